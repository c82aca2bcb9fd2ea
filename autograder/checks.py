"""The five checks. Each is a small pure function of evidence the runner gathered (outputs,
traced programs, compiled memory figures, timings) and returns a :class:`CheckResult` whose
message says what was expected, what was found and how to look at it yourself."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from .compare import compare_values
from .program import Program
from .registry import Case, Problem
from .results import CheckResult, failed, passed


@dataclass
class Attempt:
    """One run of the student's function on one case and mesh."""

    mesh: Any
    layout: tuple[int, int]
    case: Case
    expected: Optional[np.ndarray] = None
    value: Optional[np.ndarray] = None  # the output gathered to the host
    sharding_error: Optional[str] = None  # None: layout right
    error: Optional[str] = None  # what went wrong before there was an output
    program: Optional[Program] = None

    def where(self, problem: Problem) -> str:
        x, y = self.layout
        return f"on mesh {x}x{y} with {self.case.describe(problem.arg_names)}"


@dataclass
class Timing:
    student_us: float
    baseline_us: float
    ratio: float  # robust statistic of the interleaved per-round ratios
    rounds: int  # 0: not measured (the modeled ratio decides)
    platform: str
    modeled: dict = field(default_factory=dict)  # e.g. modeled TPU figures, when available


def numerics(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    if not attempts:
        return failed("numerics", "no test case could be run")
    for a in attempts:
        if a.error is not None:
            return failed("numerics", f"{a.where(problem)}: {a.error}")
        msg = compare_values(a.value, a.expected, problem.rtol, problem.atol)
        if msg is not None:
            return failed("numerics", f"{a.where(problem)}: {msg}")
    layouts = sorted({f"{x}x{y}" for x, y in (a.layout for a in attempts)})
    return passed("numerics", f"matches the NumPy reference on {len(attempts)} cases "
                  f"(meshes {', '.join(layouts)})")


def sharding(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    ran = [a for a in attempts if a.error is None]
    if not ran:
        return failed("sharding", "no output to inspect")
    if not problem.uses_mesh:
        return passed("sharding", "single-device function")
    for a in ran:
        if a.sharding_error:
            return failed("sharding", f"{a.where(problem)}: {a.sharding_error}")
    from .compare import describe_spec

    return passed("sharding", f"output laid out as {describe_spec(problem.out_spec)}")


def structure(problem: Problem, attempts: list[Attempt]) -> CheckResult:
    traced = [a for a in attempts if a.program is not None]
    if not traced:
        return failed("structure", "the program could not be traced")
    msgs: list[str] = []
    for a in traced:
        for rule in problem.rules:
            res = rule(a.program, a.mesh, problem)
            if res is None:
                continue
            if not res.passed:
                x, y = a.layout
                return failed("structure", f"on mesh {x}x{y}: {res.message}")
            if res.message not in msgs:
                msgs.append(res.message)
    return passed("structure", "; ".join(msgs) or "no rules")


def memory(problem: Problem, temp_bytes: Optional[int], bound: int, what: str,
           where: str) -> CheckResult:
    if temp_bytes is None:
        return failed("memory", f"{where}: the compiled memory figures are not available")
    mib = 1 << 20
    if temp_bytes <= bound:
        return passed("memory", f"{where}: temporary buffers {temp_bytes / mib:.2f} MiB per "
                      f"device, within the bound {bound / mib:.2f} MiB ({what})")
    return failed("memory", f"{where}: the compiled program needs {temp_bytes / mib:.2f} MiB of "
                  f"temporary buffers per device; expected at most {bound / mib:.2f} MiB "
                  f"({what}). Look with: jax.jit(f).lower(*args).compile().memory_analysis()")


def speed(problem: Problem, t: Timing) -> CheckResult:
    limit = problem.threshold(t.platform)
    if t.rounds:
        figures = (f"{t.student_us:.0f} us vs jit baseline {t.baseline_us:.0f} us (ratio "
                   f"{t.ratio:.2f}, median of {t.rounds} interleaved rounds on {t.platform})")
    else:  # the model decides: wall-clock on emulated devices would say nothing more
        figures = f"wall-clock on {t.platform} not measured (the TPU model decides here)"
    if t.modeled:
        m = t.modeled
        figures += (f"; modeled on TPU {m.get('chip', '?')}: {m['student_us']:.1f} us vs "
                    f"{m['baseline_us']:.1f} us (ratio {m['ratio']:.2f})")
        ratio, limit = m["ratio"], m.get("threshold", limit)
        basis = "modeled TPU ratio"
    else:  # measured: on a real TPU, or where the model could not read the program
        ratio, basis = t.ratio, f"wall-clock ratio on {t.platform}"
    if ratio <= limit:
        return passed("speed", f"{figures}; {basis} within {limit:g}")
    return failed("speed", f"{figures}; expected a {basis} of at most {limit:g}. Profile it: "
                  "time the compiled function against jax.jit of the plain global-view code "
                  "and compare the collectives each one runs.")
