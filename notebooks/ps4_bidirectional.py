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
# * no more bytes than the one-way ring sends: for the all-gather at most `Y` blocks of `A`'s
#   `[B/X, D/Y]` per device, for the reduce-scatter only output-block partial sums `[B/X, D/Y]`,
#   `Y - 1` of them in all, for the all-reduce at most `2(Y - 1)` output tiles `[B/X, F/Y]`.
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
#   block to a neighbour. If blocks move to `j - 1`, after `s` steps device `i` holds block
#   `(i + s) mod Y`. `Y` matmuls; `Y - 1` sends are enough.
# * **Reduce-scatter matmul** (`T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y]`). What travels is a
#   running sum for one output block. At each step a device adds its own contribution to that
#   block (`T`'s tile times the block's columns of `W2`) to the sum it just received and sends it
#   on. If sums move to `j + 1`, device `i` works on block `(i - 1 - s) mod Y` at step `s`, so
#   the sum for block `k` ends, complete, on device `k`. `Y - 1` sends of one output block each.
# * **All-reduce matmul** (`A[B_X, D_Y] @ W[D_Y, F] -> [B_X, F]`, replicated over `Y`). The
#   reduce-scatter ring over output tiles `[B/X, F/Y]` (tile `k` complete on device `k`), then
#   an all-gather ring that hands the finished tiles round until every device has all of them.
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
# ## The two-way schedule
#
# Cut device `i`'s block of `A` into a left half `L_i` and a right half `R_i`. Left halves
# travel to the left, right halves to the right. After `s` steps device `i` holds `L_{i+s}` and
# `R_{i-s}`; each meets the matching rows of `W`. The table for `Y = 4`:

# %%
ny = 4
print("step | " + " | ".join(f"device {d:<6d}" for d in range(ny)))
for step in range(ny):
    print(f"  {step}  | " + " | ".join(f"L{(d + step) % ny} R{(d - step) % ny}      "
                                       for d in range(ny)))
print("each step: two half-size ppermutes, one per direction, next to two half-size matmuls")

# %% [markdown]
# Another valid plan sends *whole* blocks both ways and finishes in about `Y / 2` steps: fewer
# steps (less latency), the same bytes. Either passes; pick one and make sure both directions
# carry data.
#
# ## Problem 4.1: `matmul_allgather_bidirectional`
#
# `A[B_X, D_Y] @ W[D, F_Y] -> [B_X, F_Y]`, as in ps3, with the two-way schedule.

# %% [solution] matmul_allgather_bidirectional

# %% [check] matmul_allgather_bidirectional

# %%
W = put(rng.standard_normal((D, F), dtype=np.float32) / np.sqrt(D), P(None, "Y"))
baseline = jax.jit(lambda a, w: a @ w, out_shardings=NamedSharding(mesh, P("X", "Y")))
mine = functools.partial(matmul_allgather_bidirectional, mesh=mesh)
print("bytes per shift:", shift_bytes(mine, A, W))
time_vs_jit(mine, baseline, A, W)
tpu_profile("matmul_allgather_bidirectional", matmul_allgather_bidirectional, mesh)

# %% [markdown]
# ## Problem 4.2: `matmul_allreduce_bidirectional`
#
# `A[B_X, D_Y] @ W[D_Y, F] -> [B_X, F]` replicated over `Y`. A `psum` has no direction you can
# choose, so write the all-reduce as two rings over output tiles `[B/X, F/Y]`:
#
# 1. a **reduce-scatter ring**: running sums of the tiles travel until tile `k` is complete on
#    device `k` (half of each tile's columns turning one way, half the other). The sums moving
#    to `j - 1` need their own schedule: work out which block a device adds at step `s` when
#    its partial sum arrives from `j + 1` (Problem 4.3 asks for the same derivation);
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
time_vs_jit(mine, baseline, A, W_ar)
tpu_profile("matmul_allreduce_bidirectional", matmul_allreduce_bidirectional, mesh)

# %% [markdown]
# ## Problem 4.3: `matmul_reducescatter_bidirectional`
#
# `T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y]`. Split each output block in two halves and run two
# rings of running sums in opposite directions. If sums turning right must reach block `k`'s
# owner last, which block does device `i` add to at step `s`? And for sums turning left? The
# total sent must stay `Y - 1` output blocks per device.

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
time_vs_jit(mine, baseline, T, W2)
tpu_profile("matmul_reducescatter_bidirectional", matmul_reducescatter_bidirectional, mesh)

# %% [markdown]
# ## Going further
#
# How much faster are these than the one-way rings? On emulated CPU devices there are no links,
# so expect nothing. On a TPU, time both versions at `B, D, F = 1024, 2048, 8192`: when a step is
# communication-bound the two-way ring should approach half its time; when the matmuls already
# hide the transfers, nothing changes.
