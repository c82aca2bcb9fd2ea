"""Trip counts of loops whose bound depends on the data, taken by running the program.

The model unrolls a ``while`` loop only when its condition can be evaluated without array data
(a ``fori_loop``, a ring over an axis size). An all-to-all MoE exchanges tokens in rounds until
the busiest destination is served, so its loop runs as many times as the routing requires.

For such a program the trusted grader learns the counts from the program itself, on the grading
input, and never from anything the submission says:

1. :func:`counting` rewrites the student's StableHLO so that every ``stablehlo.while`` carries
   one more value, its iteration counter, and hands the final count (and a 1 for each time the
   loop is entered) out of every enclosing region (function calls, outer loops, branches,
   ``shard_map`` bodies) as extra results of ``@main``. :func:`trip_counts` runs that program on
   the speed case's arrays and reads them: per loop, its most iterations in one entry (on the
   busiest device).
2. :func:`pinned` rewrites the original program once more so that each loop stops after exactly
   that many iterations (a counter compared with a constant). The pinned program does the same
   work per iteration, and its trip counts are constants the model can read; XLA compiles it
   and the model costs it like any other program.

The counting program also hands out, for every conditional (``stablehlo.case``/``if``), how many
times each branch ran; :func:`pinned` can fix a conditional to the branch each device took
(:meth:`CountedRun.taken`), so the model costs the branches the devices ran, never the ones its
own evaluation of the index would pick. :func:`device_counts` reads all of it per device
(:class:`~autograder.core.stablehlo.RunCounts`): what the structure rules are told about how
often each collective and matmul ran, instead of a symbolic reading of the program. One run
(:func:`count_run`) can serve both readings: the grader counts a memory or speed case's program
once, for its structure and for the model.

Only ``stablehlo`` and ``sdy`` structure that JAX emits is handled; anything else raises
:class:`LoopCountError` (the speed and structure checks then fail and say why).

This module is the surface; the rewriting the programs share is :mod:`.rewriting`, the keyed
digests of what the all_to_alls deliver :mod:`.digests`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import devices
from ..core.stablehlo import RunCounts, control_flow_ops, has_control_flow, module_text
from .digests import KEY_WORDS, _weigh_exchanges, new_key, received_module
from .rewriting import (LoopCountError, Tag, _const, _Escaper, _i32, _parse, _replace,
                        _set_terminator, _terminator)

try:
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
except Exception:  # noqa: BLE001  # reported when a module is parsed (rewriting._parse)
    pass

__all__ = ["CASE_MARK", "KEY_WORDS", "MARK", "CountedRun", "LoopCountError", "Tag",
           "count_and_receive", "count_run", "counting_module", "counting_program",
           "device_counts", "new_key", "pinned", "pinned_module", "received", "received_module",
           "run_counting", "trip_counts"]

#: the discardable attributes that number the loops and the conditionals of a module while it
#: is rewritten
MARK = "autograder.loop"
CASE_MARK = "autograder.case"


# -- numbering the loops and conditionals ------------------------------------------------------

def _whiles(root) -> list:
    return control_flow_ops(root)[0]


def _conditionals(root) -> list:
    return control_flow_ops(root)[1]


def _marked(root, i: int, mark: str = MARK):
    for op in (_whiles(root) if mark == MARK else _conditionals(root)):
        if mark in op.attributes and ir.IntegerAttr(op.attributes[mark]).value == i:
            return op
    raise LoopCountError(f"{'loop' if mark == MARK else 'conditional'} {i} was lost while "
                         "rewriting the program")


def _add_counter(op):
    """``op`` (a while) with one more carried value, its iteration counter from 0; returns
    (new op, the counter's block argument in the condition)."""
    i32 = _i32()
    zero = _const(0, i32, ir.InsertionPoint(op))
    new = _replace(op, [zero], [i32])
    cond, body = new.regions[0].blocks[0], new.regions[1].blocks[0]
    c_arg = cond.add_argument(i32, new.location)
    b_arg = body.add_argument(i32, new.location)
    ip = ir.InsertionPoint(_terminator(body))
    step = hlo.AddOp(b_arg, _const(1, i32, ip), ip=ip).result
    _set_terminator(body, list(_terminator(body).operands) + [step])
    return new, c_arg


def _mark_loops(module) -> int:
    loops = _whiles(module)
    for i, op in enumerate(loops):
        op = op.operation
        op.attributes[MARK] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), i)
    return len(loops)


