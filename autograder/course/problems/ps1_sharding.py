"""Registry entries for ps1_sharding: shard-local work (Problem 1)."""
from __future__ import annotations

from jax.sharding import PartitionSpec as P

from ...core.problem import Problem
from ..baselines.ps1_sharding import average_baseline as _average_baseline
from ..baselines.ps1_sharding import roll_baseline as _roll_baseline
from ..references import ps1_sharding as ref
from ..rules import base as rules
from . import register

ASSIGNMENT = "ps1_sharding"


LOCAL_ONLY = rules.all_of(rules.no_collectives_written, rules.no_compiled_collectives)

register(Problem(
    name="shard_average_jit",
    assignment=ASSIGNMENT,
    points=3,
    statement="Row i of the f32[X, D] result is the mean of the rows held by X-shard i; "
              "global-view jnp code under jit, no shard_map, no communication.",
    arg_names=("A",),
    in_specs=(P("X", "Y"),),
    out_spec=P("X", "Y"),
    make_case=ref.shard_average_case,
    reference=ref.shard_average_reference,
    baseline=_average_baseline,
    baseline_public=False,
    rules=(rules.all_of(rules.no_shard_map, rules.no_compiled_collectives),),
))

register(Problem(
    name="shard_average_shard_map",
    assignment=ASSIGNMENT,
    points=3,
    statement="The same per-shard average written with jax.shard_map and no collectives.",
    arg_names=("A",),
    in_specs=(P("X", "Y"),),
    out_spec=P("X", "Y"),
    make_case=ref.shard_average_case,
    reference=ref.shard_average_reference,
    baseline=_average_baseline,
    baseline_public=False,
    rules=(rules.all_of(rules.uses_shard_map, LOCAL_ONLY),),
))

register(Problem(
    name="roll_diff",
    assignment=ASSIGNMENT,
    points=4,
    statement="In each X-shard block b, roll(b, shift, axis=0) - b, with shard_map and no "
              "collectives; any integer shift.",
    arg_names=("A", "shift"),
    in_specs=(P("X", "Y"), None),
    out_spec=P("X", "Y"),
    make_case=ref.roll_diff_case,
    reference=ref.roll_diff_reference,
    baseline=_roll_baseline,
    baseline_public=False,
    rules=(rules.all_of(rules.uses_shard_map, LOCAL_ONLY),),
    edge_cases=ref.roll_diff_edge_cases,
))
