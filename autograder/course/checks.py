"""The five checks. Each is a small pure function of evidence the runner gathered (outputs,
traced programs, compiled memory figures, timings) and returns a :class:`CheckResult` whose
message says what was expected, what was found and how to look at it yourself."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ..core.compare import compare_values, secret_difference, values_message
from ..core.problem import Case, Problem
from .reading import Paths
from ..core.results import MEASURED, MEASURED_NEED_STRUCTURE, CheckResult, credited, failed, passed, ratio_text  # noqa: F401 - credited: test_bars reads it here
from .rules.base import CLAUSES


@dataclass
class Attempt:
    """One run of the student's function on one case and mesh."""

    mesh: Any
    layout: tuple[int, int]
    case: Case
    expected: Optional[np.ndarray] = None
    value: Optional[np.ndarray] = None  # the output gathered to the host
    sharding_error: Optional[str] = None  # None: layout right
    copies_error: Optional[str] = None  # None: every device's copy of each block agrees
    error: Optional[str] = None  # what went wrong before there was an output
    #: the program as each group of devices ran it, or why it could not be read
    #: (:mod:`autograder.course.reading`); None where it was not read
    paths: Optional[Paths] = None
    #: the same program run on public inputs of this case's shapes, where this case's output is
    #: wrong (:func:`numerics` quotes values from that run alone); None: not run
    public: Optional["Attempt"] = None

    def where(self, problem: Problem) -> str:
        return where(problem, self.layout, self.case)

    def wrong(self, problem: Problem) -> Optional[str]:
        """What is wrong with this case's output, said as a case with secret inputs must be
        (:func:`~autograder.core.compare.secret_difference`: no value, index or count); None if
        it is right. ``copies_error`` is expected in its secret form too."""
        return values_message(secret_difference(self.value, self.expected, problem.rtol,
                                                problem.atol), self.copies_error)


def mesh_name(layout) -> str:
    return f"{layout[0]}x{layout[1]}"


def where(problem: Problem, layout, case: Optional[Case] = None) -> str:
    """Which case a message is about: the mesh only for a function that runs on one."""
    on = f"on mesh {mesh_name(layout)}" if problem.uses_mesh else ""
    args = f"with {case.describe(problem.arg_names)}" if case is not None else ""
    return " ".join(w for w in (on, args) if w)


def at(problem: Problem, layout, case: Optional[Case], message: str) -> str:
    """``message`` said of a case (its mesh, and its arguments when given), where there is
    one to name."""
    on = where(problem, layout, case)
    return f"{on}: {message}" if on else message


def on_meshes(layouts) -> str:
    names = [mesh_name(l) for l in layouts]
    return f"on mesh{'es' * (len(names) > 1)} {', '.join(names)}"


@dataclass
class Timing:
    student_us: float
    baseline_us: float
    ratio: float  # robust statistic of the interleaved per-round ratios
    rounds: int  # 0: not measured
    platform: str
    modeled: dict = field(default_factory=dict)  # e.g. modeled TPU figures, when available
    #: the figures follow the case's values (loop or branch counts decided them, or a timed
    #: program has loops or branches): on the secret speed case, never quoted (:func:`speed`)
    counted: bool = False
    #: the wall-clock ratio decides (real accelerators, or emulated devices timed on request);
    #: else the modeled ratio does, where there is one (wall-clock rounds are then figures only)
    timed: bool = False


def first_wrong(problem: Problem, attempts: list[Attempt]) -> Optional[Attempt]:
    """The attempt :func:`numerics` reports: the first that raised or is wrong; None if none."""
    for a in attempts:
        if a.error is not None or a.wrong(problem) is not None:
            return a
    return None


