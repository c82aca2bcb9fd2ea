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
from .rules.base import RECEIVED_CHANGED, Rule
from .rules.ring import VARIANTS

_LOADED = False


def load_all() -> dict[str, Problem]:
    """Import every module of :mod:`autograder.course.problems` (each registers its entries),
    then check that every problem's rules have what their readers need (:func:`check_rules`):
    a registry that would grade with a rule missing a part refuses to load."""
    global _LOADED
    if not _LOADED:
        from . import problems

        for info in sorted(pkgutil.iter_modules(problems.__path__), key=lambda m: m.name):
            importlib.import_module(f"{problems.__name__}.{info.name}")
        for problem in REGISTRY.values():
            check_rules(problem)
        _LOADED = True
    return REGISTRY


class RuleNotReady(ValueError):
    """A problem's structure rule lacks what a reader of rules needs: the registry refuses to
    load."""


def check_rules(problem: Problem) -> None:
    """Raise :class:`RuleNotReady`, naming the problem and the rule, unless each of
    ``problem``'s rules (and each rule it was made of) is a
    :class:`~autograder.course.rules.base.Rule` that has what its readers need:

    * a rule that reads ``received_changed`` declares the perturbations the reader measures it
      on (:func:`autograder.course.reading.perturbations_of`): without them the reader never
      measures it, and the rule would answer "does not apply" on every program;
    * a rule a factory made names a factory that exists at module level, and a rule no factory
      made is its module's attribute of its own name: the public self-check rebuilds the
      rules from those names (:func:`autograder.public.check.encode_rule`);
    * a ring rule's variant is one :func:`~autograder.course.rules.ring.ring_budget` knows
      (:mod:`autograder.course.bars` states its budget)."""
    for rule in problem.rules:
        _check_rule(problem, rule, ())


def _check_rule(problem: Problem, rule, within: tuple[str, ...]) -> None:
    def refuse(why: str) -> RuleNotReady:
        name = rule.name if isinstance(rule, Rule) else repr(rule)
        inside = "".join(f" (in the rule {w!r})" for w in reversed(within))
        return RuleNotReady(f"problem {problem.name!r}: the structure rule {name!r}{inside} "
                            f"{why}; the registry refuses to load")

    if not isinstance(rule, Rule):
        raise refuse("is not a Rule: make it one with @structure_rule, or build it with a "
                     "function marked @rule_factory (autograder/course/rules/base.py)")
    for part in rule.parts:  # the parts first: the message names the rule that lacks
        _check_rule(problem, part, within + (rule.name,))
    if RECEIVED_CHANGED in rule.reads and rule.perturbations is None:
        raise refuse(f"reads {RECEIVED_CHANGED} but declares no perturbations to measure it "
                     "on: the reader would not measure it, and the rule would never apply")
    if rule.made_by is None:
        if _module_level(rule.check.__module__, rule.name) is not rule:
            raise refuse(f"is not the attribute {rule.name!r} of its module "
                         f"{rule.check.__module__}: the self-check cannot find it by name "
                         "(define it at module level with @structure_rule, or build it with a "
                         "function marked @rule_factory)")
    else:
        factory = rule.made_by.factory
        if _module_level(factory.__module__, factory.__qualname__) is not factory:
            raise refuse(f"was made by {factory.__qualname__}, which is not a function of "
                         f"{factory.__module__} (the self-check calls the factory again by "
                         "its name: mark a module-level function @rule_factory)")
    if rule.variant is not None and rule.variant not in VARIANTS:
        raise refuse(f"judges the ring variant {rule.variant!r}, none of {list(VARIANTS)}")


def _module_level(module: str, name: str):
    """What module ``module`` holds under ``name`` (None where it holds nothing)."""
    try:
        return vars(importlib.import_module(module)).get(name)
    except ImportError:
        return None


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
