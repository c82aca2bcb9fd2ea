"""Communication the compiler adds to a shard_map program: what the StableHLO reading cannot see.

The structure rules read the collectives a student *wrote* (:mod:`autograder.core.stablehlo`).
GSPMD adds its own where the program asks for a layout change outside the manual region: a
``shard_map`` whose ``in_specs`` replicate an axis the argument is sharded over gathers it at the
boundary (``P(None, None, 'Y')`` for weights sharded over X gathers every expert onto every
device), and global-view code around the ``shard_map`` reshards whatever it touches. None of it
is in the StableHLO; all of it is in the compiled module.

Which compiled collectives the student wrote is decided by provenance the student cannot name:
the collectives of the written program (its StableHLO) that stand inside a shard_map's manual
region (GSPMD leaves those as they are) and ran, against those of the compiled module. Never by
a name: an ``op_name`` is the student's text (a primitive of their own may be called
``ppermute``, an argument or a ``named_scope`` anything), so nothing here reads one.

Every compiled collective takes its operands' bytes from written collectives of the same kind
(an all-reduce from a ``psum``, ``pmax`` or ``pmin``) over the same mesh axes, one operand at a
time, each from one written collective with that many bytes still unclaimed. That follows what
XLA does to the collectives a program writes, and no more: it merges several into one (the
all-reduce combiner: one operand each), splits one into pieces (an all-to-all into one operand
per peer: each a share of the one written), or drops one whose result is unused (nothing to
claim). A compiled collective that cannot claim all of its bytes is the compiler's: it moves
data the written program does not (a gather at the boundary, a reshard in global-view code,
whatever a primitive's lowering asks GSPMD for). A written collective that never ran (count 0:
a branch never taken, which XLA may fold away) and one outside every manual region (GSPMD
rewrites those) stand for nothing, except that one inside a loop that ran no iteration on the
input (an exchange loop the data ends at once) stands for a compiled collective inside a loop,
which ran no more: where provenance cannot be shown, the collective is XLA's, which the rules
weigh (the worst case for the student).

This module returns the compiler's as :class:`~autograder.core.program.Op` (per device, kind,
mesh axes, bytes; ``count`` 1, or None inside a loop, whose trip count is not read here) for
the rules to weigh.
"""
from __future__ import annotations

import re
from typing import Iterable

import numpy as np

from ..core.program import Op, Program
from ..tpumodel.hlo import COLLECTIVES, Shape, device_groups, parse_module, source_target_pairs

#: HLO opcode -> the kind the rules know
KINDS = {"all-gather": "all_gather", "all-reduce": "psum", "reduce-scatter": "psum_scatter",
         "all-to-all": "all_to_all", "collective-permute": "ppermute",
         "collective-broadcast": "collective_broadcast", "ragged-all-to-all": "ragged_all_to_all"}
#: a written collective's kind (:mod:`autograder.core.stablehlo`) -> the HLO opcode it compiles to
OPCODES = {"ppermute": "collective-permute", "psum": "all-reduce", "pmax": "all-reduce",
           "pmin": "all-reduce", "all_gather": "all-gather", "psum_scatter": "reduce-scatter",
           "all_to_all": "all-to-all", "ragged_all_to_all": "ragged-all-to-all",
           "collective_broadcast": "collective-broadcast"}
#: attributes naming the computations an instruction runs; a while's run as often as it loops
_CALLS = ("calls", "to_apply", "true_computation", "false_computation", "branch_computations")
_LOOP_CALLS = ("body", "condition")


def _shapes(t) -> list[Shape]:
    if isinstance(t, Shape):
        return [t]
    if isinstance(t, list):
        return [s for x in t for s in _shapes(x)]
    return []


def _in_loops(comps: dict, entry: str) -> dict[str, bool]:
    """Computation name -> whether it can run inside a while loop (reached through a body or a
    condition)."""
    seen: set[tuple[str, bool]] = set()
    todo = [(entry, False)]
    while todo:
        name, loop = todo.pop()
        if name not in comps or (name, loop) in seen:
            continue
        seen.add((name, loop))
        for ins in comps[name].instrs:
            for key in _CALLS + _LOOP_CALLS:
                for callee in re.findall(r"%?([\w.\-]+)", ins.attrs.get(key, "").strip("{}")):
                    todo.append((callee, loop or key in _LOOP_CALLS))
    looped = {name for name, loop in seen if loop}
    return {name: name in looped for name, _ in seen}


def _axes(coords: list[np.ndarray], names: tuple[str, ...]) -> tuple[str, ...]:
    """The mesh axes along which the devices of each group (or pair) differ."""
    moved = set()
    for c in coords:
        moved |= {i for i in range(c.shape[1]) if len(set(c[:, i].tolist())) > 1}
    return tuple(names[i] for i in sorted(moved))


def _placed(axes: Iterable[str], names: tuple[str, ...]) -> tuple[str, ...]:
    """``axes`` in mesh order; an axis the mesh does not have (the reader's "?") kept as is, so
    that it matches nothing the compiled module holds."""
    axes = set(axes)
    return tuple(sorted(axes, key=lambda a: (names.index(a) if a in names else len(names), a)))


