"""Value messages name the wrong blocks of a sharded output, so a wrong ring index is found."""
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from autograder.core.compare import compare_values, values_message

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration

SIZES = {"X": 2, "Y": 4}


def _one_wrong_block():
    want = np.ones((8, 16), np.float32)
    got = want.copy()
    got[4:8, 8:12] = 3.0
    return got, want


def test_a_wrong_block_is_named_with_the_device_that_holds_it():
    got, want = _one_wrong_block()
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert msg.startswith("16 of 128 values differ")
    assert "wrong in 1 of the 8 blocks" in msg and "[4:8, 8:12] (X=1, Y=2)" in msg
    assert msg.endswith("the others are right")


def test_a_replicated_dimension_is_one_block():
    got, want = _one_wrong_block()
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", None), SIZES))
    assert "wrong in 1 of the 2 blocks" in msg and "[4:8, :] (X=1)" in msg


@pytest.mark.parametrize("tiles", [None, (P("X", "Y"), {"X": 1, "Y": 1})])
def test_no_block_sentence_without_blocks(tiles):
    got, want = _one_wrong_block()
    assert "blocks" not in compare_values(got, want, 1e-5, 1e-5, tiles=tiles)


def test_every_block_wrong_is_said_in_the_problems_terms():
    """Every value wrong (issue 54: "64 of 64 values differ; worst at index (2, 8)" was all a
    wrong ring index got): the message still speaks of the output's blocks."""
    want = np.ones((8, 16), np.float32)
    msg = compare_values(want * 0, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert msg.startswith("128 of 128 values differ")
    assert ("wrong in every one of the 8 blocks the output spec cuts it into (2 along X x 4 "
            "along Y; each device's block): a mistake every device makes alike") in msg, msg


def test_a_block_on_the_wrong_device_says_whose_it_is():
    """Right blocks on the wrong devices (a ring index off by one): each wrong block names the
    block of the reference it holds, with the device that should hold it."""
    want = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    got = np.roll(want, 4, axis=1)  # every Y block moved one device along
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert "wrong in every one of the 8 blocks" in msg, msg
    assert "[0:4, 0:4] (X=0, Y=0) holds the values of [0:4, 12:16] (X=0, Y=3)" in msg, msg
    assert "[0:4, 4:8] (X=0, Y=1) holds the values of [0:4, 0:4] (X=0, Y=0)" in msg, msg
    assert msg.endswith("and 4 more"), msg
    got = want.copy()
    got[:4, 4:8] = want[:4, 8:12]  # one block a step ahead; the others right
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert ("wrong in 1 of the 8 blocks the output spec cuts it into: [0:4, 4:8] (X=0, Y=1) "
            "holds the values of [0:4, 8:12] (X=0, Y=2); the others are right") in msg, msg


def test_many_wrong_blocks_are_counted_not_all_listed():
    want = np.ones((8, 16), np.float32)
    got = want.copy()
    got[:, :12] = 0.0  # 6 of 8 blocks
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert "wrong in 6 of the 8 blocks" in msg and "and 2 more" in msg


def test_devices_that_disagree_come_first():
    assert values_message("3 of 8 values differ", "devices disagree") == (
        "devices disagree; the copy the host reads: 3 of 8 values differ")
    assert values_message(None, None) is None


def _whole_rule(got, want, rtol, atol) -> bool:
    """The rule compare_values states, on whole float64 copies (what _close decides in chunks)."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.all(np.isfinite(g)):
        return False
    scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
    return bool(np.all(np.abs(g - w) <= atol * scale + rtol * np.abs(w)))


def _cases():
    from autograder.core.compare import CHUNK

    rng = np.random.default_rng(7)
    n = 3 * CHUNK + 5  # several chunks and a ragged last one
    w = rng.standard_normal(n).astype(np.float32)
    yield "equal", w.copy(), w
    late = w.copy()
    late[-2] += 1.0
    yield "one wrong value in the last chunk", late, w
    big = w.copy()
    big[-1] = 1e4  # the scale comes from the last chunk: small errors elsewhere are fine then
    yield "scale from the last chunk", big + 1e-2, big
    yield "scale from the last chunk, reference only", w + 1e-2, big
    inf = w.copy()
    inf[CHUNK + 3] = np.inf
    yield "an inf in the middle", inf, w
    nan_ref = w.copy()
    nan_ref[2 * CHUNK] = np.nan
    yield "a NaN in the reference", w.copy(), nan_ref
    yield "empty", np.zeros(0, np.float32), np.zeros(0, np.float32)
    yield "integers", np.arange(10), np.arange(10)


@pytest.mark.parametrize("name,got,want", list(_cases()), ids=[c[0] for c in _cases()])
def test_the_chunked_comparison_decides_as_the_whole_rule(name, got, want):
    whole = _whole_rule(got, want, 1e-5, 1e-5)
    assert (compare_values(got, want, 1e-5, 1e-5) is None) == whole


def test_a_half_block_from_the_wrong_ring_step_is_named():
    """A two-way ring whose left halves end one device off: each block's wrong half is named
    with the block it belongs to, and its right half is said to be right."""
    want = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    got = want.copy()
    for y in range(4):  # the first half of each Y block's columns is the next block's
        got[:, 4 * y:4 * y + 2] = want[:, 4 * ((y + 1) % 4):4 * ((y + 1) % 4) + 2]
    msg = compare_values(got, want, 1e-5, 1e-5, tiles=(P("X", "Y"), SIZES))
    assert ("[0:4, 0:4] (X=0, Y=0) (its first half of columns holds that of [0:4, 4:8] "
            "(X=0, Y=1); its second half of columns is right)") in msg, msg


# -- the float32 first pass of _close: same result as the float64 rule, on every input --------

F32_MAX = float(np.finfo(np.float32).max)
#: tolerances down to float64's and float32's denormals, zero, and past float32's range
ATOLS = [0.0, 5e-324, 1e-300, 1e-45, 1e-40, 1e-8, 1e-5, 1e-2, 1.0, 1e30, 1e300, 7]
RTOLS = [0.0, 1e-45, 1e-30, 1e-7, 1e-5, 1e-3, 0.3, 0.5, 0.7, 2.0, 1e10]


def _want(rng, kind: str, n: int) -> np.ndarray:
    sign = rng.choice([-1.0, 1.0], n)
    if kind == "zeros":
        return np.zeros(n, np.float32)
    if kind == "denormals":
        return (sign * rng.integers(0, 1 << 20, n) * 2.0 ** -149).astype(np.float32)
    if kind == "near float32 max":
        return (sign * F32_MAX * rng.uniform(0.5, 1.0, n)).astype(np.float32)
    if kind == "all magnitudes":
        w = sign * 10.0 ** rng.uniform(-45, 38.5, n)
        return np.clip(w, -F32_MAX, F32_MAX).astype(np.float32)
    w = rng.standard_normal(n) * float(kind)
    w[rng.random(n) < 0.01] = 0.0
    return w.astype(np.float32)


def _tolerance(want: np.ndarray, rtol, atol) -> np.ndarray:
    """The rule's float64 tolerance of each value."""
    w = want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(w))))
    return atol * scale + rtol * np.abs(w)


