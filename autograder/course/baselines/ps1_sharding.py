"""jit baselines of ps1_sharding (kept with the grader: they would give exercise 1a away)."""
from __future__ import annotations

import jax.numpy as jnp


def average_baseline(A, mesh):
    """the same per-shard averages, written in the global view"""
    x = mesh.shape["X"]
    return A.reshape(x, A.shape[0] // x, A.shape[1]).mean(axis=1)


def roll_baseline(A, shift, mesh):
    """the same per-block roll, written in the global view"""
    x = mesh.shape["X"]
    blocks = A.reshape(x, A.shape[0] // x, A.shape[1])
    return (jnp.roll(blocks, shift, axis=1) - blocks).reshape(A.shape)
