"""The floor under the model's compute: XLA's own FLOP count of the program it compiled.

The model prices a program op by op (:mod:`.cost`); an op it prices below what it computes would
make a program look cheap. XLA counts the work of every compiled program too
(``compiled.cost_analysis()``), by rules of its own. The model's count must be at least XLA's;
where it is lower, the model's compute is scaled up to XLA's count, and the speed message says so.

Like is compared with like. XLA's count (on XLA:CPU, of the partitioned module) is one device's,
and counts a while loop's body and condition once, not once per trip; a conditional counts its
dearest branch. :func:`static_work` counts the model's figures the same way, off the same
partitioned module the model reads: the matmul FLOPs of every dot and the vector operations of
every elementwise op and reduction (:func:`.cost.node_work`), each op of each computation once,
scalar arithmetic included (one operation each: XLA counts it, and the model evaluates it
exactly and charges nothing for it, so leaving it out would let XLA's count of a loop counter
exceed the model's), and the reduction an all-reduce carries (one operation per element, as XLA
counts it; the model prices it with the transfer).

XLA:CPU's count is not exactly the TPU's work either: it pads a reduction to a power of two,
counts a cumsum as its log-step scan, a sort as n log n comparisons and an argmax's reducer op by
op. On every reference answer and honest fixture of the course (at the speed case) those add at
most 3.2% to the model's count (ps2's moe_jit with a cumsum), so the floor applies where XLA counts
more than :data:`SLACK` above the model: a program can hide at most that much work, and an honest
one is never scaled for XLA's own rewrites. Where it applies, all of XLA's count is used.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .cost import HEAVY, VECTOR, dot_flops, vector_ops
from .hlo import Computation, Shape, parse_module

#: how far XLA's count may exceed the model's before the floor applies (see the docstring)
SLACK = 0.05
#: collectives that reduce as they move: one operation per element of their operand
_REDUCING = {"all-reduce"}


@dataclass(frozen=True)
class Floor:
    """The two counts of one program, per device, each loop body once: ``model`` (the model's
    rules, :func:`static_work`) and ``xla`` (``compiled.cost_analysis()``'s 'flops'; None when
    XLA gave none, said in :attr:`note`)."""

    model: float
    xla: Optional[float]
    note: str = ""

    @property
    def applies(self) -> bool:
        """XLA counts more than :data:`SLACK` above the model: the model's compute is scaled
        by :attr:`factor`."""
        return self.xla is not None and self.xla > self.model * (1.0 + SLACK)

    @property
    def factor(self) -> float:
        return self.xla / max(self.model, 1.0) if self.applies else 1.0

    @property
    def used(self) -> float:
        """The FLOPs the model's time rests on: XLA's count where the floor applies."""
        return self.xla if self.applies else self.model

    def clause(self) -> str:
        """The speed message's clause: both counts, and whether the floor applied."""
        if self.xla is None:
            return (f"the model counts {self.model / 1e9:.4g} GFLOP per device (each loop body "
                    f"once); XLA gave no count to check it against: {self.note}")
        if self.applies:
            return (f"XLA counts {self.xla / 1e9:.4g} GFLOP where the model counted "
                    f"{self.model / 1e9:.4g} (per device, each loop body once); the higher is "
                    "used")
        return (f"per device, each loop body once, the model counts {self.model / 1e9:.4g} "
                f"GFLOP and XLA {self.xla / 1e9:.4g}")

    def to_dict(self) -> dict:
        return {"model": self.model, "xla": self.xla, "applied": self.applies,
                "used": self.used, **({"note": self.note} if self.note else {})}


