"""Structure rules: small pure functions over a traced :class:`~autograder.core.program.Program`.

Each rule is a :class:`Rule`: called on ``(program, mesh, problem)``, it returns a
:class:`CheckResult` (or None when it does not apply to this mesh). What its readers need of it
(how a factory made it, the perturbed inputs the reader measures for it, its ring) are declared
fields, and the registry checks them when it loads (:func:`autograder.course.registry.load_all`).
A problem lists its rules in the registry; the structure check runs them on every mesh layout.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ...core.program import Program
from ...core.results import CheckResult, failed, passed

#: what a rule reads of the program that the reader measures only for the rules that ask
#: (:func:`autograder.course.reading.read_paths`): ``Program.received_changed``, measured on
#: the rule's :attr:`Rule.perturbations`
RECEIVED_CHANGED = "received_changed"


@dataclass(frozen=True)
class MadeBy:
    """How a :func:`rule_factory` built a rule: the factory (a module-level function, so that
    the public self-check can call it again: :func:`autograder.public.check.encode_rule`) and
    the arguments it was called with."""

    factory: Callable[..., "Rule"]
    args: tuple
    kwargs: dict


@dataclass(frozen=True, eq=False)
class Rule:
    """A structure rule: ``rule(program, mesh, problem)`` is ``check``'s
    :class:`CheckResult`, or None where the rule does not apply to this mesh."""

    check: Callable[[Program, Any, Any], Optional[CheckResult]]
    #: the rule's name (a module-level rule's is its module attribute's: the public table
    #: finds it by that name)
    name: str
    #: how a :func:`rule_factory` made it; None for a module-level rule (:func:`structure_rule`)
    made_by: Optional[MadeBy] = None
    #: what ``check`` reads that the reader measures only when asked
    #: (:data:`RECEIVED_CHANGED`); the registry refuses a rule that reads what it does not
    #: declare the means to measure
    reads: frozenset = frozenset()
    #: ``(inputs, mesh shape) -> [(device ids, {dynamic argument index: global array})]``: the
    #: perturbed inputs on which the reader measures ``received_changed`` for this rule
    #: (:func:`autograder.course.reading.received_changed`); a rule combining others
    #: (:func:`all_of`) declares its parts'
    perturbations: Optional[Callable] = None
    #: the collective-matmul variant a ring rule judges (:func:`autograder.course.rules.ring.
    #: ring_rule`; :mod:`autograder.course.bars` states its byte budget), None for other rules
    variant: Optional[str] = None
    #: whether that ring runs both ways
    bidirectional: bool = False

    def __call__(self, prog: Program, mesh, problem) -> Optional[CheckResult]:
        return self.check(prog, mesh, problem)

    @property
    def parts(self) -> tuple["Rule", ...]:
        """The rules this one was made of (the rules among its factory's arguments)."""
        if self.made_by is None:
            return ()
        return tuple(a for a in self.made_by.args if isinstance(a, Rule))


def structure_rule(check: Optional[Callable] = None, *, reads: frozenset = frozenset(),
                   perturbations: Optional[Callable] = None):
    """Make a module-level function a :class:`Rule` of the same name (as a decorator, bare or
    with the rule's ``reads`` and ``perturbations``)."""

    def make(fn) -> Rule:
        return Rule(check=fn, name=fn.__name__, reads=frozenset(reads),
                    perturbations=perturbations)

    return make if check is None else make(check)


#: how a passing rule's findings are joined (the structure check groups them by mesh)
CLAUSES = "; "

HOW_TO_LOOK = (
    "Look yourself: print(jax.make_jaxpr(functools.partial(f, mesh=mesh))(*args)) shows the "
    "collectives you wrote; jax.jit(...).lower(*args).compile().as_text() shows what XLA runs."
)


@structure_rule
def uses_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if prog.uses_shard_map:
        return passed("structure", "uses shard_map")
    return failed("structure", "write the per-device program with jax.shard_map (each "
                  "device's block, with the communication written out); found no shard_map in "
                  "the function's jaxpr. " + HOW_TO_LOOK)


@structure_rule
def no_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if not prog.uses_shard_map:
        return passed("structure", "global-view code, no shard_map")
    if not problem.uses_mesh:
        return failed("structure", "write plain jax.numpy code for one device, without "
                      "shard_map; found a shard_map in the function's jaxpr.")
    return failed("structure", "write plain jnp code on the global arrays (sharding "
                  "constraints allowed) and leave the partitioning to jax.jit, without "
                  "shard_map; found a shard_map in the function's jaxpr.")


@structure_rule
def no_collectives_written(prog: Program, mesh, problem) -> CheckResult:
    cols = prog.collectives()
    if not cols:
        return passed("structure", "no collectives in the program")
    return failed("structure", "remove the collectives: each device can do its work on its "
                  f"own block, with no communication; found in your program: {prog.summary()}. "
                  + HOW_TO_LOOK)


@structure_rule
def no_compiled_collectives(prog: Program, mesh, problem) -> CheckResult:
    lines = prog.compiled_collectives()
    if not lines:
        return passed("structure", "the compiled program has no collectives")
    first = lines[0]
    if len(first) > 160:
        first = first[:160] + "..."
    return failed("structure", "keep every intermediate and the output laid out like the input "
                  "(each shard's rows where they are), so that no data has to move; XLA added "
                  f"{len(lines)} collective(s) to the compiled program, e.g. `{first}`. Look "
                  "for the step that needs data from another shard (an operation over the "
                  "whole array, or an output laid out unlike the input). " + HOW_TO_LOOK)


def rule_factory(factory):
    """Mark a function that builds rules: each :class:`Rule` it returns remembers how it was
    made (:attr:`Rule.made_by`: the factory and its arguments), so that the public self-check
    can rebuild the registry's rules from the public table (see
    :func:`autograder.public.check.encode_rule`)."""

    @functools.wraps(factory)
    def make(*args, **kwargs) -> Rule:
        return dataclasses.replace(factory(*args, **kwargs),
                                   made_by=MadeBy(make, args, dict(kwargs)))

    return make


@rule_factory
def all_of(*rules: Rule) -> Rule:
    """Combine rules: the first failure wins, otherwise a pass listing what held. The combined
    rule reads what its parts read, measured on the first part's perturbations."""

    def rule(prog, mesh, problem):
        oks = []
        for r in rules:
            res = r(prog, mesh, problem)
            if res is None:
                continue
            if not res.passed:
                return res
            oks.append(res.message)
        return passed("structure", CLAUSES.join(oks) or "ok")

    return Rule(check=rule, name="all_of(" + ",".join(r.name for r in rules) + ")",
                reads=frozenset().union(*(r.reads for r in rules)),
                perturbations=next((r.perturbations for r in rules
                                    if r.perturbations is not None), None))
