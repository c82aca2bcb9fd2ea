"""ps3_collective_matmul: matmuls whose communication overlaps the compute. Pure NumPy.

Shapes: every per-device dimension is even, so answers that split a chunk in two (for instance
to send half of it each way round the ring) always divide evenly.
"""
import numpy as np


def _dims(rng, x, y, size):
    """(b, d, f): per-device rows of the batch, and per-Y-shard widths of D and F."""
    if size == "speed_bidirectional":
        # ps4's speed shape (global B=D=F=1024): each ring step's transfer outlasts its partial
        # matmul on a v5e, so sending half of every step each way shows in the time.
        return 1024 // x, 1024 // y, 1024 // y
    if size == "small":
        return 2, 2 * int(rng.integers(1, 3)), 2
    if size == "grade":
        return tuple(2 * int(v) for v in rng.integers(1, 4, size=3))
    # speed / memory: a realistic layer on the speed layout (global B=1024, D=1024, F=4096)
    return 1024 // x, 1024 // y, 4096 // y


def _normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def allgather_case(rng, x, y, size):
    """A[B, D] (P('X','Y')), W[D, F] (P(None,'Y'))."""
    b, d, f = _dims(rng, x, y, size)
    return _normal(rng, (x * b, y * d)), _normal(rng, (y * d, y * f), 1 / np.sqrt(y * d))


def allreduce_case(rng, x, y, size):
    """A[B, D] (P('X','Y')), W[D, F] (P('Y', None))."""
    return allgather_case(rng, x, y, size)


def reducescatter_case(rng, x, y, size):
    """T[B, F] (P('X','Y')), W2[F, D] (P('Y', None))."""
    b, d, f = _dims(rng, x, y, size)
    return _normal(rng, (x * b, y * f)), _normal(rng, (y * f, y * d), 1 / np.sqrt(y * f))


def mlp_case(rng, x, y, size):
    """In[B, D] (P('X','Y')), Win[D, F] (P(None,'Y')), Wout[F, D] (P('Y', None))."""
    b, d, f = _dims(rng, x, y, size)
    return (_normal(rng, (x * b, y * d)), _normal(rng, (y * d, y * f), 1 / np.sqrt(y * d)),
            _normal(rng, (y * f, y * d), 1 / np.sqrt(y * f)))


def _mm(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def matmul_reference(args, x, y):
    """A @ W (serves the all-gather, all-reduce and reduce-scatter variants alike)."""
    a, w = args
    return _mm(a, w)


def mlp_reference(args, x, y):
    inp, w_in, w_out = args
    hidden = np.maximum(inp.astype(np.float64) @ w_in.astype(np.float64), 0.0)
    return (hidden @ w_out.astype(np.float64)).astype(np.float32)


def _smallest(rng, x, y, n_args):
    """The smallest even per-device shapes, and a lopsided one (wide D, narrow F)."""
    out = []
    for b, d, f in ((2, 2, 2), (2, 6, 2)):
        a = _normal(rng, (x * b, y * d))
        w_in = _normal(rng, (y * d, y * f))
        if n_args == 2:
            out.append((a, w_in))
        else:
            out.append((a, w_in, _normal(rng, (y * f, y * d))))
    return out


def matmul_edge_cases(rng, x, y):
    return _smallest(rng, x, y, 2)


def reducescatter_edge_cases(rng, x, y):
    return [(_normal(rng, (x * b, y * f)), _normal(rng, (y * f, y * d)))
            for b, d, f in ((2, 2, 2), (2, 2, 6))]


def mlp_edge_cases(rng, x, y):
    return _smallest(rng, x, y, 3)


def bidirectional(make_case):
    """``make_case`` with ps4's communication-bound speed shape in place of ps3's."""
    def case(rng, x, y, size):
        return make_case(rng, x, y, "speed_bidirectional" if size == "speed" else size)

    case.__name__ = f"{make_case.__name__}_bidirectional"
    case.__qualname__ = case.__name__
    return case


allgather_case_bidirectional = bidirectional(allgather_case)
allreduce_case_bidirectional = bidirectional(allreduce_case)
reducescatter_case_bidirectional = bidirectional(reducescatter_case)
