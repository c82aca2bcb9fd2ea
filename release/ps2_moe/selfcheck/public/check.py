"""The public self-check students run from their notebooks and with pytest: the grader's checks
at home.

``run_checks(name, fn)`` runs every check the grader runs on a graded function, as the grader
runs it: ``fn`` on small random inputs on every course mesh against the NumPy reference (values
and output sharding), the grader's structure rules on the program as the grader reads it
(:mod:`autograder.course.reading`), and the grader's memory figure and modeled TPU speed at its
own memory and speed cases (:mod:`.measure`); ``check(name, fn)`` says each in one line, and the
release folder's pytest file makes each a test. tools/build_notebooks.py copies this module, the
modules it imports, the references, baselines and rules into each assignment's ``selfcheck``
package, whose ``__init__`` fills :data:`PUBLIC`; inside the course package the table comes from
the registry.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from ..core.calls import Call, CallShape
from ..core.compare import (
    compare_values,
    copies_disagree,
    genuine_array,
    sharding_problem,
    values_message,
)
from ..core.compiling import FAST_CPU_COMPILE, on_cpu, runner
from ..core.errors import describe_error
from ..core.loader import load, skipped_notes, source_chunks, written_names
from ..core.meshes import make_mesh
from ..core.results import (
    MEASURED_NEED_STRUCTURE,
    CheckResult,
    credited,
    failed,
    passed,
    skipped,
)
from ..course.reading import export_for_reading, perturbations_of, read_paths
from . import measure

#: name -> {'args', 'in_specs', 'out_spec', 'uses_mesh', 'case', 'edges', 'reference', 'rtol',
#: 'atol', 'hidden', 'baseline', 'limit', 'memory', 'steps'}; 'case', 'edges' (or None),
#: 'reference', 'steps' (or None: not a ring) and
#: 'baseline' (or None: none, or one kept with the grader) are [module relative to this package,
#: function name]; 'baseline_model' holds a kept baseline's modeled figures (or None);
#: 'limit' is the speed limit on the modeled TPU (None without a speed check);
#: 'memory' is the grader's memory bar, {'layout': [x, y], 'bound': bytes, 'what': why}, or None;
#: 'speed_layout' is the mesh [x, y] of the grader's speed case
PUBLIC: dict = {}


def _table() -> dict:
    return PUBLIC or _course_table()


@functools.cache
def _course_table() -> dict:
    """The table inside the course package (a copied package has :data:`PUBLIC` filled), made
    once per process: an entry's memory bar draws the big memory case to read its bound."""
    from ..course import registry

    return {p.name: public_entry(p) for p in registry.problems()}


#: the package this module belongs to: ``autograder`` in the course package, ``selfcheck`` in a
#: release folder's copy; the table's module paths are relative to it
ROOT = __name__.split(".")[0]


def _where(fn) -> list[str]:
    """[module relative to the package root, name] of a registry function (a references
    module)."""
    module = fn.__module__
    if not module.startswith(ROOT + "."):
        raise ValueError(f"{fn.__name__} lives in {module}, outside the {ROOT} package")
    return [module[len(ROOT):], fn.__name__]


def _function(where) -> object:
    module, name = where
    return getattr(importlib.import_module(module, ROOT), name)


def public_entry(problem, *, figures: bool = False) -> dict:
    """The JSON-able public description of a registry problem. ``figures``: for a baseline
    kept with the grader, also its modeled TPU figures at the speed case
    (:func:`autograder.tpumodel.profile.baseline_figures`), which ``tpu_profile`` compares with."""
    hidden = problem.baseline is not None and not problem.baseline_public
    if hidden and figures:
        from ..tpumodel.profile import baseline_figures

        modeled = baseline_figures(problem)
    else:
        modeled = None
    return {
        "args": list(problem.arg_names),
        "in_specs": [None if s is None else list(s) for s in problem.in_specs],
        "out_spec": list(problem.out_spec),
        "uses_mesh": problem.uses_mesh,
        "case": _where(problem.make_case),
        "edges": None if problem.edge_cases is None else _where(problem.edge_cases),
        "reference": _where(problem.reference),
        "steps": None if problem.steps is None else _where(problem.steps),
        "rtol": problem.rtol,
        "atol": problem.atol,
        "hidden": [c for c in problem.check_names if c not in ("numerics", "sharding")],
        "rules": [encode_rule(r) for r in problem.rules],
        "baseline": (_where(problem.baseline) if problem.baseline is not None
                     and problem.baseline_public else None),
        "baseline_model": modeled,
        "limit": None if problem.baseline is None else problem.threshold("tpu_model"),
        "memory": memory_entry(problem),
        "speed_layout": [int(v) for v in problem.speed_layout],
    }