def _mark_conditionals(module) -> int:
    conds = _conditionals(module)
    for i, op in enumerate(conds):
        op.attributes[CASE_MARK] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), i)
    return len(conds)


def _unmark(module) -> None:
    loops, conds = control_flow_ops(module)
    for op in loops + conds:
        for mark in (MARK, CASE_MARK):
            if mark in op.operation.attributes:
                del op.operation.attributes[mark]


# -- the two rewrites --------------------------------------------------------------------------

def counting_module(text: str, branches: bool = False, received: bool = False,
                    key: Sequence[int] | None = None):
    """(module, tags): ``text`` with every loop's count (and with ``branches``, every
    conditional's branch counts; with ``received``, the digests of :func:`received_module`,
    keyed by ``key`` or a fresh key)
    handed out of ``@main`` (see module doc). The module lives in its own MLIR context;
    ``tags`` describe the extra results, in their order."""
    ctx, module = _parse(text)
    with ctx, ir.Location.unknown():
        n = _mark_loops(module)
        n_cond = _mark_conditionals(module) if branches else 0
        esc = _Escaper(module)
        for i in range(n):
            new, _ = _add_counter(_marked(module, i))
            entered = _const(1, _i32(), ir.InsertionPoint.after(new))
            esc.escape(new.results[len(new.results) - 1], Tag(i, "trips"))
            esc.escape(new.results[len(new.results) - 1], Tag(i, "most"))
            esc.escape(entered, Tag(i, "entries"))
        for j in range(n_cond):
            for k in range(len(_marked(module, j, CASE_MARK).regions)):
                block = _marked(module, j, CASE_MARK).regions[k].blocks[0]
                ran = _const(1, _i32(), ir.InsertionPoint(_terminator(block)))
                esc.escape(ran, Tag(j, "branch", k))
        _unmark(module)
        tags = list(esc.tags)
        if received:  # after the counters: a second escaper appends its results after theirs
            tags += _weigh_exchanges(module, new_key() if key is None else key)
        if not module.operation.verify():
            raise LoopCountError("the counting program does not verify")
    return module, tags


def _pin_branch(op, taken: Sequence[int]) -> None:
    """Conditional ``op`` running branch ``taken[d]`` on device (partition) ``d``, whatever its
    own index or predicate computes: a constant where every device takes the same branch,
    else a choice by ``partition_id`` (the device's id, as the per-device model reads it)."""
    i32 = _i32()
    ip = ir.InsertionPoint(op)
    index = _const(int(taken[-1]), i32, ip)
    if len(set(taken)) > 1:
        me = hlo.ConvertOp(i32, hlo.PartitionIdOp(
            results=[ir.RankedTensorType.get([], ir.IntegerType.get_unsigned(32))],
            ip=ip).result, ip=ip).result
        for d in reversed(range(len(taken) - 1)):
            here = hlo.CompareOp(me, _const(d, i32, ip),
                                 hlo.ComparisonDirectionAttr.get("EQ"), ip=ip).result
            index = hlo.SelectOp(here, _const(int(taken[d]), i32, ip), index, ip=ip).result
    if op.name == "stablehlo.if":  # region 0 is the true branch
        index = hlo.CompareOp(index, _const(0, i32, ip),
                              hlo.ComparisonDirectionAttr.get("EQ"), ip=ip).result
    op.operands[0] = index


