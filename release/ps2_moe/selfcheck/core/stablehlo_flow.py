"""The data flow of a read module: which dots', collectives' and arguments' values reach each
recorded op and the outputs (:func:`trace_flow`, :attr:`~autograder.core.program.Op.from_ops`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .stablehlo_ops import ProgramUnreadable, _callee

if TYPE_CHECKING:
    from .stablehlo_walk import _Walker

try:
    from jax._src.lib.mlir import ir
except Exception:  # noqa: BLE001  # reported when a program is read (stablehlo.program_from_mlir)
    pass

_NONE: frozenset = frozenset()


class FlowTooLarge(Exception):
    """The data flow took more steps than :data:`_Flow.MAX_STEPS`."""


class _Flow:
    """Forward data flow over a module, walked as :class:`_Walker` walks it (into calls,
    composites, loop bodies, branches and shard_map bodies): which recorded dots' and
    collectives' results (labelled by their index) and which of ``@main``'s arguments
    (labelled ``-1 - position``) reach each value. A loop's carry takes the union of what
    enters it and what its body returns, until nothing changes; a conditional's results, the
    union of its branches'. Which branch or how many iterations ran does not matter: this is
    what *can* reach an op, the program as written."""

    #: ops visited in all (loops visit their bodies until the carry settles)
    MAX_STEPS = 400_000

    def __init__(self, funcs: dict, keys: dict, labelled: set):
        #: keys: (call ops, op) -> the recorded op's index; labelled: the indices whose
        #: results are followed (the dots and the collectives)
        self.funcs, self.keys, self.labelled = funcs, keys, labelled
        self.inputs: dict[int, frozenset] = {}  # op index -> labels reaching its operands
        self.steps = 0

    def run(self, block, env: dict, sites: tuple) -> list:
        """Walk ``block`` (its arguments already in ``env``); the labels of what it returns."""
        returned: list = []
        for op in block.operations:
            op = op.operation
            self.steps += 1
            if self.steps > self.MAX_STEPS:
                raise FlowTooLarge()
            name = op.name
            ins = [env.get(v, _NONE) for v in op.operands]
            if name in ("stablehlo.return", "func.return", "sdy.return"):
                returned = ins
                continue
            if name in ("func.call", "stablehlo.composite"):
                callee = (_callee(op) if name == "func.call" else
                          ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value)
                body = self.funcs[callee].regions[0].blocks[0]
                outs = self.run(body, dict(zip(body.arguments, ins)), sites + (op,))
            elif name == "stablehlo.while":
                cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
                carried = ins
                while True:
                    for blk in (cond, body):
                        env.update(zip(blk.arguments, carried))
                    self.run(cond, env, sites)
                    back = self.run(body, env, sites)
                    grown = [a | b for a, b in zip(carried, back)]
                    if grown == carried:
                        break
                    carried = grown
                outs = carried
            elif name in ("stablehlo.case", "stablehlo.if"):
                outs = [_NONE] * len(op.results)
                for region in op.regions:
                    back = self.run(region.blocks[0], env, sites)
                    outs = [a | b for a, b in zip(outs, back)]
            elif name == "sdy.manual_computation":
                body = op.regions[0].blocks[0]
                env.update(zip(body.arguments, ins))
                outs = self.run(body, env, sites)
            else:
                labels = _NONE.union(*ins)
                i = self.keys.get((sites, op))
                if i is not None:
                    self.inputs[i] = self.inputs.get(i, _NONE) | labels
                    if i in self.labelled:
                        labels = labels | {i}
                outs = [labels] * len(op.results)
            env.update(zip(op.results, outs))
        return returned


def trace_flow(walker: "_Walker", block, args: list) -> frozenset:
    """Trace the data flow of ``@main`` (its ``block``; ``args``, its arguments as the
    Program lists them) into the ops ``walker`` recorded (:attr:`Op.from_ops`,
    :attr:`Op.from_args`); the labels of the ops whose results reach the outputs. Past
    :data:`_Flow.MAX_STEPS` the program is :class:`ProgramUnreadable`."""
    labelled = {o.index for o in walker.ops if o.kind is not None or o.prim == "dot_general"}
    flow = _Flow(walker.funcs, walker.keys, labelled)
    env = {a: frozenset({-1 - k}) for k, a in enumerate(args)}
    try:
        returned = flow.run(block, env, ())
    except FlowTooLarge:
        raise ProgramUnreadable(
            f"the program is too large for the grader to follow its data from op to op (over "
            f"{_Flow.MAX_STEPS} ops visited); write the computation with fewer ops") from None
    for op in walker.ops:
        labels = flow.inputs.get(op.index, _NONE)
        op.from_ops = frozenset(i for i in labels if i >= 0)
        op.from_args = frozenset(-1 - i for i in labels if i < 0)
    return frozenset(i for t in returned for i in t if i >= 0)