def memory_entry(problem) -> Optional[dict]:
    """The grader's memory bar for ``problem`` as data: the mesh it compiles on, the bound in
    bytes at its 'memory' case (whose shapes do not depend on the seed) and why; None when the
    grader does not check memory."""
    if problem.memory_bound is None:
        return None
    x, y = problem.speed_layout
    bound, what = problem.memory_bound(problem.case(np.random.default_rng(0), x, y, "memory"), x, y)
    return {"layout": [int(x), int(y)], "bound": int(bound), "what": what}


def encode_rule(rule) -> dict:
    """A registry structure rule as data: ``{'rule': where}`` for a plain rule function,
    ``{'make': where, 'args': [...], 'kwargs': {...}}`` for one a rule factory built (see
    :func:`autograder.course.rules.base.rule_factory`); rule arguments are encoded the same way."""
    made = rule.made_by
    if made is None:
        where = _where(rule.check)
        if "<locals>" in rule.check.__qualname__ or where[0].startswith(".course.problems"):
            raise ValueError(f"the rule {rule.check.__qualname__} cannot travel to the "
                             "self-check: define it at module level in a rules module (or build "
                             "it with a function marked @rule_factory)")
        return {"rule": where}
    factory, args, kwargs = made.factory, made.args, made.kwargs
    return {"make": _where(factory),
            "args": [encode_rule(a) if callable(a) else a for a in args], "kwargs": dict(kwargs)}


def decode_rule(spec: dict):
    """The rule :func:`encode_rule` described."""
    if "rule" in spec:
        return _function(spec["rule"])
    args = [decode_rule(a) if isinstance(a, dict) else a for a in spec["args"]]
    return _function(spec["make"])(*args, **spec["kwargs"])


def rule_modules(spec: dict) -> set[str]:
    """The modules (relative to the package) an encoded rule lives in."""
    if "rule" in spec:
        return {spec["rule"][0]}
    return {spec["make"][0]}.union(*(rule_modules(a) for a in spec["args"] if isinstance(a, dict)))


@dataclass(frozen=True)
class PublicProblem:
    """What the TPU model needs of a graded function, read from the public table: the same
    attributes as the registry's :class:`~autograder.core.problem.Problem`, so that ``tpu_profile``
    runs the same code from a release folder as inside the course package."""

    name: str
    in_specs: tuple
    out_spec: Any
    uses_mesh: bool
    make_case: Callable
    baseline: Optional[Callable]
    limit: Optional[float]
    #: a baseline kept with the grader, as figures: {'layout': [x, y], 'chips': {chip: {...}}}
    baseline_model: Optional[dict] = None
    #: the mesh (x, y) of the grader's speed case
    speed_layout: tuple = (2, 4)
    #: the function's argument names (the rules name the first in their messages)
    arg_names: tuple[str, ...] = ()

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.in_specs) if s is None)

    def case(self, rng, x: int, y: int, size: str):
        c = self.make_case(rng, x, y, size)
        return c if hasattr(c, "args") else _Args(tuple(c))

    def threshold(self, platform: str) -> float:
        if platform != "tpu_model" or self.limit is None:
            raise ValueError(f"the public table holds only the modeled TPU limit of {self.name}")
        return self.limit


@dataclass(frozen=True)
class _Args:
    args: tuple


def problem(name: str):
    """The graded function ``name``: the registry's entry inside the course package, a
    :class:`PublicProblem` in a copied self-check package."""
    if not PUBLIC:
        from ..course import registry

        return registry.get(name)
    if name not in PUBLIC:
        raise KeyError(f"no graded function named {name!r} here; known: {sorted(PUBLIC)}")
    from jax.sharding import PartitionSpec

    spec = PUBLIC[name]
    return PublicProblem(
        name=name,
        in_specs=tuple(None if s is None else PartitionSpec(*s) for s in spec["in_specs"]),
        out_spec=PartitionSpec(*spec["out_spec"]), uses_mesh=spec["uses_mesh"],
        make_case=_function(spec["case"]),
        baseline=None if spec.get("baseline") is None else _function(spec["baseline"]),
        limit=spec.get("limit"), baseline_model=spec.get("baseline_model"),
        speed_layout=tuple(spec.get("speed_layout", (2, 4))), arg_names=tuple(spec["args"]))


