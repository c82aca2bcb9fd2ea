"""The trusted runner: gathers evidence about one graded function and hands it to the checks.

``grade_function(problem, exporter)`` plans the cases from a fresh secret seed and asks the
untrusted side for the student's *programs* (``jax.export`` artifacts of
``jax.jit(functools.partial(fn, mesh=mesh))`` for each mesh layout and argument signature; the
request carries shapes, never values). Once the artifacts are here it makes the inputs, compiles
and runs each program, reads its structure from the StableHLO it holds, measures memory and
speed against the jit baseline and returns a :class:`FunctionResult`. Every failure (an export
error, a program that hangs, NaNs, a wrong shape) becomes a failed check with a message.
"""
from __future__ import annotations

import contextlib
import functools
import os
import secrets
import statistics
import threading
import time
import zlib
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..core.compare import copies_disagree, genuine_array, sharding_problem
from ..core.compiling import (
    FAST_CPU_COMPILE,
    MEMORY_CPU_COMPILE,
    MODEL_CPU_COMPILE,
    SPEED_CPU_COMPILE,
    on_cpu,
    runner,
)
from ..core import devices
from ..core.devices import platform as current_platform
from ..core.errors import GradingTimeout, describe_error, time_limit
from ..core.files import replaced
from ..core.meshes import layouts as all_layouts
from ..core.meshes import make_mesh
from ..core.optable import refusal
from ..core.problem import Case, Problem
from ..core.records import ArgSpec, ExportRequest, spec_of
from ..core.results import CheckResult, FunctionResult, failed, skipped
from ..course import checks
from ..course.reading import perturbations_of
from .artifacts import Artifact, ArtifactError, load_artifact
from .bigcases import BigCase, BigCaseStore, big_case
from .reuse import VerdictStore, artifact_digest, function_key, located_digest
from .timing import phase

# Bound before any student code can run in this process; later patches of the time module do
# not reach it.
_clock = time.perf_counter

#: programs compiled at once for the numerics (one per core here)
COMPILE_THREADS = max(1, min(4, os.cpu_count() or 1))

#: seconds allowed for one compile-and-run of student code
CALL_TIMEOUT = float(os.environ.get("AUTOGRADER_CALL_TIMEOUT", "60"))


#: told "student", "grader" or "both" as the judge's work changes hands (the judge process
#: passes it on to the supervisor, which blames a missed deadline or a crash on the owner of
#: that moment; "both": the function is graded again with nothing overlapping)
OWNER_HOOK: Optional[Callable[[str], None]] = None
#: who owns the main thread's work under way, innermost last (empty: the student's)
_owners: list[str] = []
#: jobs of a compile pool running now: each reads or compiles the submission's programs, the
#: student's work, whoever owns the main thread meanwhile
_pool_jobs = 0
#: the owner last told to :data:`OWNER_HOOK`
_told = "student"
_owner_lock = threading.RLock()


def owner_now() -> str:
    """Whose work the judge is doing: the main thread's owner, or "both" where the grader's
    own work runs while a pool thread works on the submission's programs."""
    main = _owners[-1] if _owners else "student"
    return "both" if main == "grader" and _pool_jobs else main


def _tell() -> None:
    global _told
    with _owner_lock:
        now = owner_now()
        if now != _told:
            _told = now
            if OWNER_HOOK is not None:
                OWNER_HOOK(now)


def owner_reset() -> None:
    """A new function starts: its work is the student's until said otherwise (as the
    supervisor assumes on every ``start`` record)."""
    global _told
    with _owner_lock:
        _told = "student"


@contextlib.contextmanager
def _pool_job():
    """A compile pool's job on the submission's programs, counted while it runs."""
    global _pool_jobs
    with _owner_lock:
        _pool_jobs += 1
        _tell()
    try:
        yield
    finally:
        with _owner_lock:
            _pool_jobs -= 1
            _tell()


class GraderFault(Exception):
    """The grader's own code failed while judging a function: not the student's doing, so the
    function gets no verdict and is graded again (a regrade)."""


@contextlib.contextmanager
def _owned_by(owner: str):
    with _owner_lock:
        _owners.append(owner)
        _tell()
    try:
        yield
    finally:
        with _owner_lock:
            _owners.pop()
            _tell()


