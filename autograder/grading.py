"""The runner: gathers evidence about one graded function and hands it to the checks.

``grade_function(problem, fn)`` compiles the student's function with
``jax.jit(functools.partial(fn, mesh=mesh), static_argnums=...)`` on every mesh layout, runs it on
randomized cases, traces its program, measures memory and speed against the jit baseline, and
returns a :class:`FunctionResult`. Every failure of student code (an exception, a hang, NaNs, a
wrong shape, something that is not an array) becomes a failed check with a message.
"""
from __future__ import annotations

import functools
import os
import statistics
import time
import traceback
import zlib
from typing import Callable, Optional

import numpy as np

from . import checks
from .compare import genuine_array, sharding_problem
from .devices import platform as current_platform
from .loader import GradingTimeout, time_limit
from .meshes import layouts as all_layouts, make_mesh
from .program import trace
from .registry import Case, Problem
from .results import CheckResult, FunctionResult, failed

# Bound before any student code can run in this process; later patches of the time module do
# not reach it.
_clock = time.perf_counter

#: seconds allowed for one compile-and-run of student code
CALL_TIMEOUT = float(os.environ.get("AUTOGRADER_CALL_TIMEOUT", "60"))


def _short_error(e: BaseException) -> str:
    if isinstance(e, GradingTimeout):
        return f"your function {e} (a loop that never ends, or far too much work)"
    text = f"{type(e).__name__}: {e}"
    text = text.strip().splitlines()
    first = text[0] if text else type(e).__name__
    tb = traceback.extract_tb(e.__traceback__)
    student = [f for f in tb if f.filename.startswith("<")]
    where = f" (at {student[-1].filename} line {student[-1].lineno})" if student else ""
    return (first[:400] + where)


def _place(problem: Problem, case: Case, mesh):
    import jax
    from jax.sharding import NamedSharding

    out = []
    for a, spec in zip(case.args, problem.in_specs):
        if spec is None:
            out.append(a)
        elif problem.uses_mesh:
            out.append(jax.device_put(a, NamedSharding(mesh, spec)))
        else:
            out.append(jax.device_put(a, mesh.devices.flat[0]))
    return out


def _dynamic(problem: Problem, args):
    return [a for a, s in zip(args, problem.in_specs) if s is not None]


def _bind(problem: Problem, fn, mesh) -> Callable:
    return functools.partial(fn, mesh=mesh) if problem.uses_mesh else fn


#: XLA:CPU compiles about 40% faster without LLVM's heavy optimisations; the numerics runs use
#: it (the program XLA's HLO passes produce is the same; only machine-code quality differs).
FAST_CPU_COMPILE = {"xla_backend_optimization_level": 0}


def compile_for(problem: Problem, fn, mesh, args, *, baseline: bool = False,
                fast: bool = False):
    """jit + lower + compile ``fn`` for these placed args; returns the Compiled object."""
    import jax
    from jax.sharding import NamedSharding

    kw = {}
    if baseline and problem.uses_mesh:
        kw["out_shardings"] = NamedSharding(mesh, problem.out_spec)
    jitted = jax.jit(_bind(problem, fn, mesh), static_argnums=problem.static_argnums, **kw)
    lowered = jitted.lower(*args)
    if fast and current_platform() == "cpu":
        return lowered.compile(FAST_CPU_COMPILE)
    return lowered.compile()


def _signature(problem: Problem, case: Case) -> tuple:
    """What a compiled executable depends on: array shapes and dtypes, static values."""
    return tuple((a.shape, a.dtype.str) if s is not None else ("static", a)
                 for a, s in zip(case.args, problem.in_specs))


def run_case(problem: Problem, fn, mesh, layout, case: Case, *, want_program: bool,
             timeout: float | None = None, executables: dict | None = None) -> checks.Attempt:
    """Run one case; ``executables`` caches compiled programs by signature across cases."""
    import jax

    att = checks.Attempt(mesh=mesh, layout=layout, case=case)
    att.expected = np.asarray(problem.reference(case.args, *layout))
    cache = {} if executables is None else executables
    try:
        with time_limit(CALL_TIMEOUT if timeout is None else timeout):
            args = _place(problem, case, mesh)
            key = _signature(problem, case)
            compiled = cache.get(key)
            if compiled is None or want_program:
                compiled = compile_for(problem, fn, mesh, args, fast=not want_program)
                cache[key] = compiled
            out = compiled(*_dynamic(problem, args))
            out = genuine_array(out)
            out.block_until_ready()
            att.value = np.asarray(jax.device_get(out))
            if problem.uses_mesh:
                att.sharding_error = sharding_problem(out, mesh, problem.out_spec)
            if want_program:
                att.program = trace(_bind(problem, fn, mesh), args,
                                    static_argnums=problem.static_argnums,
                                    compiled_text=compiled.as_text())
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        att.error = _short_error(e)
    return att


def _case_seed(problem: Problem, seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(problem.name.encode())])


