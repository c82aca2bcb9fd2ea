"""Supervising the grading of one submission: limits, restarts, the report.

:func:`grade_submission` is what ``grade``, ``grade-all`` and the nbgrader preprocessor use. For
each submission it copies the file into a private temporary folder and starts the trusted grader
(``python -m autograder.judge``), which in turn runs the student's code only inside the
sandbox (:mod:`autograder.isolation`) and grades the programs it exports. This process reads the
trusted grader's records (:mod:`autograder.core.records`) and watches the clock and the memory:

* a graded function whose program hangs (inside XLA too), crashes the interpreter or exhausts
  memory gets a zero with the reason, and a fresh grader takes the functions after it;
* a statement of the submission that hangs or crashes while loading is skipped (the trusted
  grader does that inside; the skip list survives a restart);
* the scores are computed here, from this registry's points and weights; nothing the student's
  code writes reaches this process.

Nothing here imports JAX: the supervisor stays light, whatever a program does.
"""
from __future__ import annotations

import atexit
import os
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..core.clock import MACHINE_CLOCK, Deadline
from ..core.records import (Done, Handover, Job, Owner, Plan, Ready, RecordError, Restart,
                            Result, Start, parse)
from ..core.results import CheckResult, FunctionResult, SubmissionResult, skipped
from ..isolation.processes import die_with_parent
from .handin import MAX_HANDIN, own_files, read_capped
from .options import Limits, Options, cache_for, check_options
from .platform import grader_platform, with_package


#: the largest file the trusted grader itself may write: its class-wide cache keeps the big
#: cases' arrays (32 MiB each in this course, see :mod:`autograder.judge.bigcases`). What the
#: submission's processes write stays capped at ``Limits.output_mb``: the sandbox sets that
#: limit for them itself.
JUDGE_FILE_MB = 512


def _preexec(limits: Limits):
    """The judge's ``preexec_fn``: its resource limits, and death with this process. Where the
    course's devices are accelerators the judge's address space is not capped (their runtimes
    map the device's memory into it: a cap makes them abort); the watchdog's resident-memory
    bound still holds."""
    orphan_guard = die_with_parent()
    capped = not grader_platform().accelerator

    def apply():
        orphan_guard()

        def cap(which, mb):
            if mb is None:
                return
            want = int(mb) << 20
            resource.setrlimit(which, (want, want))

        if capped:
            cap(resource.RLIMIT_AS, limits.address_space_mb)
        cap(resource.RLIMIT_FSIZE, max(limits.output_mb, JUDGE_FILE_MB))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def judge_env() -> dict:
    """The environment of a judge: this process's, with JAX's platforms those of the course's
    devices (:mod:`.platform`), importing this very package (:func:`.platform.with_package`)."""
    return with_package({**os.environ, **grader_platform().env})


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover
        pass


