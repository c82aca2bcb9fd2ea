"""The speed check of one function: its speed case's program priced by the TPU model against the jit
baseline's, or timed beside it where wall-clock decides, and a public twin's figures to quote."""
from __future__ import annotations

import functools
import statistics
import time
from typing import Optional

import numpy as np

from ..core import devices
from ..core.devices import platform as current_platform
from ..core.errors import time_limit
from ..core.meshes import make_mesh
from ..core.optable import refusal
from ..core.problem import Case
from ..core.results import CheckResult, failed
from ..course import checks
from . import running
from .baseline import baseline_text
from .measured import answered, measured_program_wrong
from .ownership import GraderFault, never_the_students, short_error
from .placement import compile_for, dynamic_args, place_args
from .programs import CompileKind, Programs
from .timing import phase

# Bound before any student code can run in this process; later patches of the time module do
# not reach it.
_clock = time.perf_counter


def timed_here() -> bool:
    """Whether the speed case is timed here by default: on real accelerators (the course's
    devices are 8 or more of them), where wall-clock means what it would on the chips."""
    return devices.is_accelerator()


def speed_check(programs: Programs, modeler, *, rules: bool,
                refused: Optional[str] = None, timed: bool = False) -> CheckResult:
    """The speed check of the speed case's program. ``refused``: the op table's refusal of a
    numerics program (:mod:`autograder.core.optable`); that program, or a speed program the
    table refuses, fails here as it fails structure, before anything is compiled or timed."""
    problem = programs.plan.problem
    big = answered(programs, "speed")
    layout, case = big.layout, big.case
    mesh = make_mesh(*layout)
    try:
        with time_limit(2 * running.CALL_TIMEOUT):
            if refused is None:
                with phase("speed: op table"):
                    got = refusal(programs.artifact(layout, case).text,
                                  tuple(layout) if problem.uses_mesh else None)
                if got is not None:
                    refused = checks.at(problem, layout, case, str(got))
            if refused is not None:
                return checks.refused_speed(refused, modeled=modeler is not None)
            args = place_args(problem, case, mesh)
            modeled: dict = {}
            st_text = None
            runnable = None
            with phase("speed: compile"):  # one compile: the executable and the model's input
                if modeler is not None:
                    student, st_text = programs.compiled(layout, case, args,
                                                         CompileKind.MODEL)
                    # a program with loops or branches runs its instrumented copy, and the
                    # model's compile of it is made to be read (LLVM's O0, whose code runs
                    # the big arrays several times slower): where its copy cannot be counted,
                    # it runs a compile made to run; a program without them runs the model's
                    # compile itself (:meth:`Programs.model_runs`)
                    if not programs.model_runs(programs.request(layout, case)):
                        runnable = functools.partial(programs.compiled, layout, case, args,
                                                     CompileKind.SPEED)
                else:
                    student = programs.compiled(layout, case, args, CompileKind.PLAIN)
            wrong = measured_program_wrong(programs, "speed", checks.where(problem, layout, case),
                                           student, big, mesh, args, rules=rules,
                                           runnable=runnable)
            if wrong is not None:
                return wrong
            base_text = None
            if modeler is not None:
                with phase("speed: compile"), \
                        programs.ownership.grader_work("the jit baseline"):
                    base_text = baseline_text(problem, layout, case, mesh, args)
            modeled, s, b, ratio, rounds = speed_figures(
                programs, modeler, layout, case, mesh, args, student,
                (st_text, base_text) if modeler is not None else None, timed=timed)
            if "unreadable" in modeled:
                return failed("speed", "the TPU model cannot price this program: "
                              f"{modeled['unreadable']}. Speed is judged by the model alone "
                              "off a TPU, so this check fails; write the program with the "
                              "shard_map, collectives and loops the exercise asks for")
    except BaseException as e:  # noqa: BLE001
        never_the_students(e)
        return failed("speed", f"could not time it: {short_error(e)}")
    modeled = dict(modeled or {})
    if modeler is not None and "ratio" not in modeled:
        raise GraderFault("the TPU model returned no verdict for the speed check")
    t = checks.Timing(student_us=s * 1e6, baseline_us=b * 1e6, ratio=ratio, rounds=rounds,
                      platform=current_platform(), modeled=modeled if "ratio" in modeled else {},
                      timed=bool(rounds), counted=follows_data(programs, layout, case, args,
                                                               modeled, timed=bool(rounds)))
    public = None
    if t.counted:  # the figures follow the secret case's values: a public twin's are quoted
        public = public_speed(programs, modeler, mesh, student,
                              (st_text, base_text) if modeler is not None else None,
                              timed=timed, secret=(t, case, args))
    with programs.ownership.grader_work("the speed check"):
        return checks.speed(problem, t, public=public)


