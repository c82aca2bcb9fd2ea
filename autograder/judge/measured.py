"""The memory check, and what a program measured on a memory or speed case must do first: compute
that case's answer and keep the structure rules its numerics programs kept."""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ..core.compare import copies_disagree, genuine_array
from ..core.errors import time_limit
from ..core.meshes import make_mesh
from ..core.results import CheckResult, failed
from ..course import checks
from . import running
from .bigcases import BigCase
from .ownership import never_the_students, short_error
from .placement import dynamic_args, place_args
from .programs import CompileKind, Programs
from .running import read_structure
from .timing import phase


def answered(programs: Programs, size: str) -> BigCase:
    """The memory or speed case with its NumPy answer, made (or read) now: the grader's work,
    before the time limit of the submission's program starts, so a slow reference is never the
    student's timeout, and its error is a regrade."""
    with phase(f"{size}: the case and its answer"), \
            programs.ownership.grader_work("the NumPy reference"):
        return programs.plan.big_case(size)


def memory_check(programs: Programs, *, rules: bool) -> CheckResult:
    """The memory check of the memory case's program: XLA's temp bytes against the problem's
    bound, once the program computes the case's answer (and keeps the rules, ``rules``)."""
    problem = programs.plan.problem
    big = answered(programs, "memory")
    layout, case = big.layout, big.case
    mesh = make_mesh(*layout)
    where = checks.where(problem, layout, case)
    try:
        with time_limit(running.CALL_TIMEOUT):
            args = place_args(problem, case, mesh)
            compiled = programs.compiled(layout, case, args, CompileKind.MEMORY)
            stats = compiled.memory_analysis()
            temp = None if stats is None else int(stats.temp_size_in_bytes)
            wrong = measured_program_wrong(programs, "memory", where, compiled, big, mesh,
                                           args, rules=rules)
    except BaseException as e:  # noqa: BLE001
        never_the_students(e)
        return failed("memory", f"{where}: could not compile and run it: {short_error(e)}")
    if wrong is not None:
        return wrong
    with programs.ownership.grader_work("the memory check"):
        bound, what = problem.memory_bound(case, *layout)
        return checks.memory(problem, temp, int(bound), what, where)


def measured_program_wrong(programs: Programs, check: str, where: str, compiled, big: BigCase,
                           mesh, args, *, rules: bool,
                           runnable: Optional[Callable[[], Any]] = None) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for the memory or speed case may not be
    measured, else None: it must compute the case's answer (:func:`big_case_values`) and,
    where the numerics programs kept the structure rules (``rules``), keep them too
    (:func:`big_case_structure`). ``runnable()``: the same program compiled to run, where
    ``compiled`` was compiled only to be read (default: ``compiled`` runs)."""
    with phase(f"{check}: check the values"):
        wrong = big_case_values(programs, check, where, compiled, big, args,
                                runnable=runnable)
    if wrong is None and rules:
        with phase(f"{check}: structure"):
            wrong = big_case_structure(programs, check, big, mesh, args, compiled)
    return wrong


def big_case_values(programs: Programs, check: str, where: str, compiled, big: BigCase,
                    args, *, runnable: Optional[Callable[[], Any]] = None
                    ) -> Optional[CheckResult]:
    """Run the program compiled for the memory or speed case once and compare its output with
    the NumPy reference (:func:`checks.big_case_values`; ``big``'s answer is made
    beforehand, :func:`answered`). A program with loops or branches runs once, instrumented
    (:meth:`Programs.counted_run`): its result is checked here and its counts serve the
    structure rules and the model, so the big case is not run twice. The same computation
    either way; where the counting copy cannot be made, or there is nothing to count, the
    compiled program runs (``runnable()``'s, where given: see :func:`measured_program_wrong`;
    the structure and model readings of a program that could not be counted then fail with the
    reason)."""
    import jax

    from ..tpumodel.loops import LoopCountError

    problem = programs.plan.problem
    try:
        out = programs.counted_run(big.layout, big.case, args).out
    except LoopCountError:
        out = None
    if out is None:
        out = (compiled if runnable is None else runnable())(*dynamic_args(problem, args))
    out = genuine_array(out)
    value = np.asarray(jax.device_get(out))
    expected = big.expected
    copies = (copies_disagree(out, make_mesh(*big.layout), problem.rtol, problem.atol,
                              secret=True) if problem.uses_mesh else None)
    return checks.big_case_values(problem, check, where, value, expected, copies)


def big_case_structure(programs: Programs, check: str, big: BigCase, mesh, args,
                       compiled) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for the memory or speed case breaks the
    structure rules (:func:`checks.big_case_structure`): read as the numerics programs are, its
    loops and branches counted by the one run on this case's arrays that also gave the result
    checked and the TPU model's pinned loops (:meth:`Programs.counted_run`)."""
    problem = programs.plan.problem
    layout, case = big.layout, big.case
    att = checks.Attempt(mesh=mesh, layout=layout, case=case)

    def count(shape, names):
        return programs.counted_run(layout, case, args).per_device(shape, names)

    read_structure(att, programs.artifact(layout, case).exported,
                   mesh if problem.uses_mesh else None, compiled.as_text(),
                   dynamic_args(problem, args), ownership=programs.ownership, count=count)
    with programs.ownership.grader_work(f"the {check} check"):
        return checks.big_case_structure(problem, check, checks.where(problem, layout, case),
                                         att)
