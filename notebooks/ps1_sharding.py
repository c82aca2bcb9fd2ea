# %% [markdown]
# # Problem set 1: work that stays on its shard
#
# This notebook is about the two ways JAX lets you program many devices at once:
#
# * **`jax.jit` with shardings** — you write ordinary array code for the *whole* array (the
#   *global view*), tell JAX how the inputs and outputs are laid out, and the XLA compiler
#   (its GSPMD partitioner) decides what each device computes and what it must send.
# * **`jax.shard_map`** — you write the program *one device* runs on *its own piece* (the *local
#   view*), and any data that has to move between devices moves only because you wrote a
#   collective (`psum`, `all_gather`, `ppermute`, ...).
#
# Both problems here need **no communication at all**: each answer can be computed from the
# data a device already holds. Your job is to write code that lets the compiler see that.
#
# Run the set-up cell below first. It gives you 8 devices: real ones on a TPU/GPU host, and
# 8 emulated CPU devices anywhere else (your laptop, CI, Colab's single-chip runtimes), so every
# cell runs the same way everywhere.

# %% [markdown]
# ## Meshes and shardings
#
# A **mesh** arranges the devices in a grid with named axes. This course always uses a 2-D mesh
# with axes `'X'` and `'Y'`; `make_mesh(2, 4)` puts the 8 devices in 2 rows of 4.
#
# A **`PartitionSpec`** says, for each dimension of an array, which mesh axis splits it:
# `P('X', 'Y')` cuts the rows into `X` blocks and the columns into `Y` blocks, so each device
# holds one `[S/X, D/Y]` tile. `None` means "not split along this dimension" (every device along
# that mesh axis holds a full copy). A `NamedSharding(mesh, spec)` binds the two together.

# %%
import functools

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = make_mesh(2, 4)
S, D = 16, 8
A = jax.device_put(jnp.arange(S * D, dtype=jnp.float32).reshape(S, D),
                   NamedSharding(mesh, P("X", "Y")))
print("global shape:", A.shape)
print("each device holds:", A.addressable_shards[0].data.shape)
jax.debug.visualize_array_sharding(A)

# %% [markdown]
# Each box above is one device's tile. Try `P("X", None)` or `P(None, "Y")` and look again: a
# dimension that is not split is copied to every device along the unused mesh axis.
#
# ## Seeing the communication
#
# The compiled program tells you what XLA decided to do. This helper lists the cross-device
# operations (all-gather, all-reduce, collective-permute, ...) in a compiled function. You will
# use it to check your own answers.
#
# XLA's printed modules do not use the mesh's axis names: `axis_0` is `X` and `axis_1` is `Y`.
# So `replica_groups=mesh[...] {'axis_0'}` in the line below means the all-reduce runs across `X`.

# %%
# compiled_collectives(f, *args) compiles f for these arguments and keeps the lines of XLA's
# module that run a collective (its code is in the selfcheck folder, next to this notebook).
from selfcheck import compiled_collectives


# Summing over the rows of a row-sharded array needs an all-reduce across X:
print(compiled_collectives(lambda a: a.sum(axis=0), A))

# %% [markdown]
# Code that computes the right numbers can still make the partitioner move data. A natural
# way to average each X-shard: cut `A` into its `X` row blocks with `jnp.split`, average each
# block, and stack the averages. Every value is right; look at what XLA runs:

# %%
def split_and_stack(A, mesh):
    x = mesh.shape["X"]
    return jnp.stack([block.mean(axis=0) for block in jnp.split(A, x)])


for line in compiled_collectives(functools.partial(split_and_stack, mesh=mesh), A):
    print(line)

# %% [markdown]
# Each average is computed where its rows live, but `jnp.stack` makes a new array whose layout
# XLA picks on its own (here: the same on every X row of devices), so each device is sent the
# averages the other shards computed (`collective-permute`). `check`, which runs the grader's
# checks, says the same: the output is not laid out `P('X', 'Y')`, and the compiled program has
# collectives that nobody wrote. Problem 1a asks for the version without them.

# %%
from selfcheck import CheckFailed

try:
    check("shard_average_jit", split_and_stack, big=False)
except CheckFailed:
    pass  # the lines above are the report: sharding and structure fail, numerics pass

# %% [markdown]
# ## Problem 1a: the average of each X-shard, with `jax.jit`
#
# `A` is `f32[S, D]` sharded `P('X', 'Y')`: X-shard `i` holds rows `i*S/X ... (i+1)*S/X - 1`.
# Write `shard_average_jit(A, mesh)` returning `f32[X, D]` whose row `i` is the mean of the rows
# held by X-shard `i`, sharded `P('X', 'Y')`.
#
# Rules: global-view `jnp` code only (no `shard_map`), and the compiled program must contain
# **no collectives**. Read the number of shards from the mesh (`mesh.shape['X']`): the grader runs
# your function on meshes 2x4, 4x2, 1x8 and 8x1.
#
# *Hint:* the grader does not mind how you compute the mean, only that no device needs another's
# rows. Ask where the rows of X-shard `i` live, and whether your array code keeps them apart from
# the other shards' rows or mixes them. If XLA still inserts communication for code you believe
# is local, `jax.lax.with_sharding_constraint` tells it the layout you mean for an intermediate.

