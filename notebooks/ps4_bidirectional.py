# %% [markdown]
# # Problem set 4: using both directions of the ring
#
# The rings of problem set 3 pass data one way: device `j` sends to `j - 1` (or `j + 1`) at
# every step. But inter-chip links are full duplex: each link can carry data both ways at
# once, and on a TPU torus each chip has a neighbour on each side. A one-way ring leaves half
# of that bandwidth idle.
#
# The fix is to split the traffic: send half of every chunk with shift `+1` and the other half
# with shift `-1`. Each step then moves half the bytes over each direction, so (when the links
# are the bottleneck) a step takes about half as long. The total number of bytes a device sends
# does not change.
#
# You will rewrite the three collective matmuls with the **same signatures and shardings** as
# their problem set 3 twins:
#
# * `matmul_allgather_bidirectional(A, W, mesh)`
# * `matmul_allreduce_bidirectional(A, W, mesh)`
# * `matmul_reducescatter_bidirectional(T, W2, mesh)`
#
# The grader reads the program you wrote (its jaxpr) and runs it on the meshes 2x4, 4x2, 1x8 and
# 8x1. On each it expects:
#
# * a `jax.shard_map`, and communication only along `'Y'`: `jax.lax.ppermute` to the ring
#   neighbours (shift `+1` and `-1` mod `Y`), never a whole-operand `all_gather`, `psum_scatter`
#   or `psum` (a `psum` has no direction, so it has no place here);
# * the data moving in chunks, with partial matmuls between the sends, so each transfer has
#   work to hide behind;
# * both shifts in use, each carrying a fair share of the bytes: about half, at least a quarter;
# * no more bytes than the one-way ring needs. One rule for all three: **a ring may take `Y - 1`
#   hops**, which is what carries every block or partial sum to where it is used, plus a quarter
#   of a block of slack. So the reduce-scatter sends `Y - 1` output-block partial sums
#   `[B/X, D/Y]` and the all-reduce `2(Y - 1)` output tiles `[B/X, F/Y]` (`Y - 1` to reduce,
#   `Y - 1` to share). The all-gather alone is allowed one send more (`Y` blocks of `A`'s
#   `[B/X, D/Y]`): a loop that multiplies and sends on every step passes its last block on after
#   using it, a wasted send that no computation waits for. In the reduce-scatter an extra send is
#   an extra *hop*: the finished sum arrives one step later, and everything waits for it.
#
# The "What the grader checks" cell before each problem gives the points, the byte budget at the
# grading shape and the speed limit. With `Y = 2` both shifts reach the same neighbour, and with
# `Y = 1` nothing moves. Every per-device dimension in the tests is even, so halves always divide.
#
# ## The one-way rings you start from
#
# Write `i` for a device's place on the `'Y'` ring (`jax.lax.axis_index('Y')`) and `Y` for the
# ring's length (`mesh.shape['Y']` outside `shard_map`, `jax.lax.axis_size('Y')` inside).
#
# * **All-gather matmul** (`A[B_X, D_Y] @ W[D, F_Y]`). Device `i` starts with block `i` of `A`'s
#   columns. At each step it multiplies the block it holds by the rows of `W` with the same index
#   (`jax.lax.dynamic_slice_in_dim`) and adds the product to its output tile, then passes the
#   block to a neighbour. `Y` matmuls; `Y - 1` sends are enough.
# * **Reduce-scatter matmul** (`T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y]`). What travels is a
#   running sum for one output block. At each step a device adds its own contribution to that
#   block (`T`'s tile times the block's columns of `W2`) to the sum it just received and sends it
#   on, so that the sum for block `k` ends, complete, on device `k`. `Y - 1` sends of one output
#   block each.
# * **All-reduce matmul** (`A[B_X, D_Y] @ W[D_Y, F] -> [B_X, F]`, replicated over `Y`). The
#   reduce-scatter ring over output tiles `[B/X, F/Y]` (tile `k` complete on device `k`), then
#   an all-gather ring that hands the finished tiles round until every device has all of them.
#
# Which block a device holds, or adds to, at step `s` is index algebra you will do yourself
# below: draw the ring for `Y = 4` and follow one block. Two practice cells (not graded) check
# your tables before you write the code and say which device and step is off, and why. If an
# index in your code is still wrong, `check` says which blocks of the output are wrong.
#
# The two-way versions below split each of these rings in two.

