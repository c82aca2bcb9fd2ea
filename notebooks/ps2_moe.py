# %% [markdown]
# # Problem set 2: routing tokens to experts
#
# A *mixture of experts* (MoE) layer owns `E` weight matrices ("experts") instead of one, and
# sends every token through the expert a router picked for it:
#
# * `A: f32[S, D]` — the activations, one row per token, sharded `P('X', 'Y')`;
# * `W: f32[E, D, F]` — the experts, sharded `P('X', None, 'Y')`: the experts are split over
#   `X` in contiguous blocks (X-group `g` holds experts `g*E/X ... (g+1)*E/X - 1`) and the output
#   features over `Y`;
# * `B: int32[S]` — the routing, sharded `P('X')`: token `i` goes to expert `B[i]`.
#
# The answer is `Out[i] = A[i] @ W[B[i]]`, `f32[S, F]` sharded `P('X', 'Y')`.
#
# The arithmetic is one matmul per token. The interesting part is *where the data is*: a token
# lives on one X-group and its expert usually on another. You will write the layer four ways —
# on one device, with `jax.jit`, with `shard_map` and an all-gather, and with `shard_map` and
# all-to-all — and then extend it to top-k routing.

# %%
import functools

import numpy as np
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from selfcheck import check_slots  # an ungraded practice checker (code in the selfcheck folder)

mesh = make_mesh(2, 4)
S, D, F, E = 16, 8, 4, 4
rng = np.random.default_rng(0)
A_np = rng.standard_normal((S, D)).astype(np.float32)
W_np = rng.standard_normal((E, D, F)).astype(np.float32)
B_np = rng.integers(0, E, size=S).astype(np.int32)

A = jax.device_put(A_np, NamedSharding(mesh, P("X", "Y")))
B = jax.device_put(B_np, NamedSharding(mesh, P("X")))
W = jax.device_put(W_np, NamedSharding(mesh, P("X", None, "Y")))
want = np.stack([A_np[i] @ W_np[B_np[i]] for i in range(S)])
print("routing:", B_np)
print("one device holds A", A.addressable_shards[0].data.shape,
      "and W", W.addressable_shards[0].data.shape)

# %% [markdown]
# ## Problem 1: one device, no `[S, D, F]`
#
# The shortest correct program is `jnp.einsum('sd,sdf->sf', A, W[B])`. It is also a trap:
# `W[B]` copies one `[D, F]` matrix *per token*, an `[S, D, F]` array. With 8192 tokens and
# 1024 x 4096 experts that is 128 GiB.
#
# Instead, give every expert a buffer of tokens, so that each expert does one ordinary matmul
# on its own buffer, and then read every token's result back out. Before you write code, answer
# for yourself:
#
# 1. Which row of its expert's buffer does token `i` go to, so that no two tokens of one expert
#    share a row? (The routing is an array inside a traced function: no Python loop over
#    tokens, and no `if`.)
# 2. How many rows must each buffer have? Array shapes in JAX are fixed when the function is
#    traced, and the routing is data.
# 3. What is in the rows no token fills, and why do they do no harm?
# 4. How does token `i` find its result afterwards?
#
# The one-hot matrix of a tiny routing (row = token, column = expert) is a good place to start:

# %%
b = np.array([2, 0, 2, 1, 2, 0])
onehot = b[:, None] == np.arange(3)
print(onehot.astype(int))

# %% [markdown]
# <details><summary>Hint: the rows</summary>
#
# Token `i`'s row ("slot") is the number of earlier tokens that chose the same expert: a running
# count down each column of the one-hot matrix, read at the token's own column. For the routing
# above the slots are `0 0 1 0 2 1`.
# </details>
#
# <details><summary>Hint: the sizes</summary>
#
# Nothing stops every token from choosing the same expert, so each buffer is padded to the worst
# case, `S` rows: `[E, S, D]` in all. The padding rows are zeros, whose products nobody reads
# back. The price is `E` times the matmul work and an `[E, S, D]` buffer, still far smaller than
# `[S, D, F]` when `E << F`.
# </details>
#
# %% [markdown]
# Write `moe_local(A, B, W)` (no mesh argument: everything on one device). The grader compiles
# it at `S=4096, D=F=256` and requires the compiled temporary memory to stay well below the
# 1 GiB an `[S, D, F]` array would take.

# %% [solution] moe_local

# %% [check] moe_local

# %% [markdown]
# Compare what the compiler allocates for the trap and for your version at the grader's shapes
# (compile only, nothing runs). `memory_profile` compiles your function where the grader's
# memory check does and sets the figure beside the grader's bound (its code is in the selfcheck
# folder).