def _boundary(want: np.ndarray, tol: np.ndarray, side: np.ndarray, inside: bool) -> np.ndarray:
    """Per value, the float32 farthest from ``want`` on ``side`` that the float64 rule still
    accepts (``inside``), or the nearest one it rejects: a walk of float32 steps from the
    float64 limit ``want + side*tol`` (values it cannot reach in a few steps stay near it)."""
    w = want.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        c = np.clip(w + side * tol, -F32_MAX, F32_MAX).astype(np.float32)
        out = np.float32(np.inf) * side.astype(np.float32)
        for _ in range(4):  # step outward while accepted, then inward while rejected
            ok = np.abs(c.astype(np.float64) - w) <= tol
            c = np.where(ok, np.nextafter(c, out), c)
        for _ in range(8):
            ok = np.abs(c.astype(np.float64) - w) <= tol
            c = np.where(ok, c, np.nextafter(c, want))
        if not inside:
            c = np.nextafter(c, out)
    return c


def _float32_cases(seed: int):
    """Random float32 outputs over several chunks: values inside the tolerance, some exactly on
    its edge in float64 (the last float32 accepted, or the first rejected), some a hair to
    either side of it in float64 then rounded, and NaN, inf and overflowing differences."""
    from autograder.core.compare import CHUNK, FAST_MIN

    rng = np.random.default_rng(seed)
    n = max(FAST_MIN, 2 * CHUNK) + int(rng.integers(0, 3000))
    kinds = ["1", "1e-3", "1e3", "1e-30", "1e30", "zeros", "denormals", "near float32 max",
             "all magnitudes"]
    for _ in range(6):
        kind = kinds[int(rng.integers(len(kinds)))]
        want = _want(rng, kind, n)
        rtol = RTOLS[int(rng.integers(len(RTOLS)))]
        atol = ATOLS[int(rng.integers(len(ATOLS)))]
        tol = _tolerance(want, rtol, atol)
        w = want.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            got = np.clip(w + tol * rng.uniform(-0.9, 0.9, n), -F32_MAX, F32_MAX)
            got = got.astype(np.float32)
        edge = rng.choice(n, 50, replace=False)
        side = rng.choice([-1.0, 1.0], edge.size)
        got[edge] = _boundary(want[edge], tol[edge], side, inside=True)
        name = f"{kind} rtol={rtol} atol={atol}"
        yield f"{name}, edges inside", got.copy(), want, rtol, atol
        out = got.copy()
        out[edge[:1]] = _boundary(want[edge[:1]], tol[edge[:1]], side[:1], inside=False)
        yield f"{name}, one edge outside", out, want, rtol, atol
        tiny = got.copy()
        hair = 1.0 + rng.choice([-1.0, 1.0], edge.size) * 2.0 ** -int(rng.integers(20, 53))
        with np.errstate(over="ignore", invalid="ignore"):
            near = np.clip(w[edge] + side * tol[edge] * hair, -F32_MAX, F32_MAX)
        tiny[edge] = near.astype(np.float32)
        yield f"{name}, a hair from the edge", tiny, want, rtol, atol
        odd = got.copy()
        at = int(rng.integers(n))
        spoil = rng.choice(["nan got", "inf got", "-inf got", "nan want", "inf want",
                            "overflow"])
        bad_want = want.copy()
        if spoil.endswith("got"):
            odd[at] = {"nan got": np.nan, "inf got": np.inf, "-inf got": -np.inf}[spoil]
        elif spoil == "overflow":  # got - want is past float32's range (inf in float32)
            bad_want[at], odd[at] = -F32_MAX, F32_MAX
        else:
            bad_want[at] = np.nan if spoil == "nan want" else np.inf
            odd[at] = bad_want[at] if rng.random() < 0.5 else want[at]
        yield f"{name}, {spoil}", odd, bad_want, rtol, atol


