"""Keyed digests of what each device receives from the all_to_alls, written into a module
(:func:`received_module`): a rule weighs what an exchange delivers by comparing them."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .rewriting import LoopCountError, Tag, _const, _Escaper, _i32, _parse

try:
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
except Exception:  # noqa: BLE001  # reported when a module is parsed (rewriting._parse)
    pass


#: the ops whose results are tokens exchanged between devices, as :func:`received_module` weighs
#: them (``ragged_all_to_all`` is a custom call in JAX's StableHLO)
_EXCHANGES = ("stablehlo.all_to_all",)
_EXCHANGE_TARGETS = ("ragged_all_to_all",)


def _exchanges(module) -> list:
    found = []

    def visit(op):
        op = op.operation
        if op.name in _EXCHANGES or (
                op.name == "stablehlo.custom_call"
                and str(ir.StringAttr(op.attributes["call_target_name"]).value)
                in _EXCHANGE_TARGETS):
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


#: how many 32-bit words a digest key holds (:func:`new_key`)
KEY_WORDS = 9


def new_key() -> tuple[int, ...]:
    """A fresh key for :func:`_digest` (``KEY_WORDS`` words, as signed 32-bit integers), drawn
    from the operating system's secure source by the grader when it instruments a program,
    after the program's text is fixed: nothing the program computes can depend on it."""
    import secrets

    return tuple(secrets.randbits(32) - 2**31 for _ in range(KEY_WORDS))


def _words(value, ip):
    """``value``'s elements as i32 words, each word bit for bit (a 64-bit element is two
    words, a narrower one sign- or zero-extended; a float read as its bits, so two NaNs or two
    values that compare equal but differ in bits are different words), except a float's -0.0,
    read as 0.0 (a zeroed slot of a negative row is x * 0, and XLA folds x + 0.0)."""
    typ = ir.RankedTensorType(value.type)
    shape, et = list(typ.shape), typ.element_type
    i32 = ir.IntegerType.get_signless(32)
    if isinstance(et, ir.FloatType):
        width = ir.FloatType(et).width
        if width not in (8, 16, 32, 64):
            raise LoopCountError(f"an all_to_all of {et} cannot be weighed")
        ints = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(width))
        x = hlo.BitcastConvertOp(ints, value, ip=ip).result
        if "FNUZ" not in str(et) and "E8M0" not in str(et):  # types that have a -0.0
            negzero = hlo.CompareOp(x, _const(-2**(width - 1), ints, ip),
                                    hlo.ComparisonDirectionAttr.get("EQ"), ip=ip).result
            x = hlo.SelectOp(negzero, _const(0, ints, ip), x, ip=ip).result
        value, et = x, ir.IntegerType.get_signless(width)
    if not isinstance(et, ir.IntegerType):
        raise LoopCountError(f"an all_to_all of {et} cannot be weighed")
    width = ir.IntegerType(et).width
    if width == 64:
        return hlo.BitcastConvertOp(ir.RankedTensorType.get(shape + [2], i32), value,
                                    ip=ip).result
    if width > 64:
        raise LoopCountError(f"an all_to_all of {et} cannot be weighed")
    ints = ir.RankedTensorType.get(shape, i32)
    return (hlo.BitcastConvertOp(ints, value, ip=ip).result if width == 32
            else hlo.ConvertOp(ints, value, ip=ip).result)


