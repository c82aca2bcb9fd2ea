"""Reference answers for ps2_moe (mixture-of-experts routing).

This file is the single source of the solutions: the instructor notebook's solution cells are
built from these functions (the text between the BEGIN/END SOLUTION markers is what nbgrader
removes from the student version).

Shapes: A f32[S, D] P('X','Y'); B int32[S] P('X') (top-k: int32[S, k] P('X', None));
W f32[E, D, F] P('X', None, 'Y'); X-group g owns experts [g*E/X, (g+1)*E/X).
"""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P


def moe_local(A, B, W):
    """Out[i] = A[i] @ W[B[i]] on one device, never building an [S, D, F] array."""
    ### BEGIN SOLUTION
    S, D = A.shape
    E = W.shape[0]
    # Slot of token i inside its expert's buffer: how many earlier tokens chose the same
    # expert. One expert may receive every token, so each buffer needs S slots.
    chosen = B[:, None] == jnp.arange(E)[None, :]  # [S, E]
    slot = jnp.take_along_axis(jnp.cumsum(chosen, axis=0), B[:, None], axis=1)[:, 0] - 1
    buffers = jnp.zeros((E, S, D), A.dtype).at[B, slot].set(A)  # unused slots stay zero
    results = jnp.einsum("esd,edf->esf", buffers, W)  # [E, S, F]
    return results[B, slot]
    ### END SOLUTION


def moe_jit(A, B, W, mesh):
    """The same routing in the global view: jax.jit decides the communication."""
    ### BEGIN SOLUTION
    S, D = A.shape
    E = W.shape[0]
    chosen = B[:, None] == jnp.arange(E)[None, :]
    slot = jnp.take_along_axis(jnp.cumsum(chosen, axis=0), B[:, None], axis=1)[:, 0] - 1
    buffers = jnp.zeros((E, S, D), A.dtype).at[B, slot].set(A)
    # Put each expert's buffer where its weights live, so the matmul itself is local.
    buffers = jax.lax.with_sharding_constraint(buffers, NamedSharding(mesh, P("X", None, None)))
    results = jnp.einsum("esd,edf->esf", buffers, W)
    return jax.lax.with_sharding_constraint(results[B, slot], NamedSharding(mesh, P("X", "Y")))
    ### END SOLUTION


def moe_allgather(A, B, W, mesh):
    """shard_map: gather every token to every device, apply the local experts, scatter back."""
    ### BEGIN SOLUTION
    def local(a, b, w):
        # a: [S/X, D/Y], b: [S/X], w: [E/X, D, F/Y]
        n_local = w.shape[0]
        a = jax.lax.all_gather(a, "X", axis=0, tiled=True)  # [S, D/Y]: every token
        a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)  # [S, D]
        b = jax.lax.all_gather(b, "X", axis=0, tiled=True)  # [S]
        mine = b - jax.lax.axis_index("X") * n_local  # local expert id, valid in [0, n_local)
        ok = (mine >= 0) & (mine < n_local)
        mine = jnp.where(ok, mine, n_local)  # an extra buffer collects the others' tokens
        chosen = mine[:, None] == jnp.arange(n_local + 1)[None, :]
        slot = jnp.take_along_axis(jnp.cumsum(chosen, axis=0), mine[:, None], axis=1)[:, 0] - 1
        buffers = jnp.zeros((n_local + 1, a.shape[0], a.shape[1]), a.dtype).at[mine, slot].set(a)
        results = jnp.einsum("esd,edf->esf", buffers[:n_local], w)  # [E/X, S, F/Y]
        out = jnp.where(ok[:, None], results[jnp.minimum(mine, n_local - 1), slot], 0.0)
        # Every token's answer sits on the one X-group that owns its expert: summing over X
        # and keeping our own rows hands each group its tokens back.
        return jax.lax.psum_scatter(out, "X", scatter_dimension=0, tiled=True)

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P("X"), P("X", None, "Y")),
                         out_specs=P("X", "Y"))(A, B, W)
    ### END SOLUTION


