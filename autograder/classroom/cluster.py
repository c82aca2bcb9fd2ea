"""Grading on a Dask distributed cluster: ``grade-all DIR --scheduler tls://host:8786``.

The cluster is locked with Dask's own mutual TLS (:mod:`autograder.classroom.credentials`): the
client connects only to a ``tls://`` scheduler whose certificate the course's authority signed,
with its own certificate, and refuses any other (``--insecure-scheduler`` aside, said aloud).

The boundary with the cluster is two records, and nothing else crosses it:

* :class:`GradeTask` (client -> worker): one submission's bytes (the file, plus the student's
  own folder in the nbgrader layout, under the same rules as
  :func:`~autograder.supervisor.copy_student_folder`) and the run's :class:`~autograder.supervisor.Options`
  as their ``to_dict`` (the run's secret seed included);
* :class:`GradeOutcome` (worker -> client): the :class:`~autograder.core.results.SubmissionResult`
  as its ``to_dict``, how long the grading took and where, or why it could not be graded;
  signed (:func:`sign_outcome`) with the run's key, which the client made for this run and
  sent with each task, over the digest of the task it answers (:func:`task_digest`).

What the signature proves (:func:`verify_outcome`): the answer was made by a worker that was
given this run's task, for exactly these bytes and options, and was not altered on the way nor
put in its place by anyone without the run's key (another client of the scheduler, a result
of another run or another student's task). It cannot prove the worker graded honestly: a
tampered worker holds the key it was given. What the client can check cheaply, it checks
(:func:`plan_problem`): the assignment and the functions are the ones this client's own plan
grades, each function's checks, points and score are those its own registry gives those
verdicts, and the totals add up. Any mismatch is the grader's fault, never the student's: the
hand-in is "not graded" and the next run grades it again.

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
import hashlib
import hmac
import json
import os
import secrets
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
    #: this task's name in the run (the client's; bound into the digest the answer is signed over)
    task_id: str = ""
    #: the run's key (hex), made by the client for this run alone: the worker signs its answer
    run_key: str = ""

    @classmethod
    def of(cls, item, options: dict, *, grader: str = "", worker_cache: bool = True,
           limit: int = FOLDER_LIMIT, task_id: str = "", run_key: str = "") -> "GradeTask":
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
                   options=dict(options), grader=grader, worker_cache=worker_cache,
                   task_id=task_id, run_key=run_key)

    def to_dict(self) -> dict:
        return {"student": self.student, "assignment": self.assignment, "folder": self.folder,
                "filename": self.filename, "files": dict(self.files),
                "own_folder": self.own_folder, "options": dict(self.options),
                "grader": self.grader, "worker_cache": self.worker_cache,
                "task_id": self.task_id, "run_key": self.run_key}

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
                   else True,
                   task_id=_typed(d, "task_id", str) if "task_id" in d else "",
                   run_key=_typed(d, "run_key", str) if "run_key" in d else "")

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
    #: the worker's address (tls://...) and its machine's name
    worker: str = ""
    hostname: str = ""
    #: why it was not graded (the worker cannot isolate student code, another grader, ...)
    error: Optional[str] = None
    #: :func:`task_digest` of the task answered, as the worker received it
    digest: str = ""
    #: :func:`sign_outcome`: HMAC-SHA256 with the run's key over the canonical bytes of the rest
    signature: str = ""

    def to_dict(self) -> dict:
        return {"result": self.result, "seconds": self.seconds, "worker": self.worker,
                "hostname": self.hostname, "error": self.error, "digest": self.digest,
                "signature": self.signature}

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
                   error=None if err is None else err[:4000],
                   digest=str(d.get("digest", "")), signature=str(d.get("signature", "")))


# -- the answer's signature and the client's re-check ---------------------------------------------


class Unverified(ValueError):
    """A worker's answer that this run cannot accept (the grader's fault: graded again later)."""


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def task_digest(task: dict) -> str:
    """SHA-256 of everything a task says (its name, the student, the options and the seed,
    every file's name and bytes), the run's key left out."""
    h = hashlib.sha256()
    h.update(_canonical({k: v for k, v in task.items() if k not in ("files", "run_key")}))
    for name in sorted(task.get("files") or {}):
        data = task["files"][name]
        h.update(_canonical([name, len(data)]))
        h.update(bytes(data))
    return h.hexdigest()


def sign_outcome(outcome: dict, key: bytes) -> str:
    """HMAC-SHA256 under ``key`` of the outcome's canonical bytes (its signature left out; its
    ``digest`` names the task it answers)."""
    body = {k: v for k, v in outcome.items() if k != "signature"}
    return hmac.new(key, _canonical(body), "sha256").hexdigest()


def verify_outcome(d, key: bytes, digest: str) -> GradeOutcome:
    """The worker's answer ``d``, if signed with this run's ``key`` over the task of ``digest``;
    else :class:`Unverified` saying why (a pure function: no cluster, no clock)."""
    if not isinstance(d, dict):
        raise Unverified(f"the worker's answer is not a record ({type(d).__name__})")
    sig = d.get("signature")
    if not isinstance(sig, str) or not sig:
        raise Unverified("the worker's answer is not signed (a worker of another grader, or "
                         "not a worker of this run)")
    try:
        good = sign_outcome(d, key)
    except (TypeError, ValueError) as e:
        raise Unverified(f"the worker's answer cannot be read ({e})") from None
    if not hmac.compare_digest(sig, good):
        raise Unverified("the worker's answer is not signed with this run's key (made by "
                         "someone who was not given this run's task, or altered after it)")
    if d.get("digest") != digest:
        raise Unverified("the worker's answer is for another task than the one sent (another "
                         "student's, or other files or options)")
    try:
        return GradeOutcome.from_dict(d)
    except ValueError as e:
        raise Unverified(f"the worker's answer is malformed: {e}") from None


@dataclass(frozen=True)
class Expected:
    """What the client itself plans to be graded for one hand-in: the assignment, and each
    function's points, weights and checks from its own registry."""

    assignment: Optional[str]
    #: function -> (points, weights, check names)
    functions: dict
    isolated: bool
    #: the speed check is run (without it, a function's "speed" is absent, or skipped)
    with_speed: bool = True