# %%
from selfcheck import memory_profile

big = (jax.ShapeDtypeStruct((4096, 256), jnp.float32), jax.ShapeDtypeStruct((4096,), jnp.int32),
       jax.ShapeDtypeStruct((4, 256, 256), jnp.float32))


def temp_mib(f, *args):
    return jax.jit(f).lower(*args).compile().memory_analysis().temp_size_in_bytes / 2**20


print(f"W[B] einsum: {temp_mib(lambda a, b, w: jnp.einsum('sd,sdf->sf', a, w[b]), *big):8.1f} MiB")
memory_profile("moe_local", moe_local)

# %% [markdown]
# ## Problem 2: just `jax.jit` it
#
# Now the inputs are sharded as described at the top. Write `moe_jit(A, B, W, mesh)`: the same
# global-view routing, no `shard_map`, returning `f32[S, F]` sharded `P('X', 'Y')` (use
# `jax.lax.with_sharding_constraint` for the output, and wherever else you want to tell the
# compiler a layout).

# %% [solution] moe_jit

# %% [check] moe_jit

# %% [markdown]
# What did the compiler decide to send? The compiled module is text; the lines that run a
# collective tell you:

# %%
from selfcheck import compiled_collectives  # XLA's collective lines (code in the selfcheck folder)


for line in compiled_collectives(functools.partial(moe_jit, mesh=mesh), A, B, W):
    print(line.split(" = ", 1)[1].split("(")[0])  # result shape and collective kind

# %% [markdown]
# Look at the shapes. In the global view the scatter into `[E, S, D]` can put any token into
# any buffer, so GSPMD typically brings *all* the activations to every device (an all-gather
# or an all-reduce of `[S, D]`-sized data). That is `X` times more communication than needed,
# and a full copy of `A` on every device, which stops working when the activations do not fit.
# The next two problems take control of the communication with `shard_map`.
#
# ## Problem 3: `shard_map`, all-gather first
#
# Write `moe_allgather(A, B, W, mesh)` with `jax.shard_map`. Each device receives its tiles:
# `a: [S/X, D/Y]`, `b: [S/X]`, `w: [E/X, D, F/Y]`. The plan has three moves, and the details are
# yours:
#
# * bring every token and its routing to every device with `jax.lax.all_gather`: which axes
#   does each array need, given that the matmul needs the whole `D`?
# * let each X-group run only the tokens whose experts it owns, with the buffers of Problem 1;
# * hand each token's result back to the X-group that holds its row. Every result exists on one
#   group only (zeros elsewhere): which single collective adds across `X` and leaves each group
#   only its own rows?
#
# <details><summary>Hint: the collective that hands results back</summary>
#
# A sum over devices in which each device keeps only its own slice of the result is a
# reduce-scatter: `jax.lax.psum_scatter` over `'X'`, scattering the token dimension.
# </details>
#
# Output: `[S/X, F/Y]` per device, `out_specs=P('X', 'Y')`.
#
# Two mechanics first. Inside `shard_map` a device learns the number of X-groups with
# `jax.lax.axis_size('X')` and its own group with `jax.lax.axis_index('X')`; its experts are the
# `w.shape[0]` consecutive ones starting at `axis_index('X') * w.shape[0]`. And a scatter can
# leave entries out: with `mode='drop'`, an index past the end of the array writes nothing.

# %%
print(jnp.zeros(4, jnp.int32).at[jnp.array([0, 2, 4, 7])].set(1, mode="drop"))
print("indices 4 and 7 are past the end of a length-4 array: nothing was written for them")

# %% [markdown]
# **Question:** after the all-gather every device of an X-group holds every token, but only some
# of them chose one of this group's experts. How do you build the buffers of Problem 1 for this
# group's experts alone, so that the other tokens take no row and do no work? And what does this
# group contribute to the rows of tokens it does not serve?
#
# <details><summary>Hint</summary>
#
# Turn each token's expert id into an id *within this group* (subtract the group's first
# expert). Tokens whose local id is out of range belong elsewhere: give them an index one past
# the last buffer, and the `mode='drop'` scatter leaves them out. When you read results back,
# make their rows zero, so that the add across `X` keeps only the owner's answer.
# </details>

# %% [solution] moe_allgather

# %% [check] moe_allgather

