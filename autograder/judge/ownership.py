"""Who owns the judge's work on one function at each moment (the student's, the grader's or both),
and how the grader's own faults are told from the student's."""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator, Optional

from ..core.errors import GradingTimeout, describe_error
from ..core.records import Owner

__all__ = ["GraderFault", "Owner", "Ownership", "fault_text", "never_the_students",
           "short_error"]


class GraderFault(Exception):
    """The grader's own code failed while judging a function: not the student's doing, so the
    function gets no verdict and is graded again (a regrade)."""


class Ownership:
    """Whose work one job's judge is doing, told to ``hook`` each time it changes hands.

    The main thread's work is owned by the innermost :meth:`grader_work` or
    :meth:`student_work` block under way (none: the student's); a compile pool's jobs on the
    submission's programs (:meth:`pool_job`) are the student's work, whoever owns the main
    thread meanwhile, so the grader's own work beside one is :attr:`Owner.BOTH`. The judge
    process passes each change on to the supervisor, which blames a missed deadline or a crash
    on the owner of that moment (BOTH: the function is graded again with nothing overlapping).
    One object per job: nothing here is shared between jobs or processes."""

    def __init__(self, hook: Optional[Callable[[Owner], None]] = None):
        #: told the new owner each time it changes (None: nobody listens)
        self.hook = hook
        #: who owns the main thread's work under way, innermost last (empty: the student's)
        self._owners: list[Owner] = []
        #: jobs of a compile pool running now: each reads or compiles the submission's programs
        self._pool_jobs = 0
        #: the owner last told to :attr:`hook`
        self._told = Owner.STUDENT
        self._lock = threading.RLock()

    def now(self) -> Owner:
        """Whose work the judge is doing: the main thread's owner, or BOTH where the grader's
        own work runs while a pool thread works on the submission's programs."""
        main = self._owners[-1] if self._owners else Owner.STUDENT
        return Owner.BOTH if main is Owner.GRADER and self._pool_jobs else main

    def _tell(self) -> None:
        with self._lock:
            now = self.now()
            if now is not self._told:
                self._told = now
                if self.hook is not None:
                    self.hook(now)

    def reset(self) -> None:
        """A new function starts: its work is the student's until said otherwise (as the
        supervisor assumes on every ``start`` record)."""
        with self._lock:
            self._told = Owner.STUDENT

    @contextlib.contextmanager
    def pool_job(self) -> Iterator[None]:
        """A compile pool's job on the submission's programs, counted while it runs."""
        with self._lock:
            self._pool_jobs += 1
            self._tell()
        try:
            yield
        finally:
            with self._lock:
                self._pool_jobs -= 1
                self._tell()

    @contextlib.contextmanager
    def _owned_by(self, owner: Owner) -> Iterator[None]:
        with self._lock:
            self._owners.append(owner)
            self._tell()
        try:
            yield
        finally:
            with self._lock:
                self._owners.pop()
                self._tell()

    @contextlib.contextmanager
    def grader_work(self, what: str) -> Iterator[None]:
        """The grader's own work (the baseline, the model, reading a program, the checks): an
        error in it becomes a :class:`GraderFault`, and a deadline missed or a crash meanwhile
        is the grader's too."""
        with self._owned_by(Owner.GRADER):
            try:
                yield
            except (GraderFault, GradingTimeout, KeyboardInterrupt):
                raise
            except Exception as e:  # noqa: BLE001
                raise GraderFault(f"{what}: {type(e).__name__}: {e}") from e

    @contextlib.contextmanager
    def student_work(self) -> Iterator[None]:
        """Running the submission's program from inside the grader's own work (the model
        counting its loops on the grading input): a deadline or a crash meanwhile is the
        student's."""
        with self._owned_by(Owner.STUDENT):
            yield


def fault_text(e: BaseException) -> str:
    """How a regrade names the grader's failure (for the instructor: the student did nothing
    wrong here)."""
    import traceback

    where = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    at = f" (at {where[0].filename.rsplit('/', 2)[-1]}:{where[0].lineno})" if where else ""
    text = str(e) if isinstance(e, GraderFault) else f"{type(e).__name__}: {e}"
    return f"the grader failed: {text}"[:600] + at


def never_the_students(e: BaseException) -> None:
    """Raise again what must not become the submission's failure: an interrupt, the grader's
    own fault, and a Python recursion error, as the grader's fault (no student Python runs in
    the trusted grader, so a recursion here is in the grader's or JAX's own code; a regrade,
    never a zero)."""
    if isinstance(e, (KeyboardInterrupt, GraderFault)):
        raise e
    if isinstance(e, RecursionError):
        raise GraderFault(f"{type(e).__name__}: {e}") from e


def short_error(e: BaseException) -> str:
    if isinstance(e, GradingTimeout):
        return f"your function {e} (a loop that never ends, or far too much work)"
    return describe_error(e, limit=800)
