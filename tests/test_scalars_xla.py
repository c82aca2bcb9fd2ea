"""The model's scalar evaluator against XLA, on generated cases (issue 41, item 3).

The TPU model evaluates the scalars that steer a program (loop counters, branch indices) with
:mod:`autograder.tpumodel.scalars`, where no run measured them. Whatever it answers must be what
XLA computes, or it must refuse (``None``: the model then assumes the worst). This test builds,
per element type of the op table (:data:`autograder.core.optable.ELEMENT_TYPES`), one StableHLO
program that applies every scalar operation the evaluator knows to arrays of generated operands
(each edge value against each, then seeded random values drawn half from the type's special
values: zeros of both signs, NaNs of both signs, infinities, the limits, subnormals, shift
amounts at the bit width...), runs it on XLA, and compares every element with the evaluator's
answer on the same operands: bit for bit (a zero's sign too), a NaN for a NaN.

One compile per element type (and one for its conversions): a few seconds in all."""
from __future__ import annotations

import dataclasses

import numpy as np

from autograder.core.optable import ELEMENT_TYPES
from autograder.tpumodel import scalars

#: generated cases per operation and element type
N = 128
SEED = 41
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

#: the operations of the evaluator, by the operands' kind: StableHLO's names (HLO's are the same
#: with dashes, ``count_leading_zeros`` being ``clz``)
BINARY = {"b": ("and", "or", "xor", "maximum", "minimum"),
          "i": ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "and",
                "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic",
                "power"),
          "f": ("add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum",
                "power", "atan2")}
UNARY = {"b": ("not",),
         "i": ("negate", "abs", "sign", "not", "popcnt", "count_leading_zeros"),
         "f": ("negate", "abs", "sign", "floor", "ceil", "round_nearest_even",
               "round_nearest_afz", "sqrt", "exponential")}
#: what StableHLO does not define on unsigned integers
NOT_UNSIGNED = ("abs", "sign")


def _hlo_type(t: str) -> str:
    """HLO's name of a StableHLO element type (``i32`` -> ``s32``, ``ui8`` -> ``u8``)."""
    return {"i1": "pred"}.get(t, t.replace("ui", "u") if t.startswith("ui") else
                              t.replace("i", "s") if t.startswith("i") else t)


def _hlo_op(op: str) -> str:
    return {"count_leading_zeros": "clz"}.get(op, op.replace("_", "-"))


def _kind(t: str) -> str:
    return "b" if t == "i1" else "i" if t.startswith(("i", "ui")) else "f"


def _dtype(t: str) -> np.dtype:
    return scalars.numpy_dtype(_hlo_type(t))


def _edges(t: str) -> list:
    """Eight values of ``t`` each operation meets against each other."""
    dt = _dtype(t)
    if _kind(t) == "b":
        return [False, True] * 4
    if _kind(t) == "f":
        return [0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, -np.nan]
    info, bits = np.iinfo(dt), dt.itemsize * 8
    if dt.kind == "i":
        return [0, 1, -1, 2, info.min, info.max, bits - 1, bits]
    return [0, 1, 2, info.max, info.max - 1, 1 << (bits - 1), bits - 1, bits]


def _specials(t: str) -> list:
    dt = _dtype(t)
    if _kind(t) == "b":
        return [False, True]
    if _kind(t) == "i":
        info, bits = np.iinfo(dt), dt.itemsize * 8
        vals = [0, 1, 2, 3, 7, -1, -2, -7, bits - 1, bits, bits + 1, 2 * bits, info.min,
                info.min + 1, info.max, info.max - 1, info.max // 2, info.min // 2,
                1 << (bits - 2), 100, -100]
        return [v for v in vals if info.min <= v <= info.max]
    import ml_dtypes

    fi = ml_dtypes.finfo(dt)
    tiny, big = float(fi.tiny), float(fi.max)
    return [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, 127.5, -128.5,
            255.5, 256.0, 65535.0, 65536.0, 2.0**31, -2.0**31, 2.0**31 - 128, 2.0**32, 2.0**63,
            -2.0**63, 2.0**64, 1e10, big, -big, tiny, -tiny, tiny / 4, -tiny / 2,
            float(fi.eps), np.inf, -np.inf, np.nan, -np.nan]


