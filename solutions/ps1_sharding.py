"""Reference answers for ps1_sharding.

This file is the single source of the solutions: the instructor notebook's solution cells are
built from these functions (the text between the BEGIN/END SOLUTION markers is what nbgrader
removes from the student version).
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def shard_average_jit(A, mesh):
    """Mean of the rows of each X-shard, written in the global view."""
    ### BEGIN SOLUTION
    x = mesh.shape["X"]
    # Splitting the row axis into (X, S/X) keeps every shard's rows on its own devices, so
    # the mean over the second axis needs no communication.
    blocks = A.reshape(x, A.shape[0] // x, A.shape[1])
    blocks = jax.lax.with_sharding_constraint(blocks, NamedSharding(mesh, P("X", None, "Y")))
    return blocks.mean(axis=1)
    ### END SOLUTION


def shard_average_shard_map(A, mesh):
    """Mean of the rows of each X-shard, written per device with shard_map."""
    ### BEGIN SOLUTION
    def local_mean(block):
        # block is this device's [S/X, D/Y] tile; its row mean is one row of the answer.
        return block.mean(axis=0, keepdims=True)

    return jax.shard_map(local_mean, mesh=mesh, in_specs=P("X", "Y"),
                         out_specs=P("X", "Y"))(A)
    ### END SOLUTION


def roll_diff(A, shift, mesh):
    """roll(block, shift, axis=0) - block inside every X-shard block."""
    ### BEGIN SOLUTION
    def local(block):
        return jnp.roll(block, shift, axis=0) - block

    return jax.shard_map(local, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))(A)
    ### END SOLUTION
