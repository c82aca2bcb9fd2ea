"""What the grader checks for each graded function, in words, read from the registry.

The notebooks print it next to each problem (tools/build_notebooks.py) and ``tpu_profile``
shows the same speed limit, so a student sees the bar the grader holds them to: the points and
their split over the checks, the meshes, the byte budget of a ring, the memory bound and the
speed limit with its basis. Nothing here is typed twice: every figure comes from the
:class:`~autograder.core.problem.Problem` entry, :data:`~autograder.core.problem.SPEED_THRESHOLDS` and
:func:`~autograder.course.rules.ring.ring_budget`, at the shapes the grader itself uses.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.meshes import layouts as course_layouts
from ..core.problem import Problem
from ..core.results import MEASURED, MEASURED_NEED_STRUCTURE
from .rules.ring import ring_budget

#: a fixed generator for the bars' shapes: the grading shapes do not depend on the seed
_SHAPE_SEED = 0


@dataclass(frozen=True)
class Line:
    """One check: its name, its points, and what passes it."""

    check: str
    points: float
    passes: str


@dataclass(frozen=True)
class Bar:
    name: str
    points: float
    lines: tuple[Line, ...]

    def big_cases(self) -> str:
        """The rule every measured check shares, said once: '' when there are none."""
        big = [l.check for l in self.lines if l.check in MEASURED]
        if not big:
            return ""
        one = len(big) == 1
        return (f"The {' and '.join(big)} check{'' if one else 's'} run{'s' if one else ''} "
                f"your function at the shapes below and need{'s' if one else ''} the right "
                f"answer there too; {MEASURED_NEED_STRUCTURE} (a program that fails structure "
                f"loses {'this share' if one else 'these shares'} too).")

    def markdown(self) -> str:
        head = (f"**What the grader checks for `{self.name}`**: {self.points:g} points; nothing "
                f"counts unless the numerics pass. {self.big_cases()}").rstrip()
        return "\n".join([head, ""] + [f"- **{l.check}** ({l.points:.3g} pt): {l.passes}"
                                        for l in self.lines])

    def text(self) -> str:
        out = [f"What the grader checks for {self.name} ({self.points:g} points):"]
        if self.big_cases():
            out.append(f"  {self.big_cases()}")
        out += [f"  {l.check:9s} {l.points:5.3g}  {l.passes.replace('`', '').replace('**', '')}"
                for l in self.lines]
        return "\n".join(out)


def _mesh(layout) -> str:
    return f"{layout[0]}x{layout[1]}"


def _mib(n: float) -> str:
    return f"{n / 2 ** 20:.3g} MiB" if n >= 2 ** 20 else f"{n / 2 ** 10:.3g} KiB"


def _big_case(problem: Problem, size: str):
    return problem.case(np.random.default_rng(_SHAPE_SEED), *problem.speed_layout, size)


def _shapes(problem: Problem, case) -> str:
    return case.describe(problem.arg_names).replace(" (edge case)", "")


def split(problem: Problem) -> dict[str, float]:
    """Each check's points: the problem's points shared by the weights of the checks it runs."""
    names = problem.check_names
    total = sum(problem.weights.get(n, 0.0) for n in names)
    return {n: problem.points * problem.weights.get(n, 0.0) / total for n in names}


def numerics_line(problem: Problem) -> str:
    layouts = problem.layouts or course_layouts()
    where = (f"meshes {', '.join(_mesh(l) for l in layouts)}" if problem.uses_mesh
             else "one device")
    edge = " plus edge cases" if problem.edge_cases is not None else ""
    return (f"values match the NumPy reference (rtol {problem.rtol:g}, atol {problem.atol:g}) "
            f"on randomized shapes{edge}, {where}")


def sharding_line(problem: Problem) -> str:
    if not problem.uses_mesh:
        return "the result is one array on one device"
    return f"the output's layout is equivalent to `{problem.out_spec}`"


def ring_rules(problem: Problem) -> list:
    return [r for r in problem.rules if r.variant is not None]


def budget_line(problem: Problem) -> str | None:
    """The ring's byte budget at the speed shape, or None for a problem without a ring."""
    rings = ring_rules(problem)
    if not rings:
        return None
    case = _big_case(problem, "speed")
    nx, ny = problem.speed_layout
    arrays = [a for a in case.args if isinstance(a, np.ndarray)]
    out = np.asarray(problem.reference(case.args, nx, ny))
    info = lambda a: (tuple(a.shape), a.dtype.itemsize)  # noqa: E731
    texts = []
    for r in rings:
        budget, per_send, need = ring_budget(r.variant, nx, ny, info(arrays[0]), info(out))
        text = (f"each device sends {need}: {_mib(budget)} in all at mesh "
                f"{_mesh(problem.speed_layout)} with {_shapes(problem, case)}"
                + (f", no single send above {_mib(per_send)}" if per_send else ""))
        if r.variant == "allreduce" and not r.bidirectional:
            text = ("with psums, each psum carries at most half of the local output; with a "
                    "ppermute ring, " + text)
        texts.append(text)
        if r.bidirectional:
            texts.append("each ring direction (shift +1 and -1) carries at least a quarter of "
                         "the bytes")
    return "; ".join(texts)


def structure_line(problem: Problem) -> str:
    budget = budget_line(problem)
    return ("the communication your program does follows the statement (`check` runs the "
            "same rules on the program you wrote)"
            + (f"; byte budget: {budget}" if budget else ""))


def memory_line(problem: Problem) -> str:
    case = _big_case(problem, "memory")
    bound, what = problem.memory_bound(case, *problem.speed_layout)
    where = (f" per device at mesh {_mesh(problem.speed_layout)}" if problem.uses_mesh else "")
    return (f"compiled temporary memory{where} below {_mib(bound)} with "
            f"{_shapes(problem, case)} ({what})")


def speed_line(problem: Problem, chip: str | None = None) -> str:
    from ..tpumodel.chips import DEFAULT_CHIP

    case = _big_case(problem, "speed")
    where = f" at mesh {_mesh(problem.speed_layout)}" if problem.uses_mesh else ""
    modeled, measured = problem.threshold("tpu_model"), problem.threshold("tpu")
    shows = ("`tpu_profile` shows it" if problem.baseline_public else
             "`tpu_profile` shows it; the baseline's code would give an answer away, so its "
             "modeled figures travel with the notebook instead")
    limit = f"**at most {modeled:g}**, modeled on TPU {chip or DEFAULT_CHIP} ({shows})"
    limit += (" or measured on a TPU" if measured == modeled
              else f"; measured on a TPU, at most {measured:g}")
    doc = " ".join((problem.baseline.__doc__ or "").split())
    what = f" ({doc})" if doc else ""
    return (f"your time over the plain `jax.jit` baseline's{what}{where} with "
            f"{_shapes(problem, case)}: {limit}. (The model prices what the program does: a "
            "branch on the data as if every branch ran; a program it cannot price fails.)")


_LINES = {"numerics": numerics_line, "sharding": sharding_line, "structure": structure_line,
          "memory": memory_line, "speed": speed_line}


def bar(problem: Problem) -> Bar:
    """The bar of one graded function: a line per check it runs, with its share of points."""
    pts = split(problem)
    return Bar(problem.name, float(problem.points),
               tuple(Line(n, pts[n], _LINES[n](problem)) for n in problem.check_names))