# %% [markdown]
# ## Problem 4: only send tokens where they are needed (all-to-all)
#
# A token only needs to visit the one X-group that owns its expert. `jax.lax.all_to_all` is
# the collective for that: each device cuts an array into `X` slabs, slab `g` goes to device
# `g` of the axis, and it receives one slab from every device. With `split_axis=0,
# concat_axis=0, tiled=True`, an `[X, C, D]` send buffer becomes an `[X, C, D]` receive buffer
# whose slab `g` came from X-group `g`:

# %%
def show_all_to_all(v):
    return jax.lax.all_to_all(v, "X", 0, 0, tiled=True)


nx = mesh.shape["X"]
labels = jnp.array([[10 * g + h] for g in range(nx) for h in range(nx)])  # "from g to h"
moved = jax.shard_map(show_all_to_all, mesh=mesh, in_specs=P("X"), out_specs=P("X"))(labels)
print("row g: what group g sends to groups 0..X-1\n", labels.reshape(nx, nx))
print("row h: what group h received from groups 0..X-1\n", moved.reshape(nx, nx))

# %% [markdown]
# The catch: how many tokens go from group `g` to group `h` depends on the routing, and every
# buffer needs a fixed shape. Padding each slab to `S/X` rows brings back an `[S, D]`-sized
# buffer. Instead, send the tokens in **rounds of a fixed chunk size `C`**: an `[X, C, D]` send
# buffer per round, slab `h` holding up to `C` of the tokens bound for group `h`.
#
# Work out the plan before the code. For one device's tokens, with `dest[t]` the X-group that
# owns token `t`'s expert: in which round `r[t]` is token `t` sent, and in which row `c[t]` of
# its destination's chunk? Every token must be sent exactly once, and no destination may take
# more rounds than its own tokens need. Write the plan as plain Python below; `check_slots`
# tries it on a few routings (a skewed one, a destination nobody is sent to, `C = 1`) and says
# which token is misplaced and why. (Not graded; the same arithmetic, on arrays, is the heart
# of `moe_all_to_all`.)

# %%
def exchange_plan(dest, nx, chunk):
    """(round, row) of each token: token t goes to X-group dest[t] in round r[t], row c[t]."""
    return [0] * len(dest), [0] * len(dest)  # a first guess: every token in round 0, row 0


check_slots(exchange_plan)

# %% [markdown]
# <details><summary>Hint: the plan</summary>
#
# Count, for each token, how many earlier tokens go to the same destination (Problem 1's slot,
# with destinations for experts). Round `r` carries that count's `C`-sized block.
# </details>
#
# Then the loop, with questions to settle as you write it:
#
# * How many rounds does the loop run? Every device must run the same number of collectives,
#   so which device's need decides it, and how do the devices along `X` agree on it? (The
#   devices along `Y` hold the same tokens and routing, so they already agree.)
# * What travels with each token so that the receiving group knows which of its experts to
#   use, and how is an empty row of a chunk marked so that it does no harm?
# * How do the results come back, and how does each land in its token's output row?
#
# Keep `C` a fixed small number (say up to 128), never proportional to `S`: the grader compiles
# your function at `S = 32768` and requires its temporary memory to be far below that of an
# all-gathered `A`, and it rejects any all-gather of activations over `X`. An `all_gather` over
# `Y` (to get the full `D` of your own tokens) is fine; it is `X` that must not be gathered.
#
# A group must receive only the tokens routed to its experts, so the rows of a chunk that no
# token fills must be zeros, not copies of other rows (an index clipped to the last token
# copies that token). The grader checks it by changing the tokens that are not routed to a
# group and looking at whether anything that group receives changes.
#
# <details><summary>Hint: the loop</summary>
#
# A `jax.lax.while_loop` whose bound is the busiest (source, destination) pair's rounds, agreed
# with `jax.lax.pmax` over `'X'`. Each round: build the `[X, C, D]` chunk and the matching
# `[X, C]` expert ids (padding marked by an id no expert has), `all_to_all` both, run the local
# experts, `all_to_all` the results back, and add them into the output rows (padding sent past
# the end and dropped, as in Problem 3).
# </details>
#
# <details><summary>Hint: "manual axis types do not match"</summary>
#
# A loop carry that differs from device to device must be declared so from the start: a fresh
# `jnp.zeros(...)` varies over no mesh axis. `jax.lax.pcast(x, ('X', 'Y'), to='varying')` says
# that it does.
# </details>
#
# *On accelerators* `jax.lax.ragged_all_to_all` sends variable-sized pieces directly (you give
# it offsets and sizes per destination), so no padding and no rounds are needed. XLA:CPU does
# not implement it, which is why this notebook uses chunks.
#
# Write `moe_all_to_all(A, B, W, mesh)` with `jax.shard_map`: the same inputs, per-device tiles
# and output (`[S/X, F/Y]` per device, `out_specs=P('X', 'Y')`) as Problem 3. You may write the
# exchange as a helper (`exchange_in_chunks`) so that Problem 5 can reuse it; if you do not want
# it, leave its stub alone.