def pinned_module(text: str, trips: Sequence[int], branches: Mapping[int, Sequence[int]] = {}):
    """``text`` with loop ``i`` (in the order :func:`counting_module` numbers them) stopping
    after exactly ``trips[i]`` iterations, and conditional ``j`` of ``branches`` running
    branch ``branches[j][d]`` on device ``d`` (:meth:`CountedRun.taken`)."""
    ctx, module = _parse(text)
    with ctx, ir.Location.unknown():
        n = _mark_loops(module)
        if n != len(trips):
            raise LoopCountError(f"{len(trips)} trip counts for {n} loops")
        n_cond = _mark_conditionals(module) if branches else 0
        for j, taken in branches.items():
            if not 0 <= j < n_cond:
                raise LoopCountError(f"no conditional {j} among {n_cond}")
            _pin_branch(_marked(module, j, CASE_MARK), taken)
        for i in range(n):
            new, counter = _add_counter(_marked(module, i))
            cond = new.regions[0].blocks[0]
            ip = ir.InsertionPoint(_terminator(cond))
            bound = _const(int(trips[i]), _i32(), ip)
            less = hlo.CompareOp(counter, bound,
                                 hlo.ComparisonDirectionAttr.get("LT"), ip=ip).result
            _set_terminator(cond, [less])
        _unmark(module)
        if not module.operation.verify():
            raise LoopCountError("the pinned program does not verify")
    return module


# -- Exported artifacts ------------------------------------------------------------------------

def _with_module(exported, module, extra_outs: Sequence[tuple[tuple[int, ...], Any]] = ()):
    """``exported`` with its StableHLO replaced by ``module`` and (for a counting program) more
    results: a tuple of the original result and ``extra_outs`` ((shape, dtype) each)."""
    import jax
    from jax._src import core
    from jax._src.export import _export

    with module.context:
        payload = _export._module_to_bytecode(module)
    changes: dict[str, Any] = {"mlir_module_serialized": payload}
    if extra_outs:
        avals = tuple(exported.out_avals) + tuple(core.ShapedArray(s, d) for s, d in extra_outs)
        n = len(avals)
        changes["out_avals"] = avals
        changes["out_tree"] = jax.tree_util.tree_structure(tuple(range(n)))
        for f in dataclasses.fields(exported):
            if f.name in ("out_shardings_hlo", "_out_named_shardings"):
                changes[f.name] = tuple(getattr(exported, f.name)) + (None,) * len(extra_outs)
    return dataclasses.replace(exported, **changes)


def _result_shapes(module) -> list[tuple[int, ...]]:
    with module.context:
        for op in module.body.operations:
            op = op.operation
            if op.name == "func.func" and \
                    str(ir.StringAttr(op.attributes["sym_name"]).value) == "main":
                ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
                return [tuple(ir.RankedTensorType(t).shape) for t in ftype.results]
    raise LoopCountError("the program has no @main")


