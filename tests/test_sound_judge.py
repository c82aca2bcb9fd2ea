"""Programs crafted for the judge: the model prices what the hardware runs, never a guess.

Each fixture in ``fixtures/attacks`` computes the right values with a blocking collective (or a
whole-output psum) and adds one trick aimed at the TPU model; each must fail the speed check, and
say why. The scalar semantics behind the first trick are tested on their own below."""
import numpy as np
import pytest
from conftest import check_of, grade

from autograder.tpumodel import scalars


@pytest.mark.parametrize("fixture, function, says", [
    ("never_taken_branch", "matmul_allgather", "ratio"),
    ("device_branch", "matmul_allgather", "all 8 devices were modeled"),
    ("data_branch", "matmul_allgather", "upper bound"),
    ("too_many_ops", "matmul_allgather", "cannot price this program"),
    ("vector_matmul", "matmul_allgather", "ratio"),
    ("psum_slices", "matmul_allreduce", "ratio"),
])
def test_crafted_program_fails_speed(fixture, function, says):
    res = grade("attacks", fixture, function, with_speed=True)
    assert check_of(res, "numerics").passed, res.report()
    speed = check_of(res, "speed")
    assert not speed.passed, speed.message
    assert says in speed.message, speed.message
    assert "wall-clock ratio" not in speed.message, speed.message


S32 = "s32"


def v(x, t=S32):
    return scalars.literal(str(x), t)


@pytest.mark.parametrize("op, args, t, expected", [
    ("shift-left", (1, 31), S32, -2**31),          # wraps into the sign bit
    ("shift-left", (3, 31), S32, -2**31),
    ("shift-left", (1, 32), S32, 0),               # a shift by the width or more gives 0
    ("shift-right-arithmetic", (-8, 40), S32, -1),
    ("shift-right-logical", (-1, 28), S32, 15),
    ("add", (2**31 - 1, 1), S32, -2**31),
    ("multiply", (65536, 65536), S32, 0),
    ("divide", (7, 0), S32, -1),                   # XLA: x / 0 is all ones
    ("divide", (-2**31, -1), S32, -2**31),
    ("divide", (-7, 2), S32, -3),                  # truncates toward zero
    ("remainder", (7, 0), S32, 7),
    ("remainder", (-7, 2), S32, -1),
    ("subtract", (0, 1), "u32", 2**32 - 1),
    ("negate", (-2**31,), S32, -2**31),
])
def test_integer_scalars_follow_xla(op, args, t, expected):
    got = scalars.evaluate(op, t, {}, [v(a, t) for a in args])
    assert got is not None and int(got) == expected, (op, args, got)
    assert got.dtype == scalars.numpy_dtype(t)


def test_float_and_pred_scalars():
    half = v("0.5", "f32")
    assert int(scalars.evaluate("convert", S32, {}, [half])) == 0
    assert bool(scalars.evaluate("compare", "pred", {"direction": "LT"}, [v("0", "f32"), half]))
    assert not scalars.evaluate("compare", "pred", {"direction": "EQ"},
                                [v("nan", "f32"), v("nan", "f32")])
    # float to int out of range or NaN: not pinned down here, so unknown (never a guess)
    assert scalars.evaluate("convert", S32, {}, [v("3e9", "f32")]) is None
    assert scalars.evaluate("convert", S32, {}, [v("nan", "f32")]) is None
    # an unknown operand or operation makes the result unknown
    assert scalars.evaluate("add", S32, {}, [v(1), None]) is None
    assert scalars.evaluate("cosine-of-the-moon", S32, {}, [v(1)]) is None
    assert float(scalars.evaluate("add", "f32", {}, [v("16777216", "f32"), v("1", "f32")])) \
        == np.float32(16777216)  # f32 rounding, not Python's float