def tail(path: Path, n: int = 2000) -> str:
    """The last ``n`` bytes of a log (never the whole file: it may be huge)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class _Run:
    records: list = field(default_factory=list)
    #: why the grader stopped early (None: it finished, or stopped to be restarted)
    stopped: Optional[str] = None
    #: the function it was grading when it stopped (None: before or between functions)
    function: Optional[str] = None
    #: whose work it was doing then (the last Handover's; the student's until it says)
    owner: Owner = Owner.STUDENT
    #: the judge asked to be replaced (a Restart record): the functions left go to a fresh one
    restart: Optional[str] = None
    peak_rss_mb: float = 0.0


#: seconds a judge that closed its output is given to exit before it is killed
EXIT_GRACE_S = 10.0

#: seconds a warm judge is given to say it is ready for another submission
READY_S = 10.0


@dataclass
class _Judge:
    """A trusted grader process in ``--serve`` mode, told the options record in ``key``."""

    proc: subprocess.Popen
    key: tuple
    jobs: int = 0
    #: its ``ready`` record came with its last job's output (already read)
    ready: bool = False


class JudgePool:
    """Warm trusted graders (``python -m autograder.judge --serve``), kept between the
    submissions this process grades with the same options: JAX imported and the baselines'
    modules read once, not once per submission. Every submission still gets a fresh sandbox
    (the judge starts one per :class:`~autograder.core.records.Job`).

    A judge is given another submission only if its last one ended cleanly (its ``done`` record
    read, no time or memory limit reached, no restart asked) and it then said ``ready`` (it says
    so only when no time limit ran out in it and every thread of that job has ended); it is
    replaced after ``Limits.judge_jobs`` submissions. Anything else, a crash included, ends it,
    and the next submission starts a fresh one. Safe to share between threads."""

    def __init__(self, most_idle: int = 2):
        #: idle judges kept at most (each holds JAX and its caches: a few hundred MB)
        self.most_idle = most_idle
        self._idle: list[_Judge] = []
        self._lock = threading.Lock()
        #: judges started by this pool (tests and benchmarks read it)
        self.started = 0

    def reserve(self, n: int) -> None:
        """Keep up to ``n`` idle judges (``grade-all --workers n`` grades ``n`` at once)."""
        with self._lock:
            self.most_idle = max(self.most_idle, n)

    def take(self, opts: Options, log: Path) -> _Judge:
        """A judge for ``opts``: an idle one started by this thread with the same options,
        limits and environment that says it is ready, else a new one (whose output before its
        first job goes to ``log``)."""
        told = opts.judge_options().to_line()  # its options, limits included
        # a judge dies with the thread that started it (the parent-death signal is a
        # thread's), so only that thread is given it again
        key = (told, tuple(sorted(os.environ.items())), threading.get_ident())
        while True:
            with self._lock:
                judge = next((j for j in reversed(self._idle) if j.key == key), None)
                if judge is not None:
                    self._idle.remove(judge)
            if judge is None:
                break
            if judge.proc.poll() is None and (judge.ready or _says_ready(judge)):
                judge.ready = False
                return judge
            _end(judge)
        cmd = [sys.executable, "-m", "autograder.judge", "--serve"]
        with open(log, "ab") as logf:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=logf, cwd=log.parent, start_new_session=True,
                                    env=judge_env(), preexec_fn=_preexec(opts.limits))
        try:  # its options first (a line the fresh pipe takes at once), then its jobs
            os.write(proc.stdin.fileno(), told.encode())
        except OSError:  # gone already: it cannot take its job either, which says so
            pass
        os.set_blocking(proc.stdin.fileno(), False)
        with self._lock:
            self.started += 1
        return _Judge(proc, key)

    def give_back(self, judge: _Judge, limits: Limits) -> None:
        """Keep ``judge`` for another submission, or end it (it has had its share, or enough
        are idle already)."""
        judge.jobs += 1
        if judge.jobs >= limits.judge_jobs or (
                limits.memory_mb and _rss_mb(judge.proc.pid) > limits.memory_mb / 2):
            _end(judge)
            return
        with self._lock:
            gone = [j for j in self._idle if j.proc.poll() is not None]  # their thread ended
            self._idle = [j for j in self._idle if j not in gone] + [judge]
            evicted = self._idle[:-self.most_idle] if len(self._idle) > self.most_idle else []
            del self._idle[:len(evicted)]
        for j in gone:
            _end(j)
        for j in evicted:  # the longest idle make room
            _end(j)

    def pids(self) -> list[int]:
        """The idle judges' process ids (benchmarks read their CPU time)."""
        with self._lock:
            return [j.proc.pid for j in self._idle]

    def close(self) -> None:
        """End every idle judge (killed: it holds nothing of anyone's)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for j in idle:
            _end(j)


def _says_ready(judge: _Judge) -> bool:
    """Whether ``judge`` is alive and its output holds exactly one ``ready`` record (within
    :data:`READY_S`)."""
    if judge.proc.poll() is not None:
        return False
    fd, buf = judge.proc.stdout.fileno(), b""
    deadline = MACHINE_CLOCK.deadline(READY_S)
    while b"\n" not in buf and not deadline.expired():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                return False
            buf += chunk
    if not buf.endswith(b"\n") or buf.count(b"\n") != 1:
        return False
    try:
        return isinstance(parse(buf, allowed=(Ready,)), Ready)
    except RecordError:
        return False


def _end(judge: _Judge) -> None:
    """Kill ``judge`` and close its pipes."""
    _kill(judge.proc)
    for f in (judge.proc.stdin, judge.proc.stdout):
        try:
            f.close()
        except OSError:
            pass


#: this process's warm judges (``grade``, ``grade-all``'s threads, nbgrader's autograde, a Dask
#: worker): they end with it
JUDGES = JudgePool()
atexit.register(JUDGES.close)


def _give_job(judge: _Judge, job: Job) -> bool:
    """Write ``job`` to the judge's stdin without waiting (a pipe a judge between jobs has
    emptied takes a line at once); False if it could not take it."""
    data = job.to_line().encode()
    try:
        return os.write(judge.proc.stdin.fileno(), data) == len(data)
    except OSError:  # gone, or its pipe is full (it never read the last job)
        return False


def _run_grader(sub: Path, work: Path, opts: Options, *, only: Optional[list[str]],
                skip: list[int], deadline: Deadline, serial: tuple = ()) -> _Run:
    """One job of a judge (warm or new), from its start until its ``done`` record, its end, or
    its stop. Every wait is bounded: by the per-function limit while it grades a function
    (effective time on the machine's clock, :data:`~autograder.core.clock.MACHINE_CLOCK`:
    the judge's own limits and its sandbox's, inside these, run on clocks of their own that
    this process cannot read, and these must not end first), by the loading limit before, by
    ``deadline`` always, and by :data:`EXIT_GRACE_S` once it has closed its output."""
    from ..isolation.sandbox import describe_exit

    lim = opts.limits
    run = _Run()
    job = Job(submission=str(sub), cwd=str(work), grader_log=str(work / "grader.log"),
              log=str(work / "student.log"), assignment=opts.assignment,
              only=None if only is None else list(only), skip=list(skip), folder=opts.folder,
              serial=list(serial))
    judge = JUDGES.take(opts, work / "grader.log")
    if not _give_job(judge, job):  # a warm judge that cannot take it: a fresh one
        _end(judge)
        judge = JUDGES.take(opts, work / "grader.log")
        if not _give_job(judge, job):
            _end(judge)
            run.stopped = "the grading process could not be given the submission"
            return run
    proc = judge.proc
    fd = proc.stdout.fileno()
    buf = b""
    done = False
    phase = MACHINE_CLOCK.deadline(lim.load_s + 60).sooner(deadline)
    try:
        while not done:
            ready, _, _ = select.select([fd], [], [], 0.2)
            chunk = os.read(fd, 1 << 16) if ready else b""
            buf += chunk
            while b"\n" in buf and not done:
                line, buf = buf.split(b"\n", 1)
                try:
                    rec = parse(line, allowed=(Plan, Start, Handover, Result, Restart, Done))
                except RecordError:
                    continue
                run.records.append(rec)
                if isinstance(rec, Start):
                    run.function, run.owner = rec.function, Owner.STUDENT
                    phase = MACHINE_CLOCK.deadline(lim.per_function_s).sooner(deadline)
                elif isinstance(rec, Handover):
                    run.owner = rec.owner
                elif isinstance(rec, Result):
                    run.function = None
                elif isinstance(rec, Restart):
                    run.restart = rec.why
                elif isinstance(rec, Done):
                    done = True
            if done:
                break
            if ready and not chunk:  # it closed its output: it is ending
                try:
                    rc = proc.wait(timeout=EXIT_GRACE_S)
                except subprocess.TimeoutExpired:
                    rc = None  # stuck on its way out: the finally below kills it
                if run.restart is None:
                    run.stopped = ("it did not exit after closing its output" if rc is None
                                   else describe_exit(rc, runs_submission=False) if rc != 0 else
                                   "the grading process stopped early")
                break
            if lim.memory_mb:
                rss = _rss_mb(proc.pid)
                run.peak_rss_mb = max(run.peak_rss_mb, rss)
                if rss > lim.memory_mb:
                    run.stopped = (f"its program used more than {lim.memory_mb} MB of memory "
                                   f"({rss:.0f} MB resident) and was stopped")
                    break
            if deadline.expired():
                run.stopped = "it ran past the time limit for the whole submission and was stopped"
                break
            if phase.expired():
                run.stopped = (f"it ran past the {lim.per_function_s:g} s time limit for one "
                               "function and was stopped" if run.function else
                               "loading the submission ran past its time limit")
                break
    finally:
        judge.ready = buf == Ready().to_line().encode()  # it may come with the done record
        if done and (not buf or judge.ready) and run.stopped is None and run.restart is None \
                and proc.poll() is None:
            JUDGES.give_back(judge, lim)  # it says whether it is ready when next taken
        else:
            _end(judge)
    return run


def copy_student_folder(src: Path, dest: Path, limit: int = MAX_HANDIN,
                        limits: Optional[Limits] = None) -> None:
    """The student's folder (their own regular files only, no link followed), up to ``limit``
    bytes in all. :class:`~autograder.supervisor.handin.FolderRefused` (nothing copied) for a
    folder past ``limits``' caps on entries, depth or listing time."""
    dest.mkdir(parents=True, exist_ok=True)
    if not src.is_dir() or src.is_symlink():
        return
    made = {dest}
    for p in own_files(src, limit, limits):
        target = dest / p.relative_to(src)
        for d in reversed(target.parents):
            if d not in made and dest in d.parents:
                d.mkdir(exist_ok=True)
                made.add(d)
        target.write_bytes(read_capped(p))
        target.chmod(0o644)
    for d in made:
        d.chmod(0o755)