# %%
import functools

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
# A timing against jit and the course's TPU model (their code is in the selfcheck folder).
from selfcheck import time_vs_jit, tpu_profile
# Ungraded practice checkers for the schedules you derive (code in the selfcheck folder).
from selfcheck import check_two_way_ring, check_two_way_schedule

mesh = make_mesh(2, 4)


def shift_bytes(f, *args):
    """Bytes the program (as written) sends with each ring shift, per device."""
    from collections import Counter

    ny = mesh.shape["Y"]
    out = Counter()

    def walk(jaxpr, times=1):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "ppermute":
                nbytes = sum(v.aval.size * v.aval.dtype.itemsize for v in eqn.invars)
                for s in {(d - s) % ny for s, d in eqn.params["perm"]}:
                    out[f"shift {'+1' if s == 1 else '-1' if s == ny - 1 else s}"] += times * nbytes
            n = eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1
            for p in eqn.params.values():
                for sub in (p if isinstance(p, (tuple, list)) else (p,)):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner, times * n)

    walk(jax.make_jaxpr(f)(*args).jaxpr)
    return dict(out)


def put(x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


rng = np.random.default_rng(0)
B, D, F = 256, 512, 1024
A = put(rng.standard_normal((B, D), dtype=np.float32), P("X", "Y"))

# %% [markdown]
# ## `ppermute`: sending to a neighbour
#
# Inside `shard_map`, `jax.lax.ppermute(x, 'Y', perm)` sends each device's `x` along the `'Y'`
# axis. `perm` is a list of `(source, destination)` pairs of positions on the axis; every
# device receives what its source sent (a device that is no one's destination receives zeros).
# This course calls a ring by its **shift**, `destination - source` mod `Y`:
#
# * **shift `+1`**, "to the right": `perm = [(j, (j + 1) % Y) for j in range(Y)]`. Afterwards
#   device `j` holds what its *left* neighbour `j - 1` had.
# * **shift `-1`**, "to the left": `perm = [(j, (j - 1) % Y) for j in range(Y)]`. Afterwards
#   device `j` holds what its right neighbour `j + 1` had.
#
# Below, each of the 4 devices along `'Y'` starts with its own position and sends it with
# shift `+1`:

# %%
def to_the_right(x):
    ny = jax.lax.axis_size("Y")  # a Python int inside shard_map
    return jax.lax.ppermute(x, "Y", perm=[(j, (j + 1) % ny) for j in range(ny)])


position = jax.device_put(jnp.arange(4.0), NamedSharding(mesh, P("Y")))
print("before:", position)
print("after a shift +1:", jax.shard_map(to_the_right, mesh=mesh, in_specs=P("Y"),
                                         out_specs=P("Y"))(position))

# %% [markdown]
# ## Loops over the ring
#
# A ring runs a fixed number of steps, and any loop that says so is fine:
#
# * a **Python `for`** over `range(Y)` unrolls while JAX traces: the program holds one copy of
#   the step per iteration. With `Y <= 8` that is small, and the grader counts every copy.
# * **`jax.lax.fori_loop`** keeps one copy of the step. Its carry must have the same type on
#   every iteration, and inside `shard_map` the type includes whether a value *varies* over a
#   mesh axis. The output of a `ppermute` over `'Y'` varies over `'Y'`; a fresh `jnp.zeros(...)`
#   does not, so a carry that starts as zeros and then receives a `ppermute`'s result fails with
#   "manual axis types do not match". Mark the start value as varying with
#   `jax.lax.pcast(value, 'Y', to='varying')`, as below (or pass `check_vma=False` to
#   `jax.shard_map`, which turns the check off).
#
# The example sums every device's value round a shift `+1` ring, in a `fori_loop`:

# %%
def ring_sum(x):
    ny = jax.lax.axis_size("Y")
    right = [(j, (j + 1) % ny) for j in range(ny)]

    def step(_, carry):
        total, travelling = carry
        travelling = jax.lax.ppermute(travelling, "Y", right)
        return total + travelling, travelling

    start = jax.lax.pcast(jnp.zeros(x.shape, x.dtype), "Y", to="varying")  # varies over 'Y'
    total, _ = jax.lax.fori_loop(0, ny, step, (start, x))
    return total


print("ring sum on every device:", jax.shard_map(ring_sum, mesh=mesh, in_specs=P("Y"),
                                                 out_specs=P("Y"))(position))

# %% [markdown]
# (This little ring sends `Y` times, one hop more than needed: with `total` starting at `x`
# and `Y - 1` steps it gives the same answer. The byte budget above would notice.)
#
# ## The two-way schedule
#
# Cut device `i`'s block of `A` into a left half `L_i` and a right half `R_i`. Left halves
# travel to the left (shift `-1`), right halves to the right (shift `+1`); each meets the
# matching rows of `W` on every device it passes.
#
# **Your turn:** after `s` steps, whose left half and whose right half does device `d` hold?
# Fill in the table for `Y = 4` on paper (`s = 0 .. 3`), then write the rule as
# `halves(d, step, ny)`, returning the pair `(left, right)` of block numbers. The cell prints
# your table and checks it for `Y = 2, 4, 8`, naming the device and step where a half would
# have to come from somewhere else. Your formulas are the indices your `dynamic_slice_in_dim`
# calls need in Problem 4.1.
#
# <details><summary>Hint</summary>
#
# Follow the two halves that start on device 2 of a 4-device ring, one step at a time. Then
# turn it round: a left half reaches device `d` from its right neighbour, so after one step `d`
# holds the left half that device `d + 1` started with. What about the right halves, and after
# `s` steps?
# </details>

# %%
def halves(d, step, ny):
    """(left, right): the blocks whose left half and right half device d holds after `step`
    steps (left halves move j -> j - 1, right halves j -> j + 1)."""
    return d, d  # a first guess in which nothing moves: replace it


ny = 4
print("step | " + " | ".join(f"device {d}" for d in range(ny)))
for step in range(ny):
    row = [f"L{halves(d, step, ny)[0] % ny} R{halves(d, step, ny)[1] % ny}" for d in range(ny)]
    print(f"  {step}  | " + " | ".join(f"{c:8s}" for c in row))
check_two_way_ring(halves)

# %% [markdown]
# Another valid plan sends *whole* blocks both ways and finishes in about `Y / 2` steps: fewer
# steps (less latency), the same bytes. Either passes; pick one and make sure both directions
# carry data.
#
# ## Problem 4.1: `matmul_allgather_bidirectional`
#
# `A[B_X, D_Y] @ W[D, F_Y] -> [B_X, F_Y]` with the two-way schedule: `jax.shard_map` with
# `in_specs=(P('X','Y'), P(None,'Y'))` and `out_specs=P('X','Y')`.

# %% [solution] matmul_allgather_bidirectional

# %% [check] matmul_allgather_bidirectional

# %%
W = put(rng.standard_normal((D, F), dtype=np.float32) / np.sqrt(D), P(None, "Y"))
baseline = jax.jit(lambda a, w: a @ w, out_shardings=NamedSharding(mesh, P("X", "Y")))
mine = functools.partial(matmul_allgather_bidirectional, mesh=mesh)
print("bytes per shift:", shift_bytes(mine, A, W))
tpu_profile("matmul_allgather_bidirectional", matmul_allgather_bidirectional, mesh)

# %%
# Wall-clock on this machine, in a cell apart from the modeled TPU figures above: on emulated
# CPU devices no limit applies to it.
wall = time_vs_jit(mine, baseline, A, W)

# %% [markdown]
# ## Problem 4.2: `matmul_allreduce_bidirectional`
#
# `A[B_X, D_Y] @ W[D_Y, F] -> [B_X, F]` replicated over `Y`: `in_specs=(P('X','Y'),
# P('Y', None))`, `out_specs=P('X', None)`. A `psum` has no direction you can choose, so write
# the all-reduce as two rings over output tiles `[B/X, F/Y]`:
#
# 1. a **reduce-scatter ring**: running sums of the tiles travel until tile `k` is complete on
#    device `k` (half of each tile's columns turning one way, half the other). The sums moving
#    to `j - 1` need their own schedule: work out which block a device adds at step `s` when
#    its partial sum arrives from `j + 1` (Problem 4.3 asks for the same derivation, and its
#    practice cell checks it);
# 2. an **all-gather ring**: the finished tiles travel (again half each way) until every device
#    has all of them, placed with `jax.lax.dynamic_update_slice_in_dim`.
#
# Step 1 is the same two-way reduce-scatter that Problem 4.3 asks for, so you may find it easier
# to solve 4.3 first and come back.
#
# One wrinkle: the result is assembled from `ppermute`s, so the type system says it *varies*
# over `Y`, even though every device ends with the same values. `out_specs=P('X', None)` claims
# it does not vary over `Y`; pass `check_vma=False` to `jax.shard_map`, and the devices agreeing
# becomes your job. Reading the result on the host shows only one device's copy; `check` (and the
# grader) compare every device's copy, and you can too: each entry of `out.addressable_shards`
# holds one device's `data` for the block at its `index`.

# %% [solution] matmul_allreduce_bidirectional

# %% [check] matmul_allreduce_bidirectional

# %%
W_ar = put(rng.standard_normal((D, F), dtype=np.float32) / np.sqrt(D), P("Y", None))
baseline = jax.jit(lambda a, w: a @ w, out_shardings=NamedSharding(mesh, P("X", None)))
mine = functools.partial(matmul_allreduce_bidirectional, mesh=mesh)
print("bytes per shift:", shift_bytes(mine, A, W_ar))
copies = {}  # every device's piece of the output, by the block it claims to hold
for piece in mine(A, W_ar).addressable_shards:
    copies.setdefault(str(piece.index), []).append(np.asarray(piece.data))
print("every device's copy agrees:",
      all(np.allclose(c[0], other) for c in copies.values() for other in c))
tpu_profile("matmul_allreduce_bidirectional", matmul_allreduce_bidirectional, mesh)

# %%
# Wall-clock on this machine, in a cell apart from the modeled TPU figures above: on emulated
# CPU devices no limit applies to it.
wall = time_vs_jit(mine, baseline, A, W_ar)

# %% [markdown]
# ## Problem 4.3: `matmul_reducescatter_bidirectional`
#
# `T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y]`: `in_specs=(P('X','Y'), P('Y', None))`,
# `out_specs=P('X','Y')`. Split each output block in two halves and run two rings of running
# sums in opposite directions. The total sent must stay `Y - 1` output blocks per device
# (`Y - 1` hops, as above).
#
# **Your turn first:** the sum for block `k` must reach device `k` last, complete. On the ring
# whose sums move left (`j -> j - 1`), which block does device `i` add to at step `s`? And on
# the ring whose sums move right? Write both as `sums(i, s, ny)`, returning the pair `(left,
# right)`, and run the cell: it checks both rings for `Y = 2, 4, 8` and names the device and
# step where a sum arrives that your table does not expect. The first guess there (every
# device adds to its own block at every step) is wrong on purpose: replace it. Unlike the
# blocks of Problem 4.1, a running sum must *end* on the device it belongs to, not start there.
#
# <details><summary>Hint</summary>
#
# Start from the end: at step `Y - 1` device `i` adds to its own block. Which device added to
# that same sum one step earlier, on each ring? Keep walking back to step 0.
# </details>

# %%
def sums(i, s, ny):
    """(left, right): the output blocks whose running sums device i adds to at step s, on the
    ring whose sums move j -> j - 1 and on the one whose sums move j -> j + 1."""
    return i, i  # a first guess: every device adds to its own block at every step


check_two_way_schedule(sums)

# %% [markdown]
# Now the function: two rings of running sums, each carrying one half of every output block's
# columns, with the indices of your `sums` table.

# %% [solution] matmul_reducescatter_bidirectional

# %% [check] matmul_reducescatter_bidirectional

# %%
T = put(rng.standard_normal((B, F), dtype=np.float32), P("X", "Y"))
W2 = put(rng.standard_normal((F, D), dtype=np.float32) / np.sqrt(F), P("Y", None))
baseline = jax.jit(lambda t, w: t @ w, out_shardings=NamedSharding(mesh, P("X", "Y")))
mine = functools.partial(matmul_reducescatter_bidirectional, mesh=mesh)
print("bytes per shift:", shift_bytes(mine, T, W2))
text = jax.jit(mine).lower(T, W2).compile().as_text()
print("collective-permutes in the compiled module:", text.count("collective-permute"))
tpu_profile("matmul_reducescatter_bidirectional", matmul_reducescatter_bidirectional, mesh)

# %%
# Wall-clock on this machine, in a cell apart from the modeled TPU figures above: on emulated
# CPU devices no limit applies to it.
wall = time_vs_jit(mine, baseline, T, W2)

# %% [markdown]
# ## Going further
#
# How much faster are these than the one-way rings? On emulated CPU devices there are no links,
# so expect nothing. On a TPU, time both versions at `B, D, F = 1024, 2048, 8192`: when a step is
# communication-bound the two-way ring should approach half its time; when the matmuls already
# hide the transfers, nothing changes.