def exchange_in_chunks(a, items, experts, w, chunk):
    """Per device (inside shard_map over X): send item t (a row of ``a`` picked by
    ``items[t]``) to the X-group owning expert ``experts[t]``, in rounds of at most ``chunk``
    items per destination; return [len(items), F/Y] results, in item order."""
    ### BEGIN SOLUTION
    n_items = items.shape[0]
    n_local = w.shape[0]
    nx = jax.lax.axis_size("X")
    dest = experts // n_local  # the X-group that owns each item's expert
    to_g = dest[:, None] == jnp.arange(nx)[None, :]  # [n, X]
    count = to_g.sum(axis=0)  # items for each destination
    first = jnp.cumsum(count) - count  # where each destination's run starts once sorted
    order = jnp.argsort(dest, stable=True)  # item ids sorted by destination
    # Rounds needed by the busiest (source, destination) pair anywhere along X.
    rounds = jax.lax.pmax((jnp.max(count) + chunk - 1) // chunk, "X")
    # The loop's result differs from device to device: say so up front (shard_map's types).
    out0 = jax.lax.pcast(jnp.zeros((n_items, w.shape[2]), a.dtype), ("X", "Y"), to="varying")

    def body(state):
        r, out = state
        k = r * chunk + jnp.arange(chunk)  # this round's positions in every destination's run
        valid = k[None, :] < count[:, None]  # [X, chunk]
        pick = order[jnp.minimum(first[:, None] + k[None, :], n_items - 1)]  # item ids
        rows = jnp.where(valid[..., None], a[items[pick]], 0.0)  # [X, chunk, D]
        eid = jnp.where(valid, experts[pick] % n_local, -1)  # -1: padding
        # send slab g to X-group g; receive one slab from every group
        rows = jax.lax.all_to_all(rows, "X", 0, 0, tiled=True)
        eid = jax.lax.all_to_all(eid, "X", 0, 0, tiled=True)
        onehot = (eid[..., None] == jnp.arange(n_local)).astype(a.dtype)  # [X, chunk, E/X]
        res = jnp.einsum("gcd,gce,edf->gcf", rows, onehot, w)  # padding rows give zeros
        res = jax.lax.all_to_all(res, "X", 0, 0, tiled=True)  # answers go home
        dst = jnp.where(valid, pick, n_items)  # padding lands out of range and is dropped
        return r + 1, out.at[dst].add(res, mode="drop")

    _, out = jax.lax.while_loop(lambda s: s[0] < rounds, body, (jnp.int32(0), out0))
    return out
    ### END SOLUTION


def moe_all_to_all(A, B, W, mesh):
    """shard_map: each token travels to the X-group owning its expert with all_to_all, in
    fixed-size chunks inside a while_loop, and its result travels back the same way."""
    ### BEGIN SOLUTION
    def local(a, b, w):
        a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)  # [S/X, D]: this group's tokens
        chunk = max(1, min(128, a.shape[0] // jax.lax.axis_size("X")))
        items = jnp.arange(a.shape[0])
        return exchange_in_chunks(a, items, b, w, chunk)

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P("X"), P("X", None, "Y")),
                         out_specs=P("X", "Y"))(A, B, W)
    ### END SOLUTION


def moe_topk(A, B, W, mesh):
    """Top-k routing: Out[i] = mean_j A[i] @ W[B[i, j]], tokens travel with all_to_all."""
    ### BEGIN SOLUTION
    def local(a, b, w):
        a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)  # [S/X, D]
        s, k = b.shape
        chunk = max(1, min(128, s * k // jax.lax.axis_size("X")))
        items = jnp.arange(s * k) // k  # item t is choice t % k of token t // k
        res = exchange_in_chunks(a, items, b.reshape(-1), w, chunk)  # [S/X * k, F/Y]
        return res.reshape(s, k, -1).mean(axis=1)

    return jax.shard_map(local, mesh=mesh,
                         in_specs=(P("X", "Y"), P("X", None), P("X", None, "Y")),
                         out_specs=P("X", "Y"))(A, B, W)
    ### END SOLUTION
