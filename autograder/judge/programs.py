"""The programs of one function: its artifacts, checked on arrival, and what is made of each (a
compile of a given kind, the instrumented run that counts its loops), made once and cached."""
from __future__ import annotations

import contextlib
import enum
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterator, Optional

from ..core import devices
from ..core.compiling import (
    FAST_CPU_COMPILE,
    MEMORY_CPU_COMPILE,
    MODEL_CPU_COMPILE,
    SPEED_CPU_COMPILE,
    on_cpu,
)
from ..core.problem import Case
from ..core.records import ExportRequest
from ..core.stablehlo import has_control_flow
from .artifacts import Artifact, ArtifactError, load_artifact
from .ownership import Ownership
from .placement import dynamic_args
from .planning import Plan
from .reuse import VerdictStore, artifact_digest, function_key, located_digest, program_key
from .timing import phase


class CompileKind(enum.Enum):
    """How a program is compiled, and the XLA options that takes where the course meshes are
    emulated on CPU (:mod:`autograder.core.compiling`); on an accelerator every kind compiles
    as XLA would (:meth:`options` is None)."""

    #: the numerics cases' programs, run only for their values
    NUMERICS = ("numerics", FAST_CPU_COMPILE)
    #: the memory case's program: XLA's own passes, so its temp bytes are the real ones
    MEMORY = ("memory", MEMORY_CPU_COMPILE)
    #: the speed case's program where it is timed: as XLA would, on every platform
    PLAIN = ("plain", None)
    #: the speed case's program as the TPU model reads it: its partitioned module, its optimised
    #: module and XLA's FLOP count (:func:`autograder.tpumodel.api.compile_partitioned`); a
    #: program without loops or branches, which runs itself for its values (there is no
    #: counting copy to run), compiles with :attr:`SPEED`'s options instead: one compile both
    #: read and run (:meth:`Programs.model_runs`)
    MODEL = ("model", MODEL_CPU_COMPILE)
    #: the jit baseline timed beside the student's program, the instrumented copy of a memory
    #: or speed case's program run once to count its loops and branches, and the speed case's
    #: program run once for its values where it has nothing to count and the model read it
    SPEED = ("speed", SPEED_CPU_COMPILE)

    def __new__(cls, value: str, cpu: Optional[dict]):
        kind = object.__new__(cls)
        kind._value_ = value
        kind.cpu = cpu
        return kind

    def options(self) -> Optional[dict]:
        """The compiler options of this kind here: :attr:`cpu` on CPU (those this XLA knows),
        None (as XLA would) elsewhere or where the kind has none."""
        return None if self.cpu is None else on_cpu(self.cpu)


class Reading(enum.Enum):
    """What is made of a memory or speed case's program besides a compile, on that case's own
    arrays (or its public twin's)."""

    #: one instrumented run counting each loop's trips and each branch taken
    #: (:class:`~autograder.tpumodel.loops.CountedRun`)
    COUNTED = "counted"
    #: its partitioned module with those counts pinned, for the TPU model
    PINNED = "pinned"


