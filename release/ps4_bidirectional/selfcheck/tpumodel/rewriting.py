"""The MLIR rewriting the counting, pinned and digest programs share: a module parsed for a
rewrite, ops copied with more operands and results, and values carried out of nested regions to
new results of ``@main`` (:class:`_Escaper`, each described by a :class:`Tag`)."""
from __future__ import annotations

import dataclasses
import re
from typing import Sequence

import numpy as np

from ..core.stablehlo import ProgramUnreadable, calls_for_composites, one_callee_per_call
from .hlo import ModelError

try:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    _BINDINGS_ERROR: Exception | None = None
except Exception as e:  # noqa: BLE001  # reported when used, never silently
    _BINDINGS_ERROR = e


class LoopCountError(ModelError):
    """The program's loops could not be counted or pinned (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Tag:
    """What one extra result of a counting program holds: loop ``loop``'s iterations summed
    over its entries (``kind='trips'``), how many times it was entered (``'entries'``), its
    most iterations in one entry (``'most'``), or how many times branch ``branch`` of
    conditional ``loop`` ran (``'branch'``), or the digest of what all_to_all ``loop``
    delivered (``'received'``, :func:`received_module`). ``manual``: the
    mesh axes of the shard_map it came out of (one entry per device along them), if any."""

    loop: int
    kind: str
    branch: int = 0
    manual: tuple = ()


# -- small MLIR helpers ------------------------------------------------------------------------

def _i32():
    return ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))


def _const(value: int, typ, ip):
    attr = ir.DenseElementsAttr.get_splat(typ, ir.IntegerAttr.get(typ.element_type, value))
    return hlo.ConstantOp(attr, ip=ip).result


def _attributes(op) -> dict:
    named = (op.attributes[i] for i in range(len(op.attributes)))
    return {a.name: a.attr for a in named}


def _replace(op, extra_operands: Sequence = (), extra_types: Sequence = ()):
    """A copy of ``op`` with more operands and results, taking over its regions and uses."""
    attrs = _attributes(op)
    op = op.operation
    new = ir.Operation.create(op.name, results=[r.type for r in op.results] + list(extra_types),
                              operands=list(op.operands) + list(extra_operands),
                              attributes=attrs, regions=len(op.regions), loc=op.location,
                              ip=ir.InsertionPoint(op))
    for i, region in enumerate(op.regions):
        for block in list(region.blocks):
            block.append_to(new.regions[i])
    for old, now in zip(op.results, new.results):
        old.replace_all_uses_with(now)
    op.erase()
    return new


def _set_terminator(block, operands: list) -> None:
    """Replace ``block``'s terminator by one of the same kind returning ``operands``."""
    term = block.operations[len(block.operations) - 1]
    attrs = _attributes(term)
    ir.Operation.create(term.name, results=[], operands=operands, attributes=attrs,
                        loc=term.location, ip=ir.InsertionPoint(term))
    term.erase()


def _terminator(block):
    return block.operations[len(block.operations) - 1]


# -- escaping a value to @main -----------------------------------------------------------------