def _operands(t: str, rng, role: int = 0) -> np.ndarray:
    """``n`` values of ``t``: the edge values' cross product first (``role`` 0 and 1 are the
    two sides of it), then seeded random ones, half of them special values."""
    dt, n = _dtype(t), N
    edges = np.array(_edges(t), dtype=object)
    cross = (np.repeat(edges, len(edges)) if role == 0 else np.tile(edges, len(edges)))
    m = n - len(cross)
    if _kind(t) == "b":
        rnd = rng.integers(0, 2, m).astype(bool)
    elif _kind(t) == "i":
        info = np.iinfo(dt)
        wide = np.int64 if dt.kind == "i" else np.uint64
        big = rng.integers(info.min, info.max, m, dtype=wide, endpoint=True).astype(dt)
        small = rng.integers(-40 if dt.kind == "i" else 0, 70, m).astype(dt)
        rnd = np.where(rng.random(m) < 0.5, big, small)
    else:
        scaled = rng.standard_normal(m) * 10.0 ** rng.integers(-6, 8, m)
        halves = rng.integers(-300, 300, m) / rng.choice([1, 2, 4], m)
        with np.errstate(all="ignore"):  # past the type's range: infinities, kept
            rnd = np.where(rng.random(m) < 0.5, scaled, halves).astype(dt)
    special = np.array(_specials(t), dtype=object)
    picked = special[rng.integers(0, len(special), m)]
    with np.errstate(all="ignore"):
        rnd = np.where(rng.random(m) < 0.5, picked, rnd.astype(object))
        return np.array([dt.type(v) for v in list(cross) + list(rnd)], dtype=dt)


def _run(body: str, ins: list, outs: list) -> list:
    """Run a StableHLO ``@main`` of the arrays ``ins`` ((element type, array) pairs) whose
    ``body`` (ending in its return) gives arrays of the element types ``outs``, on XLA."""
    import jax
    import jax.numpy as jnp
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    from autograder.core.compiling import FAST_CPU_COMPILE, on_cpu

    n = len(ins[0][1])
    params = ", ".join(f"%arg{i}: tensor<{n}x{t}>" for i, (t, _) in enumerate(ins))
    results = ", ".join(f"tensor<{n}x{t}>" for t in outs)
    text = ("module @jit_f attributes {mhlo.num_partitions = 1 : i32, "
            "mhlo.num_replicas = 1 : i32} {\n"
            f"  func.func public @main({params}) -> ({results}) {{\n{body}\n  }}\n}}\n")
    arrays = [a for _, a in ins]
    exported = jax.export.export(jax.jit(lambda *xs: tuple(jnp.zeros(n, _dtype(t))
                                                           for t in outs)))(*arrays)
    ctx = mlir.make_ir_context()
    module = ir.Module.parse(text, context=ctx)
    with ctx:
        payload = mlir.module_to_bytecode(module)
    exported = dataclasses.replace(exported, mlir_module_serialized=payload,
                                   module_kept_var_idx=tuple(range(len(arrays))))
    compiled = jax.jit(exported.call).lower(*arrays).compile(
        compiler_options=on_cpu(FAST_CPU_COMPILE))
    return [np.asarray(o) for o in compiled(*arrays)]