def _digest(value, key: Sequence[int], ip, start: int = 0):
    """An i32 scalar, a keyed non-linear digest of ``value``'s bits (:func:`_words`): each word
    is mixed with a keyed function of its position (xor, then a multiply by a keyed odd
    multiplier of the position, then multiply-xorshift rounds with keyed odd multipliers),
    and the mixed words are summed, wrapping. Without the key (drawn by the grader after the
    program is fixed, :func:`new_key`) no program can tell what a word adds to the sum, so
    none can append words that cancel what it sends (as it could against a sum of words times
    public weights, linear in the bits); two inputs whose words differ get different digests
    but for a chance of about 2**-32. ``start``: the position of the first word (an op's
    second result continues where its first ended)."""
    x = _words(value, ip)
    typ = ir.RankedTensorType(x.type)
    shape = list(typ.shape)
    k = list(key)
    if len(k) != KEY_WORDS:
        raise ValueError(f"a digest key has {KEY_WORDS} words, not {len(k)}")

    def c(v):
        return _const(((int(v) + 2**31) % 2**32) - 2**31, typ, ip)

    def odd(v):
        return c(int(v) | 1)

    def mul(a, b):
        return hlo.MulOp(a, b, ip=ip).result

    def xorshift(a, n):
        return hlo.XorOp(a, hlo.ShiftRightLogicalOp(a, c(n), ip=ip).result, ip=ip).result

    def rounds(a, m1, m2):  # murmur3's finalizer, its multipliers keyed
        return xorshift(mul(xorshift(mul(xorshift(a, 16), m1), 13), m2), 16)

    pos = c(start)
    stride = 1
    for dim in reversed(range(len(shape))):
        at = hlo.IotaOp(typ, dim, ip=ip).result
        pos = hlo.AddOp(pos, mul(at, c(stride)), ip=ip).result
        stride *= int(shape[dim])
    # per position: a keyed mask and a keyed odd multiplier, non-linear in the position
    mask = rounds(hlo.AddOp(mul(pos, odd(k[0])), c(k[1]), ip=ip).result, odd(k[2]), odd(k[3]))
    mult = hlo.OrOp(rounds(hlo.XorOp(mask, c(k[4]), ip=ip).result, odd(k[5]), odd(k[6])),
                    c(1), ip=ip).result
    # a bijection of the word at each position: a change of one word always shows
    h = rounds(mul(hlo.XorOp(x, mask, ip=ip).result, mult), odd(k[7]), odd(k[8]))
    scalar = _i32()
    red = hlo.ReduceOp([scalar], [h], [_const(0, scalar, ip)], list(range(len(shape))), ip=ip)
    body = red.regions[0].blocks.append(scalar, scalar)
    inner = ir.InsertionPoint(body)
    hlo.ReturnOp([hlo.AddOp(body.arguments[0], body.arguments[1], ip=inner).result], ip=inner)
    return red.result


def received_module(text: str, key: Sequence[int] | None = None):
    """(module, tags): ``text`` handing out of ``@main``, for each all_to_all (and
    ragged_all_to_all) in program order, a digest of what each device received from it
    (:func:`_digest`, keyed by ``key``: a fresh one, :func:`new_key`, unless given), summed
    (wrapping) over every time it ran (``Tag(i, 'received')``, carried out of loops, branches,
    calls and shard_maps as the loop counts are): two runs of this module whose results a
    device received from the exchanges differ give it different digests (but for a 2**-32
    chance). Digests of two modules are comparable only when both were made with one key."""
    ctx, module = _parse(text)
    with ctx, ir.Location.unknown():
        tags = _weigh_exchanges(module, new_key() if key is None else key)
        if not module.operation.verify():
            raise LoopCountError("the program weighing its all_to_alls does not verify")
    return module, tags


def _weigh_exchanges(module, key: Sequence[int]) -> list:
    """Add :func:`received_module`'s digests (keyed by ``key``) to ``module`` (in its context),
    handed out of ``@main`` after the results it has: their tags."""
    sums = []
    for op in _exchanges(module):
        ip = ir.InsertionPoint.after(op)
        total, start = None, 0
        for r in op.results:
            s = _digest(r, key, ip, start)
            start += int(np.prod(ir.RankedTensorType(r.type).shape, dtype=np.int64)) * 2
            total = s if total is None else hlo.AddOp(total, s, ip=ip).result
        sums.append(total)
    esc = _Escaper(module)
    for i, s in enumerate(sums):
        esc.escape(s, Tag(i, "received"))
    return esc.tags
