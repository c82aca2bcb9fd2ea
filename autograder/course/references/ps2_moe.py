"""ps2_moe: mixture-of-experts routing. Pure NumPy.

Out[i] = A[i] @ W[B[i]]            (B: int32[S])
Out[i] = mean_j A[i] @ W[B[i, j]]  (B: int32[S, k], the top-k variant)

Experts are split over the mesh's X axis in contiguous blocks: X-group g holds experts
[g * E/X, (g + 1) * E/X).
"""
import numpy as np

#: the routings the case makers draw from
ROUTINGS = ("uniform", "skewed", "one expert", "few experts", "one group")


# -- references ----------------------------------------------------------------------------------

def _route(a, b, w):
    """float64 sum_j a[i] @ w[b[i, j]] for b: int[S, k]."""
    a64 = a.astype(np.float64)
    out = np.zeros((a.shape[0], w.shape[2]), np.float64)
    for j in range(b.shape[1]):
        for e in np.unique(b[:, j]):
            rows = b[:, j] == e
            out[rows] += a64[rows] @ w[e].astype(np.float64)
    return out


def moe_reference(args, x, y):
    a, b, w = args
    return _route(a, b.reshape(-1, 1), w).astype(np.float32)


def moe_topk_reference(args, x, y):
    a, b, w = args
    return (_route(a, b, w) / b.shape[1]).astype(np.float32)


# -- inputs --------------------------------------------------------------------------------------

