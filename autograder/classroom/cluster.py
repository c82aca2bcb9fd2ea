"""Grading on a Dask distributed cluster: ``grade-all DIR --scheduler tcp://host:8786``.

The boundary with the cluster is two records, and nothing else crosses it:

* :class:`GradeTask` (client -> worker): one submission's bytes (the file, plus the student's
  own folder in the nbgrader layout, under the same rules as
  :func:`~autograder.supervisor.copy_student_folder`) and the run's :class:`~autograder.supervisor.Options`
  as their ``to_dict`` (the run's secret seed included);
* :class:`GradeOutcome` (worker -> client): the :class:`~autograder.core.results.SubmissionResult`
  as its ``to_dict``, how long the grading took and where, or why it could not be graded.

:func:`run_task` runs on the worker: it lays the files out in a fresh private folder and grades
them with :func:`~autograder.supervisor.grade_submission`, exactly as a local ``grade-all`` would
(student code in the sandbox; a worker that cannot isolate it sends back an error, never an
unisolated grading). The worker uses its own machine's class-wide cache.

:func:`grade_on_cluster` runs on the client (the machine that ran ``grade-all``): it submits
one task per submission and yields the outcomes as they complete. Reports, their signatures
and the CSV are written by the client alone (:mod:`autograder.classroom.batch`); the workers never see
the reports or the signing key.
"""
from __future__ import annotations

import copy
import os
import socket
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable, Iterator, Optional

from ..core.records import (
    _expect_keys,  # one check of a record's fields (RecordError: a ValueError)
)

#: the most bytes of the student's folder sent with a submission (as copy_student_folder)
FOLDER_LIMIT = 64 << 20

INSTALL_HINT = "pip install 'jax-scaling-course[cluster]'"


class ClusterUnavailable(RuntimeError):
    """Dask distributed is not installed here."""


def require_distributed():
    """The ``distributed`` module, or :class:`ClusterUnavailable` naming the extra."""
    try:
        import distributed
    except ImportError:
        raise ClusterUnavailable("grading on a cluster needs Dask distributed: "
                                 f"{INSTALL_HINT}") from None
    return distributed


def _typed(d: dict, name: str, types, *, optional: bool = False):
    v = d.get(name)
    if v is None and optional:
        return None
    if not isinstance(v, types) or (isinstance(v, bool) and bool not in
                                    (types if isinstance(types, tuple) else (types,))):
        raise ValueError(f"{name}: expected {types}, found {type(v).__name__}")
    return v


def _component(s: str, what: str) -> str:
    """``s`` as one safe path component (a student's or a folder's name)."""
    if not isinstance(s, str) or not s or s in (".", "..") or "/" in s or "\\" in s \
            or "\0" in s:
        raise ValueError(f"{what}: not a plain file or folder name: {s!r}"[:200])
    return s


def _relpath(s: str) -> str:
    """``s`` as a relative path inside the student's folder: no way out, nothing hidden."""
    if not isinstance(s, str) or not s or "\0" in s or "\\" in s:
        raise ValueError(f"not a relative path: {s!r}"[:200])
    p = PurePosixPath(s)
    if p.is_absolute() or any(part in ("", ".", "..") or part.startswith(".")
                              for part in p.parts):
        raise ValueError(f"not a plain relative path: {s!r}"[:200])
    return str(p)


