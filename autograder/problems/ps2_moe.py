"""Registry entries for ps2_moe: mixture-of-experts routing (Problem 2)."""
from __future__ import annotations

import jax
from jax.sharding import PartitionSpec as P

from .. import rules
from ..references import ps2_moe as ref
from ..registry import Problem, register
from ..results import failed, passed

ASSIGNMENT = "ps2_moe"

A_SPEC, B_SPEC, W_SPEC, OUT_SPEC = P("X", "Y"), P("X"), P("X", None, "Y"), P("X", "Y")
BK_SPEC = P("X", None)


# -- baselines: plain global-view jnp, every expert applied to a masked copy of the tokens ----

def _dense_moe(A, weights, W):
    """sum_e weights[:, e] * (A @ W[e]) as one matmul over the (expert, D) pair."""
    S, D = A.shape
    E, _, F = W.shape
    routed = (weights[:, :, None] * A[:, None, :]).reshape(S, E * D)
    return routed @ W.reshape(E * D, F)


def _local_baseline(A, B, W):
    """every expert applied to every token and masked by one_hot(B): one matmul over the
    (expert, D) pair, E times the FLOPs of the routed answer"""
    return _dense_moe(A, jax.nn.one_hot(B, W.shape[0], dtype=A.dtype), W)


def _moe_baseline(A, B, W, mesh):
    """every expert applied to every token and masked by one_hot(B), in the global view: one
    matmul over the (expert, D) pair, E times the FLOPs of the routed answer, with the
    collectives jit chooses"""
    return _dense_moe(A, jax.nn.one_hot(B, W.shape[0], dtype=A.dtype), W)


def _topk_baseline(A, B, W, mesh):
    """every expert applied to every token and weighted by the mean of its k one-hots, in the
    global view: one matmul over the (expert, D) pair, with the collectives jit chooses"""
    weights = jax.nn.one_hot(B, W.shape[0], dtype=A.dtype).mean(axis=1)
    return _dense_moe(A, weights, W)


#: moe_local and moe_jit are about memory and about what jit communicates, not about beating
#: the dense baseline: sorting tokens into [E, S, D] buffers does the same E-fold matmul work as
#: the baseline plus a scatter and a gather of the buffers, which the TPU model prices at about
#: 1.3-2.5x the dense einsum. Allow that; a blow-up (an [S, D, F] gather, ~17x) still fails.
BUFFERS_SPEED = {"tpu_model": 3.0}


# -- structure rules -------------------------------------------------------------------------

def input_shapes(prog) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of the traced function's array arguments (global view), from the
    program's argument list (a jaxpr's binders or a StableHLO module's ``@main``)."""
    return [(dt, tuple(int(d) for d in shape))
            for dt, (shape, _) in zip(prog.arg_dtypes, prog.arg_info)]


def _activation_bytes(prog, mesh):
    """Bytes of the activations A[S, D] gathered over X but still split over Y: S * D/Y * 4."""
    shapes = input_shapes(prog)
    if not shapes or len(shapes[0][1]) != 2:
        return None
    s, d = shapes[0][1]
    return s * (d // mesh.shape["Y"]) * 4


def _gathers_over_x(prog):
    return [o for o in prog.collectives("all_gather", axis="X")]


def gathers_activations_over_x(prog, mesh, problem):
    """moe_allgather: an explicit all_gather over X of the activations."""
    if mesh.shape["X"] == 1:
        return None
    big = _activation_bytes(prog, mesh)
    found = [o for o in _gathers_over_x(prog) if big is None or o.out_bytes * 2 >= big]
    if found:
        return passed("structure", "all-gathers the activations over X")
    return failed("structure", "expected an explicit jax.lax.all_gather of the activations A "
                  "over 'X' (every device then holds every token and applies its own experts); "
                  f"found: {prog.summary()}. " + rules.HOW_TO_LOOK)


def no_activation_gather_over_x(prog, mesh, problem):
    """No all_gather over X that carries activations: [S, D]-sized per call or in total, or
    any row-gather inside a loop whose trip count is unknown."""
    if mesh.shape["X"] == 1:
        return None
    big = _activation_bytes(prog, mesh)
    for o in _gathers_over_x(prog):
        total = o.out_bytes * (o.count or 1)
        rows_in_loop = o.count is None and len(o.out_shapes[0]) >= 2
        if (big is not None and 2 * total >= big) or rows_in_loop:
            shape = list(o.out_shapes[0]) if o.out_shapes else []
            return failed("structure", "tokens must travel to their experts with all_to_all; "
                          "found an all_gather over 'X' producing "
                          f"{shape} ({total / 2**10:.1f} KiB"
                          f"{' per round' if o.count is None else ''}), i.e. the activations "
                          "of other X-groups copied to every device. Send each X-group only "
                          "the tokens routed to its experts. " + rules.HOW_TO_LOOK)
    return passed("structure", "no all-gather of activations over X")


def tokens_travel_all_to_all(prog, mesh, problem):
    if mesh.shape["X"] == 1:
        return None
    if prog.collectives("all_to_all", axis="X"):
        return passed("structure", "tokens travel with all_to_all over X")
    return failed("structure", "expected the tokens to travel to the X-group owning their "
                  f"expert with jax.lax.all_to_all over 'X'; found: {prog.summary()}. "
                  + rules.HOW_TO_LOOK)


ALL_TO_ALL_RULES = (rules.all_of(rules.uses_shard_map, tokens_travel_all_to_all,
                                 no_activation_gather_over_x),)


# -- memory bounds ---------------------------------------------------------------------------

def _local_memory_bound(case, x, y):
    a, _, w = case.args
    s, d = a.shape
    f = w.shape[2]
    full = s * d * f * 4
    return full // 8, (f"an [S, D, F] = [{s}, {d}, {f}] array would take {full / 2**20:.0f} "
                       "MiB; allowed: an eighth of that")