class Programs:
    """The artifacts of one function, checked on arrival, and a cache of what is made of each:
    a compile is keyed by ``(request id, CompileKind)``, a reading on a case's arrays by
    ``(request id, Reading, twin)``. A product asked for while another thread makes it is
    waited for, never made twice (the compile pool, :class:`~autograder.judge.pool.CompilePool`,
    makes some ahead). ``ownership``: whose work the judge is doing (:mod:`.ownership`)."""

    def __init__(self, plan: Plan, replies: Optional[dict] = None, *,
                 ownership: Optional[Ownership] = None):
        self.plan = plan
        self.replies = dict(replies or {})
        self.ownership = ownership if ownership is not None else Ownership()
        self._loaded: dict = {}
        self._made: dict = {}
        self._lock = threading.Lock()
        self._cases: Optional[list] = None
        #: why this function's verdict may not be kept for another hand-in, or None: an
        #: artifact failed to lower or compile in the judge (:meth:`_lowered`), a failure of
        #: what the judge does with the artifact as much as of the program's text
        #: (:mod:`autograder.judge.reuse`)
        self.unsettled: Optional[str] = None

    def request(self, layout, case: Case) -> ExportRequest:
        return self.plan.request(layout, case)

    def cases(self) -> list:
        """The plan's numerics cases, made once (the first time a program arrives or is run)."""
        if self._cases is None:
            self._cases = self.plan.cases()
        return self._cases

    # -- artifacts -------------------------------------------------------------------------
    def artifact(self, layout, case: Case) -> Artifact:
        return self.loaded(self.request(layout, case))

    def loaded(self, req: ExportRequest) -> Artifact:
        """``req``'s artifact, checked and loaded once (:func:`load_artifact`); its
        :class:`ArtifactError` raised each time it is asked for."""
        if req.id not in self._loaded:
            try:
                got = load_artifact(self.replies.get(req.id), req)
            except ArtifactError as e:
                got = e
            self._loaded.setdefault(req.id, got)
        got = self._loaded[req.id]
        if isinstance(got, ArtifactError):
            raise got
        return got

    def digest(self, req: ExportRequest) -> str:
        """The digest of ``req``'s artifact (:func:`~autograder.judge.reuse.artifact_digest`),
        made once; its :class:`ArtifactError` raised each time."""
        return self._once((req.id, "digest"), lambda: artifact_digest(self.loaded(req)))

    @staticmethod
    def key_options(*, with_speed: bool, timed: bool = False) -> dict:
        """What a verdict's key holds of the grading's options."""
        return {"speed": with_speed, **({"timed": True} if timed else {})}

    def key(self, *, with_speed: bool, timed: bool = False
            ) -> Optional[tuple[str, str, list[str]]]:
        """``(key, located digest, program keys)`` of this function's verdict
        (:mod:`autograder.judge.reuse`); None unless every program arrived intact."""
        digests, artifacts = [], []
        with phase("program digests"):
            for req in self.plan.all_requests():
                try:
                    artifacts.append(self.loaded(req))
                    digests.append((req, self.digest(req)))
                except Exception:  # noqa: BLE001 - an export error, a broken artifact
                    return None
        options = self.key_options(with_speed=with_speed, timed=timed)
        return (function_key(self.plan, digests, options=options),
                located_digest(artifacts),
                [program_key(self.plan, req, d, options) for req, d in digests])

    def seen_in(self, store: VerdictStore, reply, *, with_speed: bool,
                timed: bool = False) -> bool:
        """Whether the program of ``reply`` (arrived) is one a verdict kept in ``store`` was
        judged on (:meth:`VerdictStore.seen`); False where it cannot be read (no lookup will
        be made for its function)."""
        req = next((r for r in self.plan.all_requests() if r.id == reply.id), None)
        if req is None or reply.error is not None:
            return False
        with phase("program digests"):
            try:
                digest = self.digest(req)
            except Exception:  # noqa: BLE001 - a broken artifact: its function is not looked up
                return False
        return store.seen(program_key(self.plan, req, digest,
                                      self.key_options(with_speed=with_speed, timed=timed)))

    # -- the cache -------------------------------------------------------------------------
    def _once(self, key: tuple, make: Callable[[], Any]):
        """``make()``'s result for ``key``, made once whichever thread asks first."""
        with self._lock:
            fut = self._made.get(key)
            mine = fut is None
            if mine:
                fut = self._made[key] = Future()
        if mine:
            try:
                fut.set_result(make())
            except Exception as e:  # noqa: BLE001 - kept, and raised where it is used
                fut.set_exception(e)
        return fut.result()

    @contextlib.contextmanager
    def _lowered(self) -> Iterator[None]:
        """Around lowering and compiling an artifact: a failure there marks this function's
        verdict :attr:`unsettled`, and is raised on."""
        try:
            yield
        except Exception as e:
            self.unsettled = f"an artifact failed to lower or compile ({type(e).__name__})"
            raise

    # -- compiles --------------------------------------------------------------------------
    def compiled(self, layout, case: Case, args, kind: CompileKind):
        """The program of this case compiled as ``kind`` says, for ``args`` (the case's placed
        arguments, or their shapes: the HLO and its text are the same). :attr:`CompileKind.MODEL`
        gives ``(compiled, partitioned text)``: one compile for the TPU model gives its
        partitioned module, its optimised module and XLA's FLOP count."""
        return self.compiled_for(self.request(layout, case), args, kind)

    def compiled_for(self, req: ExportRequest, args, kind: CompileKind):
        """:meth:`compiled` of a request."""
        def make():
            art = self.loaded(req)
            with self._lowered():
                lowered = devices.lower(art.call, *dynamic_args(self.plan.problem, args))
                if kind is CompileKind.MODEL:
                    from ..tpumodel.api import compile_partitioned

                    runs = self.model_runs(req)
                    return compile_partitioned(
                        lowered, (CompileKind.SPEED if runs else kind).options())
                return lowered.compile(kind.options())

        return self._once((req.id, kind), make)

    def model_runs(self, req: ExportRequest) -> bool:
        """Whether ``req``'s :attr:`CompileKind.MODEL` compile is also the one that runs: a
        program without loops or branches has no counting copy, so the compile the model
        reads is made to run (:attr:`CompileKind.SPEED`'s options; the partitioned module, the
        optimised module and the FLOP count are the same at every LLVM level) and runs for its
        values, instead of a second compile of the same program."""
        return not has_control_flow(self.loaded(req).text)

    # -- readings on a case's arrays -------------------------------------------------------
    def counted_run(self, layout, case: Case, args, *, twin: bool = False):
        """The :class:`~autograder.tpumodel.loops.CountedRun` of a memory or speed case's
        program on that case's own arrays: one instrumented run (the student's work) serves the
        check of its result, the structure reading of the measured program and the model's
        pinned loops. ``twin``: ``case`` is the speed case's public twin
        (:meth:`Plan.public_big`), whose run is kept apart."""
        req = self.request(layout, case)

        def run(fn, dynamic):
            return self._counting_compiled(req, fn, dynamic)(*dynamic)

        def make():
            from ..tpumodel.loops import run_counting

            return run_counting(self._counting(req), dynamic_args(self.plan.problem, args),
                                run=run)

        return self._once((req.id, Reading.COUNTED, twin), make)

    def _counting(self, req: ExportRequest):
        """:func:`~autograder.tpumodel.loops.counting_program` of ``req``'s program, made once
        (the pool compiles it ahead; the case's run and its public twin's run it)."""
        from ..tpumodel.loops import counting_program

        return self._once((req.id, Reading.COUNTED, "program"),
                          lambda: counting_program(self.loaded(req).exported))

    def _counting_compiled(self, req: ExportRequest, fn, args):
        """The counting copy ``fn`` of ``req``'s program compiled for ``args`` (placed, or their
        shapes), once per program: the public twin's run has the secret case's shapes and
        shardings, and every counting copy of one program is the same module."""
        return self._once((req.id, Reading.COUNTED, "compiled"),
                          lambda: devices.lower(fn, *args).compile(CompileKind.SPEED.options()))

    def compile_counting(self, req: ExportRequest, args) -> None:
        """Compile the counting copy of a memory or speed case's program ahead (``args``: its
        shapes, :func:`~autograder.judge.placement.shaped_args`), where it has something to
        count: its one instrumented run (:meth:`counted_run`) then only runs."""
        made = self._counting(req)
        if made is not None:
            self._counting_compiled(req, made[0].call, dynamic_args(self.plan.problem, args))

    def measured_counts(self, layout, case: Case, mesh, args, *, twin: bool = False) -> list:
        """Per device of the speed case's mesh (row-major ids), what the one instrumented run of
        its program counted (:meth:`counted_run`): what the TPU model's loops and branches
        must be (:func:`autograder.tpumodel.api.model_measured`)."""
        return self.counted_run(layout, case, args, twin=twin).per_device(*self._geometry(mesh))

    def _geometry(self, mesh) -> tuple[tuple, tuple]:
        """(mesh shape, axis names) as the counts are read: one device without a mesh."""
        from ..tpumodel.api import _mesh_geometry

        return _mesh_geometry(mesh if self.plan.problem.uses_mesh else None)

    def pinned_speed_program(self, layout, case: Case, mesh, args, *,
                             twin: bool = False) -> tuple[str, tuple, int]:
        """``(partitioned text, trip counts, conditionals pinned)`` of the speed case's program
        with each loop's trip count fixed to what it runs on the speed case's own arrays, and
        each conditional that ran one branch per device fixed to it (counted here, by running
        the instrumented artifact; see :mod:`autograder.tpumodel.loops`)."""
        def make():
            from ..tpumodel.api import pinned_by_run

            return pinned_by_run(self.artifact(layout, case).exported,
                                 dynamic_args(self.plan.problem, args),
                                 self.counted_run(layout, case, args, twin=twin),
                                 *self._geometry(mesh))

        return self._once((self.request(layout, case).id, Reading.PINNED, twin), make)