def _problems_for(assignment: Optional[str]):
    from ..course import registry

    return registry.problems(assignment) if assignment else registry.problems()


def _scored(name: str, checks: list[CheckResult], reused: bool = False,
            regrade: Optional[str] = None) -> FunctionResult:
    """A function's result scored with this process's registry: its points, its weights."""
    from ..course import registry

    prob = registry.get(name)
    return FunctionResult(name, float(prob.points), checks, weights=dict(prob.weights),
                          reused=bool(reused), regrade=regrade)


def _zero(prob, why: str, check: str = "numerics") -> FunctionResult:
    """The student's zero, with the reason."""
    checks = [CheckResult(n, False, why) if n == check else skipped(n, why)
              for n in prob.check_names]
    return _scored(prob.name, checks)


def _regrade(prob, why: str) -> FunctionResult:
    """No verdict: the grader failed on this function (``why``), which is graded again later."""
    return _scored(prob.name, [skipped(n, "the grader failed here") for n in prob.check_names],
                   regrade=why)


def _blame(run: _Run, prob, lim: Limits) -> FunctionResult:
    """The result of the function a judge was grading when it was stopped: the student's zero
    if it was compiling, running or waiting on the submission's code; a regrade if it was doing
    the grader's own work, or both at once (where grading it again with nothing overlapping
    could not tell them apart: :func:`grade_submission` tries that first)."""
    if run.owner is Owner.BOTH:
        return _regrade(prob, f"the grader's own work on this function and the submission's "
                        f"program ran together when {run.stopped}")
    if run.owner is Owner.GRADER:
        return _regrade(prob, f"the grader's own work on this function failed: {run.stopped}")
    return _zero(prob, f"{run.stopped} while grading this function (a loop that never ends, a "
                 "crash, or far too much memory)")


