"""Scalar arithmetic exactly as XLA does it, for the values that steer a program.

The model evaluates the scalars a program computes without array data (loop counters, branch
indices, ``axis_index`` arithmetic) to learn what the hardware will run. It must get the same
answer as the hardware, or a program can steer the model down a path the chip never takes:
``((axis_index + 1) << 31) > 0`` is false on every device in int32 (the shift wraps to the sign
bit), true in Python's unbounded integers.

So every value is a NumPy scalar of the instruction's own element type, and every operation
follows XLA's definition for it (HLO semantics, as the CPU, GPU and TPU backends implement them):

* integer add, subtract, multiply and negate wrap around (two's complement);
* integer division truncates; ``x / 0`` is all ones (-1 signed, the maximum unsigned), and
  ``INT_MIN / -1`` is ``INT_MIN``; ``x % 0`` is ``x`` and ``INT_MIN % -1`` is 0;
* a shift by the bit width or more gives 0 (left, logical right) or the sign (arithmetic right);
  an arithmetic right shift copies the top bit whatever the type's signedness (on an unsigned
  value too: ``0x80000000 >> 1`` is ``0xC0000000``);
* conversions between integer types wrap; float to integer truncates toward zero;
* a compare of type TOTALORDER orders floats by their bits: ``-NaN < -inf < ... < -0.0 < +0.0
  < ... < +inf < +NaN`` (so ``-0.0 < +0.0`` is true and a NaN equals itself); the other types
  compare as IEEE does (``-0.0 == +0.0``, NaN unordered).

Floating point is known only where every backend must agree: the backends flush subnormals to
zero (NumPy keeps them: ``1e-20 * 1e-20 > 0`` is true in NumPy, false under XLA), a TPU divides
and takes square roots by approximation, and a compiler may fuse a multiply into an add. So a
float operation is evaluated only when no rounding can happen (an add, subtract or multiply
whose exact result the type holds; negate, abs, sign, floor, ceil, round, max, min, compare,
select and exact conversions) and no operand or result is subnormal; anything else is unknown.
The sign of a zero is kept where XLA keeps it (``sign(-0.0)`` is ``-0.0``); the maximum or
minimum of two zeros of opposite signs is unknown (IEEE leaves it open, and backends differ).

Where XLA's answer is not pinned down here (float to integer out of range or NaN, an element
type or an operation this module does not know), the value is unknown (``None``): the caller
then assumes the worst instead of guessing.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np

try:  # jax depends on ml_dtypes: bfloat16 and the 8-bit floats
    import ml_dtypes
    _EXTRA = {"bf16": np.dtype(ml_dtypes.bfloat16)}
    _finfo = ml_dtypes.finfo  # NumPy's finfo does not know bfloat16
except ImportError:  # pragma: no cover - never without jax; such values are then unknown
    _EXTRA = {}
    _finfo = np.finfo

_DTYPES = {"pred": np.dtype(np.bool_), "s8": np.dtype(np.int8), "s16": np.dtype(np.int16),
           "s32": np.dtype(np.int32), "s64": np.dtype(np.int64), "u8": np.dtype(np.uint8),
           "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
           "f16": np.dtype(np.float16), "f32": np.dtype(np.float32),
           "f64": np.dtype(np.float64), **_EXTRA}


#: the float element types (bfloat16's NumPy kind is 'V', not 'f')
_FLOATS = frozenset(d for k, d in _DTYPES.items() if k.startswith(("f", "bf")))


def numpy_dtype(hlo_type: str) -> Optional[np.dtype]:
    """The NumPy dtype of an HLO element type, or None for one this module does not evaluate."""
    return _DTYPES.get(hlo_type)


def _kind(dt: np.dtype) -> str:
    """NumPy's kind of a dtype ('b', 'i', 'u', 'f'), bfloat16 counted as a float."""
    return "f" if dt in _FLOATS else dt.kind


def literal(text: str, hlo_type: str) -> Optional[np.generic]:
    """The value of a scalar constant as HLO prints it (``42``, ``-1.5``, ``true``, ``inf``)."""
    dt = numpy_dtype(hlo_type)
    s = text.strip()
    if dt is None or not s:
        return None
    try:
        if dt.kind == "b":
            if s in ("true", "false"):
                return np.bool_(s == "true")
            return np.bool_(int(s) != 0)
        if dt.kind in "iu":
            v = int(s)
            info = np.iinfo(dt)
            return dt.type(v) if info.min <= v <= info.max else None
        return dt.type(float(s))
    except (ValueError, OverflowError):
        return None


