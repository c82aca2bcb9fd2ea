"""Collective all-gather matmuls used to calibrate and test the TPU model (current JAX API).

A[B, D] sharded P('X', 'Y'), W[D, F] sharded P(None, 'Y'); the result [B, F] is P('X', 'Y').
Each Y-shard of A's columns travels around the Y ring while every device multiplies the chunk it
holds by the matching rows of its W shard.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import P


def _varying(x):
    return jax.lax.pcast(x, ("X", "Y"), to="varying")


def _body_unidirectional(a, w):
    n = jax.lax.axis_size("Y")
    me = jax.lax.axis_index("Y")
    k = a.shape[1]
    perm = [(j, (j - 1) % n) for j in range(n)]  # pass chunks to the left neighbour
    acc = _varying(jnp.zeros((a.shape[0], w.shape[1]), a.dtype))
    for step in range(n):
        src = (me + step) % n  # whose chunk of A we hold now
        rows = jax.lax.dynamic_slice_in_dim(w, src * k, k, axis=0)
        if step < n - 1:
            nxt = jax.lax.ppermute(a, "Y", perm)  # in flight while we multiply
        acc = acc + a @ rows
        if step < n - 1:
            a = nxt
    return acc


def _body_bidirectional(a, w):
    """Half of the chunk goes each way round the ring; both link directions are busy."""
    n = jax.lax.axis_size("Y")
    me = jax.lax.axis_index("Y")
    k = a.shape[1]
    h = k // 2
    left = [(j, (j - 1) % n) for j in range(n)]
    right = [(j, (j + 1) % n) for j in range(n)]
    lo, hi = a[:, :h], a[:, h:]  # lo travels left, hi travels right
    acc = _varying(jnp.zeros((a.shape[0], w.shape[1]), a.dtype))
    for step in range(n):
        src_lo = (me + step) % n
        src_hi = (me - step) % n
        w_lo = jax.lax.dynamic_slice_in_dim(w, src_lo * k, h, axis=0)
        w_hi = jax.lax.dynamic_slice_in_dim(w, src_hi * k + h, h, axis=0)
        if step < n - 1:
            nlo = jax.lax.ppermute(lo, "Y", left)
            nhi = jax.lax.ppermute(hi, "Y", right)
        acc = acc + lo @ w_lo + hi @ w_hi
        if step < n - 1:
            lo, hi = nlo, nhi
    return acc


def _body_monolithic(a, w):
    return jax.lax.all_gather(a, "Y", axis=1, tiled=True) @ w


def _wrap(body):
    def fn(A, W, mesh):
        return jax.shard_map(body, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                             out_specs=P("X", "Y"))(A, W)

    fn.__name__ = body.__name__.replace("_body_", "matmul_allgather_")
    return fn


matmul_allgather_unidirectional = _wrap(_body_unidirectional)
matmul_allgather_bidirectional = _wrap(_body_bidirectional)
matmul_allgather_monolithic = _wrap(_body_monolithic)


def matmul_allgather_jit(A, W, mesh):
    """The plain global-view baseline (GSPMD all-gathers A, then multiplies)."""
    return A @ W


def matmul_unsharded_contracting(A, W, mesh):
    """The same matmul when A arrives with its contracting dimension whole: P('X', None)."""
    return jax.shard_map(lambda a, w: a @ w, mesh=mesh, in_specs=(P("X", None), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)
