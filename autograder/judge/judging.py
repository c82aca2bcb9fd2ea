"""Grading one function: its programs asked for, a verdict reused or its checks run in order
(numerics, sharding, structure, memory, speed), each failure a failed check with a message."""
from __future__ import annotations

import functools
from typing import Callable, Optional

from ..core.problem import Problem
from ..core.records import Limits
from ..core.results import CheckResult, FunctionResult, failed, not_measured, skipped
from ..course import checks
from .measured import memory_check
from .ownership import Ownership
from .planning import Plan, plan_for
from .pool import CompilePool
from .programs import Programs
from .reuse import VerdictStore
from .running import gather_attempts, run_public_twin
from .speed import default_modeler, speed_ahead_kind, speed_check, timed_here
from .timing import phase


def grade_function(problem: Problem, source, *, seed: int | None = None, quick: bool = False,
                   with_speed: bool = True, modeler: Optional[Callable] = None,
                   export_timeout: Optional[float] = None, plan: Optional[Plan] = None,
                   store: Optional[VerdictStore] = None, overlap: bool = True,
                   timed: Optional[bool] = None,
                   ownership: Optional[Ownership] = None) -> FunctionResult:
    """Grade one function from the programs ``source`` exports.

    ``source`` is an :class:`~autograder.judge.artifacts.Exporter`: the sandboxed worker, or,
    for trusted code in this process, :class:`~autograder.worker.local.LocalExporter` (see
    :func:`autograder.supervisor.local.grade_function`); None: the submission does not define
    the function. Every check runs on the exported program; nothing here calls the student's
    Python. ``store``: verdicts of identical programs graded before on the same inputs
    (:mod:`autograder.judge.reuse`), reused and added to. ``overlap`` False: no compile pool
    (:meth:`CompilePool.compiling`), for a function whose last fault had no single owner.
    ``ownership``: the job's (:class:`~autograder.judge.ownership.Ownership`: whose work the
    judge is doing, told to whoever listens); None: one of this call's own, told to nobody.
    ``export_timeout``: seconds the exports may take (default: the course's
    :attr:`~autograder.core.records.Limits.export_s`; a judge passes its own).
    ``timed``: the speed case is timed against the jit baseline and the wall-clock ratio decides,
    the model's figure beside it (default: where the course's devices are real accelerators,
    :func:`timed_here`; True on emulated CPU devices is a test of that path, not a grade).
    """
    if timed is None:
        timed = timed_here()
    res = FunctionResult(problem.name, float(problem.points), weights=dict(problem.weights))
    if source is None or not hasattr(source, "export"):
        why = f"function {problem.name!r} not found in the submission"
        res.checks = [skipped(n, why) if n != "numerics" else failed(n, why)
                      for n in problem.check_names]
        return res
    exporter = source
    plan = plan or plan_for(problem, seed=seed, quick=quick, with_speed=with_speed)
    requests = plan.all_requests()
    programs = Programs(plan, ownership=ownership)
    # where a verdict may be reused, a program's compile waits for the lookup only while every
    # program arrived was one a kept verdict was judged on (a classmate's clone compiles
    # nothing; a new program compiles from its arrival, beside the worker exporting the rest)
    hold = None if store is None else functools.partial(
        programs.seen_in, store, with_speed=with_speed, timed=timed)
    pool = CompilePool(programs, speed_ahead=speed_ahead_kind(modeler)
                       if with_speed and problem.baseline is not None else None, hold=hold)
    with pool.compiling(overlap):
        # Programs compile as they arrive, beside the worker exporting the others
        with phase("wait for exports"):
            replies = exporter.export(requests, Limits().export_s
                                      if export_timeout is None else export_timeout,
                                      on_reply=pool.arrived)
        programs.replies.update(replies)
        key = programs.key(with_speed=with_speed, timed=timed) if store is not None else None
        earlier = store.get(key[0], key[1]) if key else None
        if earlier is not None:
            try:
                res.checks = [CheckResult.from_dict(c) for c in earlier]
                res.reused = True
                pool.cancel()
                return res
            except ValueError:
                res.checks = []
        pool.start_big()
        _grade(programs, pool, res, with_speed=with_speed, modeler=modeler, timed=timed)
    # A verdict that hit a time limit may owe it to a busy machine, one that an artifact's
    # failure to lower or compile here decided to the judge's handling of it: never handed on.
    if (key and programs.unsettled is None
            and not any("timed out" in c.message for c in res.checks)):
        store.put(key[0], [c.to_dict() for c in res.checks], key[1], key[2])
    return res


def _grade(programs: Programs, pool: CompilePool, res: FunctionResult, *, with_speed: bool,
           modeler, timed: bool = False) -> None:
    """The checks of a function whose programs are here (``pool`` compiles them), in order,
    each run only where the one before lets it count: a check whose verdict is decided before
    it runs (memory and speed of a program that fails structure) is not measured, and the big
    cases' compiles no check will use are cancelled."""
    problem = programs.plan.problem
    with phase("numerics (compile and run)"):
        attempts = gather_attempts(programs, pool)
    with phase("numerics: a public case"):
        run_public_twin(programs, attempts)
    with programs.ownership.grader_work("the numerics check"):
        num = checks.numerics(problem, attempts)
    res.checks.append(num)
    if any(a.error is not None for a in attempts):
        # a function that raised (or could not be exported or run) earns nothing else: its
        # big cases' compiles not started yet are dropped
        pool.cancel()
        res.checks += [skipped(n, "the function must run on every case first (see numerics)")
                       for n in problem.check_names[1:]]
        return
    with programs.ownership.grader_work("the sharding check"):
        res.checks.append(checks.sharding(problem, attempts))
    if not num.passed:
        pool.cancel()
        res.checks += [skipped(n, "the numerics check must pass first")
                       for n in problem.check_names[1:] if n != "sharding"]
        return
    with programs.ownership.grader_work("the structure check"):
        structure = checks.structure(problem, attempts)
    res.checks.append(structure)
    measured = [n for n, applies in (("memory", problem.memory_bound is not None),
                                     ("speed", problem.baseline is not None and with_speed))
                if applies]
    if not structure.passed:
        # memory and speed count only for a program that keeps the rules: nothing they could
        # measure would count, so neither is measured, and their big cases' compiles not
        # started yet are dropped (one under way finishes, as its pool job)
        pool.cancel()
        res.checks += [not_measured(n) for n in measured]
        return
    # the memory and speed cases' programs are held to the rules the numerics programs kept
    kept = bool(problem.rules)
    if "memory" in measured:
        with phase("memory"):
            res.checks.append(memory_check(programs, rules=kept))
    if "speed" in measured:
        if modeler is None:
            modeler = default_modeler()
        res.checks.append(speed_check(programs, modeler, rules=kept, timed=timed))
