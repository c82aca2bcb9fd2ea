"""Structure rules: small pure functions over a traced :class:`~autograder.program.Program`.

Each rule returns a :class:`CheckResult` (or None when it does not apply to this mesh). A problem
lists its rules in the registry; the structure check runs them on every mesh layout.
"""
from __future__ import annotations

from .program import Program
from .results import CheckResult, failed, passed

HOW_TO_LOOK = (
    "Look yourself: print(jax.make_jaxpr(functools.partial(f, mesh=mesh))(*args)) shows the "
    "collectives you wrote; jax.jit(...).lower(*args).compile().as_text() shows what XLA runs."
)


def uses_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if prog.uses_shard_map:
        return passed("structure", "uses shard_map")
    return failed("structure", "expected the function to use jax.shard_map (a per-device "
                  "program with explicit communication); found no shard_map in its jaxpr. "
                  + HOW_TO_LOOK)


def no_shard_map(prog: Program, mesh, problem) -> CheckResult:
    if not prog.uses_shard_map:
        return passed("structure", "global-view code, no shard_map")
    return failed("structure", "this one is about jax.jit's global view: write plain jnp code "
                  "(sharding constraints allowed) without shard_map; found a shard_map in the "
                  "jaxpr.")


def no_collectives_written(prog: Program, mesh, problem) -> CheckResult:
    cols = prog.collectives()
    if not cols:
        return passed("structure", "no collectives in the program")
    return failed("structure", "expected no communication (each shard's work is local); found "
                  f"in your program: {prog.summary()}. " + HOW_TO_LOOK)


def no_compiled_collectives(prog: Program, mesh, problem) -> CheckResult:
    lines = prog.compiled_collectives()
    if not lines:
        return passed("structure", "the compiled program has no collectives")
    first = lines[0]
    if len(first) > 160:
        first = first[:160] + "..."
    return failed("structure", f"expected a compiled program with no communication; XLA added "
                  f"{len(lines)} collective(s), e.g. `{first}`. This usually means an "
                  "intermediate or the output is laid out differently from the input, so data "
                  "has to move; compare the output sharding with the spec and keep each shard's "
                  "rows where they are. " + HOW_TO_LOOK)


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
        return passed("structure", "; ".join(oks) or "ok")

    rule.__name__ = "all_of(" + ",".join(getattr(r, "__name__", "?") for r in rules) + ")"
    return rule
