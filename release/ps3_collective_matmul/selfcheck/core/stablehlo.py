"""A student's program read from a ``jax.export`` artifact's StableHLO instead of a jaxpr.

The trusted grader never runs student code: it walks the deserialized artifact's StableHLO (with
jaxlib's MLIR bindings) into the :class:`~autograder.core.program.Program` the jaxpr walker builds, so
every structure rule works unchanged. The walk starts at ``@main`` and follows ``func.call``,
``stablehlo.composite`` decompositions (XLA inlines and runs them), ``while`` bodies and
conditions (times their trip count when it can be read), ``case``/``if`` branches and
shard_map bodies (``sdy.manual_computation``, or GSPMD's ``@SPMDFullToShardShape`` custom calls).
Every op that moves data between devices (collectives, broadcasts, point-to-point sends) must be
reached by that walk: one it does not reach (inside a reduction's body, say), or a hand-written
kernel (a Pallas custom call, whose own code may copy data anywhere), makes the program
:class:`ProgramUnreadable`, and the structure check fails saying so.
Collectives name devices by logical mesh index (row-major over ``mesh_shape``), or (newer JAX)
name the axes of a mesh the module declares (``#stablehlo.replica_group_mesh_axes``); either way
they are turned into device groups and mapped back to mesh axes the same way. Unlike the jaxpr:
an unrolled scan is straight-line code; a collective over size-1 axes may vanish, as does a
zero-trip loop; ``ragged_dot`` becomes ``dot_general``; and ``shard_map_check_vma`` is unknown.

The walk also follows the data (:func:`trace_flow`): for each op, which dots' and collectives'
results and which of ``@main``'s arguments reach its operands, and which results reach the
outputs (:attr:`~autograder.core.program.Op.from_ops`), so that a rule can weigh what an op
contributes, not only that it ran.

How often each op runs is *measured* where the grader can: given the :class:`RunCounts` of one
device (what a run of the same program on the grading input counted, see
:func:`autograder.tpumodel.loops.device_counts`), a loop's body runs as often as it did, and each
branch of a conditional as often as it was taken (a branch never taken runs 0 times). Without
counts, a loop's trip count is read symbolically where the program makes it plain (a counter
from a constant to a constant by a constant step, integers only) and is unknown (None) otherwise,
and every branch is walked as if it ran.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .program import Op, Program, trip_count

try:
    from jax._src.dtypes import short_dtype_name
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    _BINDINGS_ERROR: Exception | None = None
except Exception as e:  # noqa: BLE001  # reported when a program is read, never silently
    _BINDINGS_ERROR = e

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
#: ops a loop counter or bound may pass through unchanged in value
_PASS = {"stablehlo.convert", "stablehlo.reshape", "stablehlo.broadcast_in_dim"}
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "ne": "ne"}
#: replica groups given as axes of a module mesh (JAX 0.12+):
#: ``#stablehlo.replica_group_mesh_axes<mesh = @mesh_0, axes = [#stablehlo.axis_ref<name = "Y">]>``
_MESH_AXES = re.compile(r"^#stablehlo\.replica_group_mesh_axes<mesh = @([\w.$\-]+), "
                        r"axes = \[(.*)\]>$", re.S)
_AXIS_REF = re.compile(r'#stablehlo\.axis_ref<name = "([^"]+)">')
#: a module mesh: ``#sdy.mesh<["X"=2, "Y"=4]>``, maybe with ``device_ids=[...]``
_MESH_AXIS = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_DEVICE_IDS = re.compile(r"device_ids\s*=\s*\[([\d,\s]*)\]")

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


def control_flow_ops(root) -> tuple[list, list]:
    """(loops, conditionals) of a module or op, each in pre-order: the numbering that
    :class:`RunCounts` and the counting program share."""
    loops, conds = [], []

    def visit(op):
        if op.name == "stablehlo.while":
            loops.append(op.operation)
        elif op.name in ("stablehlo.case", "stablehlo.if"):
            conds.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return loops, conds


#: the most functions :func:`one_callee_per_call` may add (a program calling helpers with loops
#: or branches inside helpers so often that each call site's copy would not fit is unreadable)
MAX_CALL_SITES = 2000


def calls_for_composites(module) -> None:
    """Turn every ``stablehlo.composite`` into a plain ``func.call`` of its decomposition (what
    XLA runs), so that a composite is counted and read the way any called function is."""
    found = []

    def visit(op):
        if op.operation.name == "stablehlo.composite":
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        call = ir.Operation.create("func.call", results=[r.type for r in op.results],
                                   operands=list(op.operands),
                                   attributes={"callee": ir.FlatSymbolRefAttr.get(callee)},
                                   loc=op.location, ip=ir.InsertionPoint(op))
        for old, now in zip(op.results, call.results):
            old.replace_all_uses_with(now)
        op.erase()


def one_callee_per_call(module) -> None:
    """Give every call of a function that holds a loop or a conditional (itself or in what it
    calls) its own copy of that function, so that a run counts each call site's loops and
    branches apart. A helper jitted once and called from three places is one function in
    StableHLO: counted together, its branch taken once in three calls could not be told apart
    from one taken in every call, and the reader could only share the count out by a guess.

    Run after :func:`calls_for_composites`, on the module both the counting program and the
    reader start from, so that both number the loops and conditionals the same way. Raises
    :class:`ProgramUnreadable` for a recursive call or past :data:`MAX_CALL_SITES` copies."""
    funcs = {_string(op.operation, "sym_name"): op.operation
             for op in module.body.operations if op.operation.name == "func.func"}
    steered: dict[str, bool] = {}

    def calls_in(fn) -> list:
        found = []

        def visit(op):
            if op.operation.name == "func.call":
                found.append(op.operation)
            return ir.WalkResult.ADVANCE

        fn.walk(visit, ir.WalkOrder.PRE_ORDER)
        return found

    def is_steered(name: str, stack: tuple = ()) -> bool:
        if name in stack:
            raise ProgramUnreadable(f"a recursive call to @{name}")
        if name not in steered:
            fn = funcs.get(name)
            if fn is None:
                raise ProgramUnreadable(f"cannot follow the call to @{name}")
            loops, conds = control_flow_ops(fn)
            steered[name] = bool(loops or conds) or any(
                is_steered(_callee(c), stack + (name,)) for c in calls_in(fn))
        return steered[name]

    used: set[str] = set()
    added = 0
    todo = [funcs["main"]] if "main" in funcs else []
    while todo:
        fn = todo.pop()
        for call in calls_in(fn):
            name = _callee(call)
            if not is_steered(name):
                continue
            if name in used:
                added += 1
                if added > MAX_CALL_SITES:
                    raise ProgramUnreadable(
                        f"functions holding loops or branches are called from over "
                        f"{MAX_CALL_SITES} places; call such helpers fewer times")
                copy = funcs[name].clone(ip=ir.InsertionPoint(module.body))
                new = f"{name}__site{added}"
                while new in funcs:
                    new += "_"
                copy.attributes["sym_name"] = ir.StringAttr.get(new)
                funcs[new] = copy
                steered[new] = True
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(new)
                name = new
            used.add(name)
            todo.append(funcs[name])


def has_control_flow(text: str) -> bool:
    """Whether a StableHLO module holds a loop or a conditional (whose counts a run tells)."""
    return any(w in text for w in ("stablehlo.while", "stablehlo.case", "stablehlo.if"))


def program_from_exported(exported, axis_names: tuple[str, ...] = ("X", "Y"),
                          mesh_shape: tuple[int, ...] | None = None,
                          compiled_text: str = "", counts: RunCounts | None = None) -> Program:
    """The :class:`Program` of a ``jax.export.Exported`` (e.g. from ``jax.export.deserialize``).

    Argument and result info come from ``exported.in_avals``/``out_avals``: the module itself
    may have dropped unused arguments. ``counts``: what a run counted on one device (see the
    module doc)."""
    prog = program_from_mlir(exported.mlir_module(), mesh_shape, tuple(axis_names), compiled_text,
                             counts)
    def info(avals) -> tuple:
        return tuple((tuple(a.shape), np.dtype(a.dtype).itemsize) for a in avals)

    prog.arg_info, prog.out_info = info(exported.in_avals), info(exported.out_avals)
    prog.arg_dtypes = tuple(short_dtype_name(a.dtype) for a in exported.in_avals)
    return prog


def program_from_mlir(text: str, mesh_shape: tuple[int, ...] | None,
                      axis_names: tuple[str, ...], compiled_text: str = "",
                      counts: RunCounts | None = None) -> Program:
    """The :class:`Program` of a StableHLO module given as text (its ``@main`` function).

    Without ``mesh_shape`` the axes of every collective are ("?",)."""
    if _BINDINGS_ERROR is not None:
        raise RuntimeError(f"the MLIR bindings of jaxlib are not usable: {_BINDINGS_ERROR}")
    ctx = mlir.make_ir_context()
    module = ir.Module.parse(text, context=ctx)
    with ctx:
        if counts is not None:  # numbered as the counting program numbers them
            calls_for_composites(module)
            one_callee_per_call(module)
            i32 = ir.IntegerType.get_signless(32)
            for ops in control_flow_ops(module):
                for i, op in enumerate(ops):
                    op.attributes[NUMBER] = ir.IntegerAttr.get(i32, i)
        walker = _Walker(module, mesh_shape, tuple(axis_names), counts)
        main = walker.funcs.get("main")
        if main is None:
            raise ValueError("the StableHLO module has no func.func @main")
        block = main.regions[0].blocks[0]
        walker.walk(block, count=1, depth=0, manual=False)
        unread = unread_transfers(module)
        if unread:
            raise ProgramUnreadable(
                f"the program moves data between devices where the grader cannot follow it "
                f"({unread[0]}); write the communication with jax.lax collectives in the body "
                f"of your function, its loops and its branches")
        attrs = main.attributes["arg_attrs"] if "arg_attrs" in main.attributes else None
        args = [walker.tensor(a.type) for i, a in enumerate(block.arguments)
                if attrs is None or "jax.global_constant" not in attrs[i]]  # platform index
        outs = [walker.tensor(t) for t in
                ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results]
        # the arguments as the Program lists them (no platform index, no tokens)
        listed = [a for i, a in enumerate(block.arguments)
                  if (attrs is None or "jax.global_constant" not in attrs[i])
                  and walker.tensor(a.type)]
        out_from = trace_flow(walker, block, listed)
    args, outs = [a for a in args if a], [o for o in outs if o]  # no tokens
    return Program(ops=walker.ops, jaxpr_text=text, compiled_text=compiled_text,
                   out_from_ops=out_from,
                   uses_shard_map=walker.uses_shard_map,
                   auto_axes=tuple(a for a in axis_names if a in walker.auto_axes),
                   arg_info=tuple((s, dt.itemsize) for s, _, dt in args),
                   out_info=tuple((s, dt.itemsize) for s, _, dt in outs),
                   arg_dtypes=tuple(short_dtype_name(dt) for _, _, dt in args))


def placement(module, mesh_shape: tuple[int, ...] | None,
              axis_names: tuple[str, ...] = ("X", "Y")) -> tuple:
    """``(group_axes, permute_axes)``: how the reader places a parsed module's collectives on
    the mesh, the very functions its walk reads ``replica_groups`` and ``source_target_pairs``
    with (each gives the mesh axes, ("?",) where no set of whole mesh axes forms the groups or
    where there is no mesh). :mod:`autograder.core.optable` refuses what they cannot place."""
    walker = _Walker(module, mesh_shape, tuple(axis_names))
    return walker.group_axes, walker.permute_axes


def _moves_data(op) -> bool:
    """Whether ``op`` sends data to other devices (a collective or a point-to-point transfer)."""
    return op.name in _COLLECTIVES or op.name in _POINT_TO_POINT or (
        op.name == "stablehlo.custom_call"
        and _string(op, "call_target_name") in _COLLECTIVE_TARGETS)


def unread_transfers(module) -> list[str]:
    """The ops of ``module`` that move data between devices but that the walk did not read
    (each read one is marked :data:`SEEN`), e.g. inside a reduction's or a sort's body, or in a
    function nothing calls the way the walk follows: described by name and enclosing op."""
    found: list[str] = []

    def visit(op):
        if _moves_data(op.operation) and SEEN not in op.operation.attributes:
            parent = op.operation.parent
            where = f" inside {parent.name}" if parent is not None else ""
            found.append(f"{op.operation.name}{where}")
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found


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


def _callee(op) -> str:
    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def _called_computations(op) -> list:
    """The functions a custom call names to run (empty for a plain library call)."""
    if "called_computations" not in op.attributes:
        return []
    return list(ir.ArrayAttr(op.attributes["called_computations"]))


def _string(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value if name in op.attributes else ""


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
