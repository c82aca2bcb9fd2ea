"""One module per assignment; each registers its graded functions on import.

Add a problem by adding a ``register(Problem(...))`` entry to the assignment's module (or a new
module here for a new assignment): the CLI, pytest, the notebooks' checks and the nbgrader cells
pick it up from the registry.
"""
from __future__ import annotations

from ...core.problem import SPEED_THRESHOLDS, Problem

#: every graded function, by name (filled as the modules of this package are imported; look
#: entries up through :mod:`autograder.course.registry`)
REGISTRY: dict[str, Problem] = {}


def register(problem: Problem) -> Problem:
    """Add one graded function (a module of this package calls it once per entry)."""
    if problem.name in REGISTRY and REGISTRY[problem.name] != problem:
        raise ValueError(f"problem {problem.name!r} registered twice")
    unknown = set(problem.speed_threshold) - set(SPEED_THRESHOLDS)
    if unknown:
        raise ValueError(f"problem {problem.name!r}: speed limits for {sorted(unknown)}; the "
                         f"platforms with a limit are {sorted(SPEED_THRESHOLDS)}")
    REGISTRY[problem.name] = problem
    return problem
