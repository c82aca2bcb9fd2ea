"""Structure rules: small pure functions over a traced :class:`~autograder.core.program.Program`.

Each rule returns a :class:`CheckResult` (or None when it does not apply to this mesh). A problem
lists its rules in the registry; the structure check runs them on every mesh layout.
"""
from __future__ import annotations

import functools

from ...core.program import Program
from ...core.results import CheckResult, failed, passed

#: how a passing rule's findings are joined (the structure check groups them by mesh)
CLAUSES = "; "

HOW_TO_LOOK = (
    "Look yourself: print(jax.make_jaxpr(functools.partial(f, mesh=mesh))(*args)) shows the "
    "collectives you wrote; jax.jit(...).lower(*args).compile().as_text() shows what XLA runs."
)


def uses_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if prog.uses_shard_map:
        return passed("structure", "uses shard_map")
    return failed("structure", "write the per-device program with jax.shard_map (each "
                  "device's block, with the communication written out); found no shard_map in "
                  "the function's jaxpr. " + HOW_TO_LOOK)


def no_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if not prog.uses_shard_map:
        return passed("structure", "global-view code, no shard_map")
    if not problem.uses_mesh:
        return failed("structure", "write plain jax.numpy code for one device, without "
                      "shard_map; found a shard_map in the function's jaxpr.")
    return failed("structure", "write plain jnp code on the global arrays (sharding "
                  "constraints allowed) and leave the partitioning to jax.jit, without "
                  "shard_map; found a shard_map in the function's jaxpr.")


def no_collectives_written(prog: Program, mesh, problem) -> CheckResult:
    cols = prog.collectives()
    if not cols:
        return passed("structure", "no collectives in the program")
    return failed("structure", "remove the collectives: each device can do its work on its "
                  f"own block, with no communication; found in your program: {prog.summary()}. "
                  + HOW_TO_LOOK)


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
    """Mark a function that builds rules: each rule it returns remembers how it was made
    (``made_by``: the factory and its arguments), so that the public self-check can rebuild the
    registry's rules from the public table (see :func:`autograder.public.encode_rule`)."""

    @functools.wraps(factory)
    def make(*args, **kwargs):
        rule = factory(*args, **kwargs)
        rule.made_by = (make, args, kwargs)
        return rule

    return make


@rule_factory
def all_of(*rules):
    """Combine rules: the first failure wins, otherwise a pass listing what held."""

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

    rule.__name__ = "all_of(" + ",".join(getattr(r, "__name__", "?") for r in rules) + ")"
    return rule
