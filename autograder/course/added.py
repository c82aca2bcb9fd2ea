"""Communication the compiler adds to a shard_map program: what the StableHLO reading cannot see.

The structure rules read the collectives a student *wrote* (:mod:`autograder.core.stablehlo`).
GSPMD adds its own where the program asks for a layout change outside the manual region: a
``shard_map`` whose ``in_specs`` replicate an axis the argument is sharded over gathers it at the
boundary (``P(None, None, 'Y')`` for weights sharded over X gathers every expert onto every
device), and global-view code around the ``shard_map`` reshards whatever it touches. None of it
is in the StableHLO; all of it is in the compiled module.

A collective of the compiled module is the student's when XLA kept the name of the ``jax.lax``
collective that made it (its ``op_name`` is a path ending in ``ppermute``, ``all_gather``, ...);
every other one was added by the compiler, named after the op that needed it
(``jit(f)/shard_map``, or on newer JAX the argument it gathers: a bare name, never taken for a
collective's, since an argument may be called ``ppermute``). This
module returns those as :class:`~autograder.core.program.Op` (per device, kind, mesh axes,
bytes; ``count`` 1, or None inside a loop, whose trip count is not read here) for the rules to
weigh.
"""
from __future__ import annotations

import re

import numpy as np

from ..core.program import Op
from ..tpumodel.hlo import COLLECTIVES, Shape, device_groups, parse_module, source_target_pairs

#: the last name of a collective's ``op_name`` when a ``jax.lax`` collective wrote it
WRITTEN = {"ppermute", "psum", "pmax", "pmin", "all_gather", "all_gather_invariant",
           "reduce_scatter", "psum_scatter", "all_to_all", "ragged_all_to_all", "psend",
           "precv", "pbroadcast", "psum_invariant"}
#: HLO opcode -> the kind the rules know
KINDS = {"all-gather": "all_gather", "all-reduce": "psum", "reduce-scatter": "psum_scatter",
         "all-to-all": "all_to_all", "collective-permute": "ppermute",
         "collective-broadcast": "collective_broadcast", "ragged-all-to-all": "ragged_all_to_all"}
_OP_NAME = re.compile(r'op_name="([^"]*)"')
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


def added_collectives(text: str, mesh_shape: tuple[int, ...],
                      axis_names: tuple[str, ...]) -> list[Op]:
    """The collectives of compiled module ``text`` that no ``jax.lax`` collective wrote (see the
    module doc), on a mesh of ``mesh_shape`` named ``axis_names``."""
    if not text or not any(op in text for op in COLLECTIVES):
        return []
    comps, entry = parse_module(text)
    loops = _in_loops(comps, entry)
    shape = tuple(int(s) for s in mesh_shape)
    n = int(np.prod(shape, dtype=np.int64))
    found: list[Op] = []
    for comp in comps.values():
        types = {i.name: i.type for i in comp.instrs}
        for ins in comp.instrs:
            opcode = ins.opcode[:-len("-start")] if ins.opcode.endswith("-start") else ins.opcode
            if opcode not in COLLECTIVES:
                continue
            m = _OP_NAME.search(ins.attrs.get("metadata", ""))
            if m and "/" in m.group(1) and m.group(1).rsplit("/", 1)[-1] in WRITTEN:
                continue  # a path ending in a collective (a bare name may be an argument's)
            if opcode == "collective-permute":
                pairs = source_target_pairs(ins.attrs)
                coords = [np.array(np.unravel_index([s, d], shape)).T for s, d in pairs
                          if max(s, d) < n]
            else:
                coords = [np.array(np.unravel_index(g, shape)).T
                          for g in device_groups(ins.attrs, n, shape) if g and max(g) < n]
            axes = _axes(coords, axis_names)
            if not axes:
                continue  # among one device: nothing moves
            ins_shapes = [s for o in ins.operands for s in _shapes(types.get(o))]
            outs = _shapes(ins.type)
            found.append(Op(
                prim=f"{opcode} added by XLA ({m.group(1) if m else 'unnamed'})",
                kind=KINDS.get(opcode, opcode), axes=axes,
                in_shapes=tuple(s.dims for s in ins_shapes),
                out_shapes=tuple(s.dims for s in outs),
                in_bytes=sum(s.nbytes for s in ins_shapes),
                out_bytes=sum(s.nbytes for s in outs),
                count=None if loops.get(comp.name) else 1, loop_depth=0, in_shard_map=False,
                index=len(found)))
    return found