def routing(rng, kind, shape, e, x):
    """int32 expert ids of the given shape in [0, e), drawn by ``kind`` (see ROUTINGS)."""
    if kind == "uniform":
        b = rng.integers(0, e, size=shape)
    elif kind == "skewed":  # a few experts get most tokens, some get none
        p = rng.permutation(np.arange(1, e + 1, dtype=np.float64) ** -2.0)
        b = rng.choice(e, size=shape, p=p / p.sum())
    elif kind == "one expert":
        b = np.full(shape, rng.integers(0, e))
    elif kind == "few experts":  # most experts stay empty
        used = rng.choice(e, size=max(1, e // 3), replace=False)
        b = rng.choice(used, size=shape)
    elif kind == "one group":  # every token goes to the experts of a single X-group
        per = e // x
        g = rng.integers(0, x)
        b = g * per + rng.integers(0, per, size=shape)
    else:
        raise ValueError(kind)
    return np.asarray(b, dtype=np.int32)


def _dims(rng, x, y, size, k=1):
    """(S, D, F, E) for a mesh x * y; E is a multiple of x, D/y leaves room above 2k."""
    if size == "small":
        s, d, f, m = int(rng.integers(2, 5)), 8, int(rng.integers(1, 3)), int(rng.integers(1, 3))
    elif size == "grade":
        s, d = int(rng.integers(2, 13)), int(rng.integers(max(8, 2 * k + 2), 13))
        f, m = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    elif size == "speed":
        # Modeled, and run once (an all-to-all loop's trip count is counted on it): big enough
        # that the TPU model sees bytes and FLOPs rather than fixed per-op costs (at 2048 x 128
        # x 128 every program is latency and the ratios say nothing), small enough for seconds
        # on CPU.
        return 8192, 512, 1024, x * max(1, 8 // x)
    elif size == "memory":  # compiled only: one all-gathered copy of A is S * D * 4 = 32 MiB
        return 32768, 256, 128, x * max(1, 8 // x)
    else:
        raise ValueError(size)
    return x * s, y * d, y * f, x * m


def _weights(rng, a_shape, e, f):
    s, d = a_shape
    a = rng.standard_normal((s, d)).astype(np.float32)
    w = (rng.standard_normal((e, d, f)) / np.sqrt(d)).astype(np.float32)
    return a, w


def moe_case(rng, x, y, size):
    """(A f32[S, D], B int32[S], W f32[E, D, F]) with E a multiple of x."""
    s, d, f, e = _dims(rng, x, y, size)
    a, w = _weights(rng, (s, d), e, f)
    kind = "uniform" if size in ("speed", "memory") else ROUTINGS[int(rng.integers(len(ROUTINGS)))]
    return a, routing(rng, kind, (s,), e, x), w


def moe_topk_case(rng, x, y, size):
    """(A f32[S, D], B int32[S, k], W f32[E, D, F]), k in 2..3 (2 at the big sizes): every
    randomized case has several choices per token, so a sum or a first choice never passes by
    luck; k = 1 is an edge case (:func:`moe_topk_edge_cases`)."""
    k = 2 if size in ("speed", "memory") else int(rng.integers(2, 4))
    s, d, f, e = _dims(rng, x, y, size, k)
    a, w = _weights(rng, (s, d), e, f)
    kind = "uniform" if size in ("speed", "memory") else ROUTINGS[int(rng.integers(len(ROUTINGS)))]
    return a, routing(rng, kind, (s, k), e, x), w


def moe_local_case(rng, x, y, size):
    """One device: any S and E. At 'memory' an [S, D, F] array would be S*D*F*4 = 1 GiB."""
    if size == "memory":
        s, d, f, e = 4096, 256, 256, 4
    elif size == "speed":
        s, d, f, e = 2048, 128, 128, 8
    elif size == "small":
        s, d, f, e = int(rng.integers(4, 17)), 8, 4, int(rng.integers(1, 5))
    else:
        s, d, f = int(rng.integers(1, 65)), int(rng.integers(4, 33)), int(rng.integers(1, 17))
        e = int(rng.integers(1, 9))
    a, w = _weights(rng, (s, d), e, f)
    kind = "uniform" if size in ("speed", "memory") else ROUTINGS[int(rng.integers(len(ROUTINGS) - 1))]
    return a, routing(rng, kind, (s,), e, 1), w


# -- edge cases ----------------------------------------------------------------------------------

def _edge_shapes(x, y):
    return 4 * x, 8 * y, 2 * y


#: tokens per X-group in the many-rounds edge case: more than two rounds of any chunk up to 128
MANY = 320


def _to_next_group(s, x, per_group):
    """Expert ids sending every X-group's tokens to the first expert of the next group."""
    return per_group * ((np.arange(s) // (s // x) + 1) % x)


def moe_edge_cases(rng, x, y):
    """All tokens to the first / the last expert, E == X and E == 3X, empty experts, every
    X-group's tokens sent to the next group (the most rounds a chunked exchange can need), and
    that again with MANY tokens per group, so a chunked exchange runs several rounds. The
    routings at E == 3X share one shape: one compiled program runs all three."""
    s, d, f = _edge_shapes(x, y)
    out = []
    for e, b in ((x, np.zeros(s)), (3 * x, np.full(s, 3 * x - 1)),
                 (3 * x, _to_next_group(s, x, 3)),
                 (3 * x, rng.choice([1, 3 * x - 1], size=s))):
        a, w = _weights(rng, (s, d), e, f)
        out.append((a, np.asarray(b, np.int32), w))
    a, w = _weights(rng, (MANY * x, d), 2 * x, f)
    out.append((a, np.asarray(_to_next_group(MANY * x, x, 2), np.int32), w))
    return out


def moe_topk_edge_cases(rng, x, y):
    """k = 1; every token's k choices equal (a sum would be k times too big); all to one expert
    (the same shape: one program runs both); k larger than E; MANY tokens per X-group, both
    choices in the next group (several rounds)."""
    s, d, f = _edge_shapes(x, y)
    out = []
    e = 2 * x
    a, w = _weights(rng, (s, d), e, f)
    out.append((a, routing(rng, "uniform", (s, 1), e, x), w))
    same = np.repeat(routing(rng, "uniform", (s, 1), e, x), 3, axis=1)
    out.append((a, same, w))
    out.append((a, np.full((s, 3), e - 1, np.int32), w))
    a, w = _weights(rng, (s, d), x, f)
    out.append((a, routing(rng, "skewed", (s, 3), x, x) if x > 1
                else np.zeros((s, 3), np.int32), w))
    a, w = _weights(rng, (MANY * x, d), 2 * x, f)
    nxt = _to_next_group(MANY * x, x, 2)
    out.append((a, np.stack([nxt, nxt + 1], axis=1).astype(np.int32), w))
    return out


def moe_local_edge_cases(rng, x, y):
    """A single expert, all tokens to the last expert, most experts empty, one token."""
    out = []
    for s, e, b in ((16, 1, np.zeros(16)), (24, 5, np.full(24, 4)),
                    (32, 6, rng.choice([0, 3], size=32)), (1, 3, np.array([2]))):
        a, w = _weights(rng, (s, 12), e, 5)
        out.append((a, np.asarray(b, np.int32), w))
    return out