@contextlib.contextmanager
def grader_work(what: str):
    """The grader's own work (the baseline, the model, reading a program, the checks): an error
    in it becomes a :class:`GraderFault`, and a deadline missed or a crash meanwhile is the
    grader's too (:data:`OWNER_HOOK`)."""
    with _owned_by("grader"):
        try:
            yield
        except (GraderFault, GradingTimeout, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001
            raise GraderFault(f"{what}: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def student_work():
    """Running the submission's program from inside the grader's own work (the model counting
    its loops on the grading input): a deadline or a crash meanwhile is the student's."""
    with _owned_by("student"):
        yield


def fault_text(e: BaseException) -> str:
    """How a regrade names the grader's failure (for the instructor: the student did nothing
    wrong here)."""
    import traceback

    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" (at {where[0].filename.rsplit('/', 2)[-1]}:{where[0].lineno})" if where else ""
    text = str(e) if isinstance(e, GraderFault) else f"{type(e).__name__}: {e}"
    return f"the grader failed: {text}"[:600] + at


def _never_the_students(e: BaseException) -> None:
    """Raise again what must not become the submission's failure: an interrupt, the grader's
    own fault, and a Python recursion error, as the grader's fault (no student Python runs in
    the trusted grader, so a recursion here is in the grader's or JAX's own code; a regrade,
    never a zero)."""
    if isinstance(e, (KeyboardInterrupt, GraderFault)):
        raise e
    if isinstance(e, RecursionError):
        raise GraderFault(f"{type(e).__name__}: {e}") from e


def _short_error(e: BaseException) -> str:
    if isinstance(e, GradingTimeout):
        return f"your function {e} (a loop that never ends, or far too much work)"
    return describe_error(e, limit=800)


def _place(problem: Problem, case: Case, mesh):
    out = []
    for a, spec in zip(case.args, problem.in_specs):
        if spec is None:
            out.append(a)
        elif problem.uses_mesh:
            out.append(devices.place(a, mesh, spec))
        else:
            out.append(devices.place(a, mesh))
    return out


def _shapes(problem: Problem, req: ExportRequest, mesh) -> list:
    """What :func:`_place` gives for the request's case, as shapes (each with the sharding
    ``_place`` would give it): enough to lower and compile its program."""
    import jax
    from jax.sharding import NamedSharding, SingleDeviceSharding

    out = []
    for a, spec in zip(req.args, problem.in_specs, strict=True):
        if spec is None:
            out.append(a.static)
            continue
        where = (NamedSharding(mesh, spec) if problem.uses_mesh
                 else SingleDeviceSharding(mesh.devices.flat[0]))
        out.append(jax.ShapeDtypeStruct(a.shape, np.dtype(a.dtype), sharding=where))
    return out


def _dynamic(problem: Problem, args):
    return [a for a, s in zip(args, problem.in_specs, strict=True) if s is not None]


def _bind(problem: Problem, fn, mesh) -> Callable:
    return functools.partial(fn, mesh=mesh) if problem.uses_mesh else fn


def compile_for(problem: Problem, fn, mesh, args, *, baseline: bool = False,
                options: Optional[dict] = None):
    """jit + lower + compile trusted ``fn`` (the jit baseline) for these placed args."""
    from jax.sharding import NamedSharding

    kw = {}
    if baseline and problem.uses_mesh:
        kw["out_shardings"] = NamedSharding(mesh, problem.out_spec)
    return devices.lower(_bind(problem, fn, mesh), *args, static_argnums=problem.static_argnums,
                         **kw).compile(options)


def speed_options() -> Optional[dict]:
    """How the speed case is compiled where it is timed, the student's program and the
    baseline alike: as XLA would (None) on an accelerator, :data:`SPEED_CPU_COMPILE` on CPU."""
    return on_cpu(SPEED_CPU_COMPILE)


def model_options() -> Optional[dict]:
    """How the speed case's program is compiled for the TPU model (its partitioned and
    optimised modules, XLA's FLOP count): on CPU, where that compile is never run (the
    instrumented copy runs, :meth:`Programs.counted_run`), :data:`MODEL_CPU_COMPILE`, whose
    HLO passes are :func:`speed_options`'s; elsewhere as XLA would."""
    return on_cpu(MODEL_CPU_COMPILE)


def _signature(problem: Problem, case: Case) -> tuple:
    """What a compiled executable depends on: array shapes and dtypes, static values."""
    return tuple((a.shape, a.dtype.str) if s is not None else ("static", a)
                 for a, s in zip(case.args, problem.in_specs, strict=True))


def request_for(problem: Problem, case: Case, layout, rid: int, platform: str) -> ExportRequest:
    """What the untrusted side is told about a case: shapes, dtypes, shardings, static values
    (never the array values)."""
    args = []
    for a, spec in zip(case.args, problem.in_specs, strict=True):
        if spec is None:
            args.append(ArgSpec(static=int(a)))
        else:
            args.append(ArgSpec(shape=tuple(int(d) for d in a.shape), dtype=a.dtype.name,
                                spec=spec_of(spec) if problem.uses_mesh else None))
    return ExportRequest(rid, problem.name, tuple(layout) if problem.uses_mesh else None,
                         tuple(args), platform)


@dataclass
class Plan:
    """Every case one function is graded on, as shapes: the inputs themselves are made from
    the secret seed only after the programs have arrived."""

    problem: Problem
    seed: int
    quick: bool
    with_big: bool
    platform: str
    #: request ids start here (one exporter serves every function of a submission)
    id_base: int = 0
    #: (layout, signature) -> its ExportRequest; the cases themselves are rebuilt from the seed
    #: by :meth:`cases` and :meth:`big` whenever they are needed
    requests: dict = field(default_factory=dict)
    #: "memory" / "speed" -> the big case's ExportRequest (:meth:`big_request`)
    big_requests: dict = field(default_factory=dict)
    #: where the big cases of a seed shared by a class are kept (:meth:`big_case`); None:
    #: drawn for this plan alone
    big_cases: Optional[BigCaseStore] = None

    def _rng(self, which: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(self.problem.name.encode()), which])

    def layouts(self):
        lays = self.problem.layouts or all_layouts()
        return lays[:2] if self.quick else lays

    def randomized_per_mesh(self) -> int:
        """How many of a mesh's cases (:meth:`cases`) are randomized; the edge cases follow."""
        return 1 if self.quick else self.problem.cases_per_mesh * self.problem.draws_per_shape

    def cases(self):
        """[(layout, [Case, ...])] for the numerics, rebuilt identically on every call."""
        out = []
        for i, layout in enumerate(self.layouts()):
            rng = self._rng(i)
            n = 1 if self.quick else self.problem.cases_per_mesh
            draws = 1 if self.quick else self.problem.draws_per_shape
            cases = []
            for _ in range(n):
                first = self.problem.case(rng, *layout, "grade")
                cases += [first] + [self.problem.redraw(rng, first) for _ in range(draws - 1)]
            if not self.quick:
                cases += self.problem.edges(rng, *layout)
            out.append((layout, cases))
        return out

    def public_twin(self, layout, case: Case, edge: Optional[int] = None) -> Optional[Case]:
        """A case of ``case``'s shapes and static values whose inputs are public: drawn from
        :data:`PUBLIC_SEED`, never from the secret seed, so whatever a message quotes of the
        student's program on it is the same in every grading run. ``edge``: ``case`` is the
        problem's edge case of that number, and its public draw is tried first (the same kind
        of input: all tokens to one expert, a negative shift); then the edge cases and the
        randomized cases of a public stream, the first with the same signature. None where
        :data:`PUBLIC_DRAWS` draws find none."""
        problem = self.problem
        want = _signature(problem, case)
        rng = np.random.default_rng([PUBLIC_SEED, zlib.crc32(problem.name.encode()),
                                     *(int(v) for v in layout)])
        edges = problem.edges(rng, *layout)
        if edge is not None and edge < len(edges) and _signature(problem, edges[edge]) == want:
            return edges[edge]
        for c in edges:
            if _signature(problem, c) == want:
                return c
        for _ in range(PUBLIC_DRAWS):
            c = problem.case(rng, *layout, "grade")
            if _signature(problem, c) == want:
                return c
        return None

    def public_big(self, size: str) -> Optional[Case]:
        """A memory or speed case of the secret one's shapes and static values whose inputs are
        public (drawn from :data:`PUBLIC_SEED`, the same in every grading run, its static
        values the secret case's, which its request tells the worker anyway): what a speed
        message quotes figures from where the secret case's own follow its values. None where
        :data:`PUBLIC_BIG_DRAWS` draws find none."""
        problem, layout = self.problem, self.problem.speed_layout
        want = self.big_request(size).args
        rng = np.random.default_rng([PUBLIC_SEED, zlib.crc32(problem.name.encode()),
                                     1000 + ("memory", "speed").index(size)])
        for _ in range(PUBLIC_BIG_DRAWS):
            c = problem.case(rng, *layout, size)
            c = Case(tuple(w.static if w.is_static else a for a, w in zip(c.args, want,
                                                                           strict=True)),
                     c.label)
            if request_for(problem, c, layout, 0, self.platform).args == want:
                return c
        return None

    def big(self, size: str) -> tuple:
        """(layout, Case) of the memory or speed check."""
        layout = self.problem.speed_layout
        rng = self._rng(1000 + ("memory", "speed").index(size))
        return layout, self.problem.case(rng, *layout, size)

    def big_case(self, size: str) -> BigCase:
        """The memory or speed case with its NumPy answer: read from :attr:`big_cases` where
        it is kept there, else drawn (:meth:`big`) and answered now."""
        return big_case(self.problem, self.problem.speed_layout,
                        lambda: self.big(size)[1], self.big_request(size), seed=self.seed,
                        size=size, store=self.big_cases)

    def big_request(self, size: str) -> ExportRequest:
        """The request of the memory or speed case (its case drawn once, to read its shapes)."""
        if size not in self.big_requests:
            self.big_requests[size] = self.request(*self.big(size))
        return self.big_requests[size]

    def big_sizes(self) -> list[str]:
        """The big cases this plan grades: "memory" and "speed", where the problem has them."""
        if not self.with_big:
            return []
        return (["memory"] if self.problem.memory_bound is not None else []) + (
            ["speed"] if self.problem.baseline is not None else [])

    def request(self, layout, case: Case) -> ExportRequest:
        key = (tuple(layout), _signature(self.problem, case))
        if key not in self.requests:
            self.requests[key] = request_for(self.problem, case, layout,
                                             self.id_base + len(self.requests), self.platform)
        return self.requests[key]

    def all_requests(self) -> list[ExportRequest]:
        """Every request of this function, planned once (the cases are made only to read
        their shapes, then dropped). A plan made before in this process with the same
        problem, seed and options has the same requests: they are taken from it (a warm
        grader grades a class on one seed; drawing the big cases again only to read their
        shapes would cost more than a second per submission)."""
        if self.requests:
            return list(self.requests.values())
        key = (id(self.problem), self.seed, self.quick, self.with_big, self.platform,
               self.id_base)
        with _planned_lock:
            earlier = _PLANNED.get(key)
        if earlier is not None and earlier[0] is self.problem:
            self.requests, self.big_requests = dict(earlier[1]), dict(earlier[2])
            return list(self.requests.values())
        for layout, cases in self.cases():
            for c in cases:
                self.request(layout, c)
        for size in self.big_sizes():
            self.big_request(size)
        with _planned_lock:
            _PLANNED[key] = (self.problem, dict(self.requests), dict(self.big_requests))
            while len(_PLANNED) > PLANS_KEPT:
                _PLANNED.popitem(last=False)
        return list(self.requests.values())


#: the seed of the public cases a numerics message quotes values from (:meth:`Plan.public_twin`):
#: public by design, the same in every grading run
PUBLIC_SEED = 20250101
#: randomized cases drawn, at most, to find one of a given signature (each costs microseconds)
PUBLIC_DRAWS = 4000
#: big cases drawn, at most, to find a public one of the secret one's signature (the course's
#: big cases have fixed shapes: the first fits)
PUBLIC_BIG_DRAWS = 4

#: how many functions' planned requests this process keeps (:meth:`Plan.all_requests`): every
#: graded function of the course, a few times over
PLANS_KEPT = 64
_PLANNED: "OrderedDict[tuple, tuple]" = OrderedDict()
_planned_lock = threading.Lock()


class Programs:
    """The artifacts of one function, checked on arrival and compiled once per signature.

    Compiles may run in a pool of :data:`COMPILE_THREADS` (inside :meth:`compiling`): each
    numerics program starts compiling as soon as its artifact arrives (:meth:`arrived`; where
    no verdict can be reused), while the worker still exports the others; the memory and
    speed cases' programs start once the function is to be graded (:meth:`start_big`), and
    compile while the numerics run. A program asked for while it compiles is waited for,
    never compiled twice."""

    def __init__(self, plan: Plan, replies: Optional[dict] = None):
        self.plan = plan
        self.replies = dict(replies or {})
        self._loaded: dict = {}
        self._compiled: dict = {}
        self._lock = threading.Lock()
        self._pool = None
        self._cancelled = False
        self._numerics: Optional[dict] = None  # request id -> (layout, case) to compile
        self._cases: Optional[list] = None
        #: request id -> the pool's job compiling it (a numerics program, or a big case's)
        self._job_of: dict = {}
        #: request id -> "memory" or "speed": the big cases compiled ahead (:meth:`start_big`)
        self._ahead: Optional[dict] = None
        #: how the speed case is compiled ahead: "model" (the executable and the partitioned
        #: module, :meth:`speed_program`), "plain", or None (not ahead: no speed check)
        self.speed_ahead: Optional[str] = None
        #: why this function's verdict may not be kept for another hand-in, or None: an
        #: artifact failed to lower or compile in the judge (:meth:`_lowered`), a failure of
        #: what the judge does with the artifact as much as of the program's text
        #: (:mod:`autograder.judge.reuse`)
        self.unsettled: Optional[str] = None

    # -- artifacts -------------------------------------------------------------------------
    def artifact(self, layout, case: Case) -> Artifact:
        return self._artifact(self.plan.request(layout, case))

    def _artifact(self, req: ExportRequest) -> Artifact:
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

    def key(self, *, with_speed: bool, timed: bool = False) -> Optional[tuple[str, str]]:
        """``(key, located digest)`` of this function's verdict (:mod:`autograder.judge.reuse`);
        None unless every program arrived intact."""
        digests, artifacts = [], []
        with phase("program digests"):
            for req in self.plan.all_requests():
                try:
                    artifacts.append(self._artifact(req))
                    digests.append((req, artifact_digest(artifacts[-1])))
                except Exception:  # noqa: BLE001 - an export error, a broken artifact
                    return None
        options = {"speed": with_speed, **({"timed": True} if timed else {})}
        return (function_key(self.plan, digests, options=options),
                located_digest(artifacts))

    # -- compiles --------------------------------------------------------------------------
    def _once(self, key, make):
        """``make()``'s result for ``key``, made once whichever thread asks first."""
        with self._lock:
            fut = self._compiled.get(key)
            mine = fut is None
            if mine:
                fut = self._compiled[key] = Future()
        if mine:
            try:
                fut.set_result(make())
            except Exception as e:  # noqa: BLE001 - kept, and raised where it is used
                fut.set_exception(e)
        return fut.result()

    def compiled(self, layout, case: Case, mesh, args, *, fast):
        """The compiled program for this case (``fast``: without LLVM's heavy passes on CPU,
        for the numerics, or ``"memory"``; the HLO and its text are the same)."""
        return self._compiled_for(self.plan.request(layout, case), args, fast=fast)

    @contextlib.contextmanager
    def _lowered(self, req: ExportRequest):
        """Around lowering and compiling ``req``'s artifact: a failure there marks this
        function's verdict :attr:`unsettled`, and is raised on."""
        try:
            yield
        except Exception as e:
            self.unsettled = f"an artifact failed to lower or compile ({type(e).__name__})"
            raise

    def _compiled_for(self, req: ExportRequest, args, *, fast):
        def make():
            art = self._artifact(req)
            with self._lowered(req):
                lowered = devices.lower(art.call, *_dynamic(self.plan.problem, args))
                if not fast:
                    return lowered.compile()
                return lowered.compile(on_cpu(MEMORY_CPU_COMPILE if fast == "memory"
                                              else FAST_CPU_COMPILE))

        return self._once((req.id, fast), make)

    def speed_program(self, layout, case: Case, mesh, args):
        """``(compiled, partitioned text)`` of the speed case, for the TPU model: one compile
        (:func:`model_options`) gives its partitioned module, its optimised module and XLA's
        FLOP count."""
        return self._speed_program_for(self.plan.request(layout, case), args)

    def _speed_program_for(self, req: ExportRequest, args):
        def make():
            from ..tpumodel.api import compile_partitioned

            art = self._artifact(req)
            with self._lowered(req):
                lowered = devices.lower(art.call, *_dynamic(self.plan.problem, args))
                return compile_partitioned(lowered, model_options())

        return self._once((req.id, "speed"), make)

    def counted_run(self, layout, case: Case, args, *, twin: bool = False):
        """The :class:`~autograder.tpumodel.loops.CountedRun` of a memory or speed case's
        program on that case's own arrays: one instrumented run (the student's work) serves the
        check of its result, the structure reading of the measured program and the model's
        pinned loops. ``twin``: ``case`` is the speed case's public twin
        (:meth:`Plan.public_big`), whose run is kept apart."""
        def make():
            from ..tpumodel.loops import count_run

            art = self.artifact(layout, case)
            return count_run(art.exported, _dynamic(self.plan.problem, args),
                             run=runner(SPEED_CPU_COMPILE))

        return self._once((self.plan.request(layout, case).id, "counted", twin), make)

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
                                 _dynamic(self.plan.problem, args),
                                 self.counted_run(layout, case, args, twin=twin),
                                 *self._geometry(mesh))

        return self._once((self.plan.request(layout, case).id, "pinned", twin), make)

    @contextlib.contextmanager
    def compiling(self, overlap: bool = True):
        """A pool that compiles numerics programs in the background while this is open
        (``overlap`` False: none; every program is then read and compiled on this thread when
        it is needed, so a fault is the owner's of that moment alone)."""
        from concurrent.futures import ThreadPoolExecutor

        if not overlap:
            yield self
            return
        pool = ThreadPoolExecutor(COMPILE_THREADS)
        self._pool = pool
        try:
            yield self
        finally:
            self._pool = None
            # what was not started is not needed any more; what runs is waited for (no
            # thread of this function outlives it)
            pool.shutdown(wait=True, cancel_futures=True)

    def cancel(self) -> None:
        """Drop the compiles not started yet (their verdict is known)."""
        self._cancelled = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def cases(self) -> list:
        """The plan's numerics cases, made once (the first time a program arrives or is run)."""
        if self._cases is None:
            self._cases = self.plan.cases()
        return self._cases

    def _numerics_cases(self) -> dict:
        if self._numerics is None:
            self._numerics = {}
            for layout, cases in self.cases():
                for c in cases:
                    self._numerics.setdefault(self.plan.request(layout, c).id, (layout, c))
        return self._numerics

    def _big_cases(self) -> dict:
        if self._ahead is None:
            self._ahead = {}
            for size in self.plan.big_sizes():
                if size == "speed" and self.speed_ahead is None:
                    continue
                self._ahead[self.plan.big_request(size).id] = size
        return self._ahead

    def _start(self, rid: int) -> None:
        if self._pool is None or rid in self._job_of:
            return
        todo = self._numerics_cases().pop(rid, None)
        if todo is None:
            return
        layout, case = todo
        problem = self.plan.problem

        def one():
            if self._cancelled:
                return
            try:
                with _pool_job():
                    mesh = _mesh_for(problem, layout)
                    self.compiled(layout, case, mesh, _place(problem, case, mesh), fast=True)
            except Exception:  # noqa: BLE001 - run_case reports it
                pass

        self._job_of[rid] = self._pool.submit(one)

    def start_big(self) -> None:
        """Start compiling the memory and speed cases' programs (in the pool, if open): they
        then compile beside the numerics runs. Called once the function is to be graded (not
        for a verdict reused from an identical program); a function whose numerics fail leaves
        them unused."""
        if self._pool is None:
            return
        for rid, size in list(self._big_cases().items()):
            if rid not in self._job_of:
                self._job_of[rid] = self._pool.submit(self._compile_big, size)

    def _compile_big(self, size: str) -> None:
        """Compile the memory or speed case's program from its shapes alone (the case's arrays
        are made when it runs)."""
        if self._cancelled:
            return
        req = self.plan.big_request(size)
        try:
            with _pool_job():
                problem = self.plan.problem
                args = _shapes(problem, req, _mesh_for(problem, problem.speed_layout))
                if size == "memory":
                    self._compiled_for(req, args, fast="memory")
                elif self.speed_ahead == "model":
                    self._speed_program_for(req, args)
                else:
                    self._compiled_for(req, args, fast=False)
        except Exception:  # noqa: BLE001 - the memory or speed check reports it
            pass

    def wait_compiled(self, layout, case: Case) -> None:
        """Wait for this case's program to finish compiling in the pool, if it was started
        there (outside any time limit: its compile may have queued behind others)."""
        job = self._job_of.get(self.plan.request(layout, case).id)
        if job is not None and not job.cancelled():
            with contextlib.suppress(Exception):
                job.result()

    def arrived(self, reply) -> None:
        """An export reply is here: start compiling its numerics program."""
        self.replies[reply.id] = reply
        if reply.error is None:
            self._start(reply.id)

    def start_all(self) -> None:
        """Start compiling every numerics program not started yet (in the pool, if open)."""
        for rid in list(self._numerics_cases()):
            self._start(rid)


