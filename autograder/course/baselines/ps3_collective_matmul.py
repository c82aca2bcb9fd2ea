"""jit baselines of ps3_collective_matmul (ps4_bidirectional uses the same)."""
from __future__ import annotations

import jax


def matmul_baseline(A, W, mesh):
    """A @ W in the global view: jit inserts its own (blocking) collectives"""
    return A @ W


def mlp_baseline(In, Win, Wout, mesh):
    """relu(In @ Win) @ Wout in the global view: jit inserts its own (blocking) collectives"""
    return jax.nn.relu(In @ Win) @ Wout
