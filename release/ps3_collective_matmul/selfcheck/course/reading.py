"""Reading the evidence the structure rules judge: one reader for the grader and the self-check.

A program is read from its ``jax.export`` artifact's StableHLO (:mod:`autograder.core.stablehlo`),
never from a symbolic guess at what it does: when it holds a loop or a conditional, it runs once
more, instrumented, on the case's own arrays (:func:`autograder.tpumodel.loops.device_counts`),
and the rules learn how often each loop and each branch ran on each device. Devices that ran
different paths get a program each, and each path must pass. Where the counts cannot be taken
the rules are not run: the structure check fails and says why. Before anything else the program
is held to the op table (:mod:`autograder.core.optable`): an op or attribute value it does not
list is refused, and the structure check fails with the refusal (the speed check does too).

The grader calls :func:`read_paths` on the artifact the sandbox exported; the notebook's
``check`` exports the student's function itself and calls the same function, so both doors
judge the same program the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

import numpy as np

from ..core import devices
from ..core.calls import Call, CallShape
from ..core.optable import refusal
from ..core.program import Program
from ..core.results import CheckResult
from ..core.stablehlo import (ProgramUnreadable, has_control_flow, module_text,
                              program_from_exported)

if TYPE_CHECKING:
    from ..core.compiling import Run
    from .rules.base import Rule


@dataclass
class Paths:
    """The program as each group of devices ran it: ``[(device ids, Program)]`` (one entry when
    every device ran the same loops and branches as often), or ``error``, why it could not be
    read."""

    programs: list = field(default_factory=list)
    error: Optional[str] = None
    #: the op table's refusal (:mod:`autograder.core.optable`), when that is the error
    refused: Optional[str] = None

    def judge(self, rules, mesh, problem) -> Iterator[tuple[str, CheckResult]]:
        """``(where, result)`` of every rule that applies, on every device path: ``where``
        says so when the devices ran different paths (each path must pass), else ''. It names
        no device: which devices took which path is what the data decided, and on a secret
        case a program could encode an input value in it."""
        for _ids, prog in self.programs:
            where = "" if len(self.programs) == 1 else (
                "on some devices: the devices ran different loop counts or branches (as the "
                "data decided), and each path is judged")
            for rule in rules:
                res = rule(prog, mesh, problem)
                if res is not None:
                    yield where, res


def count_error_text(e: Exception) -> str:
    return (f"the program's loops and branches could not be counted ({e}), so its structure "
            "cannot be judged. Write loops with fori_loop, scan, while_loop or a Python for, "
            "and keep loops out of loop conditions")


def perturbations_of(rules: Sequence[Rule]) -> Optional[Callable]:
    """The :attr:`~autograder.course.rules.base.Rule.perturbations` the first rule among
    ``rules`` that declares some (a rule combining others declares its parts') asks the reader
    to measure (:func:`read_paths`), None if none does: only the problems whose rules need the
    measure pay for its runs."""
    return next((r.perturbations for r in rules if r.perturbations is not None), None)


def received_changed(exported, mesh, dynamic, inputs: tuple, perturbations: Callable,
                     run: Optional[Run] = None) -> bool:
    """Whether some device received different bits from an all_to_all when the program ran on
    a perturbed input: ``perturbations(inputs, mesh shape)`` lists ``(devices, {dynamic
    argument index: global array})``, each an input whose changes must not reach what those
    devices receive; one instrumented copy of the program (:func:`~autograder.tpumodel.loops.
    received`) runs on the case's arrays and on each perturbed input, placed as the case's."""
    return _received_and_counted(exported, mesh, dynamic, inputs, perturbations, run,
                                 count=False)[0]


def _received_and_counted(exported, mesh, dynamic, inputs: tuple, perturbations: Callable,
                          run: Optional[Run], *, count: bool):
    """``(received_changed, counted)``: :func:`received_changed`, and with ``count`` the
    :class:`~autograder.tpumodel.loops.CountedRun` of the case's own arrays from the same
    instrumented program (:func:`~autograder.tpumodel.loops.count_and_receive`: one compile
    for both measures), else None (and None where no perturbed input is run: the caller
    counts the program alone)."""

    from ..tpumodel.loops import count_and_receive, received

    shape = tuple(int(s) for s in mesh.devices.shape)
    names = tuple(str(a) for a in mesh.axis_names)
    variants = perturbations(inputs, shape)
    if not variants:
        return False, None
    sets = [list(dynamic)]
    for _, changes in variants:
        args = list(dynamic)
        for i, value in changes.items():
            args[i] = devices.place_like(value, dynamic[i].sharding)
        sets.append(args)
    run_all = None if run is None else run.all
    counted = None
    if count:
        runs = count_and_receive(exported, sets, run_all=run_all)
        counted = runs[0]
        sums = [r.received(shape, names) for r in runs]
    else:
        sums = received(exported, sets, shape, names, run_all=run_all)
    changed = any(not np.array_equal(sums[0][list(ids)], got[list(ids)])
                  for (ids, _), got in zip(variants, sums[1:], strict=True))
    return changed, counted


def read_paths(exported, mesh, compiled_text: str, dynamic, inputs: tuple,
               run: Optional[Run] = None,
               count: Optional[Callable[[tuple, tuple], list]] = None,
               perturbations: Optional[Callable] = None) -> Paths:
    """Read ``exported`` (run on the placed ``dynamic`` arrays where it has loops or branches;
    ``inputs``: the case's arguments, for rules that weigh bytes against the input) on
    ``mesh`` (None for a one-device function). ``run`` runs a program
    (:class:`~autograder.core.compiling.Run`; default ``jax.jit(fn)(*args)``);
    ``count(mesh shape, axis names)``, where given, is that run's
    per-device counts taken by the caller (:meth:`~autograder.tpumodel.loops.CountedRun.per_device`)
    instead. ``perturbations`` (a rule's, :func:`perturbations_of`), where given with a mesh,
    is measured (:func:`received_changed`) into every path's ``received_changed``. A
    program that cannot be counted, or whose communication cannot be read
    (:class:`~autograder.core.stablehlo.ProgramUnreadable`), gives a :class:`Paths` with the
    reason (the op table's refusal first: :mod:`autograder.core.optable`); other errors
    propagate."""
    from ..tpumodel.loops import LoopCountError

    shape = None if mesh is None else tuple(int(s) for s in mesh.devices.shape)
    names = ("X",) if mesh is None else tuple(str(a) for a in mesh.axis_names)
    refused = refusal(module_text(exported), shape, names)
    if refused is not None:
        return Paths(error=str(refused), refused=str(refused))

    def read(counts=None) -> Program:
        prog = program_from_exported(exported, mesh_shape=shape, compiled_text=compiled_text,
                                     counts=counts)
        prog.inputs = tuple(inputs)
        return prog

    try:
        changed = None
        if perturbations is not None and mesh is not None:
            # the program is counted by the same instrumented copy that weighs its exchanges
            # (unless the caller counted it already; a program without loops or branches has
            # nothing to count, and its paths never read the counts)
            changed, counted = _received_and_counted(exported, mesh, dynamic, inputs,
                                                     perturbations, run, count=count is None)
            if counted is not None:
                count = counted.per_device
        paths = _read(exported, dynamic, shape, names, run, count, read)
        for _, prog in paths.programs:
            prog.received_changed = changed
        return paths
    except LoopCountError as e:
        return Paths(error=count_error_text(e))
    except ProgramUnreadable as e:
        return Paths(error=f"{e}, so its structure cannot be judged")


def _read(exported, dynamic, shape, names, run, count, read) -> Paths:
    """The program's paths (see :func:`read_paths`)."""
    from ..tpumodel.loops import device_counts

    if not has_control_flow(module_text(exported)):
        return Paths([((), read())])
    per_device = (device_counts(exported, dynamic, shape or (1,), names, run=run)
                  if count is None else count(shape or (1,), names))
    paths: dict[tuple, tuple] = {}
    for d, counts in enumerate(per_device):
        paths.setdefault(counts.key(), (counts, []))[1].append(d)
    progs = [(tuple(devs), read(counts)) for counts, devs in paths.values()]
    for _, prog in progs:  # what ran on some device is the written program's, for all
        prog.ran_elsewhere = frozenset(o.index for _, other in progs if other is not prog
                                       for o in other.ops if o.count != 0)
    return Paths(progs)


def export_for_reading(fn, placed: list, static_argnums: tuple = ()):
    """``(exported, dynamic args)`` of ``jax.jit(fn)`` on ``placed`` (static arguments given by
    position): what the self-check reads, as the sandbox's export is what the grader reads.
    ``fn`` is a :class:`~autograder.core.calls.Call` (the self-check's), or a function whose
    mesh is bound already; both are exported by :meth:`~autograder.core.calls.Call.export`."""
    call = fn if isinstance(fn, Call) else Call(CallShape.positional(len(placed),
                                                                     static_argnums), fn)
    return call.export(placed, keep_unused=True)
