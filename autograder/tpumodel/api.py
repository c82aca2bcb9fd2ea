"""Modeling a jitted function's per-device program, and the student-vs-baseline comparison.

Both the student's function and the jit baseline are compiled by XLA (on whatever backend is
present) with a dump of the module right after SPMD partitioning: the per-device program with the
collectives the student wrote in shard_map or the ones GSPMD inserted, before XLA:CPU's own passes
merge chunked collectives or make them asynchronous. Both are then costed by the same rules.
"""
from __future__ import annotations

import enum
import glob
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from . import chips as chipmod
from .cost import Geometry, build_tasks
from .hlo import (Budget, DataDependentLoop, ModelError, RunDisagrees, mark_sources,
                  parse_module, run_device, source_table)
from .schedule import Timeline, schedule
from .work import Floor, floored, static_work, xla_flops

#: the dump that holds the partitioned per-device module (single-device programs have none)
_PASS_RE = "spmd-partitioning"


def _set_persistent_cache(on: bool) -> None:
    """Turn JAX's persistent compilation cache on or off (it remembers its state otherwise)."""
    import jax

    jax.config.update("jax_enable_compilation_cache", on)
    try:
        from jax._src import compilation_cache

        compilation_cache.reset_cache()
    except Exception:  # noqa: BLE001 - private API; without it the dump may be skipped
        pass


def persistent_cache_on() -> bool:
    """Whether JAX's persistent compilation cache is in use here (on, with a folder)."""
    import jax

    return bool(jax.config.jax_enable_compilation_cache
                and jax.config.jax_compilation_cache_dir)


def compile_partitioned(lowered, compiler_options: Optional[dict] = None):
    """Compile ``lowered`` and also return the per-device HLO text right after SPMD
    partitioning: ``(compiled, text)``. The dump costs no second compile."""
    d = tempfile.mkdtemp(prefix="tpumodel-")
    # A persistent-cache hit skips XLA's passes, and with them the dump: compile afresh. The
    # switch is process-wide, so a process that compiles in several threads at once keeps the
    # cache off (the grader does, on CPU), and then nothing is switched here.
    cache_was_on = persistent_cache_on()
    if cache_was_on:
        _set_persistent_cache(False)
    try:
        compiled = lowered.compile(compiler_options={
            **(compiler_options or {}), "xla_dump_to": d, "xla_dump_hlo_pass_re": _PASS_RE,
            "xla_dump_hlo_as_text": True})
        files = sorted(glob.glob(os.path.join(d, "*after_spmd-partitioning*.txt")))
        if not files:
            files = sorted(glob.glob(os.path.join(d, "*before_optimizations.txt")))
        if not files:
            raise ModelError("XLA did not dump the partitioned module")
        # the last module compiled is ours (earlier ones may be helper computations)
        with open(files[-1], encoding="utf-8") as fh:
            return compiled, fh.read()
    finally:
        if cache_was_on:
            _set_persistent_cache(True)
        shutil.rmtree(d, ignore_errors=True)


def partitioned_hlo(fn, args, *, static_argnums=(), out_shardings=None) -> str:
    """The per-device HLO text of ``jax.jit(fn)(*args)`` right after SPMD partitioning."""
    from ..core import devices

    kw = {} if out_shardings is None else {"out_shardings": out_shardings}
    lowered = devices.lower(fn, *args, static_argnums=static_argnums, **kw)
    return compile_partitioned(lowered)[1]


@dataclass
class Modeled:
    timeline: Timeline
    chip: str
    mesh_shape: tuple
    name: str = ""
    #: the device whose program is timed: the slowest one
    device: int = 0
    #: how many devices' programs were modeled (all of them when control flow reads the
    #: device's position; else one, since every device runs the same program)
    devices: int = 1
    #: why the time is an upper bound (e.g. branches chosen by data, all costed)
    bounds: tuple = ()
    #: per loop, where the model priced the program with its loops pinned to a run's counts:
    #: the most iterations one entry of it ran on the input it was counted on (empty: the
    #: model's own walk was used, or the program has no loop)
    trips: tuple = ()
    #: how many conditionals the model priced at the branches a run took (pinned)
    branches: int = 0

    @property
    def time_us(self) -> float:
        return self.timeline.makespan * 1e6

    def summary(self) -> dict:
        out = {"name": self.name, "chip": self.chip, **self.timeline.summary()}
        if self.devices > 1:
            out.update(device=self.device, devices=self.devices)
        if self.bounds:
            out["bounds"] = list(self.bounds)
        passes = max((t.passes for t in self.timeline.tasks), default=1)
        if passes > 1:
            out["mxu_passes"] = passes
        return out