@dataclasses.dataclass
class Tally:
    compared: int = 0
    refused: int = 0
    #: (op, attributes, result type) -> (operands, evaluator's answer, XLA's), the first few
    wrong: dict = dataclasses.field(default_factory=dict)
    #: the operations (with their attributes and types) decided at least once
    decided: set = dataclasses.field(default_factory=set)

    def check(self, op: str, attrs: dict, out: str, operands: list, xla: np.ndarray) -> None:
        key = (op, tuple(sorted(attrs.items())), out, str(operands[0].dtype))
        for i, want in enumerate(xla):
            args = [o[i] for o in operands]
            got = scalars.evaluate(op, _hlo_type(out), attrs, args)
            if got is None:
                self.refused += 1
                continue
            self.compared += 1
            self.decided.add(key)
            if not _same(got, want):
                self.wrong.setdefault(key, []).append((args, got, want))


def _same(got, want) -> bool:
    """Bit for bit, a NaN for any NaN."""
    got = np.asarray(got)
    if got.dtype != want.dtype:
        return False
    if _kind_of(want.dtype) == "f" and np.isnan(float(want)):
        return bool(np.isnan(float(got)))
    return got.tobytes() == want.tobytes()


def _kind_of(dt: np.dtype) -> str:
    return "f" if dt.kind == "f" or dt == scalars.numpy_dtype("bf16") else dt.kind


def _one_type(t: str, rng, tally: Tally) -> None:
    """Every operation on ``t`` (binary, unary, compares of each type and direction, select,
    clamp) in one program."""
    kind, unsigned = _kind(t), t.startswith("ui")
    a, b, c = (_operands(t, rng, role=r) for r in (0, 1, 0))
    a, b, c = a, b, c[rng.permutation(len(c))]
    pred = rng.integers(0, 2, len(a)).astype(bool)
    tensor, p = f"tensor<{N}x{t}>", f"tensor<{N}xi1>"
    lines, outs, plan = [], [], []

    def emit(expr: str, out: str, op: str, attrs: dict, operands: list) -> None:
        lines.append(f"    %r{len(lines)} = {expr}")
        outs.append(out)
        plan.append((op, attrs, out, operands))

    for op in BINARY[kind]:
        emit(f"stablehlo.{op} %arg0, %arg1 : {tensor}", t, _hlo_op(op), {}, [a, b])
    for op in UNARY[kind]:
        if not (unsigned and op in NOT_UNSIGNED):
            emit(f"stablehlo.{op} %arg0 : {tensor}", t, _hlo_op(op), {}, [a])
    if kind == "f":
        emit(f"stablehlo.is_finite %arg0 : ({tensor}) -> {p}", "i1", "is-finite", {}, [a])
    types = {"b": ("UNSIGNED",), "i": ("UNSIGNED" if unsigned else "SIGNED",),
             "f": ("FLOAT", "TOTALORDER")}[kind]
    for typ in types:
        for d in DIRECTIONS:  # HLO names the type only where it is not the default
            attrs = {"direction": d, **({"type": typ} if typ == "TOTALORDER" else {})}
            emit(f"stablehlo.compare {d}, %arg0, %arg1, {typ} : ({tensor}, {tensor}) -> {p}",
                 "i1", "compare", attrs, [a, b])
    emit(f"stablehlo.select %arg3, %arg0, %arg1 : {p}, {tensor}", t, "select", {}, [pred, a, b])
    if kind != "b":  # XLA:CPU has no clamp of booleans (the evaluator refuses it)
        emit(f"stablehlo.clamp %arg2, %arg0, %arg1 : {tensor}", t, "clamp", {}, [c, a, b])
    ret = (f"    return {', '.join(f'%r{i}' for i in range(len(lines)))} : "
           f"{', '.join(f'tensor<{N}x{o}>' for o in outs)}")
    got = _run("\n".join(lines + [ret]), [(t, a), (t, b), (t, c), ("i1", pred)], outs)
    for (op, attrs, out, operands), xla in zip(plan, got, strict=True):
        tally.check(op, attrs, out, operands, xla)


