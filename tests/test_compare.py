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