# %% [solution] exchange_in_chunks moe_all_to_all

# %% [check] moe_all_to_all

# %% [markdown]
# Compare the memory the two `shard_map` versions need per device at the grader's memory shapes
# (compile only; the mesh is 8x1 so every device holds an eighth of the tokens), then see your
# all-to-all beside the grader's bound:

# %%
mesh8 = make_mesh(8, 1)
big_args = (jax.ShapeDtypeStruct((32768, 256), jnp.float32,
                                 sharding=NamedSharding(mesh8, P("X", "Y"))),
            jax.ShapeDtypeStruct((32768,), jnp.int32, sharding=NamedSharding(mesh8, P("X"))),
            jax.ShapeDtypeStruct((8, 256, 128), jnp.float32,
                                 sharding=NamedSharding(mesh8, P("X", None, "Y"))))
print(f"one copy of A: {32768 * 256 * 4 / 2**20:.0f} MiB")
for f in (moe_allgather, moe_all_to_all):
    print(f"{f.__name__:15s} {temp_mib(functools.partial(f, mesh=mesh8), *big_args):7.1f} MiB")
memory_profile("moe_all_to_all", moe_all_to_all)

# %% [markdown]
# And the speed. The hidden check compares your function with the `jax.jit` baseline of the
# plain global-view code, which applies every expert to every token and keeps the chosen
# answer (eight times the matmul work), on the course's model of a TPU (emulated CPU devices
# cannot time a TPU program). Your loop runs as many rounds as the routing needs, so the grader
# first runs your program on its input to count them, then models it with that count.
# `tpu_profile` does the same here: times, the ratio beside the limit, and what waits for what.

# %%
from selfcheck import tpu_profile

tpu_profile("moe_all_to_all", moe_all_to_all, mesh8)

# %% [markdown]
# ## Problem 5: top-k routing
#
# Most MoE layers send each token to `k` experts and combine the answers. Write
# `moe_topk(A, B, W, mesh)`, where now `B: int32[S, k]` is sharded `P('X', None)` (`A`, `W` and
# the output as before), and `Out[i]` is the **mean** over `j` of `A[i] @ W[B[i, j]]`.
#
# Same rules as Problem 4: all-to-all, no all-gather over `X`, small fixed chunks. Note that two
# choices of one token may name the same expert; the mean still counts both.
#
# **Question:** how do you turn `k` choices per token into the one-choice exchange you already
# have? Decide what one unit of the exchange is, how many a device sends, which row of its
# activations each one carries and to which expert, and how each token's `k` results meet again
# at the end.
#
# <details><summary>Hint</summary>
#
# Make every (token, choice) pair one item: a device has `k` times as many items as tokens, and
# each item carries its token's row to the expert of its choice. If you lay the items out in the
# order of `B`'s flattened rows, each token's `k` results come back side by side.
# </details>

# %% [solution] moe_topk

# %% [check] moe_topk

# %% [markdown]
# Each token now travels `k` times, so the grader's memory bound leaves room for `k` copies of a
# device's own tokens and results:

# %%
memory_profile("moe_topk", moe_topk)

# %% [markdown]
# ## Going further
#
# * Compare `tpu_profile` of `moe_allgather` and `moe_all_to_all` on mesh 8x1, then on 2x4:
#   when does sending only the needed tokens pay, and when is gathering everything cheaper?
# * Make the routing skewed (most tokens to one expert): how many rounds does your while loop
#   run now? What does a fixed worst-case number of rounds (a `fori_loop` over `S/X/C` rounds)
#   cost when the routing is balanced?
# * Real MoE layers cap each expert's load ("capacity factor") and drop the overflow: how would
#   that change the loop?
# * Problem 1's buffers do `E` times the useful matmul work. Sort the tokens by expert and cut
#   them into blocks of `c` rows: a block holds the tokens of at most a few experts, so one
#   matmul per (block, expert) pair does about `(S + E*c) * 2*D*F` FLOPs. Write it with a loop
#   over those pairs and compare its FLOPs with the dense program's at `E = 8` and `E = 64`
#   (`jax.jit(f).lower(*args).compile().cost_analysis()` gives XLA's count). The grader does
#   not ask for this: Problem 1 is held to memory and to the dense baseline's speed.
