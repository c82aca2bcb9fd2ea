"""Running one submission in its own process, with limits, out of reach of the grader's files.

:func:`grade_submission` is what ``grade`` and ``grade-all`` use. For each submission it

* makes a private temporary directory (the worker's working directory and ``$HOME``) holding a
  copy of the submission and a fresh copy of the :mod:`autograder` package *only*: the worker's
  import path has no course root, so ``solutions``, ``source``, the tests and the instructor's
  notebooks cannot be imported (the worker also refuses those names outright);
* starts ``python -s -P -m autograder.session`` in a new process group with a memory limit
  (``RLIMIT_AS``, plus a resident-memory watchdog here), an output limit (``RLIMIT_FSIZE``:
  a submission printing megabytes gets ``File too large`` errors, never a full disk) and no core
  dumps;
* hands it a fresh random key on stdin and reads its verdicts from a pipe: each record carries a
  sequence number and an HMAC, so a submission that writes fake results (to a file, to stdout, to
  the pipe itself) changes nothing;
* watches the clock: a statement of the submission that hangs or kills the interpreter while it is
  being loaded is skipped and the worker restarted; a graded function that hangs (in Python, at
  trace time, or inside XLA at run time), crashes the interpreter or exhausts memory gets a zero
  with the reason, and a new worker grades the functions after it.

Nothing here imports JAX: the parent stays light, whatever the worker does.
"""
from __future__ import annotations

import hmac
import json
import os
import resource
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .results import CheckResult, FunctionResult, SubmissionResult

PACKAGE_DIR = Path(__file__).resolve().parent

#: top-level module names student code may never import (the grader, the course's own files)
BLOCKED_MODULES = ("autograder", "solutions", "source", "release", "submitted", "autograded",
                   "feedback", "tests", "nbgrader_config", "gradebook", "bench_grading",
                   "benchmarks", "tools", "notebooks")


@dataclass
class Limits:
    """Per-submission limits. Times are wall-clock seconds."""

    #: one graded function, from its 'start' record to its result
    per_function_s: float = 150.0
    #: loading the submission (all its statements)
    load_s: float = 120.0
    #: the whole submission, restarts included (None: load_s + per_function_s * n + slack)
    per_submission_s: Optional[float] = None
    #: resident memory of the worker, enforced by polling /proc (None: off)
    memory_mb: Optional[int] = 6144
    #: virtual address space (RLIMIT_AS). XLA:CPU with 8 devices peaks near 1.7 GiB of address
    #: space grading ps1 on the reference; 16 GiB leaves room for the larger problems while
    #: turning a runaway allocation into a MemoryError / failed allocation instead of swapping.
    address_space_mb: Optional[int] = 16384
    #: one top-level statement of the submission while loading (interrupted with SIGALRM)
    statement_s: float = 20.0
    #: largest file the worker may write (its stdout/stderr log included)
    output_mb: int = 32
    #: how many times a crashed/hung worker is restarted for one submission
    max_restarts: int = 12

    def budget(self, n_functions: int) -> float:
        if self.per_submission_s:
            return self.per_submission_s
        return self.load_s + self.per_function_s * max(1, n_functions) + 30.0


@dataclass
class Options:
    """What to grade and how (passed through to the worker)."""

    assignment: Optional[str] = None
    quick: bool = False
    seed: int = 0
    with_speed: bool = True
    #: grade only these functions (None: all of the assignment's)
    only: Optional[list] = None
    #: persistent JAX compilation cache to start from (copied privately for each worker)
    cache_dir: Optional[Path] = None
    limits: Limits = field(default_factory=Limits)


# ---------------------------------------------------------------------------------------------
# the record channel


def sign(key: bytes, seq: int, body: dict) -> str:
    text = json.dumps(body, sort_keys=True)
    mac = hmac.new(key, f"{seq}:{text}".encode(), "sha256").hexdigest()
    return json.dumps({"seq": seq, "mac": mac, "body": body})