@dataclass(frozen=True)
class RecordedTimeline:
    """A timeline known by its summary only: figures modeled where the program's code lives
    and shipped as data (a jit baseline whose code would give an exercise away)."""

    figures: dict
    tasks: tuple = ()

    @property
    def makespan(self) -> float:
        return self.figures["time_us"] / 1e6

    def summary(self) -> dict:
        return dict(self.figures)


#: the figures of a timeline summary that travel as data
FIGURES = ("time_us", "compute_us", "comm_us", "exposed_comm_us", "n_compute", "n_comm")


def recorded(figures: dict, chip: str, mesh_shape, name: str = "jit baseline") -> Modeled:
    """A :class:`Modeled` made of recorded figures (see :func:`baseline_figures`)."""
    missing = [k for k in FIGURES if k not in figures]
    if missing:
        raise ValueError(f"recorded figures lack {missing}")
    return Modeled(RecordedTimeline({k: figures[k] for k in FIGURES}), chip,
                   tuple(mesh_shape), name)


def model_hlo(text: str, mesh_shape=(1,), axis_names=("X",), chip=None,
              device: Optional[int] = None, name: str = "",
              measured: Optional[list] = None) -> Modeled:
    """Model the per-device module ``text``. ``device=None``: the slowest device (only device 0
    is flattened unless a loop or a branch reads the device's position; then every device is,
    and the slowest one is timed); an int: that device alone. ``measured``: per device (mesh
    order) what a run of the same program counted
    (:class:`~autograder.core.stablehlo.RunCounts`); where the model's walk of its loops and
    branches is not that, :class:`RunDisagrees` is raised (:func:`model_measured` then prices
    the program pinned to the run's counts)."""
    chip = chipmod.get_chip(chip)
    comps, entry = parse_module(text)
    geo = Geometry(tuple(mesh_shape), tuple(axis_names))
    budget = Budget()  # one for the program: every device flattened spends from it
    first = run_device(comps, entry, 0 if device is None else device, budget=budget)
    runs = [first]
    if device is None and first.device_dependent:
        runs += [run_device(comps, entry, d, budget=budget) for d in range(1, geo.n)]
    if measured is not None:
        for fl in runs:  # a walk that read no device position is every device's
            for d in ([fl.device] if len(runs) > 1 else range(len(measured))):
                why = fl.disagrees(measured[d])
                if why is not None:
                    raise RunDisagrees(f"device {d}: {why}")
    worst = None
    frames = source_table(text)  # the student's lines each op came from, for the profile
    for fl in runs:
        mark_sources(fl.nodes, frames)
        timeline = schedule(build_tasks(fl.nodes, fl.out, geo, chip, fl.device))
        if worst is None or timeline.makespan > worst[0].makespan:
            worst = (timeline, fl)
    timeline, fl = worst
    bounds = tuple(dict.fromkeys(b for r in runs for b in r.bounds))
    return Modeled(timeline, chip.name, tuple(mesh_shape), name, device=fl.device,
                   devices=len(runs), bounds=bounds)