@dataclasses.dataclass
class CountedRun:
    """What one run of a counting program handed out: per :class:`Tag`, its values (one per
    position along the tag's shard_map axes), and the program's own result. :meth:`trips` and
    :meth:`per_device` are two readings of the same run, so one run on a case's arrays serves
    the model's pinned loops, the structure rules and the check of the result."""

    tags: list
    values: list
    #: the program's own result, from the same run (None where nothing ran: nothing to count)
    out: Any = None

    def trips(self) -> tuple[int, ...]:
        """Per loop (numbered as :func:`pinned` expects): its most iterations in one entry, on
        the busiest device (0 for a loop never entered). A pinned loop runs as often at every
        entry, so a loop whose count varies between entries is modeled at its longest, never
        at a mean that one long entry and many empty ones would make small."""
        loops = [(t, v) for t, v in zip(self.tags, self.values, strict=True)
                 if t.kind == "most"]  # every loop has one (a sum and an entry count beside)
        if not loops:
            return ()
        most = np.zeros(1 + max(t.loop for t, _ in loops), np.int64)
        for tag, v in loops:
            if v.size:
                most[tag.loop] = max(most[tag.loop], int(v.max()))
        return tuple(int(m) for m in most)

    def taken(self, mesh_shape: Sequence[int], axis_names: Sequence[str]) -> dict:
        """Conditional j -> the branch each device (row-major ids) ran, for every conditional
        that ran one branch only on each device that ran it (a device that never ran it is
        given another device's branch): what :func:`pinned` fixes, so the model costs the
        branches the device took. A conditional that took two branches on one device is left
        out (the model reads its index where it can, and else costs every branch)."""
        out = {}
        per = self.per_device(mesh_shape, axis_names)
        for j in sorted({j for c in per for j in c.branches}):
            ran = [[k for k, n in enumerate(c.branches.get(j, ())) if n] for c in per]
            if any(len(r) > 1 for r in ran) or not any(ran):
                continue
            first = next(r[0] for r in ran if r)
            out[j] = tuple(r[0] if r else first for r in ran)
        return out

    def per_device(self, mesh_shape: Sequence[int], axis_names: Sequence[str]) -> list[RunCounts]:
        """Per device of the mesh (row-major ids): each loop's iterations and entries, each
        conditional's branches (see :class:`~autograder.core.stablehlo.RunCounts`)."""
        shape = tuple(int(s) for s in mesh_shape) or (1,)
        per = [RunCounts() for _ in range(int(np.prod(shape, dtype=np.int64)))]
        for tag, v in zip(self.tags, self.values, strict=True):
            positions = _positions(tag, v, shape, axis_names, "counts")
            if tag.kind in ("most", "received"):
                continue  # the model's reading (trips()), the digests' (received())
            for d, at in enumerate(positions):
                c, x = per[d], int(v[at])
                if tag.kind == "trips":
                    c.trips[tag.loop] = c.trips.get(tag.loop, 0) + x
                elif tag.kind == "entries":
                    c.entries[tag.loop] = c.entries.get(tag.loop, 0) + x
                else:
                    got = list(c.branches.get(tag.loop, ()))
                    got += [0] * (tag.branch + 1 - len(got))
                    got[tag.branch] += x
                    c.branches[tag.loop] = tuple(got)
        return per

    def received(self, mesh_shape: Sequence[int], axis_names: Sequence[str]) -> np.ndarray:
        """[device (row-major id), exchange]: the digest of what each device received from
        each all_to_all (tags ``'received'``, :func:`received_module`; comparable between the
        runs of one instrumented program, whose key they share)."""
        shape = tuple(int(s) for s in mesh_shape) or (1,)
        cols = [np.asarray(v, np.int64)[_positions(tag, v, shape, axis_names, "digests")]
                for tag, v in zip(self.tags, self.values, strict=True)
                if tag.kind == "received"]
        n_dev = int(np.prod(shape, dtype=np.int64))
        return np.stack(cols, axis=1) if cols else np.zeros((n_dev, 0), np.int64)


def _positions(tag: Tag, v: np.ndarray, shape: tuple, axis_names: Sequence[str],
               what: str) -> np.ndarray:
    """Per device of a mesh of ``shape`` (row-major ids), the position in ``v`` (tag ``tag``'s
    values, one per device along its shard_map axes) of the value that device saw."""
    names = list(axis_names)
    if any(a not in names for a in tag.manual):
        raise LoopCountError(f"a shard_map over axes {tag.manual} of a mesh {names}")
    sizes = [shape[names.index(a)] for a in tag.manual]
    if v.size != int(np.prod(sizes, dtype=np.int64)):
        raise LoopCountError(f"{v.size} {what} for a shard_map over {tag.manual}")
    n_dev = int(np.prod(shape, dtype=np.int64))
    if not tag.manual:
        return np.zeros(n_dev, np.int64)
    coords = np.unravel_index(np.arange(n_dev), shape)
    return np.ravel_multi_index([coords[names.index(a)] for a in tag.manual], sizes)


def counting_program(exported, branches: bool = True):
    """``(counting copy, tags)`` of ``exported``: the program that also returns, per tag, what
    its loops (and with ``branches``, its conditionals) counted; None where there is nothing to
    count (no loop, no branch: not even a rewrite to make)."""
    text = module_text(exported)
    if not has_control_flow(text):
        return None
    module, tags = counting_module(text, branches=branches)
    if not tags:
        return None
    shapes = _result_shapes(module)[-len(tags):]
    return _with_module(exported, module, [(s, np.int32) for s in shapes]), list(tags)


def count_run(exported, args: Sequence, run: Callable | None = None,
              branches: bool = True) -> CountedRun:
    """Run the counting program of ``exported`` (with ``branches``, its conditionals counted
    too; :func:`counting_program`) on ``args`` once; nothing runs where there is nothing to
    count. ``run(fn, args)`` runs a program (default: ``jax.jit(fn)(*args)``)."""
    return run_counting(counting_program(exported, branches), args, run)


