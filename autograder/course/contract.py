"""The contract as a document: every graded function's signature, shardings, statement, points
and checks, written from the registry (``CONTRACT.md`` at the repository's root, rebuilt by
``make release``; a test fails when it is out of date, so it cannot drift)."""
from __future__ import annotations

from ..core.compare import describe_spec
from ..core.results import MEASURED_NEED_STRUCTURE
from . import bars, registry

HEAD = f"""# The contract: graded functions, shardings and checks

Generated from the registry (`autograder/course/problems/`) by `make release`; do not edit.
`python -m autograder list [FUNCTION ...]` prints the same from the installed grader.

Every function takes its arguments as global `jax.Array`s placed with the input shardings
below (a `static` argument is a Python value) and, where it runs on a mesh, the mesh as its
last argument `mesh` (axes `'X'` and `'Y'`; the grader uses the meshes 2x4, 4x2, 1x8 and 8x1).
It must return one `jax.Array` with the output sharding. Nothing counts unless the numerics
pass; the other checks share the rest of the points as listed, and
{MEASURED_NEED_STRUCTURE}: a program that fails
structure loses the memory and speed shares too, and the grader does not measure them (the
notebook's `check` still shows their figures, for information).
"""


def signature(problem) -> str:
    args = list(problem.arg_names) + (["mesh"] if problem.uses_mesh else [])
    return f"{problem.name}({', '.join(args)})"


def _spec(s) -> str:
    return "static" if s is None else f"`{describe_spec(s)}`"


def entry(problem) -> str:
    shardings = ", ".join(f"`{n}` {_spec(s)}"
                          for n, s in zip(problem.arg_names, problem.in_specs, strict=True))
    out = f"`{describe_spec(problem.out_spec)}`" if problem.uses_mesh else "one device"
    return "\n".join([
        f"### `{signature(problem)}`: {problem.points:g} points",
        "",
        problem.statement,
        "",
        f"- inputs: {shardings}; output: {out}",
        *(f"- **{line.check}** ({line.points:.3g} pt): {line.passes}"
          for line in bars.bar(problem).lines),
        "",
    ])


def markdown() -> str:
    registry.load_all()
    parts = [HEAD]
    for asg in registry.assignments():
        probs = registry.problems(asg)
        total = sum(p.points for p in probs)
        parts.append(f"## `{asg}` ({total:g} points)\n")
        parts += [entry(p) for p in probs]
    return "\n".join(parts).rstrip() + "\n"