def model_measured(text: str, mesh_shape=(1,), axis_names=("X",), chip=None, name: str = "",
                   measured: Optional[Callable[[], list]] = None,
                   pinned: Optional[Callable[[], tuple]] = None) -> Modeled:
    """Model ``text`` with its loops and branches as the instrumented run of the same program
    measured them, wherever a run measured them: the model's own evaluation of loop conditions
    and branch indices (:mod:`.scalars`) only fills in what no run measured.

    ``measured()``: per device, what the run counted (None, or a :class:`LoopCountError`: no
    measurement). ``pinned()``: ``(text, trips, branches)``, the partitioned module of the same
    program with every loop pinned to the run's counts and every conditional that ran one
    branch per device pinned to it (:func:`~autograder.tpumodel.loops.pinned`), the trip
    counts and how many conditionals were pinned. The walk of ``text`` is used where it is
    what the run measured; a walk that differs (a loop or a branch the model would read
    otherwise than the device ran it), or a loop only the data bounds, is priced pinned."""
    counts = None
    if measured is not None:
        from .loops import LoopCountError

        try:
            counts = measured()
        except LoopCountError:
            counts = None  # nothing measured: the model's own reading (the rules say why)
    try:
        return model_hlo(text, mesh_shape, axis_names, chip=chip, name=name, measured=counts)
    except (DataDependentLoop, RunDisagrees):
        if pinned is None:
            raise
    text, trips, branches = pinned()
    st = model_hlo(text, mesh_shape, axis_names, chip=chip, name=name)
    st.trips, st.branches = tuple(trips), int(branches)
    return st


def _mesh_geometry(mesh):
    if mesh is None:
        return (1,), ("X",)
    return tuple(int(s) for s in mesh.devices.shape), tuple(str(a) for a in mesh.axis_names)


def model_function(fn, args, mesh=None, *, chip=None, static_argnums=(), out_shardings=None,
                   name: str = "") -> Modeled:
    """Model ``jax.jit(fn)(*args)`` (args placed on ``mesh``) on a TPU generation."""
    text = partitioned_hlo(fn, args, static_argnums=static_argnums, out_shardings=out_shardings)
    shape, names = _mesh_geometry(mesh)
    return model_hlo(text, shape, names, chip=chip, name=name)


def _problem(problem):
    """The problem object: the registry's :class:`~autograder.core.problem.Problem` or the
    self-check's public one. The model reads only its attributes; a name is looked up by the
    caller, which knows which table it means."""
    if isinstance(problem, str):
        raise TypeError(f"pass the problem itself, not its name {problem!r} (the registry's "
                        "entry, or selfcheck's public one)")
    return problem


def compare(problem, fn, mesh, args, *, chip=None, program=False,
            texts: Optional[tuple[str, Optional[str]]] = None,
            baseline: Optional[Modeled] = None) -> tuple[Modeled, Modeled]:
    """(student, baseline) models for a registry problem on placed ``args``.

    ``fn`` is the student's function (called with the mesh and the static values), or, with
    ``program=True``, an already bound program of the array arguments alone (the grader passes
    a deserialized ``jax.export`` artifact's ``call``). ``texts``: the two partitioned modules,
    already dumped (see :func:`compile_partitioned`); ``fn`` and ``args`` are then unused.
    ``baseline``: the jit baseline already modeled (a release folder's :func:`recorded`
    figures, where the baseline's code stays with the grader), in place of ``texts[1]``."""
    problem = _problem(problem)
    if problem.baseline is None and baseline is None:
        raise ModelError(f"{problem.name} has no jit baseline to compare with")
    shape, names = _mesh_geometry(mesh if problem.uses_mesh else None)
    if texts is not None:
        st = model_hlo(texts[0], shape, names, chip=chip, name="student")
        if baseline is None:
            baseline = model_hlo(texts[1], shape, names, chip=chip, name="jit baseline")
        return st, baseline
    st = model_student(problem, fn, mesh, args, chip=chip, program=program)
    base = model_hlo(baseline_hlo(problem, mesh, args), shape, names, chip=chip,
                     name="jit baseline")
    return st, base


def baseline_hlo(problem, mesh, args) -> str:
    """The partitioned per-device module of the problem's jit baseline on placed ``args``
    (with the problem's output sharding), ready for :func:`model_hlo` on any chip."""
    from ..core.calls import Call

    return compile_partitioned(Call.of(problem, problem.baseline, mesh).lower(
        args, out_sharding=True))[1]


