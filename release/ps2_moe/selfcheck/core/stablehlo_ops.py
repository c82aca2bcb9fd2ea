"""The StableHLO reader's vocabulary: the op tables, :class:`ProgramUnreadable`,
:class:`RunCounts` and the small op accessors its modules (:mod:`.stablehlo` and its walk, flow and
call rewrites) share."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

try:
    from jax._src.lib.mlir import ir
except Exception:  # noqa: BLE001  # reported when a program is read (stablehlo.program_from_mlir)
    pass

#: StableHLO op -> (jaxpr-like primitive, collective kind); all_reduce is refined by its reducer.
_COLLECTIVES = {"stablehlo.collective_permute": ("ppermute", "ppermute"),
                "stablehlo.all_gather": ("all_gather", "all_gather"),
                "stablehlo.all_reduce": ("psum", "psum"),
                "stablehlo.reduce_scatter": ("reduce_scatter", "psum_scatter"),
                "stablehlo.all_to_all": ("all_to_all", "all_to_all"),
                "stablehlo.collective_broadcast": ("pbroadcast", "collective_broadcast")}
#: point-to-point transfers (``jax.lax.psend``/``precv``, GPU only): read like a permute
_POINT_TO_POINT = {"stablehlo.send": ("psend", "send"), "stablehlo.recv": ("precv", "recv")}
#: custom calls that move data between devices, by target
_COLLECTIVE_TARGETS = {"ragged_all_to_all"}
#: ops a loop counter or bound may pass through unchanged in value
_PASS = {"stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim"}

Tensor = tuple[tuple[int, ...], int, np.dtype]  # shape, bytes, dtype

#: the discardable attribute that numbers a module's loops and conditionals while it is walked
NUMBER = "autograder.n"
#: the discardable attribute that marks each op moving data between devices that the walk read
SEEN = "autograder.seen"


class ProgramUnreadable(ValueError):
    """The program holds something whose communication the reader cannot account for (a
    hand-written kernel, a collective where no walk of the program reaches it): the structure
    rules cannot judge it, and the check fails saying why, never passes on what it cannot see."""


@dataclass(frozen=True)
class RunCounts:
    """What one run of a program counted on one device. Loops and conditionals are numbered in
    the order :func:`control_flow_ops` finds them; ``trips[i]``: loop i's iterations summed over
    all its entries, ``entries[i]``: how many times it was entered; ``branches[j]``: how many
    times each branch of conditional j ran."""

    trips: dict = field(default_factory=dict)
    entries: dict = field(default_factory=dict)
    branches: dict = field(default_factory=dict)

    def key(self) -> tuple:
        return (tuple(sorted(self.trips.items())), tuple(sorted(self.entries.items())),
                tuple(sorted((k, tuple(v)) for k, v in self.branches.items())))


def _moves_data(op) -> bool:
    """Whether ``op`` sends data to other devices (a collective or a point-to-point transfer)."""
    return op.name in _COLLECTIVES or op.name in _POINT_TO_POINT or (
        op.name == "stablehlo.custom_call"
        and _string(op, "call_target_name") in _COLLECTIVE_TARGETS)


def _producer(v):
    return v.owner.operation if isinstance(v, ir.OpResult) else None


def _through(v):
    """Follow ``v`` back through conversions, reshapes and scalar broadcasts."""
    for _ in range(32):
        p = _producer(v)
        if p is None or p.name not in _PASS:
            break
        v = p.operands[0]
    return v


def _arg_of(v, block) -> int | None:
    """The position of ``v`` among ``block``'s arguments, None if it is not one of them."""
    return v.arg_number if isinstance(v, ir.BlockArgument) and v.owner == block else None


def _callee(op) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def _called_computations(op) -> list:
    """The functions a custom call names to run (empty for a plain library call)."""
    if "called_computations" not in op.attributes:
        return []
    return list(ir.ArrayAttr(op.attributes["called_computations"]))


def _string(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else ""