def verify(key: bytes, line: str, seq: int) -> Optional[dict]:
    """The record's body if ``line`` is the genuine record number ``seq``, else None."""
    try:
        rec = json.loads(line)
        body = rec["body"]
        text = json.dumps(body, sort_keys=True)
        want = hmac.new(key, f"{seq}:{text}".encode(), "sha256").hexdigest()
        if rec.get("seq") == seq and hmac.compare_digest(str(rec.get("mac")), want):
            return body
    except Exception:  # noqa: BLE001 - anything malformed is simply not a record
        pass
    return None


# ---------------------------------------------------------------------------------------------
# the worker's surroundings


def copy_package(dest: Path) -> Path:
    """Copy the autograder package (and nothing else of the course) under ``dest``."""
    target = dest / "autograder"
    shutil.copytree(PACKAGE_DIR, target,
                    ignore=shutil.ignore_patterns("*.orig", "*.rej", ".pytest_cache"))
    return dest


def worker_env(home: Path, pkg_root: Path) -> dict:
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "JAX_PLATFORMS", "XLA_FLAGS", "TPU_NAME",
            "CUDA_VISIBLE_DEVICES", "TF_CPP_MIN_LOG_LEVEL", "SSL_CERT_FILE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({
        "HOME": str(home),
        "TMPDIR": str(home),
        "PYTHONPATH": str(pkg_root),
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg",
    })
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


def _preexec(limits: Limits):
    def apply():
        def cap(which, mb):
            if mb is None:
                return
            soft, hard = resource.getrlimit(which)
            want = int(mb) << 20
            if hard != resource.RLIM_INFINITY:
                want = min(want, hard)
            resource.setrlimit(which, (want, hard))

        cap(resource.RLIMIT_AS, limits.address_space_mb)
        cap(resource.RLIMIT_FSIZE, limits.output_mb)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


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


def _describe_exit(rc: int) -> str:
    if rc < 0:
        import signal

        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        what = {"SIGSEGV": " (a segmentation fault)", "SIGABRT": " (an abort, e.g. a failed "
                "allocation inside XLA)", "SIGKILL": " (killed, e.g. out of memory)",
                "SIGXFSZ": " (it wrote too much output)"}.get(name, "")
        return f"the Python process died from {name}{what}"
    return f"the Python process exited with code {rc} (os._exit / sys.exit in the submission?)"


@dataclass
class _Run:
    records: list = field(default_factory=list)
    #: why the worker stopped early (None: it finished)
    stopped: Optional[str] = None
    #: 'load' + statement record, or 'function' + name, where it was when it stopped
    phase: Optional[tuple] = None
    forged: int = 0
    log_tail: str = ""
    peak_rss_mb: float = 0.0


