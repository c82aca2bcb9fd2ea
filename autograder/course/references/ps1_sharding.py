"""ps1_sharding: per-shard averages and rolls. Pure NumPy."""
import numpy as np


def _rows_cols(rng, x, y, size):
    """Rows per X-shard and columns per Y-shard for a case of the given size."""
    if size == "small":
        return int(rng.integers(2, 5)), int(rng.integers(1, 3))
    if size == "grade":
        return int(rng.integers(1, 9)), int(rng.integers(1, 5))
    # speed / memory: a few MiB per device
    return 4096 // x, 1024 // y


def activations(rng, x, y, size):
    """A: f32[S, D] with S divisible by X and D by Y."""
    s, d = _rows_cols(rng, x, y, size)
    return rng.standard_normal((x * s, y * d)).astype(np.float32)


def shard_average_reference(args, x, y):
    (a,) = args
    return a.reshape(x, a.shape[0] // x, a.shape[1]).mean(axis=1).astype(np.float32)


def roll_diff_reference(args, x, y):
    a, shift = args
    blocks = a.reshape(x, a.shape[0] // x, a.shape[1])
    return (np.roll(blocks, shift, axis=1) - blocks).reshape(a.shape).astype(np.float32)


def shard_average_case(rng, x, y, size):
    return (activations(rng, x, y, size),)


def roll_diff_case(rng, x, y, size):
    """Blocks of at least two rows and a shift that really moves them (a one-row block, or a
    whole number of blocks, rolls onto itself: any answer that returns zeros would pass);
    negative shifts and shifts past a block included. The edge cases cover the rest."""
    s, d = _rows_cols(rng, x, y, size)
    s = max(s, 2)
    a = rng.standard_normal((x * s, y * d)).astype(np.float32)
    return (a, int(rng.integers(-2, 3)) * s + int(rng.integers(1, s)))


def roll_diff_edge_cases(rng, x, y):
    """Shifts that catch slicing mistakes: none, negative, a whole block, beyond a block."""
    a = activations(rng, x, y, "grade")
    block = a.shape[0] // x
    return [(a, s) for s in sorted({0, -1, block, block + 1, -(3 * block + 1)})]