def expected_for(item, opts) -> Expected:
    """The plan of ``item`` under ``opts``, made here as the judge makes it on the worker
    (:func:`run_task` grades with the item's assignment): as given, or read from the hand-in's
    name or source, without running it."""
    from ..judge.process import choose_problems

    assignment, probs = choose_problems(item.assignment, Path(item.path))
    if opts.only:
        probs = [p for p in probs if p.name in opts.only]
    return Expected(assignment, {p.name: (float(p.points), dict(p.weights),
                                          tuple(p.check_names)) for p in probs},
                    bool(opts.isolation), bool(opts.with_speed))


def _close(a, b) -> bool:
    return isinstance(a, (int, float)) and not isinstance(a, bool) and abs(a - b) <= 1e-6


def plan_problem(result: dict, expected: Expected) -> str:
    """What in a worker's ``result`` (``SubmissionResult.to_dict()``) disagrees with the client's
    own plan and registry ('' when nothing): another assignment, other functions, checks,
    points, or a score its checks do not give, totals that do not add up, isolation. A pure
    function of the two."""
    from ..core.results import CheckResult, FunctionResult

    if expected.assignment is not None and result.get("assignment") != expected.assignment:
        return (f"graded as assignment {result.get('assignment')!r}, planned "
                f"{expected.assignment!r}")
    if result.get("isolated") is not expected.isolated:
        return f"isolated is {result.get('isolated')!r}, the run asked {expected.isolated}"
    fns = result.get("functions")
    if not isinstance(fns, dict):
        return "no functions"
    all_regrade = fns and all(isinstance(f, dict) and f.get("needs_regrade")
                              for f in fns.values())
    if set(fns) != set(expected.functions) and not all_regrade:
        return (f"graded functions {sorted(fns)}, planned {sorted(expected.functions)}")
    from ..course import registry

    score = top = 0.0
    for name, f in fns.items():
        try:
            points, weights, checks = (expected.functions.get(name) or
                                       (float(registry.get(name).points),
                                        dict(registry.get(name).weights),
                                        tuple(registry.get(name).check_names)))
            got = FunctionResult(name, points, [CheckResult.from_dict(c) for c in f["checks"]],
                                 weights=weights, regrade=f.get("needs_regrade") or None)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            return f"{name}: not a function result of this grader ({type(e).__name__}: {e})"
        names = [c.name for c in got.checks]
        speed = [c for c in got.checks if c.name == "speed"]
        if not expected.with_speed:
            if speed and speed[0].passed:
                return f"{name}: a passed speed check, planned {list(checks)} without speed"
            if not speed:
                checks = tuple(c for c in checks if c != "speed")
        if not got.regrade and sorted(names) != sorted(checks):  # a regrade may have none
            return f"{name}: checks {names}, planned {list(checks)}"
        if not _close(f.get("max_score"), points):
            return f"{name}: max_score {f.get('max_score')!r}, the registry gives {points}"
        if not _close(f.get("score"), got.score):
            return f"{name}: score {f.get('score')!r}, its checks give {got.score}"
        score += got.score
        top += points
    if not _close(result.get("score"), round(score, 4)) or \
            not _close(result.get("max_score"), round(top, 4)):
        return (f"totals {result.get('score')!r}/{result.get('max_score')!r}, its functions "
                f"give {round(score, 4)}/{round(top, 4)}")
    return ""