def model_student(problem, fn, mesh, args, *, chip=None, program=False) -> Modeled:
    """The student's side of :func:`compare` alone (a loop the data steers is counted on
    ``args`` and modeled with that count)."""
    from ..core.calls import Call

    geo_mesh = mesh if problem.uses_mesh else None
    call = Call.of(problem, fn, mesh)
    dynamic = call.dynamic(args)
    # the student's function of the array arguments alone
    student = fn if program else call.closed(args)
    try:
        st = model_function(student, dynamic, geo_mesh, chip=chip, name="student")
    except DataDependentLoop:
        # its loops run as often as the data says: count them on these arrays, then model
        # the same program with those counts fixed (see .loops)
        from ..core import devices
        from .loops import pinned, trip_counts

        exported = devices.export(student, *dynamic)
        trips = trip_counts(exported, dynamic)
        fixed = pinned(exported, trips)
        st = model_function(fixed.call, dynamic, geo_mesh, chip=chip, name="student")
        st.trips = tuple(trips)
    return st


def pinned_partitioned(exported, dynamic, trips, branches=None) -> str:
    """The partitioned module of ``exported`` with each loop stopping after its count in
    ``trips`` (counted on ``dynamic``, :mod:`.loops`) and the conditionals of ``branches``
    running the branch each device ran (:meth:`.loops.CountedRun.taken`): what the model reads
    of a program whose loops run as often as its data says. Only read, never run: the
    quickest compile."""
    from ..core import devices
    from ..core.compiling import FAST_CPU_COMPILE, on_cpu
    from .loops import pinned

    lowered = devices.lower(pinned(exported, trips, branches or {}).call, *dynamic)
    return compile_partitioned(lowered, on_cpu(FAST_CPU_COMPILE))[1]


def pinned_by_run(exported, dynamic, counted, mesh_shape, axis_names) -> tuple[str, tuple, int]:
    """``(partitioned text, trip counts, conditionals pinned)`` of ``exported`` with each loop
    fixed to the trip count the instrumented run ``counted`` (a
    :class:`~autograder.tpumodel.loops.CountedRun` on ``dynamic``) measured and each conditional
    that ran one branch per device fixed to it: the ``pinned()`` of :func:`model_measured`, as
    the grader makes it."""
    trips, taken = counted.trips(), counted.taken(mesh_shape, axis_names)
    return pinned_partitioned(exported, dynamic, trips, taken), trips, len(taken)


def run_hooks(exported, dynamic, mesh_shape, axis_names,
              run: Optional[Callable] = None) -> tuple[Callable[[], list], Callable[[], tuple]]:
    """``(measured, pinned)`` for :func:`model_measured` from one instrumented run of
    ``exported`` on ``dynamic`` (:func:`~autograder.tpumodel.loops.count_run` with ``run``),
    made at most once and only when asked for: the grader's reading of the same program's loops
    and branches, for a program modeled outside the grader (the self-check, ``tpu_profile``)."""
    from .loops import count_run

    got: list = []

    def counted():
        if not got:
            try:
                got.append(count_run(exported, dynamic, run=run))
            except ModelError as e:  # LoopCountError: said again by whoever asks next
                got.append(e)
        if isinstance(got[0], Exception):
            raise got[0]
        return got[0]

    def measured():
        return counted().per_device(mesh_shape, axis_names)

    def pinned():
        return pinned_by_run(exported, dynamic, counted(), mesh_shape, axis_names)

    return measured, pinned


def modeled_threshold(problem) -> float:
    return problem.threshold("tpu_model")


def grading_models(problem, fn, mesh, args, *, chip=None, program=False,
                   texts: Optional[tuple[str, Optional[str]]] = None,
                   pinned: Optional[Callable[[], tuple]] = None,
                   measured: Optional[Callable[[], list]] = None,
                   compiled=None, baseline: Optional[Modeled] = None
                   ) -> tuple[Modeled, Modeled, Optional[Floor]]:
    """``(student, baseline, floor)``: the models :func:`grading_modeler` judges by (the same
    arguments), the student's with the FLOPs floor applied where it applies (``floor``: the two
    counts, None without ``compiled``). Raises :class:`ModelError` for a program the model
    cannot price. ``tpu_profile`` draws these timelines."""
    if texts is not None:
        shape, names = _mesh_geometry(mesh if _problem(problem).uses_mesh else None)
        st = model_measured(texts[0], shape, names, chip=chip, name="student",
                            measured=measured, pinned=pinned)
        base = baseline if baseline is not None else model_hlo(
            texts[1], shape, names, chip=chip, name="jit baseline")
    else:
        st, base = compare(problem, fn, mesh, args, chip=chip, program=program,
                           baseline=baseline)
    floor = None
    if compiled is not None and texts is not None:
        floor = Floor(static_work(texts[0]), *xla_flops(compiled))
        st = floored(st, floor)
    return st, base, floor


