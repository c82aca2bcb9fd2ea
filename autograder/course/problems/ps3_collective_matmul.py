"""Registry entries for ps3_collective_matmul: overlapped (collective) matmuls (Problem 3)."""
from __future__ import annotations

from jax.sharding import PartitionSpec as P

from ...core.problem import Problem
from ..baselines.ps3_collective_matmul import matmul_baseline, mlp_baseline
from ..references import ps3_collective_matmul as ref
from ..rules.ring import ring_rule
from . import register

ASSIGNMENT = "ps3_collective_matmul"

#: Speed limits, as a ratio to the jit baseline's time, at the speed shape (global B, D, F = 1024,
#: 1024, 4096, f32, mesh 2x4). With every MXU pass at the fitted 0.58 of the bf16 peak (a float32
#: dot at default precision is one pass), each one-way ring step's transfer there outlasts its
#: partial matmul about 5x on a v5e: the shape is communication-bound, so a ring hides only its
#: few microseconds of matmuls and its per-step adds cost what XLA's own ring folds in. The
#: references and honest variants model at: all-gather 0.93, reduce-scatter 1.04-1.08, MLP
#: 0.99-1.07, all-reduce 1.04-1.13 (a HIGHEST-precision variant's six passes hide under its
#: all-reduce: 1.10). Each limit sits between those and the nearest slower program that passes
#: the ring structure: a serialized ring (all-gather 1.42, reduce-scatter 1.18), HIGHEST precision
#: (reduce-scatter 1.30, MLP 1.25), an all-reduce psum in 16 tiles (1.32; 8 tiles 1.16 pass).
#: Blocking programs (0.96-1.00) fail the structure check, which carries the overlap lesson at
#: this shape. "tpu" (wall-clock on a real TPU): the same with room for timing noise. See
#: docs/model.md, "The limits". ps4 has its own shape and limits (problems/ps4_bidirectional.py).
SPEED = {
    "allgather": {"tpu": 0.97, "tpu_model": 0.97},
    "allreduce": {"tpu": 1.3, "tpu_model": 1.2},
    "reducescatter": {"tpu": 1.15, "tpu_model": 1.12},
    "mlp": {"tpu": 1.2, "tpu_model": 1.15},
}


register(Problem(
    name="matmul_allgather",
    assignment=ASSIGNMENT,
    points=4,
    statement="A[B_X, D_Y] @ W[D, F_Y] -> [B_X, F_Y] with shard_map: pass A's blocks round the "
              "'Y' ring with ppermute, multiplying each block as it arrives (no all_gather).",
    arg_names=("A", "W"),
    in_specs=(P("X", "Y"), P(None, "Y")),
    out_spec=P("X", "Y"),
    make_case=ref.allgather_case,
    steps=ref.allgather_steps,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allgather"),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=SPEED["allgather"],
))

register(Problem(
    name="matmul_allreduce",
    assignment=ASSIGNMENT,
    points=5,
    statement="A[B_X, D_Y] @ W[D_Y, F] -> [B_X, F] (replicated over Y) with shard_map: reduce "
              "the partial products over 'Y' tile by tile (several psums of output tiles, or a "
              "ppermute ring), never one psum of the whole output.",
    arg_names=("A", "W"),
    in_specs=(P("X", "Y"), P("Y", None)),
    out_spec=P("X", None),
    make_case=ref.allreduce_case,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allreduce"),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=SPEED["allreduce"],
))

register(Problem(
    name="matmul_reducescatter",
    assignment=ASSIGNMENT,
    points=5,
    statement="T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y] with shard_map: accumulate output-block "
              "partial sums [B/X, D/Y] while passing them round the 'Y' ring (Y-1 blocks sent "
              "per device, no psum_scatter).",
    arg_names=("T", "W2"),
    in_specs=(P("X", "Y"), P("Y", None)),
    out_spec=P("X", "Y"),
    make_case=ref.reducescatter_case,
    steps=ref.reducescatter_steps,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("reducescatter"),),
    edge_cases=ref.reducescatter_edge_cases,
    speed_threshold=SPEED["reducescatter"],
))

register(Problem(
    name="mlp_block",
    assignment=ASSIGNMENT,
    points=6,
    statement="relu(In @ Win) @ Wout, In and Out [B_X, D_Y], Win [D, F_Y], Wout [F_Y, D]: the "
              "all-gather ring for the up-projection, then the reduce-scatter ring for the "
              "down-projection, communication overlapped throughout.",
    arg_names=("In", "Win", "Wout"),
    in_specs=(P("X", "Y"), P(None, "Y"), P("Y", None)),
    out_spec=P("X", "Y"),
    make_case=ref.mlp_case,
    reference=ref.mlp_reference,
    baseline=mlp_baseline,
    rules=(ring_rule("mlp"),),
    edge_cases=ref.mlp_edge_cases,
    speed_threshold=SPEED["mlp"],
))