def accepted(d, key: bytes, digest: str, expected: Expected) -> GradeOutcome:
    """The worker's answer once verified (:func:`verify_outcome`) and, if a result, re-checked
    against the client's plan (:func:`plan_problem`); an error outcome saying why otherwise
    (the grader's fault: "not graded", and the next run grades the hand-in again)."""
    try:
        out = verify_outcome(d, key, digest)
    except Unverified as e:
        return GradeOutcome(error=f"the cluster's answer was rejected: {e}; not graded (the "
                            "grader's fault, never the student's): run the same command again")
    if out.result is not None:
        problem = plan_problem(out.result, expected)
        if problem:
            return GradeOutcome(seconds=out.seconds, worker=out.worker, hostname=out.hostname,
                                error=f"the result from {out.hostname} ({out.worker}) does not "
                                f"match this run's plan: {problem}; not graded (the grader's "
                                "fault, never the student's): run the same command again")
    return out


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
    """Grade one :class:`GradeTask` (as a dict) on this machine; a :class:`GradeOutcome` dict,
    signed with the task's run key (:func:`sign_outcome`).

    Never raises for anything a submission does (grade_submission does not); what stops the
    grading here (no isolation on this worker, another grader, a malformed task) is an error
    outcome, which the client records without writing a report."""
    out = _run_task(task_dict)
    key = task_dict.get("run_key") if isinstance(task_dict, dict) else None
    try:
        out["digest"] = task_digest(GradeTask.from_dict(task_dict).to_dict())
        out["signature"] = sign_outcome(out, bytes.fromhex(key))
    except (TypeError, ValueError):  # a malformed task: its answer goes back unsigned
        pass
    return out


def _run_task(task_dict: dict) -> dict:
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


class SchedulerRefused(OSError):
    """The scheduler could not be reached, or the TLS handshake failed (either side refused)."""


def connect(scheduler_address: str, *, security=None, insecure: bool = False,
            timeout: float = 30.0):
    """A ``distributed.Client`` of the scheduler at ``scheduler_address``: a ``tls://`` one,
    authenticated both ways with ``security`` (the course's client credentials,
    :meth:`~autograder.classroom.credentials.ClusterCredentials.security`), unless ``insecure``.
    Raises :class:`~autograder.classroom.credentials.CredentialsError` (a ValueError) before
    connecting for a plain address or no credentials, and SchedulerRefused (an OSError) for a
    scheduler that cannot be reached or authenticated."""
    from .credentials import CredentialsError, scheme_problem

    distributed = require_distributed()
    if not insecure:
        problem = scheme_problem(scheduler_address)
        if problem:
            raise CredentialsError(problem)
        if security is None or not getattr(security, "require_encryption", False):
            raise CredentialsError("no cluster credentials for the TLS scheduler: give "
                                   "--cluster-credentials FOLDER (docs/cluster.md)")
    try:
        return distributed.Client(scheduler_address, timeout=timeout, set_as_default=False,
                                  security=security)
    except (OSError, TimeoutError) as e:
        raise SchedulerRefused(
            f"cannot reach or authenticate the Dask scheduler at {scheduler_address}: {e}"
            + ("" if insecure else " (is it up, started with a certificate of this course's "
               "authority, and are these the course's client credentials?)")) from None


def grade_on_cluster(items: Iterable, opts, scheduler_address: str, *,
                     seed: Optional[int] = None, window: Optional[int] = None,
                     timeout: float = 30.0, retries: int = 2, security=None,
                     insecure: bool = False) -> Iterator[tuple]:
    """Grade ``items`` (:class:`autograder.classroom.batch.Item`) on the Dask cluster whose scheduler is
    at ``scheduler_address`` (:func:`connect`: ``tls://`` with ``security``, or ``insecure``);
    yields ``(item, GradeOutcome)`` as each completes, each answer verified and re-checked
    (:func:`accepted`).

    ``seed``: the run's secret seed, used where ``opts.seed`` is None (every submission of a
    run is graded with the same one). Each task may be retried ``retries`` times if it raises,
    and Dask reschedules the tasks of a worker that dies. Raises :class:`ClusterUnavailable`
    without ``distributed``, CredentialsError for an address or credentials it refuses, and
    OSError/TimeoutError if the scheduler cannot be reached or authenticated."""
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
    run_key = secrets.token_bytes(32)  # this run's alone: never written, never reused
    todo = list(items)
    with connect(scheduler_address, security=security, insecure=insecure,
                 timeout=timeout) as client:
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
                key = f"grade-{_slug(item.student)}-{uuid.uuid4().hex[:12]}"
                try:
                    task = GradeTask.of(item, options, grader=grader, worker_cache=own,
                                        task_id=key, run_key=run_key.hex())
                    expected = expected_for(item, run)
                except (OSError, ValueError) as e:  # ValueError: FolderRefused, a race
                    ready.append((item, GradeOutcome(error=f"cannot read the submission: {e}")))
                    continue
                d = task.to_dict()
                fut = client.submit(run_task, d, key=key, pure=False, retries=retries)
                futures[fut] = (item, task_digest(d), expected)
                done.add(fut)

        fill()
        while ready:
            yield ready.pop()
        for fut in done:
            item, digest, expected = futures.pop(fut)
            try:
                out = accepted(fut.result(), run_key, digest, expected)
            except Exception as e:  # noqa: BLE001 - the task failed (after its retries)
                out = GradeOutcome(error=f"the cluster could not grade it: "
                                         f"{type(e).__name__}: {e}")
            fut.release()
            fill()
            yield item, out
            while ready:
                yield ready.pop()
