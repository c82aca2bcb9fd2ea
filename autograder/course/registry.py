"""The one registry of graded functions.

Each :class:`Problem` says everything about one graded function: its arguments and shardings, how
to make random inputs, the NumPy reference, the jit baseline, the structure rules, the memory
bound, the speed threshold and the points. The notebooks' public checks, the hidden nbgrader cells,
the pytest suite and the CLI are all driven from here; a new problem is one new entry in a module
of :mod:`autograder.course.problems`.
"""
from __future__ import annotations

import importlib
import pkgutil

from ..core.problem import Problem
from .problems import REGISTRY

_LOADED = False


def load_all() -> dict[str, Problem]:
    """Import every module of :mod:`autograder.course.problems` (each registers its entries)."""
    global _LOADED
    if not _LOADED:
        from . import problems

        for info in sorted(pkgutil.iter_modules(problems.__path__), key=lambda m: m.name):
            importlib.import_module(f"{problems.__name__}.{info.name}")
        _LOADED = True
    return REGISTRY


def problems(assignment: str | None = None) -> list[Problem]:
    load_all()
    return [p for p in REGISTRY.values() if assignment is None or p.assignment == assignment]


def get(name: str) -> Problem:
    load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no graded function named {name!r}; known: {sorted(REGISTRY)}") from None


def assignments() -> list[str]:
    load_all()
    return sorted({p.assignment for p in REGISTRY.values()})
