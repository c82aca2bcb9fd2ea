"""jit baselines of ps2_moe: every expert applied to a masked copy of the tokens.

They stay with the grader (``Problem.baseline_public``): moe_local_baseline is moe_local's
answer as it stands and moe_baseline moe_jit's with one sharding constraint. Their matmul work
is E times one matmul per token, as much as E buffers of S rows each: the problems are about
memory and communication, not about doing less matmul work than this."""
from __future__ import annotations

import jax


def _dense_moe(A, weights, W):
    """sum_e weights[:, e] * (A @ W[e]) as one matmul over the (expert, D) pair."""
    S, D = A.shape
    E, _, F = W.shape
    routed = (weights[:, :, None] * A[:, None, :]).reshape(S, E * D)
    return routed @ W.reshape(E * D, F)


def moe_local_baseline(A, B, W):
    """every expert applied to every token and masked by one_hot(B): one matmul over the
    (expert, D) pair, E times the FLOPs of one matmul per token"""
    return _dense_moe(A, jax.nn.one_hot(B, W.shape[0], dtype=A.dtype), W)


def moe_baseline(A, B, W, mesh):
    """every expert applied to every token and masked by one_hot(B), in the global view: one
    matmul over the (expert, D) pair, E times the FLOPs of one matmul per token, with the
    collectives jit chooses"""
    return _dense_moe(A, jax.nn.one_hot(B, W.shape[0], dtype=A.dtype), W)


def topk_baseline(A, B, W, mesh):
    """every expert applied to every token and weighted by the mean of its k one-hots, in the
    global view: one matmul over the (expert, D) pair, with the collectives jit chooses"""
    weights = jax.nn.one_hot(B, W.shape[0], dtype=A.dtype).mean(axis=1)
    return _dense_moe(A, weights, W)