def _all_to_all_memory_bound(case, x, y):
    a, b, w = case.args
    s, d = a.shape
    f = w.shape[2]
    k = 1 if b.ndim == 1 else b.shape[1]
    gathered = s * d * 4
    own = (s // x) * k * (d + f) * 4  # this device's k copies of its tokens and their results
    mib = 2 ** 20
    return gathered // 2 + own, (
        f"one all-gathered copy of A f32[{s}, {d}] alone takes {gathered / mib:.0f} MiB per "
        f"device; allowed: half of that plus {own / mib:.0f} MiB, room for {k} cop"
        f"{'y' if k == 1 else 'ies'} of this device's own tokens and results. Keep the "
        "chunks a fixed small size, not proportional to S")


# -- the entries -----------------------------------------------------------------------------

register(Problem(
    name="moe_local",
    assignment=ASSIGNMENT,
    points=3,
    statement="Out[i] = A[i] @ W[B[i]] on one device (no mesh argument), without building an "
              "[S, D, F] array: sort the tokens into per-expert buffers.",
    arg_names=("A", "B", "W"),
    in_specs=(P(), P(), P()),
    out_spec=P(),
    make_case=ref.moe_local_case,
    reference=ref.moe_reference,
    baseline=_local_baseline,
    rules=(rules.no_shard_map,),
    memory_bound=_local_memory_bound,
    speed_threshold=BUFFERS_SPEED,
    uses_mesh=False,
    cases_per_mesh=3,
    edge_cases=ref.moe_local_edge_cases,
    layouts=((2, 4),),
))

register(Problem(
    name="moe_jit",
    assignment=ASSIGNMENT,
    points=2,
    statement="The routing in jax.jit's global view (no shard_map) on sharded inputs; output "
              "f32[S, F] sharded P('X', 'Y').",
    arg_names=("A", "B", "W"),
    in_specs=(A_SPEC, B_SPEC, W_SPEC),
    out_spec=OUT_SPEC,
    make_case=ref.moe_case,
    reference=ref.moe_reference,
    baseline=_moe_baseline,
    rules=(rules.no_shard_map,),
    speed_threshold=BUFFERS_SPEED,
    cases_per_mesh=1,
    edge_cases=ref.moe_edge_cases,
))

register(Problem(
    name="moe_allgather",
    assignment=ASSIGNMENT,
    points=3,
    statement="shard_map: all_gather the activations over X, apply this device's experts, "
              "send the results back to their tokens' owners.",
    arg_names=("A", "B", "W"),
    in_specs=(A_SPEC, B_SPEC, W_SPEC),
    out_spec=OUT_SPEC,
    make_case=ref.moe_case,
    reference=ref.moe_reference,
    baseline=_moe_baseline,
    rules=(rules.all_of(rules.uses_shard_map, gathers_activations_over_x),),
    cases_per_mesh=1,
    edge_cases=ref.moe_edge_cases,
))

register(Problem(
    name="moe_all_to_all",
    assignment=ASSIGNMENT,
    points=5,
    statement="shard_map: tokens travel to the X-group owning their expert with all_to_all "
              "(fixed-size chunks in a loop) and back; never all-gathers A over X.",
    arg_names=("A", "B", "W"),
    in_specs=(A_SPEC, B_SPEC, W_SPEC),
    out_spec=OUT_SPEC,
    make_case=ref.moe_case,
    reference=ref.moe_reference,
    baseline=_moe_baseline,
    rules=ALL_TO_ALL_RULES,
    memory_bound=_all_to_all_memory_bound,
    cases_per_mesh=1,
    edge_cases=ref.moe_edge_cases,
    speed_layout=(8, 1),
))

register(Problem(
    name="moe_topk",
    assignment=ASSIGNMENT,
    points=4,
    statement="Top-k routing, B: int32[S, k] P('X', None): Out[i] = mean_j A[i] @ W[B[i, j]], "
              "with the same rules as moe_all_to_all.",
    arg_names=("A", "B", "W"),
    in_specs=(A_SPEC, BK_SPEC, W_SPEC),
    out_spec=OUT_SPEC,
    make_case=ref.moe_topk_case,
    reference=ref.moe_topk_reference,
    baseline=_topk_baseline,
    rules=ALL_TO_ALL_RULES,
    memory_bound=_all_to_all_memory_bound,
    cases_per_mesh=1,
    edge_cases=ref.moe_topk_edge_cases,
    speed_layout=(8, 1),
))