def _mesh_for(problem: Problem, layout):
    return make_mesh(*layout)


def run_case(programs: Programs, layout, case: Case, *, want_program: bool,
             timeout: float | None = None, secret: bool = True) -> checks.Attempt:
    """Run one case of the student's program, and read its structure if asked. ``secret``:
    the case's inputs come from the secret seed (every case the grader plans), so what it finds
    wrong is said without values (:func:`~autograder.core.compare.copies_disagree`'s secret
    form); False for a public twin (:meth:`Plan.public_twin`)."""
    import jax

    problem = programs.plan.problem
    mesh = _mesh_for(problem, layout)
    att = checks.Attempt(mesh=mesh, layout=layout, case=case)
    att.expected = np.asarray(problem.reference(case.args, *layout))
    try:
        with time_limit(CALL_TIMEOUT if timeout is None else timeout):
            args = _place(problem, case, mesh)
            compiled = programs.compiled(layout, case, mesh, args, fast=True)
            out = compiled(*_dynamic(problem, args))
            out = genuine_array(out)
            out.block_until_ready()
            att.value = np.asarray(jax.device_get(out))
            if problem.uses_mesh:
                with grader_work("comparing the output's layout and copies"):
                    att.sharding_error = sharding_problem(out, mesh, problem.out_spec)
                    att.copies_error = copies_disagree(out, mesh, problem.rtol, problem.atol,
                                                       secret=secret)
            if want_program:
                art = programs.artifact(layout, case)
                with phase("read structure"):
                    read_structure(att, art.exported, mesh if problem.uses_mesh else None,
                                   compiled.as_text(), _dynamic(problem, args),
                                   perturbations=perturbations_of(problem.rules))
    except ArtifactError as e:
        att.error = str(e)
    except BaseException as e:  # noqa: BLE001
        _never_the_students(e)
        att.error = _short_error(e)
    return att