def _run_worker(sub: Path, work: Path, opts: Options, *, only: Optional[list[str]],
                skip: list[int], deadline: float, log: Path) -> _Run:
    lim = opts.limits
    key = secrets.token_bytes(32)
    r_fd, w_fd = os.pipe()
    cmd = [sys.executable, "-s", "-P", "-m", "autograder.session", str(sub),
           "--channel-fd", str(w_fd), "--seed", str(opts.seed)]
    if opts.assignment:
        cmd += ["--assignment", opts.assignment]
    if opts.quick:
        cmd.append("--quick")
    if not opts.with_speed:
        cmd.append("--no-speed")
    if only is not None:
        cmd += ["--only", ",".join(only)]
    if skip:
        cmd += ["--skip", ",".join(str(s) for s in skip)]
    cmd += ["--statement-timeout", str(lim.statement_s)]
    cache = work / "jax_cache"
    if opts.cache_dir and Path(opts.cache_dir).is_dir() and not cache.exists():
        # A private copy: whatever this submission writes there never reaches another one.
        shutil.copytree(opts.cache_dir, cache)
    cmd += ["--cache-dir", str(cache)]
    home = work / "home"
    home.mkdir(exist_ok=True)
    run = _Run()
    with open(log, "ab") as logf:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=logf, stderr=subprocess.STDOUT,
                                cwd=home, env=worker_env(home, work / "pkg"),
                                start_new_session=True, pass_fds=(w_fd,),
                                preexec_fn=_preexec(lim))
    os.close(w_fd)
    try:
        proc.stdin.write(key.hex().encode() + b"\n")
        proc.stdin.close()
    except BrokenPipeError:
        pass
    buf = b""
    seq = 0
    phase: Optional[tuple] = ("load", None)
    phase_deadline = min(deadline, time.monotonic() + lim.load_s)
    eof = False
    def handle(line: bytes) -> None:
        nonlocal seq, phase, phase_deadline
        body = verify(key, line.decode("utf-8", "replace"), seq)
        if body is None:
            run.forged += 1
            return
        seq += 1
        run.records.append(body)
        kind = body.get("type")
        if kind == "loading":
            phase = ("load", body)
        elif kind in ("plan", "result"):
            phase = None
        elif kind == "start":
            phase = ("function", body["function"])
            phase_deadline = min(deadline, time.monotonic() + lim.per_function_s)

    def read(timeout: float) -> bool:
        """Read what is there; False at end of file."""
        nonlocal buf
        ready, _, _ = select.select([r_fd], [], [], timeout)
        if not ready:
            return True
        chunk = os.read(r_fd, 1 << 16)
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            handle(line)
        return bool(chunk)

    try:
        while True:
            if not eof:
                eof = not read(0.2)
            else:
                time.sleep(0.05)
            rc = proc.poll()
            if rc is not None:
                try:  # children the submission may have left behind keep the pipe open
                    os.killpg(proc.pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
                while not eof and read(0.5):
                    pass
                if not any(r.get("type") == "done" for r in run.records):
                    run.stopped = _describe_exit(rc) if rc != 0 else \
                        "the grading process stopped early (the submission ended it?)"
                break
            now = time.monotonic()
            if lim.memory_mb:
                rss = _rss_mb(proc.pid)
                run.peak_rss_mb = max(run.peak_rss_mb, rss)
                if rss > lim.memory_mb:
                    _kill(proc)
                    run.stopped = (f"it used more than {lim.memory_mb} MB of memory "
                                   f"({rss:.0f} MB resident) and was stopped")
                    break
            if now > deadline:
                _kill(proc)
                run.stopped = "it ran past the time limit for the whole submission and was stopped"
                break
            if phase is not None and now > phase_deadline:
                _kill(proc)
                if phase[0] == "load":
                    run.stopped = f"it ran past the {lim.load_s:g} s time limit for loading the submission"
                else:
                    run.stopped = f"it ran past the {lim.per_function_s:g} s time limit for one function"
                run.stopped += " and was stopped"
                break
    finally:
        os.close(r_fd)
        if proc.poll() is None:
            _kill(proc)
    run.phase = phase
    try:
        data = log.read_bytes()
        run.log_tail = data[-2000:].decode("utf-8", "replace")
    except OSError:
        pass
    return run


# ---------------------------------------------------------------------------------------------
# one submission


def _problems_for(assignment: Optional[str]):
    from . import registry

    return registry.problems(assignment) if assignment else registry.problems()


def _zero(prob, why: str, check: str = "numerics") -> FunctionResult:
    checks = []
    for n in prob.check_names:
        if n == check:
            checks.append(CheckResult(n, False, why))
        else:
            checks.append(CheckResult(n, False, f"not checked: {why}"))
    return FunctionResult(prob.name, float(prob.points), checks, weights=dict(prob.weights))


def grade_submission(submission: Path, opts: Optional[Options] = None, *,
                     log: Optional[Callable[[str], None]] = None) -> SubmissionResult:
    """Grade one notebook or .py file in isolated worker processes; never raises for student
    misbehaviour."""
    from . import registry

    opts = opts or Options()
    lim = opts.limits
    submission = Path(submission).resolve()
    expected = _problems_for(opts.assignment)
    deadline = time.monotonic() + lim.budget(len(expected))
    with tempfile.TemporaryDirectory(prefix="autograde-") as tmp:
        work = Path(tmp)
        copy_package(work / "pkg")
        # The submission is copied under a neutral folder named like its own parent (the
        # assignment, in the nbgrader layout), so its __file__ reveals nothing of the course.
        subdir = work / "sub" / submission.parent.name
        subdir.mkdir(parents=True)
        sub = subdir / submission.name
        shutil.copyfile(submission, sub)
        logf = work / "worker.log"
        plan = None
        notes: list[str] = []
        results: dict[str, FunctionResult] = {}
        skip: list[int] = []
        only: Optional[list[str]] = list(opts.only) if opts.only else None
        forged = 0
        peak = 0.0
        for attempt in range(lim.max_restarts + 1):
            run = _run_worker(sub, work, opts, only=only, skip=skip, deadline=deadline, log=logf)
            forged += run.forged
            peak = max(peak, run.peak_rss_mb)
            for rec in run.records:
                t = rec.get("type")
                if t == "plan" and plan is None:
                    plan = rec
                    notes.extend(rec.get("notes", []))
                elif t == "result":
                    prob = registry.get(rec["function"])
                    results[rec["function"]] = FunctionResult(
                        rec["function"], float(rec["max_score"]),
                        [CheckResult(**c) for c in rec["checks"]],
                        weights=rec.get("weights", dict(prob.weights)))
                elif t == "note":
                    notes.append(rec["text"])
            if run.stopped is None:
                break
            if log is not None:
                log(run.log_tail)
            phase = run.phase
            if phase and phase[0] == "load" and time.monotonic() < deadline:
                where = phase[1]
                if where is None:  # before the first statement: nothing to skip
                    notes.append(f"the grader could not start: {run.stopped}")
                    break
                skip.append(int(where["stmt"]))
                notes.append(f"{where['where']}: skipped, {run.stopped} while this statement "
                             "was being loaded")
                continue
            if phase and phase[0] == "function":
                name = phase[1]
                prob = registry.get(name)
                results[name] = _zero(prob, f"{run.stopped} while grading this function (a loop "
                                            "that never ends, a crash of the interpreter, or "
                                            "far too much memory)")
            if plan is None or time.monotonic() >= deadline:
                if plan is None:
                    notes.append(f"{run.stopped} before the grading could start")
                break
            left = [n for n in plan["functions"] if n not in results
                    and (not opts.only or n in opts.only)]
            if not left:
                break
            only = left
        else:
            notes.append("gave up after too many restarts of the grading process")
        if forged:
            notes.append(f"{forged} line(s) that were not the grader's own were found on its "
                         "results channel and ignored")
        names = plan["functions"] if plan else [p.name for p in expected]
        if opts.only:
            names = [n for n in names if n in opts.only]
        assignment = (plan or {}).get("assignment") or opts.assignment
        try:
            size = logf.stat().st_size
        except OSError:
            size = 0
        if size >= (lim.output_mb << 20) - 4096:
            notes.append(f"the submission printed more than {lim.output_mb} MB; the rest of its "
                         "output was refused (writes failed with 'File too large')")
        functions = {}
        for n in names:
            if n in results:
                functions[n] = results[n]
            else:
                functions[n] = _zero(registry.get(n), "not graded: the grading process stopped "
                                     "before reaching this function")
    res = SubmissionResult(functions, assignment, notes)
    res.peak_rss_mb = peak  # type: ignore[attr-defined]
    return res


def warm_cache(cache_dir: Path, opts: Optional[Options] = None,
               assignments: Optional[list[str]] = None) -> bool:
    """Compile the jit baselines once into ``cache_dir`` with a trusted worker (no student
    code), so every submission's worker starts from a warm compilation cache."""
    opts = opts or Options()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="autograde-warm-") as tmp:
        work = Path(tmp)
        copy_package(work / "pkg")
        home = work / "home"
        home.mkdir()
        cmd = [sys.executable, "-s", "-P", "-m", "autograder.session", "--warm",
               "--cache-dir", str(cache_dir), "--seed", str(opts.seed)]
        if opts.quick:
            cmd.append("--quick")
        if not opts.with_speed:
            cmd.append("--no-speed")
        for a in assignments or []:
            cmd += ["--warm-assignment", a]
        try:
            rc = subprocess.run(cmd, cwd=home, env=worker_env(home, work / "pkg"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, timeout=600,
                                preexec_fn=_preexec(opts.limits)).returncode
        except subprocess.TimeoutExpired:
            return False
    return rc == 0