def grade_submission(submission: Path, opts: Optional[Options] = None, *,
                     log: Optional[Callable[[str], None]] = None,
                     keep_log: Optional[Path] = None) -> SubmissionResult:
    """Grade one notebook or .py file; never raises for student misbehaviour.

    The judge's own log (``grader.log``) lives in a temporary folder deleted on return; given
    ``keep_log``, its last megabyte is copied there when some function needs a regrade (what
    the instructor reads to see what broke).

    A function the grader itself failed on (an error in its own code, a crash or a missed
    deadline while doing its own work, a judge that could not start, a budget or restart count
    used up before the function was reached) is marked as needing a regrade, never scored as
    the student's zero.

    Raises ValueError for an unknown assignment or function name,
    :class:`IsolationUnavailable` where student code cannot be isolated (unless
    ``opts.isolation`` is False), and :class:`~autograder.supervisor.handin.FolderRefused` (a
    ValueError: the hand-in's, not the grader's) for a student's folder past a cap of
    ``opts.limits``, before any process starts."""
    from ..course import registry

    opts = opts or Options()
    check_options(opts)
    lim = opts.limits
    submission = Path(submission).resolve()
    expected = _problems_for(opts.assignment)
    started, effective = time.monotonic(), MACHINE_CLOCK.now()
    deadline = MACHINE_CLOCK.deadline(lim.budget(len(expected)))
    with tempfile.TemporaryDirectory(prefix="autograde-") as tmp:
        work = Path(tmp)
        # A private copy, named like the original and its folder (the assignment, in the
        # nbgrader layout): the sandbox sees this file alone.
        subdir = work / "sub" / submission.parent.name
        subdir.mkdir(parents=True)
        sub = subdir / submission.name
        if opts.folder:
            copy_student_folder(submission.parent, subdir, limits=lim)
        sub.write_bytes(read_capped(submission))
        os.chmod(sub, 0o644)
        for d in (work / "sub", subdir):
            os.chmod(d, 0o755)
        plan: Optional[Plan] = None
        notes: list[str] = []
        results: dict[str, FunctionResult] = {}
        skip: list[int] = []
        #: functions to grade with nothing overlapping: a fault in their last grading came
        #: while the grader's own work and the submission's program ran together
        serial: list[str] = []
        only: Optional[list[str]] = list(opts.only) if opts.only else None
        peak = 0.0
        unfinished = "the grading process stopped before reaching this function"
        fruitless = 0  # restarts after which no function was settled
        while True:
            settled = (set(results), len(serial))
            run = _run_grader(sub, work, opts, only=only, skip=skip, deadline=deadline,
                              serial=tuple(serial))
            peak = max(peak, run.peak_rss_mb)
            for rec in run.records:
                if isinstance(rec, Plan):
                    skip = list(rec.skip)
                    if plan is None:
                        plan = rec
                        notes.extend(rec.notes)
                elif isinstance(rec, Result) and rec.function in registry.load_all():
                    try:
                        checks = [CheckResult.from_dict(c) for c in rec.checks]
                    except ValueError as e:
                        results[rec.function] = _regrade(
                            registry.get(rec.function),
                            f"the grader sent a malformed result ({e})")
                        continue
                    results[rec.function] = _scored(rec.function, checks, rec.reused,
                                                    regrade=rec.regrade)
                elif isinstance(rec, Done):
                    notes.extend(n for n in rec.notes if n not in notes)
            if run.stopped is not None:
                if log is not None:
                    log(tail(work / "grader.log"))
                if run.function is not None and run.owner is Owner.BOTH \
                        and run.function not in serial:
                    serial.append(run.function)  # graded again, alone: then it has one owner
                elif run.function is not None:
                    results[run.function] = _blame(run, registry.get(run.function), lim)
            if plan is None:
                if run.stopped is not None:
                    last = tail(work / "grader.log", 600).strip().splitlines()[-3:]
                    unfinished = (f"the grader could not start grading ({run.stopped}"
                                  + (f"; grader log: {' / '.join(last)}" if last else "") + ")")
                break
            left = [n for n in plan.functions if n not in results
                    and (not opts.only or n in opts.only)]
            if not left or (run.stopped is None and run.restart is None):
                break
            if deadline.expired():
                unfinished = ("the grading ran out of its time budget for the whole submission "
                              "before reaching this function")
                break
            if settled == (set(results), len(serial)):
                fruitless += 1
                if fruitless > lim.max_restarts:
                    unfinished = (f"the grading process was restarted {lim.max_restarts} times "
                                  "without settling a function and gave up before reaching "
                                  "this function")
                    break
            only = left
        names = list(plan.functions) if plan else [p.name for p in expected]
        if opts.only:
            names = [n for n in names if n in opts.only]
        assignment = (plan.assignment if plan else None) or opts.assignment
        if (work / "student.log").exists() and \
                (work / "student.log").stat().st_size >= (lim.output_mb << 20) - 4096:
            notes.append(f"the submission printed more than {lim.output_mb} MB; the rest of "
                         "its output was refused")
        functions = {n: results.get(n) or _regrade(registry.get(n), unfinished)
                     for n in names}
        if keep_log is not None and any(f.regrade for f in functions.values()):
            try:
                Path(keep_log).parent.mkdir(parents=True, exist_ok=True)
                Path(keep_log).write_text(tail(work / "grader.log", 1 << 20))
            except OSError:  # the log is a help, never a reason to lose the grades
                pass
    wall = time.monotonic() - started
    if wall > 60 and MACHINE_CLOCK.now() - effective < 0.8 * wall:
        notes.append(f"grading took {wall:.0f} s on a busy machine; its time limits were "
                     "stretched to match, and no point depends on how long it took")
    if not opts.isolation:
        notes.insert(0, "graded WITHOUT isolation (--no-isolation): the student's code ran "
                        "unconfined on the grading machine")
    res = SubmissionResult(functions, assignment, notes, isolated=opts.isolation)
    res.peak_rss_mb = peak  # type: ignore[attr-defined]
    return res


def warm_cache(opts: Optional[Options] = None, assignments: Optional[list[str]] = None) -> bool:
    """Compile the jit baselines once into the trusted side's cache (no student code), so
    every trusted grader starts warm; a stamp (this grader's hash) makes it once per grader."""
    import json

    from ..core.identity import grader_hash

    opts = opts or Options()
    cache = cache_for(opts)
    if cache is None:
        return False
    cache.mkdir(parents=True, exist_ok=True)
    stamp = cache / f".warmed-{'speed' if opts.with_speed else 'nospeed'}"
    want = json.dumps([grader_hash(), sorted(assignments or ["all"])])
    if stamp.exists() and stamp.read_text() == want:
        return True
    cmd = [sys.executable, "-m", "autograder.judge", "--cache-dir", str(cache)]
    for a in assignments or ["all"]:
        cmd += ["--warm", a]
    if not opts.with_speed:
        cmd.append("--no-speed")
    try:
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, timeout=600, env=judge_env(),
                            preexec_fn=_preexec(opts.limits)).returncode
    except subprocess.TimeoutExpired:
        return False
    if rc == 0:
        stamp.write_text(want)
    return rc == 0