# %% [solution] shard_average_jit

# %% [check] shard_average_jit

# %% [markdown]
# Check the communication yourself; the list should be empty:

# %%
print(compiled_collectives(functools.partial(shard_average_jit, mesh=mesh), A))

# %% [markdown]
# ## A first `shard_map`
#
# Before the exercise, one complete `shard_map`, to see the mechanics. The function you give it
# runs once per device, on that device's tile only; `axis_index` tells it where it sits in the
# mesh. Here every device adds `1000 * (its X position) + 100 * (its Y position)` to the values
# it holds, so the result shows which device computed which part.

# %%
def tag_with_position(tile):
    # `tile` is this device's [S/X, D/Y] piece of A.
    where = 1000 * jax.lax.axis_index("X") + 100 * jax.lax.axis_index("Y")
    return tile + where.astype(tile.dtype)


tagged = jax.shard_map(tag_with_position, mesh=mesh, in_specs=P("X", "Y"),
                       out_specs=P("X", "Y"))(A)
print("global result:", tagged.shape, "  each device's piece:",
      tagged.addressable_shards[0].data.shape)
print(np.asarray(tagged)[:, ::2])  # every second column, to keep it short

# %% [markdown]
# `out_specs` says how the devices' pieces are put side by side: with `P('X', 'Y')`, the pieces
# of the X devices are stacked along dimension 0 and those of the Y devices along dimension 1.
# So a piece of shape `[r, c]` on every device makes a global result of shape `[X*r, Y*c]`.
# Here each piece has its tile's shape, so the result has `A`'s shape.
#
# ## Problem 1b: the same average with `shard_map`
#
# Now write `shard_average_shard_map(A, mesh)` with `jax.shard_map`. No collectives needed.
# Before you write the body, work out on paper: what does one device hold, which part of the
# `[X, D]` answer can it compute from that alone, and so what shape must its piece have for
# `out_specs=P('X', 'Y')` to assemble exactly `[X, D]`? (A piece of the wrong shape still
# runs: `check` then reports the shape it found.)
#
# `jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...)` returns a function of the global
# arrays; it is traceable under `jax.jit` like any other.

# %% [solution] shard_average_shard_map

# %% [check] shard_average_shard_map

# %% [markdown]
# ## Problem 2: roll within each X-shard
#
# Write `roll_diff(A, shift, mesh)` returning `f32[S, D]`, sharded `P('X', 'Y')`, where each
# X-shard block `b` (the `[S/X, D]` rows that shard holds) becomes `roll(b, shift, axis=0) - b`.
# Rows roll around *within* their block, never into a neighbour's.
#
# Use `shard_map`; no collectives. `shift` is a Python `int` (the grader passes it as a static
# argument) and can be any integer: zero, negative, or larger than a block.
#
# *Think first:* `jax.jit` can compute this too, with global-view code; the speed check's
# baseline is such a program. Why is the local view a natural fit here, and why would a plain
# `jnp.roll(A, shift, axis=0)` on the global array be both wrong *and* need communication? The
# picture below is a hint; `compiled_collectives` will show you the second part.

# %%
# A small picture of "within a block" (NumPy): 8 rows in 2 blocks (rows 0-3 and 4-7), as 2
# X-shards hold them. Each row holds its own index.
rows = np.arange(8)[:, None]
within = np.concatenate([np.roll(b, 1, axis=0) for b in np.split(rows, 2)])
across = np.roll(rows, 1, axis=0)  # a plain roll of the whole array
print("columns: original | rolled by 1 within each block | rolled by 1 across the whole array")
print(np.hstack([rows, within, across]))

# %% [solution] roll_diff

# %% [check] roll_diff

# %% [markdown]
# How would your `roll_diff` run on a TPU? `tpu_profile` models it with the grader's own model,
# at the grader's speed case, beside the jit baseline (whose code stays with the grader, since
# it would give 1a away: only its modeled figures travel with this notebook). The speed check
# holds the ratio to the limit printed above the exercise. Different ways of writing the same
# roll can cost quite differently: try one that gathers rows with a computed index.

# %%
from selfcheck import tpu_profile

tpu_profile("roll_diff", roll_diff, mesh)

# %% [markdown]
# ## Going further
#
# * Time `shard_average_jit` and `shard_average_shard_map` against each other with
#   `%timeit f(A).block_until_ready()`. On 8 emulated CPU devices the numbers are noisy; on a TPU
#   both should be about as fast as reading `A` once.
# * Replace `out_specs=P('X', 'Y')` by `P(None, 'Y')` in your shard_map average: what does JAX
#   say, and why? (With `check_vma=True`, shard_map checks that an output declared as replicated
#   over an axis really is the same on every device of that axis.)