def speed_figures(programs: Programs, modeler, layout, case: Case, mesh, args, student,
                  texts: Optional[tuple], *, timed: bool, twin: bool = False) -> tuple:
    """``(modeled, student_s, baseline_s, ratio, rounds)`` of the speed case's compiled program
    ``student`` run on ``args`` (``case``'s, placed): the TPU model's verdict with its loops and
    branches as one instrumented run on these arrays counts them, and where it is timed, the
    wall-clock figures. ``twin``: ``case`` is the speed case's public twin (its runs are kept
    apart from the secret case's)."""
    problem = programs.plan.problem
    modeled: dict = {}
    if modeler is not None:
        def pinned():
            with programs.ownership.student_work():
                return programs.pinned_speed_program(layout, case, mesh, args, twin=twin)

        def measured():  # the run that checked the values: no second one
            return programs.measured_counts(layout, case, mesh, args, twin=twin)

        with phase("speed: model"), programs.ownership.grader_work("the TPU model"):
            from ..tpumodel.api import ModelRequest

            modeled = modeler(ModelRequest.of_modules(
                problem, mesh, texts, args=args, pinned=pinned, measured=measured,
                compiled=student)) or {}
        check_floor(modeled)
        if "unreadable" in modeled:
            return modeled, float("nan"), float("nan"), float("nan"), 0
    # Wall-clock is timed only where it decides: a real accelerator (``timed``; the model's
    # figure beside it), or emulated devices told to (a test of this path). Where the model
    # decides, timing emulated devices adds nothing.
    rounds = MEASURED_ROUNDS if (timed or modeler is None) else 0
    s = b = ratio = float("nan")
    if rounds:
        # the baseline compiled as the student's program was (the model's compile, where one
        # ran), so the two are timed alike
        options = (CompileKind.SPEED if modeler is None else CompileKind.MODEL).options()
        with phase("speed: compile"), \
                programs.ownership.grader_work("compiling the jit baseline"):
            base = compile_for(problem, problem.baseline, mesh, args, baseline=True,
                               options=options)
        with phase("speed: measure"):
            s, b, ratio = measure(student, base, dynamic_args(problem, args), rounds=rounds)
    return modeled, s, b, ratio, rounds


def follows_data(programs: Programs, layout, case: Case, args, modeled: dict, *,
                 timed: bool) -> bool:
    """Whether the speed case's figures may follow its values (which are secret): the model
    pinned loops or branches to the counts its run took, or, where it is ``timed``, the
    program has loops or branches at all (a wall-clock time follows what runs). A modeled
    program without pinned counts is priced from its text and shapes alone."""
    from ..tpumodel.loops import LoopCountError

    if modeled.get("trips") or modeled.get("branches"):
        return True
    if not timed:
        return False
    try:
        return bool(programs.counted_run(layout, case, args).tags)
    except LoopCountError:
        return True  # not counted: assume it may


def same_counts(one, two) -> bool:
    """Whether two instrumented runs of one program counted the same (every tag's values)."""
    return (one.tags == two.tags and len(one.values) == len(two.values)
            and all(np.array_equal(a, b) for a, b in zip(one.values, two.values)))


#: seconds the speed case's public twin may take (its program is compiled already), the model
#: and any timing included: past it, no figure is quoted
SPEED_TWIN_TIMEOUT = 60.0


