"""The compile pool of one function: its programs compiled ahead in threads, while the worker still
exports and the numerics run, each as a job of the submission's (:meth:`Ownership.pool_job`)."""
from __future__ import annotations

import contextlib
import os
from typing import Callable, Iterator, Optional

from ..core.meshes import make_mesh
from ..core.problem import Case
from .placement import place_args, shaped_args
from .programs import CompileKind, Programs
from .timing import phase

#: programs compiled at once for the numerics (one per core here)
COMPILE_THREADS = max(1, min(4, os.cpu_count() or 1))


class CompilePool:
    """Schedules the compiles of one function's :class:`~autograder.judge.programs.Programs`.

    Compiles run in a pool of :data:`COMPILE_THREADS` (inside :meth:`compiling`): each
    numerics program starts compiling as soon as its artifact arrives (:meth:`arrived`; where
    no verdict can be reused), while the worker still exports the others; the memory and
    speed cases' programs start once the function is to be graded (:meth:`start_big`), and
    compile while the numerics run. ``speed_ahead``: how the speed case's program compiles
    ahead (:attr:`CompileKind.MODEL` where the model reads it, :attr:`CompileKind.PLAIN`
    where it is timed), None: not ahead (no speed check, or it must compile alone)."""

    def __init__(self, programs: Programs, *, speed_ahead: Optional[CompileKind] = None,
                 hold: Optional[Callable] = None):
        self.programs = programs
        self.speed_ahead = speed_ahead
        #: ``hold(reply)``: whether an arrived program waits for the verdict's lookup (it may
        #: be a program graded before); the first that need not wait starts every compile
        self._hold = hold
        self._held: list = []
        self._pool = None
        self._cancelled = False
        self._numerics: Optional[dict] = None  # request id -> (layout, case) to compile
        #: request id -> the pool's job compiling it (a numerics program, or a big case's)
        self._job_of: dict = {}
        #: request id -> "memory" or "speed": the big cases compiled ahead (:meth:`start_big`)
        self._ahead: Optional[dict] = None

    @property
    def open(self) -> bool:
        """Whether compiles run in the pool now (else on the main thread, when needed)."""
        return self._pool is not None

    @contextlib.contextmanager
    def compiling(self, overlap: bool = True) -> Iterator["CompilePool"]:
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

    def _numerics_cases(self) -> dict:
        if self._numerics is None:
            self._numerics = {}
            for layout, cases in self.programs.cases():
                for c in cases:
                    self._numerics.setdefault(self.programs.request(layout, c).id, (layout, c))
        return self._numerics

    def _big_cases(self) -> dict:
        if self._ahead is None:
            self._ahead = {}
            plan = self.programs.plan
            for size in plan.big_sizes():
                if size == "speed" and self.speed_ahead is None:
                    continue
                self._ahead[plan.big_request(size).id] = size
        return self._ahead

    def _start(self, rid: int) -> None:
        if self._pool is None or rid in self._job_of:
            return
        todo = self._numerics_cases().pop(rid, None)
        if todo is None:
            return
        layout, case = todo
        programs = self.programs
        problem = programs.plan.problem

        def one():
            if self._cancelled:
                return
            try:
                with programs.ownership.pool_job(), phase("pool: compile numerics"):
                    args = place_args(problem, case, make_mesh(*layout))
                    programs.compiled(layout, case, args, CompileKind.NUMERICS)
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
        programs = self.programs
        req = programs.plan.big_request(size)
        try:
            with programs.ownership.pool_job(), phase(f"pool: compile the {size} case"):
                problem = programs.plan.problem
                args = shaped_args(problem, req, make_mesh(*problem.speed_layout))
                kind = CompileKind.MEMORY if size == "memory" else self.speed_ahead
                programs.compiled_for(req, args, kind)
                # its loops and branches are counted by one instrumented run on the case's
                # arrays (the values checked, the structure read, the model's loops pinned):
                # its copy compiles here too, beside the numerics runs
                if not self._cancelled:
                    programs.compile_counting(req, args)
        except Exception:  # noqa: BLE001 - the memory or speed check reports it
            pass

    def wait_compiled(self, layout, case: Case) -> None:
        """Wait for this case's program to finish compiling in the pool, if it was started
        there (outside any time limit: its compile may have queued behind others)."""
        job = self._job_of.get(self.programs.request(layout, case).id)
        if job is not None and not job.cancelled():
            with contextlib.suppress(Exception):
                job.result()

    def arrived(self, reply) -> None:
        """An export reply is here: start compiling its numerics program, unless ``hold`` says
        it may wait for a verdict kept for it (then it waits until a program arrives that no
        kept verdict was judged on, and the function's verdict is new, or until
        :meth:`start_all`)."""
        self.programs.replies[reply.id] = reply
        if reply.error is not None:
            return
        if self._hold is not None:
            if self._hold(reply):
                self._held.append(reply.id)
                return
            self._hold = None  # a program no kept verdict holds: this function's is new
            for rid in self._held:
                self._start(rid)
            self._held = []
        self._start(reply.id)

    def start_all(self) -> None:
        """Start compiling every numerics program not started yet (in the pool, if open)."""
        for rid in list(self._numerics_cases()):
            self._start(rid)