def run_counting(made, args: Sequence, run: Callable | None = None) -> CountedRun:
    """Run ``made``, a :func:`counting_program`'s ``(counting copy, tags)`` (None: nothing to
    count, and nothing runs), on ``args`` once (``run`` as :func:`count_run`'s)."""
    if made is None:
        return CountedRun([], [])
    counting, tags = made
    outs = (run or (lambda f, a: devices.jit(f)(*a)))(counting.call, args)
    return CountedRun(tags, [np.asarray(v).reshape(-1) for v in outs[1:]], outs[0])


def trip_counts(exported, args: Sequence, run: Callable | None = None) -> tuple[int, ...]:
    """Per loop of ``exported`` (numbered as :func:`pinned` expects): its iterations per entry
    on ``args`` (:meth:`CountedRun.trips`)."""
    return count_run(exported, args, run, branches=False).trips()


def device_counts(exported, args: Sequence, mesh_shape: Sequence[int],
                  axis_names: Sequence[str], run: Callable | None = None) -> list[RunCounts]:
    """Per device of the mesh (row-major ids), what a run of ``exported`` on ``args`` counted
    (:meth:`CountedRun.per_device`)."""
    return count_run(exported, args, run).per_device(mesh_shape, axis_names)


def pinned(exported, trips: Sequence[int], branches: Mapping[int, Sequence[int]] = {}):
    """``exported`` with every loop stopping after its count in ``trips`` and the conditionals
    of ``branches`` running the branches a run took (:meth:`CountedRun.taken`)."""
    return _with_module(exported, pinned_module(module_text(exported), trips, branches))


# -- what the all_to_alls deliver (the digests: .digests) --------------------------------------

def received(exported, arg_sets: Sequence[Sequence], mesh_shape: Sequence[int],
             axis_names: Sequence[str], run_all: Callable | None = None,
             key: Sequence[int] | None = None) -> list[np.ndarray]:
    """Per argument set of ``arg_sets`` (placed arrays), the digests of what each device
    received from each all_to_all (:func:`received_module`, keyed by ``key``: a fresh one for
    each call unless given), as an array [device (row-major id), exchange]; one compiled
    program runs them all (``run_all(fn, arg_sets)``: its outputs per set; default
    ``jax.jit``), so the sets' digests are comparable with each other."""
    module, tags = received_module(module_text(exported), key)
    if not tags:
        return [np.zeros((int(np.prod(mesh_shape, dtype=np.int64)), 0), np.int32)
                for _ in arg_sets]
    return [run.received(mesh_shape, axis_names)
            for run in _run_instrumented(exported, module, tags, arg_sets, run_all)]


def count_and_receive(exported, arg_sets: Sequence[Sequence],
                      run_all: Callable | None = None,
                      key: Sequence[int] | None = None) -> list[CountedRun]:
    """Per argument set of ``arg_sets`` (placed arrays, all of one signature), the
    :class:`CountedRun` of one program that both counts (:func:`count_run`'s, branches
    included) and weighs what its all_to_alls deliver (:func:`received`'s digests, keyed as
    there, read with :meth:`CountedRun.received`): the structure reading of a program with
    loops or branches whose exchanges are also measured on perturbed inputs compiles one
    instrumented copy, not two. ``run_all(fn, arg_sets)``: the outputs per set (default
    ``jax.jit``, compiled once)."""
    module, tags = counting_module(module_text(exported), branches=True, received=True,
                                   key=key)
    if not tags:
        return [CountedRun([], []) for _ in arg_sets]
    return _run_instrumented(exported, module, tags, arg_sets, run_all)


def _run_instrumented(exported, module, tags: list, arg_sets: Sequence[Sequence],
                      run_all: Callable | None) -> list[CountedRun]:
    """``module`` (``exported`` instrumented, ``tags`` its extra results) compiled once and run
    on each set of ``arg_sets``: a :class:`CountedRun` per set."""
    shapes = _result_shapes(module)[-len(tags):]
    program = _with_module(exported, module, [(s, np.int32) for s in shapes])

    def each(f, sets):
        jitted = devices.jit(f)
        return [jitted(*a) for a in sets]

    outs = (run_all or each)(program.call, list(arg_sets))
    return [CountedRun(list(tags), [np.asarray(v).reshape(-1) for v in o[1:]], o[0])
            for o in outs]