def public_speed(programs: Programs, modeler, mesh, student, texts: Optional[tuple], *,
                 timed: bool, secret: tuple) -> Optional[checks.Timing]:
    """The speed figures of the same compiled program on the speed case's public twin
    (:meth:`Plan.public_big`): what a speed message quotes where the secret case's own figures
    follow its values. None where no twin is drawn, or it fails or runs long: then no figure
    is quoted. Nothing here changes the verdict. ``secret``: ``(timing, case, placed args)``
    of the secret case; where only the model decides and the twin's run counts what the
    secret case's counted, the model's inputs are the same and so are its figures (not
    modeled twice)."""
    plan = programs.plan
    problem = plan.problem
    with phase("speed: a public case"), \
            programs.ownership.grader_work("drawing a public case"):
        twin = plan.public_big("speed")
    if twin is None:
        return None
    layout = problem.speed_layout
    t, case, secret_args = secret
    try:
        with time_limit(SPEED_TWIN_TIMEOUT):
            args = place_args(problem, twin, mesh)
            if not t.rounds and same_counts(programs.counted_run(layout, case, secret_args),
                                            programs.counted_run(layout, twin, args,
                                                                 twin=True)):
                return t
            modeled, s, b, ratio, rounds = speed_figures(
                programs, modeler, layout, twin, mesh, args, student, texts, timed=timed,
                twin=True)
    except BaseException as e:  # noqa: BLE001
        never_the_students(e)
        return None
    if modeler is not None and "ratio" not in modeled:
        return None
    return checks.Timing(student_us=s * 1e6, baseline_us=b * 1e6, ratio=ratio, rounds=rounds,
                         platform=current_platform(), modeled=modeled, timed=bool(rounds))


def check_floor(modeled: dict) -> None:
    """The model's FLOPs stand on XLA's count of the same executable (``modeled['flops']``,
    :mod:`autograder.tpumodel.work`): a verdict whose count fell below it, the floor not
    applied, is the grader's fault, never given."""
    from ..tpumodel.work import SLACK

    if "ratio" not in modeled:
        return
    flops = modeled.get("flops")
    if flops is None:
        raise GraderFault("the TPU model's verdict lacks XLA's FLOP count of the program")
    if flops["xla"] is not None and flops["used"] * (1.0 + SLACK) < flops["xla"]:
        raise GraderFault(f"the TPU model counted {flops['used']:.4g} FLOPs where XLA counts "
                          f"{flops['xla']:.4g}, and the floor was not applied")


#: interleaved timing rounds when wall-clock is the speed basis
MEASURED_ROUNDS = 15


def measure(student, baseline, args, *, rounds: int = 15, min_batch_s: float = 2e-3) -> tuple:
    """Interleaved timing: (student_s, baseline_s, median per-round ratio)."""
    import jax

    def once(f, n):
        t0 = _clock()
        for _ in range(n):
            out = f(*args)
        jax.block_until_ready(out)
        return (_clock() - t0) / n

    once(student, 1)  # warm
    n, t = 1, once(baseline, 1)
    while t * n < min_batch_s and n < 1024:
        n *= 2
        t = once(baseline, n)
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


def speed_ahead_kind(modeler) -> Optional[CompileKind]:
    """How the speed case's program may compile ahead
    (:attr:`~autograder.judge.pool.CompilePool.speed_ahead`): as the speed check will compile
    it, with the modeler it will use (the default one where none is given): PLAIN where it is
    timed, MODEL where the model reads it, None where it must not (the model's compile, for
    its dump, switches the persistent cache process-wide when that cache is on: then it runs
    alone, in the speed check, never beside the pool)."""
    if modeler is None:
        try:
            modeler = default_modeler()
        except RuntimeError:
            return None  # the speed check says why
    if modeler is None:
        return CompileKind.PLAIN
    from ..tpumodel.api import persistent_cache_on

    return None if persistent_cache_on() else CompileKind.MODEL


def default_modeler():
    """The modeled-TPU speed basis when no TPU is present (None on a TPU: measured time)."""
    try:
        from ..tpumodel import default_modeler as the_models
    except ImportError as e:
        raise RuntimeError(f"the TPU model could not be loaded ({e})") from e
    return the_models()
