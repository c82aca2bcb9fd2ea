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

This module is the reader's surface; its parts: the vocabulary (:mod:`.stablehlo_ops`), the call
rewrites and the numbering of loops and conditionals (:mod:`.stablehlo_calls`), the walk
(:mod:`.stablehlo_walk`) and the data flow (:mod:`.stablehlo_flow`).
"""
from __future__ import annotations

import weakref

import numpy as np

from .program import Program
from .stablehlo_calls import (MAX_CALL_SITES, calls_for_composites, control_flow_ops,
                              has_control_flow, one_callee_per_call)
from .stablehlo_flow import FlowTooLarge, trace_flow
from .stablehlo_ops import NUMBER, SEEN, ProgramUnreadable, RunCounts, Tensor, _moves_data
from .stablehlo_walk import _Walker, mesh_axes_groups, module_mesh

try:
    from jax._src.dtypes import short_dtype_name
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    _BINDINGS_ERROR: Exception | None = None
except Exception as e:  # noqa: BLE001  # reported when a program is read, never silently
    _BINDINGS_ERROR = e

__all__ = ["MAX_CALL_SITES", "NUMBER", "SEEN", "FlowTooLarge", "ProgramUnreadable", "RunCounts",
           "Tensor", "calls_for_composites", "control_flow_ops", "has_control_flow",
           "mesh_axes_groups", "module_mesh", "one_callee_per_call", "placement",
           "bare_text", "module_text", "program_from_exported", "program_from_mlir", "trace_flow",
           "unread_transfers"]

#: the StableHLO texts of each live ``Exported``, by ``id`` (removed when it is collected):
#: ``(with source locations, without)``
_TEXTS: dict[int, tuple[str, str]] = {}


def _texts(exported) -> tuple[str, str]:
    key = id(exported)
    got = _TEXTS.get(key)
    if got is None:
        with mlir.make_ir_context():
            module = exported.mlir_module(serialized=False)
            got = (mlir.module_to_string(module),
                   module.operation.get_asm(enable_debug_info=False))
        _TEXTS[key] = got
        weakref.finalize(exported, _TEXTS.pop, key, None)
    return got


def module_text(exported) -> str:
    """``exported.mlir_module()``, made once per artifact: each call deserializes its bytecode
    into a fresh MLIR context and prints it (about 11 ms for a course program), and one
    grading reads each program in several places (the op table, the reader, the counting
    copy, every path of a program whose devices ran it differently)."""
    return _texts(exported)[0]


def bare_text(exported) -> str:
    """The StableHLO text of ``exported`` without source locations (what a verdict's key reads:
    :func:`autograder.judge.reuse.canonical_bare`), printed from the same deserialization as
    :func:`module_text` (parsing that text again cost a verdict's key about 8 ms a program)."""
    return _texts(exported)[1]


def program_from_exported(exported, axis_names: tuple[str, ...] = ("X", "Y"),
                          mesh_shape: tuple[int, ...] | None = None,
                          compiled_text: str = "", counts: RunCounts | None = None) -> Program:
    """The :class:`Program` of a ``jax.export.Exported`` (e.g. from ``jax.export.deserialize``).

    Argument and result info come from ``exported.in_avals``/``out_avals``: the module itself
    may have dropped unused arguments. ``counts``: what a run counted on one device (see the
    module doc)."""
    prog = program_from_mlir(module_text(exported), mesh_shape, tuple(axis_names), compiled_text,
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
