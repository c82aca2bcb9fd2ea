"""The walk of a module's functions into :class:`~autograder.core.program.Op` records
(:class:`_Walker`): run counts, loop trip counts, and device groups placed on mesh axes."""
from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

from .program import Op, trip_count
from .stablehlo_ops import (_COLLECTIVE_TARGETS, _COLLECTIVES, _POINT_TO_POINT, NUMBER, SEEN,
                            ProgramUnreadable, RunCounts, Tensor, _arg_of, _callee,
                            _called_computations, _moves_data, _producer, _string, _through)

try:
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
except Exception:  # noqa: BLE001  # reported when a program is read (stablehlo.program_from_mlir)
    pass

#: custom calls that run a kernel written by hand (Pallas on TPU or GPU): its own program, which
#: may copy data to other devices where no StableHLO op shows it
_KERNEL_TARGETS = {"tpu_custom_call", "mosaic_gpu", "mosaic_gpu_v2", "__gpu$xla.gpu.triton",
                   "triton_kernel_call"}
_REDUCERS = {"stablehlo.maximum": "pmax", "stablehlo.or": "pmax",
             "stablehlo.minimum": "pmin", "stablehlo.and": "pmin"}
_RENAME = {"stablehlo.dot_general": "dot_general", "stablehlo.dot": "dot_general"}
#: structural ops that are not recorded
_SKIP = {"stablehlo.constant", "stablehlo.return", "func.return", "sdy.return"}
#: GSPMD's shard_map entry (+1) and exit (-1) custom calls, and plain sharding annotations (0)
_GSPMD = {"SPMDFullToShardShape": 1, "SPMDShardToFullShape": -1, "Sharding": 0}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "ne": "ne"}
#: replica groups given as axes of a module mesh (JAX 0.12+):
#: ``#stablehlo.replica_group_mesh_axes<mesh = @mesh_0, axes = [#stablehlo.axis_ref<name = "Y">]>``
_MESH_AXES = re.compile(r"^#stablehlo\.replica_group_mesh_axes<mesh = @([\w.$\-]+), "
                        r"axes = \[(.*)\]>$", re.S)
_AXIS_REF = re.compile(r'#stablehlo\.axis_ref<name = "([^"]+)">')
#: a module mesh: ``#sdy.mesh<["X"=2, "Y"=4]>``, maybe with ``device_ids=[...]``
_MESH_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_DEVICE_IDS = re.compile(r"device_ids\s*=\s*\[([\d,\s]*)\]")


def mesh_axes_groups(text: str, meshes: dict) -> np.ndarray | None:
    """The device groups (one row each) of replica groups written as axes of a module mesh,
    ``#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [...]>``, the ids of a group running
    through the axes in the order named; ``meshes``: name -> :func:`module_mesh`. None for
    anything else (a sub-axis, an unknown mesh or axis)."""
    m = _MESH_AXES.match(text.strip())
    if m is None or meshes.get(m.group(1)) is None:
        return None
    ids, names = meshes[m.group(1)]
    refs = _AXIS_REF.findall(m.group(2))
    if len(refs) != m.group(2).count("#stablehlo.axis_ref") or len(set(refs)) != len(refs) \
            or any(r not in names for r in refs):
        return None
    axes = [names.index(r) for r in refs]
    rest = [a for a in range(ids.ndim) if a not in axes]
    size = int(np.prod([ids.shape[a] for a in axes], dtype=np.int64))
    return np.transpose(ids, rest + axes).reshape(-1, size)


def module_mesh(text: str) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """(device ids shaped like the mesh, axis names) of an ``#sdy.mesh<...>`` attribute."""
    head = text.split("device_ids", 1)[0]
    axes = _MESH_AXIS.findall(head)
    if not axes:
        return None
    shape = tuple(int(n) for _, n in axes)
    size = int(np.prod(shape, dtype=np.int64))
    m = _DEVICE_IDS.search(text)
    ids = (np.array([int(i) for i in m.group(1).split(",") if i.strip()]) if m
           else np.arange(size))
    if ids.size != size:
        return None
    return ids.reshape(shape), tuple(name for name, _ in axes)