@dataclass(frozen=True)
class GradeTask:
    """One submission to grade, as it crosses to a worker."""

    student: str
    assignment: Optional[str]
    #: the name of the folder the submission sits in (nbgrader: the assignment's)
    folder: str
    #: the submission's file name (a key of ``files``)
    filename: str
    #: relative path -> content: the submission, and the student's own folder if ``own_folder``
    files: dict
    #: the file sits in the student's own folder, which grading may see (Options.folder)
    own_folder: bool
    #: the run's :meth:`Options.to_dict` (assignment and folder come from this task)
    options: dict
    #: :func:`autograder.core.identity.grader_hash` of the client: a worker with another grader refuses
    grader: str = ""
    #: grade with the worker machine's own class-wide cache (the client used its default one)
    worker_cache: bool = True

    @classmethod
    def of(cls, item, options: dict, *, grader: str = "", worker_cache: bool = True,
           limit: int = FOLDER_LIMIT) -> "GradeTask":
        """The task for a :class:`autograder.classroom.batch.Item` (reads its files)."""
        path = Path(item.path)
        files: dict[str, bytes] = {}
        if item.own_folder and path.parent.is_dir():
            from ..supervisor.handin import own_files, read_capped
            from ..supervisor.options import Limits

            for p in own_files(path.parent, limit, Limits.from_dict(options["limits"])
                               if isinstance(options.get("limits"), dict) else None):
                files[p.relative_to(path.parent).as_posix()] = read_capped(p)
        files[path.name] = path.read_bytes()  # the submission itself, always
        return cls(student=item.student, assignment=item.assignment, folder=path.parent.name,
                   filename=path.name, files=files, own_folder=bool(item.own_folder),
                   options=dict(options), grader=grader, worker_cache=worker_cache)

    def to_dict(self) -> dict:
        return {"student": self.student, "assignment": self.assignment, "folder": self.folder,
                "filename": self.filename, "files": dict(self.files),
                "own_folder": self.own_folder, "options": dict(self.options),
                "grader": self.grader, "worker_cache": self.worker_cache}

    @classmethod
    def from_dict(cls, d: dict) -> "GradeTask":
        _expect_keys(d, cls)
        files = _typed(d, "files", dict)
        out: dict[str, bytes] = {}
        for k, v in files.items():
            if not isinstance(v, (bytes, bytearray)):
                raise ValueError(f"files[{k!r}]: expected bytes, found {type(v).__name__}")
            out[_relpath(k)] = bytes(v)
        filename = _component(_typed(d, "filename", str), "filename")
        if filename not in out:
            raise ValueError(f"the submission {filename!r} is not among the files")
        return cls(student=_component(_typed(d, "student", str), "student"),
                   assignment=_typed(d, "assignment", str, optional=True),
                   folder=_component(_typed(d, "folder", str), "folder"),
                   filename=filename, files=out,
                   own_folder=_typed(d, "own_folder", bool),
                   options=_typed(d, "options", dict),
                   grader=_typed(d, "grader", str) if "grader" in d else "",
                   worker_cache=_typed(d, "worker_cache", bool) if "worker_cache" in d
                   else True)

    def lay_out(self, root: Path) -> Path:
        """Write the files under ``root/submitted/<student>/<folder>/`` (nbgrader's layout);
        the submission's path."""
        folder = Path(root) / "submitted" / self.student / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        for rel, data in self.files.items():
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return folder / self.filename


@dataclass(frozen=True)
class GradeOutcome:
    """What a worker sends back: the result (``SubmissionResult.to_dict()``) or an error."""

    result: Optional[dict] = None
    #: seconds the worker spent on the task (grading and, the first time, warming its cache)
    seconds: float = 0.0
    #: the worker's address (tcp://...) and its machine's name
    worker: str = ""
    hostname: str = ""
    #: why it was not graded (the worker cannot isolate student code, another grader, ...)
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return {"result": self.result, "seconds": self.seconds, "worker": self.worker,
                "hostname": self.hostname, "error": self.error}

    @classmethod
    def from_dict(cls, d: dict) -> "GradeOutcome":
        _expect_keys(d, cls)
        res = _typed(d, "result", dict, optional=True)
        err = _typed(d, "error", str, optional=True)
        if (res is None) == (err is None):
            raise ValueError("GradeOutcome: exactly one of result and error")
        if res is not None:
            if not isinstance(res.get("functions"), dict):
                raise ValueError("GradeOutcome: the result has no functions")
            for k in ("score", "max_score"):
                if isinstance(res.get(k), bool) or not isinstance(res.get(k), (int, float)):
                    raise ValueError(f"GradeOutcome: the result's {k} is not a number")
        return cls(result=res, seconds=float(_typed(d, "seconds", (int, float))),
                   worker=str(d.get("worker", "")), hostname=str(d.get("hostname", "")),
                   error=None if err is None else err[:4000])


# -- on the worker ------------------------------------------------------------------------------

_warm_lock = threading.Lock()
_warmed: set = set()


def _warm_once(opts) -> None:
    """Warm this machine's cache once per worker process (cheap afterwards: warm_cache's
    stamp makes it once per grader on the machine)."""
    from ..supervisor.options import cache_for
    from ..supervisor.supervise import warm_cache

    key = (str(cache_for(opts)), opts.with_speed)
    with _warm_lock:
        if key in _warmed:
            return
        warm_cache(opts)
        _warmed.add(key)


def worker_cache_dir(named: Optional[Path], own: bool) -> Optional[Path]:
    """The cache a worker grades with: none if the run has none; the named one if the client
    named one that exists on this machine too (a shared file system); else this machine's
    own class-wide cache."""
    from ..supervisor.options import default_cache_dir

    if named is None:
        return None
    if not own and Path(named).is_dir():
        return Path(named)
    return default_cache_dir()


def _where() -> tuple[str, str]:
    host = socket.gethostname()
    try:
        from distributed import get_worker

        return get_worker().address, host
    except Exception:  # noqa: BLE001 - not on a Dask worker (a direct call)
        return f"pid {os.getpid()}", host