def _wrap(v: int, dt: np.dtype) -> np.generic:
    bits = dt.itemsize * 8
    v &= (1 << bits) - 1
    if dt.kind == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return dt.type(v)


def _convert(x: np.generic, dt: np.dtype) -> Optional[np.generic]:
    src = x.dtype
    if _subnormal(x):
        return None  # flushed to zero by XLA's backends (a subnormal converts to false, to 0)
    if dt.kind == "b":
        return np.bool_(x != 0)
    if dt.kind in "iu":
        if _kind(src) in "biu":
            return _wrap(int(x), dt)
        f = float(x)
        if not np.isfinite(f):
            return None
        t = int(f)  # toward zero
        info = np.iinfo(dt)
        return dt.type(t) if info.min <= t <= info.max else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = np.array(x).astype(dt)[()]
    exact = (int(x) == y) if _kind(src) in "biu" and np.isfinite(y) else \
        (src.kind == "b" or np.isnan(x) and np.isnan(y) or float(x) == float(y))
    return y if exact and not _subnormal(y) else None  # a rounding conversion: unknown


def _subnormal(x) -> bool:
    """Whether a float is subnormal (which XLA's backends flush to zero and NumPy keeps)."""
    x = np.asarray(x)
    if _kind(x.dtype) != "f":
        return False
    f = abs(float(x))
    return 0.0 < f < float(_finfo(x.dtype).tiny)


def evaluate(opcode: str, out_type: str, attrs: dict, values: list) -> Optional[Any]:
    """The value of scalar instruction ``opcode`` with result element type ``out_type`` on the
    known operand ``values`` (NumPy scalars of their own types); None when it is not known."""
    dt = numpy_dtype(out_type)
    if dt is None or any(v is None for v in values):
        return None
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _evaluate(opcode, dt, attrs, values)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError, KeyError, IndexError):
        return None


def _evaluate(op: str, dt: np.dtype, attrs: dict, c: list) -> Optional[Any]:
    integer = dt.kind in "iu"
    if op == "compare":
        return _compare(attrs, *c)
    if op == "select":
        return c[1] if bool(c[0]) else c[2]
    if op == "convert":
        return _convert(c[0], dt)
    if op == "bitcast-convert":
        src = c[0].dtype
        return np.array(c[0], src).view(dt)[()] if src.itemsize == dt.itemsize else None
    if op == "clamp":  # clamp(lo, x, hi)
        lo, x, hi = c
        if dt.kind == "b":
            return None  # not an operation XLA's backends all implement
        if integer:
            return dt.type(min(max(int(x), int(lo)), int(hi)))
        low = _floating("maximum", dt, [dt.type(x), dt.type(lo)])
        return None if low is None else _floating("minimum", dt, [low, dt.type(hi)])
    if op == "is-finite":
        return np.bool_(np.isfinite(float(c[0])))
    if dt.kind == "b":
        a = bool(c[0])
        if op == "not":
            return np.bool_(not a)
        b = bool(c[1]) if len(c) > 1 else None
        if op == "and":
            return np.bool_(a and b)
        if op == "or":
            return np.bool_(a or b)
        if op == "xor":
            return np.bool_(a != b)
        return None
    if integer:
        return _integer(op, dt, [int(x) for x in c])
    return _floating(op, dt, [dt.type(x) for x in c])


#: the comparison type XLA takes when the instruction names none
_DEFAULT_TYPE = {"b": "UNSIGNED", "i": "SIGNED", "u": "UNSIGNED", "f": "FLOAT"}


def _compare(attrs: dict, a: np.generic, b: np.generic) -> Optional[np.bool_]:
    """``compare`` with its direction and type (HLO's ``direction=LT, type=TOTALORDER``)."""
    if a.dtype != b.dtype or _subnormal(a) or _subnormal(b):
        return None
    kind = _kind(a.dtype)
    typ = attrs.get("type", _DEFAULT_TYPE.get(kind))
    direction = attrs.get("direction")
    if direction not in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        return None
    if kind == "f" and typ == "TOTALORDER":
        a, b = _total_order(a), _total_order(b)
    elif typ != _DEFAULT_TYPE.get(kind):
        return None  # a type XLA would not give these operands (SIGNED on floats, say)
    return np.bool_({"EQ": a == b, "NE": a != b, "LT": a < b, "LE": a <= b, "GT": a > b,
                     "GE": a >= b}[direction])


