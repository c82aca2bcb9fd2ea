"""cleo's ps1 answers: one right, one right but wasteful, one wrong (used by tools/demo.py)."""


def shard_average_shard_map(A, mesh):
    # Right numbers, needless communication: gathers the whole row block over Y first.
    def local_mean(block):
        full = jax.lax.all_gather(block, "Y", axis=1, tiled=True)
        d = block.shape[1]
        start = jax.lax.axis_index("Y") * d
        return jax.lax.dynamic_slice_in_dim(full.mean(axis=0, keepdims=True), start, d, axis=1)

    return jax.shard_map(local_mean, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))(A)


def roll_diff(A, shift, mesh):
    # Wrong: a global-view roll moves rows across shard boundaries.
    return jnp.roll(A, shift, axis=0) - A