def _dot_flops(op, ins: list, outs: list) -> int:
    """FLOPs of one run of a ``dot_general`` (or legacy ``dot``): 2 x the output's elements x
    the size of the contracted dimensions."""
    if not ins or not outs:
        return 0
    lhs = ins[0][0]
    if op.name == "stablehlo.dot_general":
        dims = hlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
        contracted = [lhs[d] for d in dims.lhs_contracting_dimensions]
    else:  # stablehlo.dot: the last dimension of the left operand
        contracted = list(lhs[-1:])
    return int(2 * np.prod(outs[0][0], dtype=np.int64) * np.prod(contracted, dtype=np.int64))


class _Walker:
    """Walks a module's functions into a flat list of :class:`Op` (program order)."""

    def __init__(self, module, mesh_shape, axis_names, counts: RunCounts | None = None):
        self.counts = counts
        self.funcs = {_string(op.operation, "sym_name"): op.operation
                      for op in module.body.operations if op.operation.name == "func.func"}
        # MLIR element type (as text) -> NumPy dtype, inverting JAX's own table
        self.etypes: dict[str, np.dtype] = {}
        for dt, make in mlir._dtype_to_ir_type.items():
            if dt.name != "float0":  # also i1; bool comes next
                self.etypes.setdefault(str(make()), dt)
        self.ops: list[Op] = []
        self.uses_shard_map = False
        self.auto_axes: set[str] = set()
        self.manual_axes: set[str] = set()  # of the shard_maps the walk is inside
        #: the module's meshes (``sdy.mesh @name``): name -> device ids shaped like the mesh,
        #: and its axis names
        self.meshes: dict[str, tuple[np.ndarray, tuple[str, ...]]] = {}
        for op in module.body.operations:
            op = op.operation
            if op.name == "sdy.mesh" and "mesh" in op.attributes:
                mesh = module_mesh(str(op.attributes["mesh"]))
                if mesh is not None:
                    self.meshes[_string(op, "sym_name")] = mesh
        self.axis_names = axis_names
        self.ids = (None if mesh_shape is None else
                    np.arange(int(np.prod(mesh_shape))).reshape(tuple(mesh_shape)))
        self.calls: list[str] = []
        #: the call ops the walk is inside, and each recorded op's place: (those call ops,
        #: the op) -> its index in :attr:`ops` (what :class:`_Flow` labels values with)
        self.sites: list = []
        self.keys: dict = {}

    def tensor(self, t) -> Tensor | None:
        """(shape, bytes, dtype) of a ranked tensor type; None for tokens and tuples."""
        if not isinstance(t, ir.RankedTensorType):
            return None
        dt = self.etypes.get(str(t.element_type), np.dtype(np.uint8))
        shape = tuple(int(d) for d in t.shape)
        size = 0 if any(d < 0 for d in shape) else int(np.prod(shape, dtype=np.int64))
        return shape, size * dt.itemsize, dt

    # -- the walk ---------------------------------------------------------------------------
    def walk(self, block, count: int | None, depth: int, manual: bool,
             data: bool = False) -> None:
        """Walk ``block``, run ``count`` times; ``data``: that count was decided by the data
        (a measured loop whose trip count the program does not state, or a branch), see
        :attr:`~autograder.core.program.Op.data_counted`."""
        gspmd_manual = 0  # open @SPMDFullToShardShape ... @SPMDShardToFullShape spans
        for op in block.operations:
            op = op.operation
            name, inside = op.name, manual or gspmd_manual > 0
            target = _string(op, "call_target_name")
            if name in ("func.call", "stablehlo.composite"):
                # a composite runs its decomposition (XLA inlines it): walked like a call
                callee = (_callee(op) if name == "func.call" else
                          ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value)
                if callee in self.calls or callee not in self.funcs:
                    raise ProgramUnreadable(f"cannot follow the call to @{callee}")
                self.calls.append(callee)
                self.sites.append(op)
                self.walk(self.funcs[callee].regions[0].blocks[0], count, depth, inside, data)
                self.sites.pop()
                self.calls.pop()
            elif name == "stablehlo.while":
                # the condition runs once more per entry than the body
                inner = data
                if self.counts is not None:  # measured: as often per entry as it ran
                    i = self.number(op)
                    trips, entries = self.counts.trips.get(i, 0), self.counts.entries.get(i, 0)
                    sub, test = (None, None) if count is None else (
                        (int(round(count * trips / entries)),
                         int(round(count * (trips + entries) / entries))) if entries else (0, 0))
                    # the program states the trip count only where it can be read from it and
                    # the run agrees; otherwise the data decided it
                    n = self.trip_count(op)
                    inner = data or (entries > 0 and (n is None or n * entries != trips))
                else:
                    n = self.trip_count(op)
                    sub, test = (None, None) if count is None or n is None else (
                        count * n, count * (n + 1))
                self.walk(op.regions[0].blocks[0], test, depth + 1, inside, inner)
                self.walk(op.regions[1].blocks[0], sub, depth + 1, inside, inner)
            elif name in ("stablehlo.case", "stablehlo.if"):
                taken = None
                if self.counts is not None:
                    taken = tuple(self.counts.branches.get(self.number(op), ()))
                    if len(taken) != len(op.regions):
                        taken = (0,) * len(op.regions)  # never reached
                for k, region in enumerate(op.regions):
                    sub = count
                    if taken is not None and count is not None:
                        sub = int(round(count * taken[k] / sum(taken))) if sum(taken) else 0
                    # which branch runs is the data's choice, as far as a message may tell
                    self.walk(region.blocks[0], sub, depth, inside,
                              data or taken is not None)
            elif name == "sdy.manual_computation":
                self.uses_shard_map = True
                outer = self.manual_axes
                if "manual_axes" in op.attributes:  # nested ones add to the enclosing axes
                    self.manual_axes = outer | set(
                        re.findall(r'"([^"]+)"', str(op.attributes["manual_axes"])))
                if self.ids is not None:
                    self.auto_axes.update(a for a, n in zip(self.axis_names, self.ids.shape)
                                          if n > 1 and a not in self.manual_axes)
                self.walk(op.regions[0].blocks[0], count, depth, True, data)
                self.manual_axes = outer
            elif name == "stablehlo.custom_call" and target in _GSPMD:
                step = _GSPMD[target]
                if step or "manual" in _string(op, "mhlo.sharding"):
                    self.uses_shard_map = True
                gspmd_manual = max(0, gspmd_manual + step)
            elif name == "stablehlo.custom_call" and (
                    target in _KERNEL_TARGETS or _called_computations(op)):
                raise ProgramUnreadable(
                    f"a hand-written kernel (custom call {target!r}) runs code of its own, which "
                    f"may send data to other devices where the grader cannot see it; write "
                    f"this exercise with jax.numpy and jax.lax")
            elif name not in _SKIP:
                self.record(op, count, depth, inside, data)

    def record(self, op, count: int | None, depth: int, manual: bool,
               data: bool = False) -> None:
        name = op.name
        prim, kind = _COLLECTIVES.get(name, (_RENAME.get(name, name.split(".", 1)[-1]), None))
        params: dict[str, Any] = {}
        axes: tuple[str, ...] = ()
        if name == "stablehlo.custom_call":
            prim = _string(op, "call_target_name")
            if prim in _COLLECTIVE_TARGETS:
                kind = prim
                axes = self.group_axes(ir.DictAttr(op.attributes["backend_config"])
                                       ["replica_groups"])
        elif name in ("stablehlo.collective_permute", *_POINT_TO_POINT):
            prim, kind = _POINT_TO_POINT.get(name, (prim, kind))
            axes, params["perm"] = self.permute_axes(op.attributes["source_target_pairs"])
        elif kind is not None:
            axes = self.group_axes(op.attributes["replica_groups"])
            if name == "stablehlo.all_reduce":
                reducer = {o.operation.name for o in op.regions[0].blocks[0].operations}
                kind = prim = next((k for r, k in _REDUCERS.items() if r in reducer), "psum")
        if _moves_data(op):  # what unread_transfers looks for
            op.attributes[SEEN] = ir.UnitAttr.get()
        ins = [t for t in (self.tensor(v.type) for v in op.operands) if t]
        outs = [t for t in (self.tensor(r.type) for r in op.results) if t]
        self.keys[(tuple(self.sites), op)] = len(self.ops)
        self.ops.append(Op(
            prim=prim, kind=kind, axes=axes,
            in_shapes=tuple(s for s, _, _ in ins), out_shapes=tuple(s for s, _, _ in outs),
            in_bytes=sum(b for _, b, _ in ins), out_bytes=sum(b for _, b, _ in outs),
            count=count, loop_depth=depth, in_shard_map=manual, params=params,
            index=len(self.ops), data_counted=data,
            flops=_dot_flops(op, ins, outs) if prim == "dot_general" else 0))

    # -- device ids -> mesh axes ------------------------------------------------------------
    def group_axes(self, attr) -> tuple[str, ...]:
        """The mesh axes whose device groups are exactly these ``replica_groups``.

        The smallest such set wins (a size-1 axis adds nothing to a group), named in the order
        the ids run through a group when that tells it, else in mesh order. ("?",) when there
        is no mesh or no set of axes forms these groups (e.g. ``axis_index_groups``)."""
        if self.ids is None:
            return ("?",)
        groups = self.replica_groups(attr)
        if groups is None:
            return ("?",)
        rows = {tuple(int(i) for i in g if i >= 0) for g in groups}
        for r in range(self.ids.ndim + 1):
            for combo in itertools.combinations(range(self.ids.ndim), r):
                if {frozenset(g) for g in self._groups(combo)} != {frozenset(g) for g in rows}:
                    continue
                order = next((o for o in itertools.permutations(combo)
                              if self._groups(o) == rows), combo)
                return tuple(self.axis_names[a] for a in order)
        return ("?",)

    def replica_groups(self, attr) -> np.ndarray | None:
        """The device groups of a ``replica_groups`` attribute, one row per group: a dense
        matrix of ids as it stands, or the groups the named axes of a module mesh form (in the
        order named, as JAX writes them). None when they cannot be told (an unknown mesh, part
        of an axis)."""
        try:
            return np.atleast_2d(np.array(ir.DenseIntElementsAttr(attr)))
        except (TypeError, ValueError):  # not a dense matrix of ids
            return mesh_axes_groups(str(attr), self.meshes)

    def _groups(self, axes: tuple[int, ...]) -> set[tuple[int, ...]]:
        rest = [a for a in range(self.ids.ndim) if a not in axes]
        size = int(np.prod([self.ids.shape[a] for a in axes], dtype=np.int64))
        return {tuple(int(i) for i in g)
                for g in np.transpose(self.ids, rest + list(axes)).reshape(-1, size)}

    def permute_axes(self, attr) -> tuple[tuple[str, ...], tuple[tuple[int, int], ...]]:
        """The axes a collective_permute moves data along (where source and target coordinates
        differ) and its pairs as row-major indices over those axes, like a ppermute's
        ``perm``; without a mesh, ("?",) and the device ids."""
        pairs = np.atleast_2d(np.array(attr)).astype(int)
        if self.ids is None or (pairs.size and pairs.max() >= self.ids.size):
            return ("?",), tuple(dict.fromkeys(tuple(p) for p in pairs.tolist()))
        src, dst = (np.array(np.unravel_index(pairs[:, i], self.ids.shape)) for i in (0, 1))
        moved = [a for a in range(self.ids.ndim) if (src[a] != dst[a]).any()]
        sub = tuple(self.ids.shape[a] for a in moved)
        local = [tuple(int(np.ravel_multi_index(tuple(c[moved, k]), sub)) if moved else 0
                       for c in (src, dst)) for k in range(len(pairs))]
        return tuple(self.axis_names[a] for a in moved), tuple(dict.fromkeys(local))

    def number(self, op) -> int:
        """The loop's or conditional's number (see :func:`control_flow_ops`)."""
        if NUMBER not in op.attributes:
            raise ValueError(f"a {op.name} the counts do not number")
        return int(ir.IntegerAttr(op.attributes[NUMBER]).value)

    # -- while-loop trip counts -------------------------------------------------------------
    def const(self, v) -> int | None:
        """The value of a scalar (or splat) integer constant, or of a float constant that holds
        a whole number, else None (a float counter such as 0.0 < 0.5 is never rounded into a
        count)."""
        p = _producer(_through(v))
        if p is None or p.name != "stablehlo.constant":
            return None
        attr = p.attributes["value"]
        if not isinstance(attr, (ir.DenseIntElementsAttr, ir.DenseFPElementsAttr)) \
                or not attr.is_splat:
            return None
        try:
            value = attr.get_splat_value().value
            if isinstance(value, float) and not value.is_integer():
                return None
            return int(value)
        except (OverflowError, ValueError):  # inf, nan
            return None

    def affine(self, v):
        """``v`` as (root value, offset) through constant adds/subtracts, conversions and calls."""
        off = 0
        for _ in range(64):
            v = _through(v)
            p = _producer(v)
            if p is None:
                break
            if p.name in ("stablehlo.add", "stablehlo.subtract"):
                a, b = p.operands
                sign = 1 if p.name == "stablehlo.add" else -1
                if self.const(b) is not None:
                    off, v = off + sign * self.const(b), a
                    continue
                if sign == 1 and self.const(a) is not None:
                    off, v = off + self.const(a), b
                    continue
            if p.name == "func.call" and _callee(p) in self.funcs:
                block = self.funcs[_callee(p)].regions[0].blocks[0]
                root, o = self.affine(list(block.operations)[-1].operands[v.result_number])
                if _arg_of(root, block) is None:
                    return root, off + o
                off, v = off + o, p.operands[_arg_of(root, block)]
                continue
            break
        return v, off

    def trip_count(self, w) -> int | None:
        """Trip count of a ``stablehlo.while`` counting a carry from a constant to a known bound
        by a constant step, as :func:`autograder.core.program._while_trip_count` reads a jaxpr."""
        cond, body = w.regions[0].blocks[0], w.regions[1].blocks[0]
        cmp = _producer(_through(list(cond.operations)[-1].operands[0]))
        if cmp is None or cmp.name != "stablehlo.compare":
            return None
        op = hlo.ComparisonDirectionAttr(cmp.attributes["comparison_direction"]).value.lower()
        if op not in _FLIP:
            return None
        lhs, rhs = (_through(v) for v in cmp.operands)
        inits, returned = list(w.operands), list(list(body.operations)[-1].operands)

        def step(pos: int) -> int | None:
            root, off = self.affine(returned[pos])
            return off if _arg_of(root, body) == pos else None

        def known(v) -> int | None:
            """A constant (captured from any enclosing scope) or a carry the body never changes."""
            c, pos = self.const(v), _arg_of(v, cond)
            if c is None and pos is not None and step(pos) == 0:
                c = self.const(inits[pos])
            return c

        pos, bound = _arg_of(lhs, cond), known(rhs)
        if pos is None or bound is None or step(pos) in (None, 0):
            pos2, bound2 = _arg_of(rhs, cond), known(lhs)
            if pos2 is not None and bound2 is not None and step(pos2) not in (None, 0):
                pos, bound, op = pos2, bound2, _FLIP[op]
        if pos is None or bound is None:
            return None
        start = self.const(inits[pos])
        return None if start is None else trip_count(op, start, bound, step(pos))