def _total_order(x: np.generic) -> int:
    """A float's place in IEEE's total order as an integer: its bits read as a signed integer,
    the magnitude bits of a negative one flipped (``-NaN < -inf < -0.0 < +0.0 < +inf <
    +NaN``)."""
    bits = x.dtype.itemsize * 8
    u = int(np.array(x).view(f"u{x.dtype.itemsize}")[()])
    if u >> (bits - 1):
        return -1 - (u & ((1 << (bits - 1)) - 1))  # -0.0 is -1, below +0.0 at 0
    return u


def _integer(op: str, dt: np.dtype, c: list[int]) -> Optional[np.generic]:
    bits = dt.itemsize * 8
    signed = dt.kind == "i"
    lo = -(1 << (bits - 1)) if signed else 0
    if op == "add":
        return _wrap(c[0] + c[1], dt)
    if op == "subtract":
        return _wrap(c[0] - c[1], dt)
    if op == "multiply":
        return _wrap(c[0] * c[1], dt)
    if op == "negate":
        return _wrap(-c[0], dt)
    if op == "abs":
        return _wrap(abs(c[0]), dt)
    if op == "sign":
        return dt.type((c[0] > 0) - (c[0] < 0))
    if op == "maximum":
        return dt.type(max(c))
    if op == "minimum":
        return dt.type(min(c))
    if op == "divide":
        a, b = c
        if b == 0:
            return _wrap(-1, dt)
        if signed and a == lo and b == -1:
            return dt.type(lo)
        q = abs(a) // abs(b)
        return _wrap(q if (a >= 0) == (b > 0) else -q, dt)
    if op == "remainder":
        a, b = c
        if b == 0:
            return dt.type(a)
        if signed and a == lo and b == -1:
            return dt.type(0)
        r = abs(a) % abs(b)
        return _wrap(r if a >= 0 else -r, dt)
    if op in ("and", "or", "xor"):
        a, b = (x & ((1 << bits) - 1) for x in c)
        return _wrap({"and": a & b, "or": a | b, "xor": a ^ b}[op], dt)
    if op == "not":
        return _wrap(~c[0], dt)
    if op in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
        a, s = c[0], c[1] & ((1 << bits) - 1)  # the shift amount is read as unsigned
        if op == "shift-left":
            return _wrap(a << s, dt) if s < bits else dt.type(0)
        if op == "shift-right-logical":
            u = a & ((1 << bits) - 1)
            return _wrap(u >> s, dt) if s < bits else dt.type(0)
        u = a & ((1 << bits) - 1)  # the top bit is the sign, of an unsigned value too
        a = u - (1 << bits) if u >> (bits - 1) else u
        if s >= bits:
            return _wrap(-1 if a < 0 else 0, dt)
        return _wrap(a >> s, dt)
    if op == "popcnt":
        return dt.type(bin(c[0] & ((1 << bits) - 1)).count("1"))
    if op in ("count-leading-zeros", "clz"):
        return dt.type(bits - (c[0] & ((1 << bits) - 1)).bit_length())
    return None


def _floating(op: str, dt: np.dtype, c: list) -> Optional[np.generic]:
    """Only what no backend can round differently (see the module doc); else None."""
    if any(_subnormal(x) for x in c):
        return None
    exact = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b,
             "multiply": lambda a, b: a * b}
    unary = {"negate": np.negative, "abs": np.abs, "sign": np.sign, "floor": np.floor,
             "ceil": np.ceil, "round-nearest-even": np.rint}
    if op in exact and len(c) == 2:
        wide = exact[op](np.float64(c[0]), np.float64(c[1]))  # exact for f32, f16 and bf16
        got = dt.type(wide)
        if not np.isfinite(wide) or float(got) != float(wide):
            return None  # rounded (or overflowed): how a backend rounds is not pinned down
        out = got
    elif op in ("maximum", "minimum") and len(c) == 2:
        if c[0] == 0 and c[1] == 0 and np.signbit(c[0]) != np.signbit(c[1]):
            return None  # max(-0.0, +0.0): IEEE leaves it open, and backends differ
        out = dt.type((np.maximum if op == "maximum" else np.minimum)(c[0], c[1]))
    elif op == "sign" and not (np.isfinite(c[0]) and c[0] != 0):
        out = c[0]  # sign(+-0.0) is that zero, sign(NaN) is NaN, sign(+-inf) is +-1
        if np.isinf(out):
            out = dt.type(np.copysign(1.0, float(out)))
    elif op == "round-nearest-afz":
        x = float(c[0])
        out = dt.type(np.copysign(np.floor(abs(x) + 0.5), x)) if np.isfinite(x) else dt.type(x)
    elif op in unary:
        out = dt.type(unary[op](c[0]))
    else:  # divide, sqrt, power, remainder, ...: approximated or rounded by some backend
        return None
    return None if _subnormal(out) else out