class _Escaper:
    """Carries scalar counts out of nested regions to new results of ``@main``."""

    def __init__(self, module):
        self.module = module
        self.tags: list[Tag] = []
        self.meshes = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "sdy.mesh":
                name = str(ir.StringAttr(op.attributes["sym_name"]).value)
                self.meshes[name] = [(a, int(n)) for a, n in
                                     re.findall(r'"([^"]+)"\s*=\s*(\d+)', str(op.attributes["mesh"]))]

    def escape(self, value, tag: Tag) -> None:
        owner = value.owner
        block = owner if isinstance(owner, ir.Block) else owner.operation.block
        parent = block.owner.operation
        name = parent.name
        if name == "func.func":
            self._out_of_func(parent, block, value, tag)
        elif name == "stablehlo.while":
            self._out_of_while(parent, block, value, tag)
        elif name in ("stablehlo.case", "stablehlo.if"):
            self._out_of_branches(parent, block, value, tag)
        elif name == "sdy.manual_computation":
            self._out_of_shard_map(parent, value, tag)
        else:
            raise LoopCountError(f"a loop inside {name} cannot be counted")

    def _out_of_func(self, fn, block, value, tag):
        _set_terminator(block, list(_terminator(block).operands) + [value])
        ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
        fn.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get(list(ftype.inputs), list(ftype.results) + [value.type]))
        if "res_attrs" in fn.attributes:
            old = ir.ArrayAttr(fn.attributes["res_attrs"])
            fn.attributes["res_attrs"] = ir.ArrayAttr.get(
                [old[i] for i in range(len(old))] + [ir.DictAttr.get({})])
        sym = str(ir.StringAttr(fn.attributes["sym_name"]).value)
        if sym == "main":
            self.tags.append(tag)
            return
        calls = []

        def visit(op):
            op = op.operation
            if op.name == "func.call" and \
                    str(ir.FlatSymbolRefAttr(op.attributes["callee"]).value) == sym:
                calls.append(op)
            return ir.WalkResult.ADVANCE

        self.module.operation.walk(visit)
        for call in calls:
            new = _replace(call, [], [value.type])
            self.escape(new.results[len(new.results) - 1], tag)

    def _out_of_while(self, op, block, value, tag):
        if block == op.regions[0].blocks[0]:
            raise LoopCountError("a loop inside a loop's condition cannot be counted")
        typ = value.type
        zero = _const(0, typ, ir.InsertionPoint(op))
        new = _replace(op, [zero], [typ])
        cond, body = new.regions[0].blocks[0], new.regions[1].blocks[0]
        cond.add_argument(typ, new.location)
        acc = body.add_argument(typ, new.location)
        ip = ir.InsertionPoint(_terminator(body))
        total = (hlo.MaxOp if tag.kind == "most" else hlo.AddOp)(acc, value, ip=ip).result
        _set_terminator(body, list(_terminator(body).operands) + [total])
        self.escape(new.results[len(new.results) - 1], tag)

    def _out_of_branches(self, op, block, value, tag):
        typ = value.type
        new = _replace(op, [], [typ])
        for region in new.regions:
            b = region.blocks[0]
            v = value if b == block else _const(0, typ, ir.InsertionPoint(_terminator(b)))
            _set_terminator(b, list(_terminator(b).operands) + [v])
        self.escape(new.results[len(new.results) - 1], tag)

    def _out_of_shard_map(self, op, value, tag):
        """Inside, the count is this device's; outside, one entry per device along the manual
        axes (the busiest device is read later). A count already carried out of an inner
        shard_map is a vector over the inner axes: outside this one it becomes one row per
        position along this one's axes, flattened (outer axes major, as :class:`Tag` lists
        them), so nested shard_maps are counted like any other region."""
        manual = re.findall(r'"([^"]+)"', str(op.attributes["manual_axes"]))
        shardings = str(op.attributes["out_shardings"])
        m = re.search(r"@([\w.$\-]+)", str(op.attributes["in_shardings"])) or \
            re.search(r"@([\w.$\-]+)", shardings)
        sizes = dict(self.meshes.get(m.group(1), [])) if m else {}
        if any(a not in sizes for a in manual) or set(manual) & set(tag.manual):
            raise LoopCountError("the shard_map's mesh could not be read")
        n = int(np.prod([sizes[a] for a in manual], dtype=np.int64))
        inner = [int(d) for d in ir.RankedTensorType(value.type).shape]  # [] or [m]
        i32 = ir.IntegerType.get_signless(32)
        block = op.regions[0].blocks[0]
        ip = ir.InsertionPoint(_terminator(block))
        one = hlo.ReshapeOp(ir.RankedTensorType.get([1] + inner, i32), value, ip=ip).result
        _set_terminator(block, list(_terminator(block).operands) + [one])
        new = _replace(op, [], [ir.RankedTensorType.get([n] + inner, i32)])
        axes = ", ".join(f'"{a}"' for a in manual)
        dims = ", ".join([f"{{{axes}}}"] + ["{}"] * len(inner))
        spec = f'<@{m.group(1)}, [{dims}]>'
        text = re.sub(r"\]>\s*$", f", {spec}]>", shardings) if "<@" in shardings else \
            f"#sdy.sharding_per_value<[{spec}]>"
        new.attributes["out_shardings"] = ir.Attribute.parse(text)
        out = new.results[len(new.results) - 1]
        if inner:  # [n, m] -> [n * m]
            flat = ir.RankedTensorType.get([n * int(np.prod(inner, dtype=np.int64))], i32)
            out = hlo.ReshapeOp(flat, out, ip=ir.InsertionPoint.after(new)).result
        self.escape(out, dataclasses.replace(tag, manual=tuple(manual) + tuple(tag.manual)))


# -- a module to rewrite -----------------------------------------------------------------------

def _parse(text: str):
    """(context, module) of ``text``, its composites already plain calls and every call site of
    a function with loops or branches calling its own copy (what both rewrites and the reader
    start from: :func:`~autograder.core.stablehlo.one_callee_per_call`)."""
    if _BINDINGS_ERROR is not None:
        raise LoopCountError(f"the MLIR bindings of jaxlib are not usable: {_BINDINGS_ERROR}")
    ctx = mlir.make_ir_context()
    module = ir.Module.parse(text, context=ctx)
    with ctx:
        calls_for_composites(module)
        try:
            one_callee_per_call(module)
        except ProgramUnreadable as e:
            raise LoopCountError(str(e)) from None
    return ctx, module