def test_the_float32_pass_decides_as_the_float64_rule():
    """For big float32 outputs _close first decides in float32 with a margin; on values on
    the tolerance's edge in float64, denormals, zeros, values near float32's largest, NaN, inf,
    zero and denormal tolerances, it says what the float64 rule says."""
    from autograder.core.compare import _close

    results = []
    with np.errstate(over="ignore", invalid="ignore"):
        for seed in range(30):
            for name, got, want, rtol, atol in _float32_cases(seed):
                want_ok = _whole_rule(got, want, rtol, atol)
                assert _close(got, want, rtol, atol) == want_ok, (seed, name)
                if got.size % 8 == 0:  # the shape does not matter
                    assert _close(got.reshape(-1, 8), want.reshape(-1, 8), rtol, atol) == want_ok
                results.append(want_ok)
    assert 0.2 < np.mean(results) < 0.8, np.mean(results)  # both outcomes well represented


class _Counted:
    """A function that counts its calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


@pytest.fixture
def counted(monkeypatch):
    """compare's float64 rule, its whole-output and its per-chunk doors, counting calls."""
    from autograder.core import compare

    doors = {name: _Counted(getattr(compare, name)) for name in ("_close_exact", "_within")}
    for name, fn in doors.items():
        monkeypatch.setattr(compare, name, fn)
    return doors


def test_big_float32_outputs_that_pass_never_reach_float64(counted):
    from autograder.core.compare import CHUNK, _close

    rng = np.random.default_rng(3)
    want = rng.standard_normal((8 * CHUNK // 1024, 1024)).astype(np.float32)
    got = want + np.float32(1e-6) * rng.standard_normal(want.shape).astype(np.float32)
    assert _close(got, want, 1e-5, 1e-5)
    assert (counted["_close_exact"].calls, counted["_within"].calls) == (0, 0)
    got.reshape(-1)[3 * CHUNK + 17] += 1.0  # one wrong value: only its chunk goes to float64
    assert not _close(got, want, 1e-5, 1e-5)
    assert (counted["_close_exact"].calls, counted["_within"].calls) == (0, 1)
    assert compare_values(got, want, 1e-5, 1e-5).startswith("1 of ")


def test_small_or_float64_outputs_and_flushed_denormals_take_the_float64_rule(counted,
                                                                               monkeypatch):
    from autograder.core import compare

    want = np.ones(compare.FAST_MIN - 1, np.float32)
    assert compare._close(want, want, 1e-5, 1e-5)
    big = np.ones(compare.FAST_MIN, np.float64)
    assert compare._close(big, big, 1e-5, 1e-5)
    assert (counted["_close_exact"].calls, counted["_within"].calls) == (2, 2)
    monkeypatch.setattr(compare, "_DENORMAL", np.zeros(1, np.float32))  # as if flushed
    big = big.astype(np.float32)
    assert compare._close(big, big, 1e-5, 1e-5)
    assert (counted["_close_exact"].calls, counted["_within"].calls) == (2, 3)