def gather_attempts(problem: Problem, fn, *, seed: int = 0, quick: bool = False,
                    layouts=None) -> list[checks.Attempt]:
    rng = _case_seed(problem, seed)
    lays = layouts or problem.layouts or all_layouts()
    if quick:
        lays = lays[:2]
    attempts = []
    for layout in lays:
        mesh = make_mesh(*layout)
        executables: dict = {}
        cases = [problem.case(rng, *layout, "grade")
                 for _ in range(1 if quick else problem.cases_per_mesh)]
        if not quick:
            cases += problem.edges(*layout)
        for i, case in enumerate(cases):
            att = run_case(problem, fn, mesh, layout, case, want_program=(i == 0),
                           executables=executables)
            attempts.append(att)
            if att.error and "timed out" in att.error:
                return attempts  # one hang is enough evidence; do not wait for more
    return attempts


def measure(student, baseline, args, *, rounds: int = 15, min_batch_s: float = 2e-3) -> tuple:
    """Interleaved timing: (student_s, baseline_s, median per-round ratio)."""
    import jax

    def once(f, n):
        t0 = _clock()
        for _ in range(n):
            out = f(*args)
        jax.block_until_ready(out)
        return (_clock() - t0) / n

    once(student, 1), once(baseline, 1)  # warm
    n = 1
    while once(baseline, n) * n < min_batch_s and n < 1024:
        n *= 2
    ts, tb, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            b = once(baseline, n)
            s = once(student, n)
        else:
            s = once(student, n)
            b = once(baseline, n)
        ts.append(s)
        tb.append(b)
        ratios.append(s / max(b, 1e-12))
    return statistics.median(ts), statistics.median(tb), statistics.median(ratios)


def _skipped(name: str, why: str) -> CheckResult:
    return failed(name, f"not checked: {why}")


def grade_function(problem: Problem, fn, *, seed: int = 0, quick: bool = False,
                   with_speed: bool = True, modeler: Optional[Callable] = None) -> FunctionResult:
    """Grade one function. ``fn`` None means the submission does not define it."""
    res = FunctionResult(problem.name, float(problem.points), weights=dict(problem.weights))
    if fn is None or not callable(fn):
        why = f"function {problem.name!r} not found in the submission"
        res.checks = [_skipped(n, why) if n != "numerics" else failed(n, why)
                      for n in problem.check_names]
        return res
    attempts = gather_attempts(problem, fn, seed=seed, quick=quick)
    num = checks.numerics(problem, attempts)
    res.checks.append(num)
    res.checks.append(checks.sharding(problem, attempts))
    if not num.passed:
        for n in problem.check_names[1:]:
            if n != "sharding":
                res.checks.append(_skipped(n, "the numerics check must pass first"))
        return res
    res.checks.append(checks.structure(problem, attempts))
    big = None
    if problem.memory_bound is not None or (with_speed and problem.baseline is not None):
        big = _big_case(problem, fn, seed)
    if problem.memory_bound is not None:
        res.checks.append(_memory_check(problem, fn, big))
    if problem.baseline is not None and with_speed:
        if modeler is None:
            modeler = _default_modeler()
        res.checks.append(_speed_check(problem, fn, big, modeler))
    return res


def _big_case(problem: Problem, fn, seed: int):
    layout = problem.speed_layout
    mesh = make_mesh(*layout)
    rng = _case_seed(problem, seed + 1)
    return layout, mesh, rng


def _memory_check(problem: Problem, fn, big) -> CheckResult:
    layout, mesh, rng = big
    case = problem.case(rng, *layout, "memory")
    where = f"mesh {layout[0]}x{layout[1]} with {case.describe(problem.arg_names)}"
    try:
        with time_limit(CALL_TIMEOUT):
            args = _place(problem, case, mesh)
            compiled = compile_for(problem, fn, mesh, args)
            stats = compiled.memory_analysis()
            temp = None if stats is None else int(stats.temp_size_in_bytes)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        return failed("memory", f"{where}: could not compile: {_short_error(e)}")
    bound, what = problem.memory_bound(case, *layout)
    return checks.memory(problem, temp, int(bound), what, where)


def _speed_check(problem: Problem, fn, big, modeler) -> CheckResult:
    layout, mesh, rng = big
    case = problem.case(rng, *layout, "speed")
    try:
        with time_limit(2 * CALL_TIMEOUT):
            args = _place(problem, case, mesh)
            student = compile_for(problem, fn, mesh, args)
            base = compile_for(problem, problem.baseline, mesh, args, baseline=True)
            dyn = _dynamic(problem, args)
            s, b, ratio = measure(student, base, dyn)
            modeled = modeler(problem, fn, mesh, args) if modeler else {}
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        return failed("speed", f"could not time it: {_short_error(e)}")
    modeled = dict(modeled or {})
    note = modeled.pop("note", None) if "ratio" not in modeled else None
    t = checks.Timing(student_us=s * 1e6, baseline_us=b * 1e6, ratio=ratio, rounds=15,
                      platform=current_platform(), modeled=modeled if "ratio" in modeled else {})
    res = checks.speed(problem, t)
    if note:
        res.message += f" (note: {note})"
    return res


def _default_modeler():
    """The modeled-TPU speed basis when no TPU is present (None on a TPU: measured time)."""
    try:
        from .tpumodel import default_modeler
    except Exception:  # noqa: BLE001 - the model is optional
        return None
    return default_modeler()