def written_pool(written: Iterable[Op], axis_names: tuple[str, ...],
                 ran_elsewhere: frozenset = frozenset(), *, idle: bool = False
                 ) -> dict[tuple, list[int]]:
    """``(HLO opcode, mesh axes) -> [bytes of each written collective]``: what the compiled
    module's collectives may claim (see the module doc): the collectives of the written
    program inside a shard_map's manual region that ran (count not 0 here or on other devices,
    ``ran_elsewhere``: their indices; an unknown count counts). ``idle``: instead, those inside
    a loop that ran no iteration on any device (a loop whose trip count the data decides may
    run none on one input): they stand for compiled collectives inside loops only, which then
    ran no more than they did."""
    pool: dict[tuple, list[int]] = {}
    for o in written:
        opcode = OPCODES.get(o.kind or "")
        if opcode is None or not o.in_shard_map:
            continue
        never = o.count == 0 and o.index not in ran_elsewhere
        if never != idle or (idle and not o.loop_depth):
            continue
        pool.setdefault((opcode, _placed(o.axes, axis_names)), []).append(int(o.in_bytes))
    return pool


def _claim(pool: dict[tuple, list[int]], key: tuple, operands: list[int], exact: bool) -> bool:
    """Take each of ``operands``' bytes from one written collective under ``key`` with that
    many still unclaimed (``exact``: exactly that many; else the smallest that holds them, so
    that a bigger one stays for a bigger operand); all or nothing."""
    left = list(pool.get(key, ()))
    for need in sorted(operands, reverse=True):
        fits = [i for i, b in enumerate(left) if (b == need if exact else b >= need)]
        if not fits:
            return False
        i = min(fits, key=lambda j: left[j])
        left[i] -= need
    pool[key] = left
    return True


def _claim_whole(pool: dict[tuple, list[int]], key: tuple, operands: list[int]) -> bool:
    """Take all of ``operands``' bytes from one written collective under ``key`` that has
    exactly that many unclaimed: one written collective XLA split into pieces (an all-to-all
    into one operand per peer), claimed before any piece may be taken from another."""
    left = pool.get(key, [])
    total = sum(operands)
    for i, b in enumerate(left):
        if b == total:
            left[i] = 0
            return True
    return False


def added_by_xla(prog: Program, mesh) -> list[Op]:
    """The collectives XLA adds to ``prog`` (a :class:`~autograder.core.program.Program` read
    with its compiled module) on ``mesh``: :func:`added_collectives`."""
    return added_collectives(prog.compiled_text, tuple(mesh.devices.shape),
                             tuple(str(a) for a in mesh.axis_names), prog.ops,
                             prog.ran_elsewhere)


def added_collectives(text: str, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...],
                      written: Iterable[Op], ran_elsewhere: frozenset = frozenset()
                      ) -> list[Op]:
    """The collectives of compiled module ``text`` that the written program's collectives
    (``written``: the ops of its :class:`~autograder.core.program.Program`, read from the
    StableHLO; ``ran_elsewhere``: see :func:`written_pool`) do not account for (see the module
    doc), on a mesh of ``mesh_shape`` named ``axis_names``."""
    if not text or not any(op in text for op in COLLECTIVES):
        return []
    names = tuple(str(a) for a in axis_names)
    pool = written_pool(written, names, ran_elsewhere)
    comps, entry = parse_module(text)
    loops = _in_loops(comps, entry)
    shape = tuple(int(s) for s in mesh_shape)
    n = int(np.prod(shape, dtype=np.int64))
    met: list[tuple] = []  # (instruction, its computation, opcode, axes, operand shapes)
    for comp in comps.values():
        types = {i.name: i.type for i in comp.instrs}
        for ins in comp.instrs:
            opcode = ins.opcode[:-len("-start")] if ins.opcode.endswith("-start") else ins.opcode
            if opcode not in COLLECTIVES:
                continue
            if opcode == "collective-permute":
                pairs = source_target_pairs(ins.attrs)
                coords = [np.array(np.unravel_index([s, d], shape)).T for s, d in pairs
                          if max(s, d) < n]
            else:
                coords = [np.array(np.unravel_index(g, shape)).T
                          for g in device_groups(ins.attrs, n, shape) if g and max(g) < n]
            axes = _axes(coords, names)
            if not axes:
                continue  # among one device: nothing moves
            met.append((ins, comp, opcode, axes,
                        [s for o in ins.operands for s in _shapes(types.get(o))]))
    # those the written program sent as they are first, then those XLA split into pieces (all
    # of one written collective), then those it merged or split otherwise
    met = [m for m in met if not _claim(pool, (m[2], m[3]), [s.nbytes for s in m[4]], True)]
    met = [m for m in met if not _claim_whole(pool, (m[2], m[3]), [s.nbytes for s in m[4]])]
    met = [m for m in met if not _claim(pool, (m[2], m[3]), [s.nbytes for s in m[4]], False)]
    # a collective inside a loop that ran no iteration on this input (an exchange loop with
    # nothing left to send) compiles to one inside a loop: it stands for that one alone
    idle = written_pool(written, names, ran_elsewhere, idle=True)
    for exact in (True, False):
        met = [m for m in met if not (loops.get(m[1].name) and _claim(
            idle, (m[2], m[3]), [s.nbytes for s in m[4]], exact))]
    found: list[Op] = []
    for ins, comp, opcode, axes, ins_shapes in met:
        outs = _shapes(ins.type)
        found.append(Op(
            prim=f"{opcode} added by XLA", kind=KINDS.get(opcode, opcode), axes=axes,
            in_shapes=tuple(s.dims for s in ins_shapes),
            out_shapes=tuple(s.dims for s in outs),
            in_bytes=sum(s.nbytes for s in ins_shapes),
            out_bytes=sum(s.nbytes for s in outs),
            count=None if loops.get(comp.name) else 1, loop_depth=0, in_shard_map=False,
            index=len(found)))
    return found