def _structure(rules, call, placed, mesh, prob, inputs, compiled: str):
    """The registry's structure rules on the program ``call`` (a
    :class:`~autograder.core.calls.Call`) makes of ``placed``, read as the grader reads it
    (:mod:`autograder.course.reading`: its exported StableHLO, loops and branches counted on
    the case ``inputs``; ``compiled``: the text of its compiled module): ``(problem, refused)``,
    problem None when they hold, else what to change; refused: the op table refused the program
    (then the grader fails speed with structure)."""
    __tracebackhide__ = True  # pytest shows the check's message, not this frame
    exported, dynamic = export_for_reading(call, placed)
    paths = read_paths(exported, mesh if prob.uses_mesh else None, compiled, dynamic, inputs,
                       run=runner(FAST_CPU_COMPILE), perturbations=perturbations_of(rules))
    if paths.error is not None:
        return f"structure: {paths.error}", paths.refused is not None
    for where, res in paths.judge(rules, mesh, prob):
        if not res.passed:
            return f"structure{f' ({where})' if where else ''}: {res.message}", False
    return None, False


class CheckFailed(AssertionError):
    """What ``check`` raises: an AssertionError (pytest reports it as one) that a notebook shows
    as its message alone, without a traceback through the self-check's own code. ``shown``:
    the checks whose report ``check`` printed just before; a notebook then shows only their
    names, so that each message appears once (``str()`` keeps the whole message)."""

    def __init__(self, message: str = "", shown: tuple[str, ...] = ()):
        super().__init__(message)
        self.shown = tuple(shown)

    def _render_traceback_(self):  # IPython's hook for how an exception is shown
        if self.shown:
            return [f"check failed: {', '.join(self.shown)} (the FAILED line"
                    f"{'s' * (len(self.shown) != 1)} above say{'s' * (len(self.shown) == 1)} "
                    "what was found and where)"]
        return [f"check failed: {self}"]


#: seconds one public case may take (tracing, compiling and running), as the grader's own
#: per-function limit bounds an endless loop
TIME_LIMIT_S = 120.0