def read_structure(att: checks.Attempt, exported, mesh, compiled_text: str, dynamic,
                   count: Optional[Callable] = None,
                   perturbations: Optional[Callable] = None) -> None:
    """Read the program's structure into ``att`` with the reader the self-check uses
    (:func:`autograder.course.reading.read_paths`): a program with loops or conditionals runs
    once more, instrumented, on this case's arrays (the student's work; ``count``: that run's
    per-device counts, taken by the caller), the reading is the grader's. ``perturbations``
    (the rules', :func:`~autograder.course.reading.perturbations_of`): measured on this case
    (the numerics case whose structure is read; a big case's reading leaves it out)."""
    from ..course.reading import read_paths

    try:
        with student_work():
            paths = read_paths(exported, mesh, compiled_text, dynamic, att.case.args,
                               run=runner(FAST_CPU_COMPILE), count=count,
                               perturbations=perturbations)
    except (GraderFault, GradingTimeout, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - the reader and its instrumented copy are ours
        raise GraderFault(f"reading the program's structure: {type(e).__name__}: {e}") from e
    att.paths = paths


def gather_attempts(programs: Programs) -> list[checks.Attempt]:
    attempts = []
    cases = programs.cases()
    programs.start_all()
    for layout, cs in cases:
        for i, case in enumerate(cs):
            # each case runs once its own program is compiled, while the pool compiles the
            # others; the wait is outside the case's time limit
            with phase("compile numerics"):
                programs.wait_compiled(layout, case)
            att = run_case(programs, layout, case, want_program=(i == 0))
            attempts.append(att)
            if att.error and "timed out" in att.error:
                return attempts  # one hang is enough evidence; do not wait for more
    return attempts


#: seconds a public twin's run may take (its program is compiled already; an honest one takes
#: milliseconds): past it, no value is quoted
TWIN_TIMEOUT = 10.0


def run_public_twin(programs: Programs, attempts: list[checks.Attempt]) -> None:
    """Where a numerics case's output is wrong, run the same compiled program on public inputs
    of that case's shapes (:meth:`Plan.public_twin`) and keep the run in the attempt's
    ``public``: the numerics message quotes values from it alone. Nothing here changes a
    verdict; a twin that cannot be drawn, raises or runs long leaves ``public`` None."""
    problem = programs.plan.problem
    with grader_work("finding the failing case"):
        bad = checks.first_wrong(problem, attempts)
    if bad is None or bad.error is not None:
        return
    edge = None
    for layout, cases in programs.cases():
        if layout == bad.layout:
            at = next((i for i, c in enumerate(cases) if c is bad.case), None)
            randomized = programs.plan.randomized_per_mesh()
            if at is not None and at >= randomized:
                edge = at - randomized
    with grader_work("drawing a public case"):
        twin = programs.plan.public_twin(bad.layout, bad.case, edge)
    if twin is None:
        return
    att = run_case(programs, bad.layout, twin, want_program=False, timeout=TWIN_TIMEOUT,
                   secret=False)
    if att.error is None:
        bad.public = att


def measure(student, baseline, args, *, rounds: int = 15, min_batch_s: float = 2e-3) -> tuple:
    """Interleaved timing: (student_s, baseline_s, median per-round ratio)."""
    import jax

    def once(f, n):
        t0 = _clock()
        for _ in range(n):
            out = f(*args)
        jax.block_until_ready(out)
        return (_clock() - t0) / n

    once(student, 1)  # warm
    n, t = 1, once(baseline, 1)
    while t * n < min_batch_s and n < 1024:
        n *= 2
        t = once(baseline, n)
    ts, tb, ratios = [], [], []
    for r in range(rounds):
        if r % 2:
            b = once(baseline, n)
            s = once(student, n)
        else:
            s = once(student, n)
            b = once(baseline, n)
        ts.append(s)
        tb.append(b)
        ratios.append(s / max(b, 1e-12))
    return statistics.median(ts), statistics.median(tb), statistics.median(ratios)


def fresh_seed() -> int:
    """A secret seed for one grading run: nothing a student can predict or memorise."""
    return secrets.randbits(63)


def plan_for(problem: Problem, *, seed: int | None = None, quick: bool = False,
             with_speed: bool = True, id_base: int = 0,
             big_cases: Optional[BigCaseStore] = None) -> Plan:
    """The cases ``problem`` is graded on, from ``seed`` (None: a fresh secret one);
    ``big_cases``: where a class graded on ``seed`` keeps its big cases (only with a seed)."""
    if seed is None and big_cases is not None:
        raise ValueError("big cases are kept for a seed shared by a class, not a fresh one")
    return Plan(problem, fresh_seed() if seed is None else seed, quick,
                with_big=problem.memory_bound is not None or (
                    with_speed and problem.baseline is not None),
                platform=current_platform(), id_base=id_base, big_cases=big_cases)


def grade_function(problem: Problem, source, *, seed: int | None = None, quick: bool = False,
                   with_speed: bool = True, modeler: Optional[Callable] = None,
                   export_timeout: float = 120.0, plan: Optional[Plan] = None,
                   store: Optional[VerdictStore] = None, overlap: bool = True,
                   timed: Optional[bool] = None) -> FunctionResult:
    """Grade one function from the programs ``source`` exports.

    ``source`` is an :class:`~autograder.judge.artifacts.Exporter`: the sandboxed worker, or,
    for trusted code in this process, :class:`~autograder.worker.local.LocalExporter` (see
    :func:`autograder.supervisor.local.grade_function`); None: the submission does not define
    the function. Every check runs on the exported program; nothing here calls the student's
    Python. ``store``: verdicts of identical programs graded before on the same inputs
    (:mod:`autograder.judge.reuse`), reused and added to. ``overlap`` False: no compile pool
    (:meth:`Programs.compiling`), for a function whose last fault had no single owner.
    ``timed``: the speed case is timed against the jit baseline and the wall-clock ratio decides,
    the model's figure beside it (default: where the course's devices are real accelerators,
    :func:`timed_here`; True on emulated CPU devices is a test of that path, not a grade).
    """
    if timed is None:
        timed = timed_here()
    res = FunctionResult(problem.name, float(problem.points), weights=dict(problem.weights))
    if source is None or not hasattr(source, "export"):
        why = f"function {problem.name!r} not found in the submission"
        res.checks = [skipped(n, why) if n != "numerics" else failed(n, why)
                      for n in problem.check_names]
        return res
    exporter = source
    plan = plan or plan_for(problem, seed=seed, quick=quick, with_speed=with_speed)
    requests = plan.all_requests()
    programs = Programs(plan)
    if with_speed and problem.baseline is not None:
        programs.speed_ahead = _speed_ahead(modeler)
    with programs.compiling(overlap):
        # Programs compile as they arrive, beside the worker exporting the others; where an
        # identical program's verdict may be reused, not before the lookup (a clone's programs
        # would be compiled for nothing, the judge's cores taken from its worker)
        with phase("wait for exports"):
            replies = exporter.export(requests, export_timeout,
                                      on_reply=programs.arrived if store is None else None)
        programs.replies.update(replies)
        key = programs.key(with_speed=with_speed, timed=timed) if store is not None else None
        earlier = store.get(*key) if key else None
        if earlier is not None:
            try:
                res.checks = [CheckResult.from_dict(c) for c in earlier]
                res.reused = True
                programs.cancel()
                return res
            except ValueError:
                res.checks = []
        programs.start_big()
        _grade(programs, res, with_speed=with_speed, modeler=modeler, timed=timed)
    # A verdict that hit a time limit may owe it to a busy machine, one that an artifact's
    # failure to lower or compile here decided to the judge's handling of it: never handed on.
    if (key and programs.unsettled is None
            and not any("timed out" in c.message for c in res.checks)):
        store.put(key[0], [c.to_dict() for c in res.checks], key[1])
    return res


def _grade(programs: Programs, res: FunctionResult, *, with_speed: bool, modeler,
           timed: bool = False) -> None:
    problem = programs.plan.problem
    with phase("numerics (compile and run)"):
        attempts = gather_attempts(programs)
    with phase("numerics: a public case"):
        run_public_twin(programs, attempts)
    with grader_work("the numerics check"):
        num = checks.numerics(problem, attempts)
    res.checks.append(num)
    if any(a.error is not None for a in attempts):
        # a function that raised (or could not be exported or run) earns nothing else
        res.checks += [skipped(n, "the function must run on every case first (see numerics)")
                       for n in problem.check_names[1:]]
        return
    with grader_work("the sharding check"):
        res.checks.append(checks.sharding(problem, attempts))
    if not num.passed:
        res.checks += [skipped(n, "the numerics check must pass first")
                       for n in problem.check_names[1:] if n != "sharding"]
        return
    with grader_work("the structure check"):
        structure = checks.structure(problem, attempts)
    res.checks.append(structure)
    # the memory and speed cases' programs are held to the rules the numerics programs kept
    # (a program that broke them there has lost the structure share already, and is measured
    # as it is, for information)
    kept = structure.passed and bool(problem.rules)
    # memory and speed count only where the structure check passed (checks.credited); a
    # program that fails it is still measured, and its figures shown for information
    if problem.memory_bound is not None:
        with phase("memory"):
            memory = _memory_check(programs, rules=kept)
        res.checks.append(checks.credited(memory, structure))
    if problem.baseline is not None and with_speed:
        if modeler is None:
            modeler = _default_modeler()
        # a program the op table refuses fails speed with structure (core/optable.py)
        refused = next((checks.at(problem, a.layout, None, a.paths.refused) for a in attempts
                        if a.paths is not None and a.paths.refused), None)
        speed = _speed_check(programs, modeler, rules=kept, refused=refused, timed=timed)
        res.checks.append(checks.credited(speed, structure))


def _memory_check(programs: Programs, *, rules: bool) -> CheckResult:
    problem = programs.plan.problem
    big = _answered(programs.plan, "memory")
    layout, case = big.layout, big.case
    mesh = _mesh_for(problem, layout)
    where = checks.where(problem, layout, case)
    try:
        with time_limit(CALL_TIMEOUT):
            args = _place(problem, case, mesh)
            compiled = programs.compiled(layout, case, mesh, args, fast="memory")
            stats = compiled.memory_analysis()
            temp = None if stats is None else int(stats.temp_size_in_bytes)
            wrong = _measured_program_wrong(programs, "memory", where, compiled, big, mesh,
                                            args, rules=rules)
    except BaseException as e:  # noqa: BLE001
        _never_the_students(e)
        return failed("memory", f"{where}: could not compile and run it: {_short_error(e)}")
    if wrong is not None:
        return wrong
    with grader_work("the memory check"):
        bound, what = problem.memory_bound(case, *layout)
        return checks.memory(problem, temp, int(bound), what, where)


def _answered(plan: Plan, size: str) -> BigCase:
    """The memory or speed case with its NumPy answer, made (or read) now: the grader's work,
    before the time limit of the submission's program starts, so a slow reference is never the
    student's timeout, and its error is a regrade."""
    with phase(f"{size}: the case and its answer"), grader_work("the NumPy reference"):
        return plan.big_case(size)


def _measured_program_wrong(programs: Programs, check: str, where: str, compiled, big: BigCase,
                            mesh, args, *, rules: bool) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for the memory or speed case may not be
    measured, else None: it must compute the case's answer (:func:`_big_case_values`) and,
    where the numerics programs kept the structure rules (``rules``), keep them too
    (:func:`_big_case_structure`)."""
    with phase(f"{check}: check the values"):
        wrong = _big_case_values(programs, check, where, compiled, big, args)
    if wrong is None and rules:
        with phase(f"{check}: structure"):
            wrong = _big_case_structure(programs, check, big, mesh, args, compiled)
    return wrong


def _big_case_values(programs: Programs, check: str, where: str, compiled, big: BigCase,
                     args) -> Optional[CheckResult]:
    """Run the program compiled for the memory or speed case once and compare its output with
    the NumPy reference (:func:`checks.big_case_values`; ``big``'s answer is made
    beforehand, :func:`_answered`). A program with loops or branches runs once, instrumented
    (:meth:`Programs.counted_run`): its result is checked here and its counts serve the
    structure rules and the model, so the big case is not run twice. The same computation
    either way; where the counting copy cannot be made, the compiled program runs (the
    structure and model readings then fail with the reason)."""
    import jax

    from ..tpumodel.loops import LoopCountError

    problem = programs.plan.problem
    try:
        out = programs.counted_run(big.layout, big.case, args).out
    except LoopCountError:
        out = None
    if out is None:
        out = compiled(*_dynamic(problem, args))
    out = genuine_array(out)
    value = np.asarray(jax.device_get(out))
    expected = big.expected
    copies = (copies_disagree(out, _mesh_for(problem, big.layout), problem.rtol, problem.atol,
                              secret=True) if problem.uses_mesh else None)
    return checks.big_case_values(problem, check, where, value, expected, copies)


def _big_case_structure(programs: Programs, check: str, big: BigCase, mesh, args,
                        compiled) -> Optional[CheckResult]:
    """A failed ``check`` when the program compiled for the memory or speed case breaks the
    structure rules (:func:`checks.big_case_structure`): read as the numerics programs are, its
    loops and branches counted by the one run on this case's arrays that also gave the result
    checked and the TPU model's pinned loops (:meth:`Programs.counted_run`)."""
    problem = programs.plan.problem
    layout, case = big.layout, big.case
    att = checks.Attempt(mesh=mesh, layout=layout, case=case)

    def count(shape, names):
        return programs.counted_run(layout, case, args).per_device(shape, names)

    read_structure(att, programs.artifact(layout, case).exported,
                   mesh if problem.uses_mesh else None, compiled.as_text(),
                   _dynamic(problem, args), count=count)
    with grader_work(f"the {check} check"):
        return checks.big_case_structure(problem, check, checks.where(problem, layout, case),
                                         att)


def timed_here() -> bool:
    """Whether the speed case is timed here by default: on real accelerators (the course's
    devices are 8 or more of them), where wall-clock means what it would on the chips."""
    return devices.is_accelerator()


def _speed_check(programs: Programs, modeler, *, rules: bool,
                 refused: Optional[str] = None, timed: bool = False) -> CheckResult:
    """The speed check of the speed case's program. ``refused``: the op table's refusal of a
    numerics program (:mod:`autograder.core.optable`); that program, or a speed program the
    table refuses, fails here as it fails structure, before anything is compiled or timed."""
    problem = programs.plan.problem
    big = _answered(programs.plan, "speed")
    layout, case = big.layout, big.case
    mesh = _mesh_for(problem, layout)
    try:
        with time_limit(2 * CALL_TIMEOUT):
            if refused is None:
                with phase("speed: op table"):
                    got = refusal(programs.artifact(layout, case).text,
                                  tuple(layout) if problem.uses_mesh else None)
                if got is not None:
                    refused = checks.at(problem, layout, case, str(got))
            if refused is not None:
                return checks.refused_speed(refused, modeled=modeler is not None)
            args = _place(problem, case, mesh)
            modeled: dict = {}
            st_text = None
            with phase("speed: compile"):  # one compile: the executable and the model's input
                if modeler is not None:
                    student, st_text = programs.speed_program(layout, case, mesh, args)
                else:
                    student = programs.compiled(layout, case, mesh, args, fast=False)
            wrong = _measured_program_wrong(programs, "speed", checks.where(problem, layout, case),
                                            student, big, mesh, args, rules=rules)
            if wrong is not None:
                return wrong
            base_text = None
            if modeler is not None:
                with phase("speed: compile"), grader_work("the jit baseline"):
                    base_text = baseline_text(problem, layout, case, mesh, args)
            modeled, s, b, ratio, rounds = _speed_figures(
                programs, modeler, layout, case, mesh, args, student,
                (st_text, base_text) if modeler is not None else None, timed=timed)
            if "unreadable" in modeled:
                return failed("speed", "the TPU model cannot price this program: "
                              f"{modeled['unreadable']}. Speed is judged by the model alone "
                              "off a TPU, so this check fails; write the program with the "
                              "shard_map, collectives and loops the exercise asks for")
    except BaseException as e:  # noqa: BLE001
        _never_the_students(e)
        return failed("speed", f"could not time it: {_short_error(e)}")
    modeled = dict(modeled or {})
    if modeler is not None and "ratio" not in modeled:
        raise GraderFault("the TPU model returned no verdict for the speed check")
    t = checks.Timing(student_us=s * 1e6, baseline_us=b * 1e6, ratio=ratio, rounds=rounds,
                      platform=current_platform(), modeled=modeled if "ratio" in modeled else {},
                      timed=bool(rounds), counted=_follows_data(programs, layout, case, args, modeled,
                                            timed=bool(rounds)))
    public = None
    if t.counted:  # the figures follow the secret case's values: a public twin's are quoted
        public = _public_speed(programs, modeler, mesh, student,
                               (st_text, base_text) if modeler is not None else None,
                               timed=timed, secret=(t, case, args))
    with grader_work("the speed check"):
        return checks.speed(problem, t, public=public)


def _speed_figures(programs: Programs, modeler, layout, case: Case, mesh, args, student,
                   texts: Optional[tuple], *, timed: bool, twin: bool = False) -> tuple:
    """``(modeled, student_s, baseline_s, ratio, rounds)`` of the speed case's compiled program
    ``student`` run on ``args`` (``case``'s, placed): the TPU model's verdict with its loops and
    branches as one instrumented run on these arrays counts them, and where it is timed, the
    wall-clock figures. ``twin``: ``case`` is the speed case's public twin (its runs are kept
    apart from the secret case's)."""
    problem = programs.plan.problem
    modeled: dict = {}
    if modeler is not None:
        def pinned():
            with student_work():
                return programs.pinned_speed_program(layout, case, mesh, args, twin=twin)

        def measured():  # the run that checked the values: no second one
            return programs.measured_counts(layout, case, mesh, args, twin=twin)

        with phase("speed: model"), grader_work("the TPU model"):
            modeled = modeler(problem, None, mesh, args, program=True, texts=texts,
                              pinned=pinned, measured=measured, compiled=student) or {}
        _check_floor(modeled)
        if "unreadable" in modeled:
            return modeled, float("nan"), float("nan"), float("nan"), 0
    # Wall-clock is timed only where it decides: a real accelerator (``timed``; the model's
    # figure beside it), or emulated devices told to (a test of this path). Where the model
    # decides, timing emulated devices adds nothing.
    rounds = MEASURED_ROUNDS if (timed or modeler is None) else 0
    s = b = ratio = float("nan")
    if rounds:
        # the baseline compiled as the student's program was (the model's compile, where one
        # ran), so the two are timed alike
        options = speed_options() if modeler is None else model_options()
        with phase("speed: compile"), grader_work("compiling the jit baseline"):
            base = compile_for(problem, problem.baseline, mesh, args, baseline=True,
                               options=options)
        with phase("speed: measure"):
            s, b, ratio = measure(student, base, _dynamic(problem, args), rounds=rounds)
    return modeled, s, b, ratio, rounds


def _follows_data(programs: Programs, layout, case: Case, args, modeled: dict, *,
                  timed: bool) -> bool:
    """Whether the speed case's figures may follow its values (which are secret): the model
    pinned loops or branches to the counts its run took, or, where it is ``timed``, the
    program has loops or branches at all (a wall-clock time follows what runs). A modeled
    program without pinned counts is priced from its text and shapes alone."""
    from ..tpumodel.loops import LoopCountError

    if modeled.get("trips") or modeled.get("branches"):
        return True
    if not timed:
        return False
    try:
        return bool(programs.counted_run(layout, case, args).tags)
    except LoopCountError:
        return True  # not counted: assume it may


def _same_counts(one, two) -> bool:
    """Whether two instrumented runs of one program counted the same (every tag's values)."""
    return (one.tags == two.tags and len(one.values) == len(two.values)
            and all(np.array_equal(a, b) for a, b in zip(one.values, two.values)))


#: seconds the speed case's public twin may take (its program is compiled already), the model
#: and any timing included: past it, no figure is quoted
SPEED_TWIN_TIMEOUT = 60.0


def _public_speed(programs: Programs, modeler, mesh, student, texts: Optional[tuple], *,
                  timed: bool, secret: tuple) -> Optional[checks.Timing]:
    """The speed figures of the same compiled program on the speed case's public twin
    (:meth:`Plan.public_big`): what a speed message quotes where the secret case's own figures
    follow its values. None where no twin is drawn, or it fails or runs long: then no figure
    is quoted. Nothing here changes the verdict. ``secret``: ``(timing, case, placed args)``
    of the secret case; where only the model decides and the twin's run counts what the
    secret case's counted, the model's inputs are the same and so are its figures (not
    modeled twice)."""
    plan = programs.plan
    problem = plan.problem
    with phase("speed: a public case"), grader_work("drawing a public case"):
        twin = plan.public_big("speed")
    if twin is None:
        return None
    layout = problem.speed_layout
    t, case, secret_args = secret
    try:
        with time_limit(SPEED_TWIN_TIMEOUT):
            args = _place(problem, twin, mesh)
            if not t.rounds and _same_counts(programs.counted_run(layout, case, secret_args),
                                             programs.counted_run(layout, twin, args,
                                                                  twin=True)):
                return t
            modeled, s, b, ratio, rounds = _speed_figures(
                programs, modeler, layout, twin, mesh, args, student, texts, timed=timed,
                twin=True)
    except BaseException as e:  # noqa: BLE001
        _never_the_students(e)
        return None
    if modeler is not None and "ratio" not in modeled:
        return None
    return checks.Timing(student_us=s * 1e6, baseline_us=b * 1e6, ratio=ratio, rounds=rounds,
                         platform=current_platform(), modeled=modeled, timed=bool(rounds))


def _check_floor(modeled: dict) -> None:
    """The model's FLOPs stand on XLA's count of the same executable (``modeled['flops']``,
    :mod:`autograder.tpumodel.work`): a verdict whose count fell below it, the floor not
    applied, is the grader's fault, never given."""
    from ..tpumodel.work import SLACK

    if "ratio" not in modeled:
        return
    flops = modeled.get("flops")
    if flops is None:
        raise GraderFault("the TPU model's verdict lacks XLA's FLOP count of the program")
    if flops["xla"] is not None and flops["used"] * (1.0 + SLACK) < flops["xla"]:
        raise GraderFault(f"the TPU model counted {flops['used']:.4g} FLOPs where XLA counts "
                          f"{flops['xla']:.4g}, and the floor was not applied")


#: interleaved timing rounds when wall-clock is the speed basis
MEASURED_ROUNDS = 15

#: the trusted side's class-wide cache (set by :func:`autograder.judge.enable_cache`); the
#: jit baselines' partitioned modules are kept under ``model/`` there
CACHE_DIR: Optional[Path] = None


@functools.lru_cache(maxsize=None)
def _baseline_text_key(problem_name: str, layout: tuple, signature: tuple) -> str:
    import hashlib

    import jax

    from ..core.identity import grader_hash

    return hashlib.sha256(repr((grader_hash(), jax.__version__, problem_name, layout,
                                signature)).encode()).hexdigest()[:24]


_baseline_texts: dict = {}


def baseline_text(problem: Problem, layout, case: Case, mesh, args) -> str:
    """The partitioned module of the speed case's jit baseline, for the model: computed once per
    grader and JAX version, then read from the class-wide cache."""
    from ..tpumodel.api import partitioned_hlo

    key = _baseline_text_key(problem.name, tuple(layout), _signature(problem, case))
    if key in _baseline_texts:
        return _baseline_texts[key]
    path = CACHE_DIR / "model" / f"{problem.name}-{key}.hlo" if CACHE_DIR else None
    text = None
    if path is not None and path.exists():
        text = path.read_text(encoding="utf-8")
    if not text:
        from jax.sharding import NamedSharding

        outs = NamedSharding(mesh, problem.out_spec) if problem.uses_mesh else None
        text = partitioned_hlo(_bind(problem, problem.baseline, mesh), args,
                               static_argnums=problem.static_argnums, out_shardings=outs)
        if path is not None:
            with replaced(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
    _baseline_texts[key] = text
    return text


def _speed_ahead(modeler) -> Optional[str]:
    """How the speed case's program may compile ahead (:attr:`Programs.speed_ahead`): as the
    speed check will compile it, with the modeler it will use (the default one where none is
    given): "plain" where it is timed, "model" where the model reads it, None where it must
    not (the model's compile, for its dump, switches the persistent cache process-wide when
    that cache is on: then it runs alone, in the speed check, never beside the pool)."""
    if modeler is None:
        try:
            modeler = _default_modeler()
        except RuntimeError:
            return None  # the speed check says why
    if modeler is None:
        return "plain"
    from ..tpumodel.api import persistent_cache_on

    return None if persistent_cache_on() else "model"


def _default_modeler():
    """The modeled-TPU speed basis when no TPU is present (None on a TPU: measured time)."""
    try:
        from ..tpumodel import default_modeler
    except ImportError as e:
        raise RuntimeError(f"the TPU model could not be loaded ({e})") from e
    return default_modeler()