def verdict(problem, st: Modeled, base: Modeled, floor: Optional[Floor] = None) -> dict:
    """The speed check's figures of :func:`grading_models`' result (see
    :func:`grading_modeler`)."""
    s, b = st.time_us, base.time_us
    out = {"chip": st.chip, "student_us": s, "baseline_us": b,
           "ratio": s / max(b, 1e-9), "threshold": modeled_threshold(_problem(problem)),
           "student": st.summary(), "baseline": base.summary()}
    if st.trips:
        out["trips"] = list(st.trips)
    if st.branches:
        out["branches"] = st.branches
    if floor is not None:
        out["flops"] = floor.to_dict()
        out["flops_clause"] = floor.clause()
    clause = precision_clause(out["student"].get("mxu_passes", 1))
    if clause:
        out["precision_clause"] = clause
    return out


class ModelMode(enum.Enum):
    """What a :class:`ModelRequest` gives the model of the student's side."""

    #: ``fn``: the student's function (called with the mesh and the static values), traced and
    #: partitioned here on ``args``
    FUNCTION = "function"
    #: ``fn``: an already bound program of the array arguments alone (a deserialized
    #: ``jax.export`` artifact's ``call``), partitioned here on ``args``
    PROGRAM = "program"
    #: ``texts``: the two partitioned modules, already dumped (:func:`compile_partitioned`);
    #: nothing is traced or compiled here
    MODULES = "modules"


#: the fields only a :attr:`ModelMode.MODULES` request carries
_MODULES_ONLY = ("texts", "pinned", "measured", "compiled")


@dataclass(frozen=True)
class ModelRequest:
    """One question to the modeler (:func:`grading_modeler`): the student's side in one
    :class:`ModelMode`, checked when the request is made (a field its mode does not read is
    refused, never ignored). Build it with :meth:`of_function`, :meth:`of_program` or
    :meth:`of_modules`.

    ``problem``: the registry's problem or the self-check's public one; ``mesh`` and ``args``:
    the speed case's mesh and placed arguments. With :attr:`ModelMode.MODULES`: ``texts``, the
    student's and the jit baseline's partitioned modules; ``measured()`` and ``pinned()``: the
    counts of the instrumented run of the student's program on the grading input and the same
    program pinned to them, which the model uses wherever its own walk differs
    (:func:`model_measured`; :func:`run_hooks` makes both from one run); ``compiled``: the
    executable XLA compiled from ``texts[0]``, whose own FLOP count is the floor under the
    model's (:mod:`.work`). In every mode ``baseline``: the jit baseline's recorded figures
    (:func:`recorded`) in place of its own module (``texts[1]``, or the baseline traced here):
    how a release folder's self-check runs this same verdict where the baseline's code stays
    with the grader. ``chip``: the TPU generation (None: the default)."""

    problem: object
    mode: ModelMode
    mesh: object = None
    args: Sequence = ()
    fn: Optional[Callable] = None
    texts: Optional[tuple[str, Optional[str]]] = None
    pinned: Optional[Callable[[], tuple]] = None
    measured: Optional[Callable[[], list]] = None
    compiled: object = None
    baseline: Optional[Modeled] = None
    chip: Optional[str] = None

    def __post_init__(self):
        if not isinstance(self.mode, ModelMode):
            raise TypeError(f"mode: expected a ModelMode, got {self.mode!r}")
        if self.mode is ModelMode.MODULES:
            if self.fn is not None:
                raise ValueError("a MODULES request reads the partitioned modules, not fn")
            if self.texts is None or len(self.texts) != 2 or not self.texts[0]:
                raise ValueError("a MODULES request needs texts: (the student's partitioned "
                                 "module, the jit baseline's or None)")
            if self.texts[1] is None and self.baseline is None:
                raise ValueError("a MODULES request needs the jit baseline's module "
                                 "(texts[1]) or its recorded figures (baseline)")
            return
        if self.fn is None:
            raise ValueError(f"a {self.mode.name} request needs fn")
        given = [n for n in _MODULES_ONLY if getattr(self, n) is not None]
        if given:
            raise ValueError(f"{', '.join(given)}: read only by a MODULES request, "
                             f"not by a {self.mode.name} one")

    @classmethod
    def of_function(cls, problem, fn, mesh, args, *, chip: Optional[str] = None,
                    baseline: Optional[Modeled] = None) -> "ModelRequest":
        """The student's function ``fn``, traced here on the placed ``args``."""
        return cls(problem, ModelMode.FUNCTION, mesh, tuple(args), fn=fn, chip=chip,
                   baseline=baseline)

    @classmethod
    def of_program(cls, problem, program, mesh, args, *, chip: Optional[str] = None,
                   baseline: Optional[Modeled] = None) -> "ModelRequest":
        """A bound ``program`` of the array arguments alone, partitioned here on ``args``."""
        return cls(problem, ModelMode.PROGRAM, mesh, tuple(args), fn=program, chip=chip,
                   baseline=baseline)

    @classmethod
    def of_modules(cls, problem, mesh, texts: tuple[str, Optional[str]], *, args=(),
                   pinned: Optional[Callable[[], tuple]] = None,
                   measured: Optional[Callable[[], list]] = None, compiled=None,
                   baseline: Optional[Modeled] = None,
                   chip: Optional[str] = None) -> "ModelRequest":
        """The partitioned modules ``texts`` (the student's, the jit baseline's or None with
        ``baseline``), with the run's counts and the compiled executable where known."""
        return cls(problem, ModelMode.MODULES, mesh, tuple(args), texts=tuple(texts),
                   pinned=pinned, measured=measured, compiled=compiled, baseline=baseline,
                   chip=chip)