def run_task(task_dict: dict) -> dict:
    """Grade one :class:`GradeTask` (as a dict) on this machine; a :class:`GradeOutcome` dict.

    Never raises for anything a submission does (grade_submission does not); what stops the
    grading here (no isolation on this worker, another grader, a malformed task) is an error
    outcome, which the client records without writing a report."""
    from ..core.identity import grader_hash
    from ..supervisor.options import IsolationUnavailable, Options, check_options
    from ..supervisor.supervise import grade_submission

    t0 = time.monotonic()
    worker, host = _where()

    def failed(msg: str) -> dict:
        return GradeOutcome(seconds=round(time.monotonic() - t0, 3), worker=worker,
                            hostname=host, error=f"on the worker {host} ({worker}): {msg}"
                            ).to_dict()

    try:
        task = GradeTask.from_dict(task_dict)
        if task.grader and task.grader != grader_hash():
            return failed(f"its autograder ({grader_hash()}) is not the one that submitted "
                          f"the task ({task.grader}); install the same version on every "
                          "grading machine")
        opts = Options.from_dict(task.options)
        opts.assignment = task.assignment
        opts.folder = task.own_folder
        opts.cache_dir = worker_cache_dir(opts.cache_dir, task.worker_cache)
        check_options(opts)
        _warm_once(opts)
        with tempfile.TemporaryDirectory(prefix="autograde-task-") as tmp:
            res = grade_submission(task.lay_out(Path(tmp)), opts)
        return GradeOutcome(result=res.to_dict(), seconds=round(time.monotonic() - t0, 3),
                            worker=worker, hostname=host).to_dict()
    except IsolationUnavailable as e:
        return failed(f"this machine cannot isolate student code ({e}); install bubblewrap "
                      "on every grading machine (or grade with --no-isolation)")
    except Exception as e:  # noqa: BLE001 - the grader itself failed on this machine
        return failed(f"{type(e).__name__}: {e}")


# -- on the client ------------------------------------------------------------------------------


def _window(client, window: Optional[int]) -> int:
    """How many tasks to keep submitted at once (their files are held in memory)."""
    if window:
        return max(1, window)
    try:
        threads = sum(client.nthreads().values())
    except Exception:  # noqa: BLE001
        threads = 0
    return max(16, 4 * threads)


def grade_on_cluster(items: Iterable, opts, scheduler_address: str, *,
                     seed: Optional[int] = None, window: Optional[int] = None,
                     timeout: float = 30.0, retries: int = 2) -> Iterator[tuple]:
    """Grade ``items`` (:class:`autograder.classroom.batch.Item`) on the Dask cluster whose scheduler is
    at ``scheduler_address``; yields ``(item, GradeOutcome)`` as each completes.

    ``seed``: the run's secret seed, used where ``opts.seed`` is None (every submission of a
    run is graded with the same one). Each task may be retried ``retries`` times if it raises,
    and Dask reschedules the tasks of a worker that dies. Raises :class:`ClusterUnavailable`
    without ``distributed``, and OSError/TimeoutError if the scheduler cannot be reached."""
    from ..core.identity import grader_hash
    from ..supervisor.options import default_cache_dir
    from .names import _slug

    distributed = require_distributed()
    run = copy.copy(opts)
    if run.seed is None:
        run.seed = seed
    options = run.to_dict()
    # the client's own default cache means "each machine its own"; a named one may be shared
    own = opts.cache_dir is not None and Path(opts.cache_dir).resolve() == default_cache_dir()
    grader = grader_hash()
    todo = list(items)
    with distributed.Client(scheduler_address, timeout=timeout,
                            set_as_default=False) as client:
        done = distributed.as_completed([], loop=client.loop)
        futures: dict = {}
        ready: list = []  # outcomes known without the cluster (a file that cannot be read)
        nxt = 0

        def fill() -> None:
            nonlocal nxt
            limit = _window(client, window)
            while nxt < len(todo) and len(futures) < limit:
                item = todo[nxt]
                nxt += 1
                try:
                    task = GradeTask.of(item, options, grader=grader, worker_cache=own)
                except (OSError, ValueError) as e:  # ValueError: FolderRefused, a race
                    ready.append((item, GradeOutcome(error=f"cannot read the submission: {e}")))
                    continue
                key = f"grade-{_slug(item.student)}-{uuid.uuid4().hex[:12]}"
                fut = client.submit(run_task, task.to_dict(), key=key, pure=False,
                                    retries=retries)
                futures[fut] = item
                done.add(fut)

        fill()
        while ready:
            yield ready.pop()
        for fut in done:
            item = futures.pop(fut)
            try:
                out = GradeOutcome.from_dict(fut.result())
            except Exception as e:  # noqa: BLE001 - the task failed (after its retries)
                out = GradeOutcome(error=f"the cluster could not grade it: "
                                         f"{type(e).__name__}: {e}")
            fut.release()
            fill()
            yield item, out
            while ready:
                yield ready.pop()
