"""The public self-check students run from their notebooks and with pytest.

``check(name, fn)`` runs ``fn`` on small random inputs on every course mesh and compares the
result (values and output sharding) with the NumPy reference. tools/build_notebooks.py copies
this module, the modules it imports and the references into each assignment's ``selfcheck``
package, whose ``__init__`` fills :data:`PUBLIC`; inside the course package the table comes from
the registry. The hidden grader checks much more (structure, memory, speed, bigger shapes).
"""
from __future__ import annotations

import functools
import importlib

import numpy as np

from .compare import compare_values, genuine_array, sharding_problem
from .loader import load
from .meshes import make_mesh

#: name -> {'args', 'in_specs', 'out_spec', 'uses_mesh', 'case', 'edges', 'reference', 'rtol',
#: 'atol'}; 'case', 'edges' (or None) and 'reference' are [module relative to this package,
#: function name]
PUBLIC: dict = {}


def _table() -> dict:
    if PUBLIC:
        return PUBLIC
    from autograder import registry  # the course package (a copied package has PUBLIC filled)

    return {p.name: public_entry(p) for p in registry.problems()}


def _where(fn) -> list[str]:
    """[module relative to the package, name] of a registry function (a references module)."""
    package = __package__ or __name__.rpartition(".")[0]
    module = fn.__module__
    if not module.startswith(package + "."):
        raise ValueError(f"{fn.__name__} lives in {module}, outside the {package} package")
    return [module[len(package):], fn.__name__]


def _function(where) -> object:
    module, name = where
    return getattr(importlib.import_module(module, __package__), name)


def public_entry(problem) -> dict:
    """The JSON-able public description of a registry problem."""
    return {
        "args": list(problem.arg_names),
        "in_specs": [None if s is None else list(s) for s in problem.in_specs],
        "out_spec": list(problem.out_spec),
        "uses_mesh": problem.uses_mesh,
        "case": _where(problem.make_case),
        "edges": None if problem.edge_cases is None else _where(problem.edge_cases),
        "reference": _where(problem.reference),
        "rtol": problem.rtol,
        "atol": problem.atol,
        "hidden": [c for c in problem.check_names if c not in ("numerics", "sharding")],
    }


#: what each hidden check is about, as the self-check's last line names it
HIDDEN = {"structure": "its structure (shard_map, collectives)", "memory": "its memory",
          "speed": "its speed"}


def check(name: str, fn, *, layouts=((2, 4), (4, 2), (1, 8), (8, 1)), cases: int = 2,
          verbose: bool = True) -> None:
    """Raise AssertionError with an explanation unless ``fn`` passes the public cases."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    table = _table()
    if name not in table:
        raise KeyError(f"unknown graded function {name!r}")
    spec = table[name]
    make_case, reference = _function(spec["case"]), _function(spec["reference"])
    in_specs = [None if s is None else PartitionSpec(*s) for s in spec["in_specs"]]
    out_spec = PartitionSpec(*spec["out_spec"])
    static = tuple(i for i, s in enumerate(in_specs) if s is None)
    edges = _function(spec["edges"]) if spec.get("edges") else None
    n = n_edges = 0
    for x, y in layouts:
        mesh = make_mesh(x, y)
        rng = np.random.default_rng([x, y, 2024])
        runs = [(tuple(make_case(rng, x, y, "small")), "") for _ in range(cases)]
        if edges is not None and (x, y) == tuple(layouts[0]):  # edge cases: on the first mesh
            runs += [(tuple(getattr(c, "args", c)), " (edge case)") for c in edges(rng, x, y)]
        for args, label in runs:
            want = np.asarray(reference(args, x, y))
            placed = []
            for a, s in zip(args, in_specs, strict=True):
                if s is None:
                    placed.append(a)
                elif spec["uses_mesh"]:
                    placed.append(jax.device_put(a, NamedSharding(mesh, s)))
                else:
                    placed.append(jax.device_put(a, mesh.devices.flat[0]))
            where = (f"{name} on mesh {x}x{y} with "
                     + ", ".join(f"{k}={list(a.shape) if hasattr(a, 'shape') else a}"
                                 for k, a in zip(spec["args"], args)) + label)
            f = functools.partial(fn, mesh=mesh) if spec["uses_mesh"] else fn
            out = jax.jit(f, static_argnums=static)(*placed)
            try:
                out = genuine_array(out)
            except TypeError as e:
                raise AssertionError(f"{where}: {e}") from None
            msg = compare_values(np.asarray(jax.device_get(out)), want, spec["rtol"],
                                 spec["atol"])
            if msg is None and spec["uses_mesh"]:
                msg = sharding_problem(out, mesh, out_spec)
            if msg is not None:
                raise AssertionError(f"{where}: {msg}")
            n, n_edges = n + (not label), n_edges + bool(label)
    if verbose:
        edge = f" and {n_edges} edge cases on mesh {layouts[0][0]}x{layouts[0][1]}" \
            if n_edges else ""
        hidden = [HIDDEN[c] for c in spec.get("hidden", ()) if c in HIDDEN]
        also = (f" The hidden grader also checks {', '.join(hidden[:-1])}"
                f"{' and ' if len(hidden) > 1 else ''}{hidden[-1]}." if hidden else "")
        print(f"OK {name}: values and output sharding match on {n} small cases "
              f"(meshes {', '.join(f'{x}x{y}' for x, y in layouts)}){edge}.{also}")


def load_functions(path) -> dict:
    """The callables a notebook or .py file defines (demos and prints are not run)."""
    loaded = load(path, keep_names=frozenset(_table()))  # notes only where a checked name needs them
    for note in loaded.notes:
        print("note:", note)
    return {k: v for k, v in loaded.namespace.items() if callable(v)}
