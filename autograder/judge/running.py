"""The numerics cases of one function: each run on its compiled program, the first of each mesh's
structure read, and a public twin of a wrong case run for the message to quote."""
from __future__ import annotations

import os
from typing import Callable, Optional

import numpy as np

from ..core.compare import copies_disagree, genuine_array, sharding_problem
from ..core.compiling import runner
from ..core.errors import GradingTimeout, time_limit
from ..core.meshes import make_mesh
from ..core.problem import Case
from ..course import checks
from ..course.reading import perturbations_of
from .artifacts import ArtifactError
from .ownership import GraderFault, Ownership, never_the_students, short_error
from .placement import dynamic_args, place_args
from .pool import CompilePool
from .programs import CompileKind, Programs
from .timing import phase


#: seconds allowed for one compile-and-run of student code
CALL_TIMEOUT = float(os.environ.get("AUTOGRADER_CALL_TIMEOUT", "60"))


def run_case(programs: Programs, layout, case: Case, *, want_program: bool,
             timeout: float | None = None, secret: bool = True) -> checks.Attempt:
    """Run one case of the student's program, and read its structure if asked. ``secret``:
    the case's inputs come from the secret seed (every case the grader plans), so what it finds
    wrong is said without values (:func:`~autograder.core.compare.copies_disagree`'s secret
    form); False for a public twin (:meth:`Plan.public_twin`)."""
    import jax

    problem = programs.plan.problem
    mesh = make_mesh(*layout)
    att = checks.Attempt(mesh=mesh, layout=layout, case=case)
    att.expected = np.asarray(problem.reference(case.args, *layout))
    try:
        with time_limit(CALL_TIMEOUT if timeout is None else timeout):
            args = place_args(problem, case, mesh)
            compiled = programs.compiled(layout, case, args, CompileKind.NUMERICS)
            out = compiled(*dynamic_args(problem, args))
            out = genuine_array(out)
            out.block_until_ready()
            att.value = np.asarray(jax.device_get(out))
            if problem.uses_mesh:
                with programs.ownership.grader_work("comparing the output's layout and "
                                                    "copies"):
                    att.sharding_error = sharding_problem(out, mesh, problem.out_spec)
                    att.copies_error = copies_disagree(out, mesh, problem.rtol, problem.atol,
                                                       secret=secret)
            if want_program:
                art = programs.artifact(layout, case)
                with phase("read structure"):
                    read_structure(att, art.exported, mesh if problem.uses_mesh else None,
                                   compiled.as_text(), dynamic_args(problem, args),
                                   ownership=programs.ownership,
                                   perturbations=perturbations_of(problem.rules))
    except ArtifactError as e:
        att.error = str(e)
    except BaseException as e:  # noqa: BLE001
        never_the_students(e)
        att.error = short_error(e)
    return att


def read_structure(att: checks.Attempt, exported, mesh, compiled_text: str, dynamic, *,
                   ownership: Ownership, count: Optional[Callable] = None,
                   perturbations: Optional[Callable] = None) -> None:
    """Read the program's structure into ``att`` with the reader the self-check uses
    (:func:`autograder.course.reading.read_paths`): a program with loops or conditionals runs
    once more, instrumented, on this case's arrays (the student's work; ``count``: that run's
    per-device counts, taken by the caller), the reading is the grader's. ``perturbations``
    (the rules', :func:`~autograder.course.reading.perturbations_of`): measured on this case
    (the numerics case whose structure is read; a big case's reading leaves it out).
    ``ownership``: the job's (the instrumented run is the student's work)."""
    from ..course.reading import read_paths

    try:
        with ownership.student_work():
            paths = read_paths(exported, mesh, compiled_text, dynamic, att.case.args,
                               run=runner(CompileKind.NUMERICS.cpu), count=count,
                               perturbations=perturbations)
    except (GraderFault, GradingTimeout, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - the reader and its instrumented copy are ours
        raise GraderFault(f"reading the program's structure: {type(e).__name__}: {e}") from e
    att.paths = paths


def gather_attempts(programs: Programs, pool: CompilePool) -> list[checks.Attempt]:
    """Run every numerics case (each once its program is compiled, by ``pool`` or here),
    reading the structure of each mesh's first; the first hang ends the run."""
    attempts = []
    cases = programs.cases()
    pool.start_all()
    for layout, cs in cases:
        for i, case in enumerate(cs):
            # each case runs once its own program is compiled, while the pool compiles the
            # others; the wait is outside the case's time limit
            with phase("compile numerics"):
                pool.wait_compiled(layout, case)
            att = run_case(programs, layout, case, want_program=(i == 0))
            attempts.append(att)
            if att.error and "timed out" in att.error:
                return attempts  # one hang is enough evidence; do not wait for more
    return attempts


#: seconds a public twin's run may take (its program is compiled already; an honest one takes
#: milliseconds): past it, no value is quoted
TWIN_TIMEOUT = 10.0


def run_public_twin(programs: Programs, attempts: list[checks.Attempt]) -> None:
    """Where a numerics case's output is wrong, run the same compiled program on public inputs
    of that case's shapes (:meth:`Plan.public_twin`) and keep the run in the attempt's
    ``public``: the numerics message quotes values from it alone. Nothing here changes a
    verdict; a twin that cannot be drawn, raises or runs long leaves ``public`` None."""
    problem = programs.plan.problem
    with programs.ownership.grader_work("finding the failing case"):
        bad = checks.first_wrong(problem, attempts)
    if bad is None or bad.error is not None:
        return
    edge = None
    for layout, cases in programs.cases():
        if layout == bad.layout:
            at = next((i for i, c in enumerate(cases) if c is bad.case), None)
            randomized = programs.plan.randomized_per_mesh()
            if at is not None and at >= randomized:
                edge = at - randomized
    with programs.ownership.grader_work("drawing a public case"):
        twin = programs.plan.public_twin(bad.layout, bad.case, edge)
    if twin is None:
        return
    att = run_case(programs, bad.layout, twin, want_program=False, timeout=TWIN_TIMEOUT,
                   secret=False)
    if att.error is None:
        bad.public = att