def numerics(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    """Every case right, or what is wrong with the first that is not. The grading cases' inputs
    come from the secret seed: a message says where (the mesh, the shapes, the kind of fault)
    and quotes values (an index, the reference's and the output's) only from the same program
    run on public inputs of those shapes (:attr:`Attempt.public`), so nothing it quotes can
    depend on the secret seed, whatever the program computes."""
    if not attempts:
        return failed("numerics", "no test case could be run")
    a = first_wrong(problem, attempts)
    if a is not None:
        if a.error is not None:
            return failed("numerics", f"{a.where(problem)}: {a.error}")
        return failed("numerics",
                      f"{a.where(problem)}: {a.wrong(problem)}{public_values(problem, a)}")
    layouts = list(dict.fromkeys(a.layout for a in attempts))
    return passed("numerics", f"matches the NumPy reference on {len(attempts)} cases"
                  + (f" ({on_meshes(layouts)})" if problem.uses_mesh else ""))


def public_values(problem: Problem, a: Attempt) -> str:
    """What the same program does on public inputs of ``a``'s shapes (its values, the worst
    index, the wrong blocks, for a ring the wrong steps), or why no value is quoted: the sentences after a secret case's
    fault in a numerics message."""
    secret = (" (the grading cases' values come from the run's secret seed and are never "
              "quoted)")
    p = a.public
    if p is None or p.error is not None or p.value is None:
        return (f"{secret}; your notebook's check({problem.name!r}, fn) runs public cases "
                "and shows the values")
    tiles = ((problem.out_spec, {"X": p.layout[0], "Y": p.layout[1]})
             if problem.uses_mesh else None)
    differ = compare_values(p.value, p.expected, problem.rtol, problem.atol, tiles=tiles)
    if differ is not None and problem.steps is not None:  # a ring: which of its steps is wrong
        differ += problem.steps(p.case.args, p.value, p.expected, *p.layout, problem.rtol,
                                problem.atol)
    msg = values_message(differ, p.copies_error)
    if msg is None:
        return (f"{secret}. The same program gives the right answer on public inputs of these "
                "shapes, so the fault shows with some values only: look for what depends on "
                "the data (a routing, an index, a count), and run your notebook's "
                f"check({problem.name!r}, fn) several times, which draws new cases each time")
    return (f"{secret}. The same program on public inputs of these shapes (the same in every "
            f"grading run): {msg}")


def sharding(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    ran = [a for a in attempts if a.error is None]
    if not ran:
        return failed("sharding", "no output to inspect")
    if not problem.uses_mesh:
        return passed("sharding", "single-device function")
    for a in ran:
        if a.sharding_error:
            return failed("sharding", f"{a.where(problem)}: {a.sharding_error}")
    from ..core.compare import describe_spec

    return passed("sharding", f"output laid out as {describe_spec(problem.out_spec)}")


def structure(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    """The problem's rules on every program read, and on every device's path through it where
    the devices ran different loop counts or branches (each must pass)."""
    for a in attempts:
        if a.paths is not None and a.paths.error is not None:
            on = where(problem, a.layout)
            return failed("structure", f"{on}: {a.paths.error}" if on else a.paths.error)
    traced = [a for a in attempts if a.paths is not None and a.paths.programs]
    if not traced:
        return failed("structure", "the program could not be traced")
    seen: dict[str, list] = {}  # each clause of the rules' findings -> the meshes it holds on
    for a in traced:
        for devices, res in a.paths.judge(problem.rules, a.mesh, problem):
            if not res.passed:
                on = " ".join(w for w in (where(problem, a.layout),
                                          f"({devices})" if devices else "") if w)
                return failed("structure", f"{on}: {res.message}" if on else res.message)
            for clause in res.message.split(CLAUSES):
                seen.setdefault(clause, []).append(a.layout)
    return passed("structure", group_by_mesh(seen, problem) or "no rules")


def group_by_mesh(seen: dict[str, list], problem: Problem) -> str:
    """Clauses said once per group of meshes they hold on, a line per group ("on meshes 2x4,
    4x2: a; b", "on mesh 1x8: c"); no mesh named for a single-device function, nor where only
    one mesh was seen."""
    meshes = {l for ls in seen.values() for l in ls}
    if not problem.uses_mesh or len(meshes) == 1:
        return CLAUSES.join(seen)
    groups: dict[tuple, list[str]] = {}
    for clause, layouts in seen.items():
        groups.setdefault(tuple(dict.fromkeys(layouts)), []).append(clause)
    return "\n".join(f"{on_meshes(ls)}: {CLAUSES.join(cs)}" for ls, cs in groups.items())


def big_case_values(problem: Problem, check: str, where: str, value: np.ndarray,
                    expected: np.ndarray, copies: Optional[str] = None) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for its memory or speed case does not
    compute that case's answer, else None. The big cases have public shapes, so a function that
    notices big inputs and skips the work would otherwise buy the memory or speed share: only a
    program that computes the answer is measured."""
    msg = values_message(secret_difference(value, expected, problem.rtol, problem.atol), copies)
    if msg is None:
        return None
    return failed(check, f"{where}: the program for this case does not compute the answer "
                  f"({msg}; the case's values come from the run's secret seed and are never "
                  f"quoted). The {check} check measures only a program that does; a function "
                  "must compute the same thing whatever the size of its inputs")


def big_case_structure(problem: Problem, check: str, where: str,
                       attempt: Attempt) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for the memory or speed case (read into
    ``attempt``) breaks the structure rules, else None. The big cases have public shapes, so a
    function that notices them could hand in, for the measured program alone, one the rules
    refuse (a blocking collective that the model prices below a slow ring, say): only a program
    that keeps the rules is measured."""
    res = structure(problem, [attempt])
    if res.passed:
        return None
    return failed(check, f"{where}: the program for this case does not keep the structure "
                  f"rules that the numerics cases' programs kept: {res.message.rstrip('.')}. "
                  f"The {check} check measures only a program that does what the exercise "
                  "asks; a function must do the same thing whatever the size of its inputs")


def memory(problem: Problem, temp_bytes: Optional[int], bound: int, what: str,
           where: str) -> CheckResult:
    if temp_bytes is None:
        return failed("memory", f"{where}: the compiled memory figures are not available")
    mib = 1 << 20
    if temp_bytes <= bound:
        per = " per device" if problem.uses_mesh else ""
        return passed("memory", f"{where}: temporary buffers {temp_bytes / mib:.2f} MiB{per}, "
                      f"within the bound {bound / mib:.2f} MiB ({what})")
    per = " per device" if problem.uses_mesh else ""
    return failed("memory", f"keep the temporary buffers within {bound / mib:.2f} MiB{per} "
                  f"({what}); {where}, the compiled program needs {temp_bytes / mib:.2f} MiB. "
                  "Look for an intermediate larger than that bound, with "
                  "jax.jit(f).lower(*args).compile().memory_analysis()")


def refused_speed(refusal: str, *, modeled: bool) -> CheckResult:
    """The speed check of a program the op table refuses (:mod:`autograder.core.optable`):
    failed with the refusal, as the structure check fails, never priced by a guess."""
    basis = ("the TPU model cannot price this program" if modeled
             else "this program is not timed")
    return failed("speed", f"{basis}: {refusal.rstrip('.')}. Only programs made of what the "
                  "course's programs contain are timed, so this check fails with the structure "
                  "check")


def _figures(t: Timing, limit: Optional[float]) -> str:
    """The figures of one speed measurement: wall-clock (where timed) and the model's."""
    digits = (lambda r: ratio_text(r, limit)) if limit is not None else (lambda r: f"{r:.2f}")
    if t.rounds:
        figures = (f"yours {t.student_us:.0f} us vs jit baseline {t.baseline_us:.0f} us (ratio "
                   f"{digits(t.ratio)}, median of {t.rounds} interleaved rounds on "
                   f"{t.platform})")
    else:  # the model decides: wall-clock on emulated devices would say nothing more
        figures = f"wall-clock on {t.platform} not measured (the TPU model decides here)"
    if t.modeled:
        m = t.modeled
        figures += (f"; modeled on TPU {m.get('chip', '?')}: yours {m['student_us']:.1f} us vs "
                    f"jit baseline {m['baseline_us']:.1f} us (ratio "
                    f"{digits(m['ratio']) if not t.rounds else format(m['ratio'], '.2f')})")
        if m.get("trips"):
            n = len(m["trips"])
            figures += (f", each loop modeled at the most iterations one entry of it ran on "
                        f"these inputs ({n} loop{'s' * (n != 1)}; the notebook's tpu_profile "
                        "shows the counts)")
        if m.get("branches"):
            n = m["branches"]
            figures += (f", {n} conditional{'s' * (n != 1)} modeled at the branch each device "
                        "ran on these inputs (a run decides, not the model's reading)")
        bounds = (m.get("student") or {}).get("bounds")
        if bounds:
            figures += (f"; an upper bound, since the model cannot know which way the program "
                        f"goes ({'; '.join(bounds)})")
        if m.get("flops_clause"):  # the model's FLOPs against XLA's (tpumodel.work)
            figures += f"; {m['flops_clause']}"
        if m.get("precision_clause"):  # matmuls at HIGH/HIGHEST: 3/6 MXU passes (tpumodel.cost)
            figures += f"; {m['precision_clause']}"
        devices = (m.get("student") or {}).get("devices")
        if devices:
            figures += (f"; its control flow depends on the device, so all {devices} devices "
                        f"were modeled and the slowest (device {m['student'].get('device')}) "
                        "timed")
    return figures


#: what a speed message says of the secret speed case whose figures follow its values
_SECRET_FIGURES = ("the speed case's values come from the run's secret seed, and your "
                   "program's loop or branch counts follow them, so its figures there are not "
                   "quoted")


def speed(problem: Problem, t: Timing, public: Optional[Timing] = None) -> CheckResult:
    """The speed verdict of ``t`` (the speed case's figures) against the problem's limit.
    Where ``t.counted`` (its figures follow the secret case's values: a loop or branch count,
    or a timed program with control flow), the message says pass or fail only, and quotes
    figures from ``public``: the same program on public inputs of the same shapes (None: no
    figure is quoted), as :func:`numerics` quotes values."""
    if t.timed or not t.modeled:  # wall-clock decides, the model's figure beside it
        ratio, basis = t.ratio, f"wall-clock ratio on {t.platform}"
        limit = problem.threshold(t.platform)
        if t.platform == "cpu":
            basis += (" (emulated devices timed on request: a test of the timed path, not a "
                      "grade)")
    else:  # the model decides
        m = t.modeled
        ratio, limit = m["ratio"], m.get("threshold", problem.threshold("tpu_model"))
        basis = "modeled TPU ratio"
    counted = t.counted or bool(t.modeled and (t.modeled.get("trips")
                                                or t.modeled.get("branches")))
    if not counted:
        figures = _figures(t, limit)
    elif public is not None:
        figures = (f"{_SECRET_FIGURES}; on public inputs of the same shapes (the same in "
                   f"every grading run): {_figures(public, limit)}")
    else:
        figures = (f"{_SECRET_FIGURES}, nor any from public inputs (they could not be run); "
                   "the notebook's tpu_profile models it on public inputs")
    if ratio <= limit:
        return passed("speed", f"{figures}; {basis} within {limit:g}"
                      + (" on the speed case" if counted else ""))
    if problem.uses_mesh:
        how = ("compare the collectives each one runs and what each computation waits for "
               "(the notebook's tpu_profile shows both)")
    else:
        how = "compare the two compiled programs (jax.jit(f).lower(*args).compile().as_text())"
    if counted:
        return failed("speed", f"make it faster: a {basis} of at most {limit:g} is needed, and "
                      f"on the speed case yours is above it ({figures}). Time it against "
                      f"jax.jit of the plain code and {how}.")
    return failed("speed", f"make it faster: a {basis} of at most {limit:g} is needed, yours is "
                  f"{ratio_text(ratio, limit)} ({figures}). Time it against jax.jit of the plain "
                  f"code and {how}.")