def _conversions(t: str, rng, tally: Tally) -> None:
    """``t`` converted to every element type, and bitcast to those of its width."""
    a = _operands(t, rng)
    source = f"tensor<{N}x{t}>"
    converts = sorted(ELEMENT_TYPES)
    width = _dtype(t).itemsize
    bitcasts = [u for u in converts if u not in (t, "i1") and t != "i1"
                and _dtype(u).itemsize == width]
    lines = [f"    %c{i} = stablehlo.convert %arg0 : ({source}) -> tensor<{N}x{u}>"
             for i, u in enumerate(converts)]
    lines += [f"    %b{i} = stablehlo.bitcast_convert %arg0 : ({source}) -> tensor<{N}x{u}>"
              for i, u in enumerate(bitcasts)]
    names = [f"%c{i}" for i in range(len(converts))] + [f"%b{i}" for i in range(len(bitcasts))]
    outs = converts + bitcasts
    ret = f"    return {', '.join(names)} : {', '.join(f'tensor<{N}x{o}>' for o in outs)}"
    got = _run("\n".join(lines + [ret]), [(t, a)], outs)
    for i, (u, xla) in enumerate(zip(outs, got, strict=True)):
        tally.check("convert" if i < len(converts) else "bitcast-convert", {}, u, [a], xla)


def test_scalar_evaluator_agrees_with_xla_on_generated_cases():
    import jax

    rng = np.random.default_rng(SEED)
    tally = Tally()
    with jax.enable_x64(True):  # the 64-bit types of the table
        for t in sorted(ELEMENT_TYPES):
            _one_type(t, rng, tally)
            _conversions(t, rng, tally)
    shown = "\n".join(f"{key}: {len(cases)} cases, e.g. operands {cases[0][0]}: evaluator "
                      f"{cases[0][1]!r}, XLA {cases[0][2]!r}"
                      for key, cases in list(tally.wrong.items())[:12])
    assert not tally.wrong, f"{len(tally.wrong)} operations disagree with XLA:\n{shown}"
    assert tally.compared >= 10_000, tally
    # the facts a program could steer the model with are decided (not refused) and were checked
    for key in [("compare", (("direction", "LT"), ("type", "TOTALORDER")), "i1", "float32"),
                ("shift-right-arithmetic", (), "ui32", "uint32"),
                ("divide", (), "i32", "int32"), ("remainder", (), "i64", "int64"),
                ("convert", (), "i32", "float32"), ("convert", (), "ui8", "int32"),
                ("convert", (), "i1", "float32"), ("maximum", (), "f32", "float32"),
                ("sign", (), "f32", "float32"), ("select", (), "bf16", "bool"),
                ("shift-left", (), "i8", "int8"), ("clz", (), "ui16", "uint16")]:
        assert key in tally.decided, key


def test_the_facts_the_evaluator_was_wrong_about():
    """What the generated cases found (each was evaluated otherwise before)."""
    f32, u32 = scalars.numpy_dtype("f32"), scalars.numpy_dtype("u32")
    total = {"direction": "LT", "type": "TOTALORDER"}
    assert scalars.evaluate("compare", "pred", total, [f32.type(-0.0), f32.type(0.0)])
    assert scalars.evaluate("compare", "pred", total, [f32.type(1.0), f32.type(np.nan)])
    assert not scalars.evaluate("compare", "pred", {"direction": "LT"},
                                [f32.type(-0.0), f32.type(0.0)])
    assert scalars.evaluate("shift-right-arithmetic", "u32", {},
                            [u32.type(0x80000000), u32.type(1)]) == 0xC0000000
    assert np.signbit(scalars.evaluate("sign", "f32", {}, [f32.type(-0.0)]))
    # a subnormal is zero to XLA: converted to a boolean it is false, so the evaluator refuses
    assert scalars.evaluate("convert", "pred", {}, [f32.type(1e-40)]) is None
    bf16 = scalars.numpy_dtype("bf16")
    assert scalars.evaluate("compare", "pred", {"direction": "GT"},
                            [bf16.type(3e-39), bf16.type(0)]) is None
    assert scalars.evaluate("maximum", "f32", {}, [f32.type(-0.0), f32.type(0.0)]) is None