def xla_flops(compiled) -> tuple[Optional[float], str]:
    """``(flops, note)`` of a compiled executable by XLA's cost analysis: its 'flops' entry (a
    dict, or a list of dicts, one per program, on some JAX versions: the largest is taken).
    ``(None, why)`` when XLA gives no count."""
    try:
        got = compiled.cost_analysis()
    except Exception as e:  # noqa: BLE001 - a backend without a cost analysis
        return None, f"XLA's cost analysis failed ({type(e).__name__}: {str(e)[:120]})"
    entries = got if isinstance(got, (list, tuple)) else [got]
    entries = [d for d in entries if isinstance(d, dict)]
    if not entries:
        return None, f"XLA's cost analysis gave no figures ({type(got).__name__})"
    # XLA leaves out a property it counts none of: a program of transfers alone has no 'flops'
    counts = [max(0.0, float(d.get("flops", 0.0))) for d in entries]
    return max(counts), "" if any("flops" in d for d in entries) else "XLA counts no FLOPs"


def _callees(ins) -> list[str]:
    if ins.opcode in ("call", "fusion", "async-start"):
        c = ins.attrs.get("to_apply") or ins.attrs.get("calls")
        return [c.lstrip("%")] if c else []
    return []


def _shapes(typ) -> list[Shape]:
    if isinstance(typ, list):
        return [s for t in typ for s in _shapes(t)]
    return [typ] if isinstance(typ, Shape) else []


class _Op:
    """An instruction seen as the cost rules see a node (``opcode``, ``out``, ``inputs``'s
    shapes, ``attrs``)."""

    class _In:
        def __init__(self, shape):
            self.shape = shape

    def __init__(self, opcode, out, inputs, attrs):
        self.opcode, self.out, self.attrs = opcode, out, attrs
        self.inputs = [self._In(s) for s in inputs]


def _operand_shapes(ins, types: dict) -> list[Shape]:
    out = []
    for ref in ins.operands:
        base, *path = ref.split("#")
        t = types.get(base)
        for k in path:
            t = t[int(k)] if isinstance(t, list) and int(k) < len(t) else None
        out += _shapes(t) if t is not None else []
    return out


def _work(comps: dict[str, Computation], name: str, memo: dict) -> float:
    if name in memo:
        return memo[name]
    memo[name] = 0.0  # a cycle (never in valid HLO) counts nothing more
    comp = comps[name]
    types = {i.name: i.type for i in comp.instrs}
    total = 0.0
    for ins in comp.instrs:
        op = ins.opcode
        if op == "while":
            total += sum(_work(comps, ins.attrs[k].lstrip("%"), memo)
                         for k in ("condition", "body") if k in ins.attrs)
            continue
        if op == "conditional":
            if "branch_computations" in ins.attrs:
                names = re.findall(r"%?([\w.\-]+)", ins.attrs["branch_computations"].strip("{}"))
            else:
                names = [ins.attrs[k].lstrip("%") for k in ("true_computation",
                                                            "false_computation")]
            total += max((_work(comps, b, memo) for b in names if b in comps), default=0.0)
            continue
        callees = [c for c in _callees(ins) if c in comps]
        if callees:
            total += sum(_work(comps, c, memo) for c in callees)
            continue
        if op.endswith("-start"):
            op = op[: -len("-start")]
        if op in _REDUCING:
            total += sum(float(sh.size) for sh in _operand_shapes(ins, types))
            continue
        out = _shapes(ins.type)
        node = _Op(op, out, _operand_shapes(ins, types), ins.attrs)
        if op in HEAVY:
            total += dot_flops(node)
        elif op in VECTOR:
            total += vector_ops(node)
    memo[name] = total
    return total


def static_work(text: str) -> float:
    """The model's count of a per-device module's work as XLA counts its own: matmul FLOPs plus
    vector operations, each op of each computation once (a loop's body and condition once, a
    conditional's dearest branch, a call's callee at each call)."""
    comps, entry = parse_module(text)
    return _work(comps, entry, {})


def floored(modeled, floor: Floor):
    """``modeled`` (a :class:`.api.Modeled`) with every compute task's time scaled by
    ``floor.factor`` and the program scheduled again, where the floor applies; else itself."""
    from dataclasses import replace

    from .schedule import schedule

    if not floor.applies:
        return modeled
    tasks = [replace(t, duration=t.duration * floor.factor, deps=set(t.deps))
             if t.kind == "compute" else replace(t, deps=set(t.deps))
             for t in modeled.timeline.tasks]
    return replace(modeled, timeline=schedule(tasks))