@contextlib.contextmanager
def _time_limit(seconds: float, what: str):
    """Stop Python code (tracing an endless Python loop, say) that runs past ``seconds``, with
    an AssertionError; where no timer signal can be used (not the main thread) it says so."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "setitimer"):
        yield
        return

    def stop(signum, frame):
        __tracebackhide__ = True
        raise CheckFailed(f"{what}: still running after {seconds:g} s, the self-check's "
                             "time limit (an endless loop?); the grader stops it the same way")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _wait(out, seconds: float, what: str) -> None:
    """Wait for the computation behind ``out`` (dispatched asynchronously) for ``seconds`` at
    most: a loop inside the compiled program (an endless ``while_loop``) never returns to
    Python, so it is polled rather than awaited."""
    import time

    __tracebackhide__ = True
    ready = getattr(out, "is_ready", None)
    if ready is None:
        return
    end = time.monotonic() + seconds
    pause = 0.001
    while not ready():
        if time.monotonic() > end:
            raise CheckFailed(
                f"{what}: its program still runs after {seconds:g} s, the self-check's time "
                "limit (a loop in the compiled program that never ends?). It keeps running in "
                "the background: restart the kernel before you check again")
        time.sleep(pause)
        pause = min(0.05, pause * 2)


#: the course meshes the public cases run on
LAYOUTS = ((2, 4), (4, 2), (1, 8), (8, 1))


def check_names(name: str) -> list[str]:
    """The checks the grader runs on ``name``, in its order (numerics, sharding, structure,
    then memory and speed where the problem has them): the self-check runs the same."""
    spec = _table()[name]
    return ["numerics", "sharding"] + [c for c in spec.get("hidden", ())
                                       if c not in ("numerics", "sharding")]


def run_checks(name: str, fn, *, layouts=LAYOUTS, cases: int = 2, seed: int | None = None,
               time_limit: float = TIME_LIMIT_S, big: bool = True,
               raise_errors: bool = False, edges: bool = True) -> list[CheckResult]:
    """Every check the grader runs on ``fn`` (the graded function ``name``), as the grader runs
    it, one :class:`~autograder.core.results.CheckResult` each (:func:`check_names`):

    * numerics and sharding on small random cases drawn afresh on every mesh of ``layouts``
      (``cases`` per mesh, and the problem's edge cases on the first), against the NumPy
      reference the grader uses; ``seed`` draws the same cases again;
    * structure: the grader's rules on the program as the grader reads it, once per mesh;
    * memory and speed (``big``): the grader's memory figure and modeled TPU ratio at its own
      memory and speed cases, against its bound and limit (:mod:`.measure`).

    As in the grader, structure, memory and speed need the numerics to pass first, and a
    function that raised earns nothing else. ``raise_errors``: let an error of the function
    itself propagate (the notebook shows its traceback) instead of failing numerics with it.
    Each case may take ``time_limit`` seconds (an endless loop fails numerics, saying so).
    ``edges`` False: the randomized cases alone (the edge cases test values; the structure is
    read on each mesh's first randomized case)."""
    import secrets

    import jax
    from jax.sharding import PartitionSpec

    __tracebackhide__ = True
    table = _table()
    if name not in table:
        raise KeyError(f"unknown graded function {name!r}; known: {sorted(table)}")
    spec = table[name]
    make_case, reference = _function(spec["case"]), _function(spec["reference"])
    in_specs = [None if s is None else PartitionSpec(*s) for s in spec["in_specs"]]
    out_spec = PartitionSpec(*spec["out_spec"])
    shape = CallShape(tuple(in_specs), bool(spec["uses_mesh"]), out_spec, name)
    make_edges = _function(spec["edges"]) if spec.get("edges") else None
    rules = [decode_rule(r) for r in spec.get("rules", ())]
    names = check_names(name)
    found: dict[str, str] = {}  # check -> the first thing wrong with it
    refused = raised = False
    n = n_edges = 0
    seed = secrets.randbits(31) if seed is None else int(seed)
    again = f" (cases drawn with seed={seed}: check({name!r}, fn, seed={seed}) draws them again)"
    for x, y in layouts:
        if "numerics" in found:
            break
        mesh = make_mesh(x, y)
        rng = np.random.default_rng([x, y, seed])
        runs = [(tuple(make_case(rng, x, y, "small")), "") for _ in range(cases)]
        if edges and make_edges is not None and (x, y) == tuple(layouts[0]):  # the first mesh
            runs += [(tuple(getattr(c, "args", c)), " (edge case)")
                     for c in make_edges(rng, x, y)]
        for args, label in runs:
            want = np.asarray(reference(args, x, y))
            call = Call(shape, fn, mesh)
            placed = call.place(args)
            on = f" on mesh {x}x{y}" if spec["uses_mesh"] else ""
            where = (f"{name}{on} with "
                     + ", ".join(f"{k}={list(a.shape) if hasattr(a, 'shape') else a}"
                                 for k, a in zip(spec["args"], args)) + label)
            try:
                with _time_limit(time_limit, where):
                    # compiled as the grader compiles its numerics programs (on CPU: without
                    # LLVM's heavy passes, about 3x quicker to compile; elsewhere as XLA would)
                    compiled = call.lower(placed).compile(on_cpu(FAST_CPU_COMPILE))
                    out = compiled(*call.dynamic(placed))
            except CheckFailed as e:  # an endless loop, stopped
                found["numerics"], raised = str(e), True
                break
            except Exception as e:  # noqa: BLE001 - the function's own error
                if raise_errors:
                    raise
                found["numerics"], raised = f"{where}: {describe_error(e)}", True
                break
            try:
                out = genuine_array(out)
                _wait(out, time_limit, where)
            except TypeError as e:  # not an array
                found["numerics"], raised = f"{where}: {e}", True
                break
            except CheckFailed as e:  # a program that never ends, stopped
                found["numerics"], raised = str(e), True
                break
            tiles = (out_spec, {"X": x, "Y": y}) if spec["uses_mesh"] else None
            got = np.asarray(jax.device_get(out))
            msg = compare_values(got, want, spec["rtol"], spec["atol"], tiles=tiles)
            if msg is not None and spec.get("steps"):  # a ring: which of its steps is wrong
                msg += _function(spec["steps"])(args, got, want, x, y, spec["rtol"],
                                                spec["atol"])
            if spec["uses_mesh"]:
                msg = values_message(msg, copies_disagree(out, mesh, spec["rtol"], spec["atol"]))
                bad = sharding_problem(out, mesh, out_spec)
                if bad is not None and "sharding" not in found:
                    found["sharding"] = f"{where}: {bad}{again}"
            if msg is not None:
                found["numerics"] = f"{where}: {msg}{again}"
                break
            if rules and args is runs[0][0] and "structure" not in found:  # once per mesh
                bad, refused_here = _structure(rules, call, placed, mesh, problem(name), args,
                                               compiled.as_text())
                if bad is not None:
                    found["structure"] = f"{where}: {bad}{again}"
                    refused = refused or refused_here
            n, n_edges = n + (not label), n_edges + bool(label)
    out = []
    for c in names:
        if c in found:
            out.append(failed(c, found[c]))
        elif c == "numerics":
            meshes = (f" (meshes {', '.join(f'{x}x{y}' for x, y in layouts)})"
                      if spec["uses_mesh"] else "")
            first = f" on mesh {layouts[0][0]}x{layouts[0][1]}" if spec["uses_mesh"] else ""
            edge = f" and {n_edges} edge cases{first}" if n_edges else ""
            out.append(passed(c, f"values match the NumPy reference on {n} small "
                              f"case{'s' * (n != 1)}{meshes}{edge}"))
        elif raised:
            out.append(skipped(c, "the function must run on every case first (see numerics)"))
        elif c == "sharding":
            out.append(passed(c, f"output laid out as P{tuple(spec['out_spec'])!r}"
                              if spec["uses_mesh"] else "single-device function"))
        elif "numerics" in found:
            out.append(skipped(c, "the numerics check must pass first"))
        elif c == "structure":
            meshes = ", ".join(f"{x}x{y}" for x, y in layouts)
            out.append(passed(c, f"the grader's rules hold (meshes {meshes})" if rules
                              else "no rules"))
        elif not big:
            continue
        elif c == "speed" and refused:
            out.append(failed(c, "the TPU model cannot price this program (the structure "
                              "check says why), so this check fails with the structure check"))
        elif c == "memory":
            with _time_limit(time_limit, f"{name} at the grader's memory case"):
                out.append(measure.memory(problem(name), spec["memory"], spec["args"], fn))
        elif c == "speed":
            with _time_limit(2 * time_limit, f"{name} at the grader's speed case"):
                out.append(measure.speed(problem(name), fn))
    # as the grader counts them: speed and memory only for a program that keeps the rules
    structure = next((r for r in out if r.name == "structure"), None)
    return out if structure is None else [credited(r, structure) for r in out]


def check(name: str, fn, *, layouts=LAYOUTS, cases: int = 2, verbose: bool = True,
          seed: int | None = None, time_limit: float = TIME_LIMIT_S, big: bool = True,
          edges: bool = True) -> None:
    """Run every check the grader runs on ``fn`` (:func:`run_checks`) and say each in one line;
    raise :class:`CheckFailed` (an AssertionError) with what failed, unless all pass.

    The cases are drawn afresh on every call, as the grader draws its own from a secret seed
    (a program that passes on one draw and fails on another is found); ``seed`` draws the same
    ones again, and a failure names it. Memory and speed are the grader's figures at its own
    shapes (compile and model only, a few seconds); ``big=False`` leaves them out (pytest in
    this folder, or ``memory_profile`` and ``tpu_profile``, run them). An error of the function
    itself is raised as it is, with its traceback."""
    import os

    __tracebackhide__ = True  # under pytest a failure shows its message, not this code
    if os.environ.get("NBGRADER_EXECUTION"):  # the grader's report on this function follows
        print(f"{name}: the self-check steps aside while nbgrader runs the notebook; the "
              "grader's report below says what passed")
        return None
    results = run_checks(name, fn, layouts=layouts, cases=cases, seed=seed, edges=edges,
                         time_limit=time_limit, big=big, raise_errors=True)
    bad = [r for r in results if not r.passed]
    if verbose:
        for note in notebook_notes(fn):
            print("note:", note)
        print(lines(name, results, big=big))
    if bad:
        first = [r for r in bad if not r.skipped]
        raise CheckFailed("\n".join(f"{r.name}: {r.message}" for r in first),
                          shown=tuple(r.name for r in first) if verbose else ())


def lines(name: str, results: list[CheckResult], *, big: bool = True) -> str:
    """What ``check`` prints: one line per check (``ok`` or ``FAILED``, then what was found),
    and ``OK name`` at the end where every check the grader runs passed here."""
    width = max(len(r.name) for r in results)
    out = [f"  {r.name:{width}s}  {'ok' if r.passed else 'FAILED':6s}  {r.message}"
           for r in results]
    left = [c for c in check_names(name) if c not in {r.name for r in results}]
    if left:
        out.append(f"  {', '.join(left)}: not run here (big=False): pytest in this folder runs "
                   "them, as do memory_profile and tpu_profile")
    rule = (f"; {MEASURED_NEED_STRUCTURE}"
            if any(c in ("memory", "speed") for c in check_names(name)) else "")
    if all(r.passed for r in results) and not left:
        out.append(f"OK {name}: every check the grader runs passes here "
                   f"({', '.join(r.name for r in results)}){rule}")
    elif all(r.passed for r in results):
        out.append(f"OK {name}: {', '.join(r.name for r in results)} pass{rule}")
    return f"{name}:\n" + "\n".join(out)


def load_functions(path) -> dict:
    """The callables a notebook or .py file defines, loaded as the grader loads them (demos
    and prints are not run). What the loader notes (a statement it skips that sets something
    up, a definition that failed) comes as a warning, which pytest lists in its summary."""
    import warnings

    loaded = load(path, keep_names=frozenset(_table()))  # notes only where a checked name needs them
    for note in loaded.notes + own_module_notes(path):
        warnings.warn(f"note: {note}", LoadNote, stacklevel=2)
    return {k: v for k, v in loaded.namespace.items() if callable(v)}


class LoadNote(UserWarning):
    """What the grader's loader would note about the file the functions came from."""


def notebook_file(fn):
    """The saved notebook a function typed in a notebook kernel comes from, or None (a function
    loaded from a file, or no notebook found): the one Jupyter names (``JPY_SESSION_NAME``,
    VS Code's ``__vsc_ipynb_file__``), else the only notebook in the working folder that
    defines a function of this name."""
    import os
    from pathlib import Path

    if getattr(fn, "__module__", None) != "__main__":
        return None
    name = getattr(fn, "__name__", None)
    named = [os.environ.get("JPY_SESSION_NAME"),
             getattr(fn, "__globals__", {}).get("__vsc_ipynb_file__")]
    for cand in named:
        if cand and str(cand).endswith(".ipynb") and Path(cand).is_file():
            return Path(cand)
    found = []
    for path in sorted(Path.cwd().glob("*.ipynb")):
        try:
            if name in written_names(path):
                found.append(path)
        except (OSError, ValueError):
            continue
    return found[0] if len(found) == 1 else None


def notebook_notes(fn) -> list[str]:
    """What the grader's loader would say about the saved notebook ``fn`` was typed in (a
    statement it does not run that sets something up, or changes what a graded function
    reads): the notebook ran those statements, the grader will not, so the check here cannot
    show the difference. Empty where there is no notebook to read."""
    path = notebook_file(fn)
    if path is None:
        return []
    try:
        return [f"{path.name}, {n}" for n in skipped_notes(path, frozenset(_table()))] + \
            own_module_notes(path)
    except Exception:  # noqa: BLE001 - a notebook saved half-way: nothing to say
        return []


def own_module_notes(path) -> list[str]:
    """One note per module of the student's own that the saved notebook (or file) at ``path``
    imports from its own folder (``helpers.py`` beside it, or a ``helpers/`` package): it works
    at home, and the grader has it only if it is handed in beside the notebook."""
    import ast
    from pathlib import Path

    path = Path(path)
    seen: dict[str, str] = {}
    for label, code in source_chunks(path):
        try:
            tree = ast.parse(code)
        except SyntaxError:  # a cell of IPython syntax: the loader reads it, not this
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top in seen or top in (ROOT, "selfcheck"):
                    continue
                for found in (path.parent / f"{top}.py", path.parent / top / "__init__.py"):
                    if found.is_file():
                        seen[top] = (
                            f"{path.name}, {label} line {node.lineno}: your notebook imports "
                            f"{top} from {found.relative_to(path.parent)} in its own folder. "
                            f"Hand in {found.relative_to(path.parent).parts[0]} beside "
                            f"{path.name}: the grader has only the files you hand in, and "
                            f"without it every function that uses {top} scores nothing there, "
                            "though it passes here")
                        break
    return list(seen.values())