def grading_modeler(request: ModelRequest) -> dict:
    """The ``modeler`` of :func:`autograder.judge.grading.grade_function`: the speed check's
    figures for one :class:`ModelRequest`.

    Returns ``{'chip', 'student_us', 'baseline_us', 'ratio', 'threshold', ...}``, or
    ``{'unreadable': why}`` when the student's program holds something the model cannot price
    (the speed check then fails and says why: a program the model cannot read is never judged
    on a laxer basis). Any other error is the model's own and propagates (the grader's fault).
    With ``compiled``, ``'flops'`` holds the model's and XLA's counts
    (:meth:`.work.Floor.to_dict`)."""
    if not isinstance(request, ModelRequest):
        raise TypeError(f"the modeler takes a ModelRequest, not {type(request).__name__}")
    r = request
    try:
        st, base, floor = grading_models(r.problem, r.fn, r.mesh, list(r.args), chip=r.chip,
                                         program=r.mode is ModelMode.PROGRAM, texts=r.texts,
                                         pinned=r.pinned, measured=r.measured,
                                         compiled=r.compiled, baseline=r.baseline)
    except ModelError as e:
        return {"unreadable": str(e)[:300]}
    return verdict(r.problem, st, base, floor)


#: the precision a float32 matmul takes its MXU passes at (:data:`.cost.PRECISION_PASSES`)
_PRECISION_OF = {3: "HIGH (or the algorithm BF16_BF16_F32_X3)",
                 6: "HIGHEST (or the algorithm BF16_BF16_F32_X6)"}


def precision_clause(passes: int) -> str:
    """What the speed message says of a program whose dearest matmul takes ``passes`` MXU
    passes (more than the jit baselines' one), '' when it takes one."""
    if passes <= 1:
        return ""
    return (f"precision={_PRECISION_OF.get(passes, str(passes))} costs {passes} MXU passes per "
            "matmul on a TPU; the jit baseline uses the default precision (1 pass): multiply at "
            "the default precision, which on the CPU where values are checked is full float32 "
            "already")


def default_modeler():
    """The modeler grading uses by default: the TPU model, everywhere (where the speed case is
    timed, on real accelerators, its figure stands beside the wall-clock ratio that decides)."""
    return grading_modeler
