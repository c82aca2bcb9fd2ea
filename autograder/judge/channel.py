"""The judge's line to the untrusted worker: starting it in the sandbox, sending requests,
reading replies within deadlines.

:class:`SandboxExporter` is the :class:`~autograder.judge.artifacts.Exporter` the judge grades
with: the student's code runs in :mod:`autograder.worker` inside the sandbox
(:mod:`autograder.isolation`), and every line it sends is parsed as an untrusted record.
"""
from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Optional

from ..core.clock import CpuReading, Deadline, ShareClock
from ..core.results import quoted
from ..core.records import (
    ExportReply,
    ExportRequest,
    Limits,
    Loaded,
    Loading,
    Quit,
    RecordError,
    Unready,
    parse,
)
from ..isolation.sandbox import describe_exit

#: bytes of replies a worker may have sent that this side has not taken yet (replies to
#: requests sent ahead wait here while this side compiles); past it, the worker is stopped
MAX_UNREAD = 512 << 20

#: a worker that asked for less CPU than this share of a missed deadline (what it ran and what
#: it waited on the run queue, :class:`~autograder.core.clock.ShareClock`) was waiting, not
#: computing: no loop of the submission's was running (a busy loop asks for a whole core,
#: however little of one a busy machine gives it)
IDLE_SHARE = 0.05
#: deadlines missed in a row by idle workers (the first one's, then the fresh one's) after which
#: the submission's exports left fail at once: a worker that answers nothing costs two limits
SILENT_MISSES = 2


def sandbox_note(note: str) -> str:
    """A note the worker sent (the loader's, about statements of the hand-in): the worker ran
    the hand-in's code before it sent it, so the report shows it as the sandbox's, quoted, never
    as the grader's own words."""
    return f"while loading, your code's sandbox reported {quoted(note, 600)}"


class WorkerStopped(Exception):
    """The untrusted worker died or ran out of time; ``phase`` says where."""

    def __init__(self, why: str, phase: tuple):
        super().__init__(why)
        self.why = why
        self.phase = phase


class WorkerLink:
    """The pipes of one running worker, each served by a thread of its own, so that neither
    side can block the other, and a watchdog for as long as it lives.

    * :meth:`send` queues a line for the worker's stdin and returns at once; a writer thread
      writes it (a worker that never reads its stdin blocks that thread, never this side);
    * a reader thread takes every line the worker writes off its stdout as soon as it comes (a
      worker that floods replies never waits on this side), within a line-size cap and a cap on
      what is sent and not yet taken (:data:`MAX_UNREAD`);
    * :meth:`lines` hands those lines out within a deadline; a half-written line never comes
      out, and the deadline still holds;
    * the watchdog checks the resident memory of the whole sandbox (every process in it) until
      the worker is gone, not only while a line is awaited, and stops it past ``memory_mb``.

    Whatever stops the worker (its exit, a cap, the watchdog, :meth:`stop`) kills the whole
    sandbox, and every later :meth:`lines` raises :class:`WorkerStopped` saying why.
    """

    def __init__(self, box, memory_mb: Optional[int] = None, max_line: int = 64 << 20,
                 max_unread: Optional[int] = None, poll_s: float = 0.25):
        self.box = box
        self.memory_mb = memory_mb
        self.max_line = max_line
        self.max_unread = MAX_UNREAD if max_unread is None else max_unread
        self.poll_s = poll_s
        self._incoming: queue.Queue = queue.Queue()
        self._outgoing: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._unread = 0
        self._why: Optional[WorkerStopped] = None
        for target in (self._read, self._write, self._watch):
            threading.Thread(target=target, daemon=True,
                             name=f"worker-{box.proc.pid}-{target.__name__[1:]}").start()

    # -- this side -------------------------------------------------------------------------
    def send(self, line: str) -> None:
        """Queue ``line`` for the worker (never blocks)."""
        self._outgoing.put(line.encode())

    def lines(self, deadline: Deadline):
        """The worker's lines (bytes, without the newline) as they come, until ``deadline``
        (effective time, :mod:`autograder.core.clock`): then, or when the worker is stopped,
        :class:`WorkerStopped`."""
        while True:
            left = deadline.left()
            if left <= 0:
                raise WorkerStopped("timeout", ("timeout", None))
            try:
                item = self._incoming.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if isinstance(item, WorkerStopped):
                self._incoming.put(item)  # every later reader hears it too
                raise item
            with self._lock:
                self._unread -= len(item)
            yield item

    def stopped(self) -> Optional[WorkerStopped]:
        """Why the worker was stopped (None: it was not, or not yet)."""
        with self._lock:
            return self._why

    def stop(self, why: WorkerStopped) -> None:
        """End the worker (the whole sandbox); the first reason given is the one reported."""
        with self._lock:
            if self._why is None:
                self._why = why
        self.box.kill()

    def close(self) -> None:
        """Tell the writer thread to close the worker's stdin once what is queued is written."""
        self._outgoing.put(None)

    # -- threads ---------------------------------------------------------------------------
    def _read(self) -> None:
        fd = self.box.proc.stdout.fileno()
        buf = b""
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                with self._lock:
                    self._unread += len(line)
                    flood = self._unread > self.max_unread
                if flood:
                    self.stop(WorkerStopped(
                        f"it sent more than {self.max_unread >> 20} MB that nobody asked for "
                        "yet", ("protocol", None)))
                    break
                self._incoming.put(line)
            if len(buf) > self.max_line:
                self.stop(WorkerStopped("it wrote an oversized record", ("protocol", None)))
                buf = b""
        # the worker closed its stdout: it ended, or it goes on without a way to answer
        try:
            rc = self.box.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.stop(WorkerStopped("it closed its output and went on running",
                                    ("protocol", None)))
            rc = self.box.proc.wait()
        if self._why is None and self.box.out_of_memory():
            self._why = WorkerStopped(
                "it went past its memory bound (all its processes together) and the kernel "
                "stopped it", ("memory", None))
        with self._lock:
            why = self._why or WorkerStopped(describe_exit(rc), ("exit", rc))
            self._why = why
        self._incoming.put(why)

    def _write(self) -> None:
        fd = self.box.proc.stdin.fileno()
        while True:
            data = self._outgoing.get()
            if data is None:
                break
            try:
                while data:
                    data = data[os.write(fd, data):]
            except OSError:  # the worker is gone (or closed its stdin): nothing more to say
                break
        try:
            self.box.proc.stdin.close()
        except OSError:
            pass

    def _watch(self) -> None:
        while self.box.proc.poll() is None:
            if self.memory_mb and self.box.rss_mb() > self.memory_mb:
                self.stop(WorkerStopped(
                    f"it used more than {self.memory_mb} MB of memory (all its processes "
                    "together) and was stopped", ("memory", None)))
                return
            time.sleep(self.poll_s)


class SandboxExporter:
    """The untrusted worker in its sandbox, driven over its stdin/stdout.

    :meth:`start` loads the submission (statements that hang or crash are skipped on a
    restart); :meth:`export` sends requests and collects replies within a time limit. Every
    line it reads is parsed as an untrusted record. ``functions``: the graded functions the
    worker is to take out of the submission (default: every one the registry knows).

    Its limits (loading, tracing and exporting) run on the sandbox's own effective clock
    (:attr:`clock`, a :class:`~autograder.core.clock.ShareClock`): stretched only while the
    sandbox gets less of the CPU than it asks for, never by how many processes a classmate's
    sandbox runs; a limit that was stretched says so in its message.

    A budget per hand-in, not per function: a worker that misses a deadline is restarted, and
    the functions after it are asked again, so one function's hang (a Python loop at trace
    time, which keeps a core busy) costs that function alone, however many such functions
    there are. A worker that misses its deadline *idle* (waiting, not computing: a replaced
    ``sys.stdin``, a signal handler or a sleep in every function) is restarted once; when the
    fresh one misses idle too, with no reply in between (:data:`SILENT_MISSES`), the worker
    stopped answering, and every export left fails at once, saying so.
    """

    def __init__(self, submission: Path, *, isolated: bool,
                 statement_s: float = Limits.statement_s, load_s: float = Limits.load_s,
                 log: Optional[Path] = None, limits=None,
                 folder: bool = False, functions: Optional[list[str]] = None):
        if functions is None:
            from ..course import registry

            functions = [p.name for p in registry.problems()]
        self.functions = list(functions)
        self.submission = Path(submission)
        self.folder = folder
        self.isolated = isolated
        self.statement_s = statement_s
        self.load_s = load_s
        self.log = log
        self.limits = limits
        self.skip: list[int] = []
        self.notes: list[str] = []
        #: what happened to the sandbox after loading, for the end of the report
        self.late_notes: list[str] = []
        self.defined: list[str] = []
        #: why the worker cannot grade any hand-in here (the grader's environment: a module it
        #: needs that the sandbox cannot import), or None
        self.fault: Optional[str] = None
        self.box = None
        self.link: Optional[WorkerLink] = None
        #: requests sent to the current worker (each once), those not answered yet, and
        #: replies that came before they were asked for
        self.sent: set[int] = set()
        self.pending: dict[int, ExportRequest] = {}
        self.replies: dict[int, ExportReply] = {}
        #: deadlines missed (all of them), and those missed idle in a row (no reply between)
        self.misses = 0
        self.idle_misses = 0
        #: why every export left fails at once (None: the worker is still asked)
        self.stopped_answering: Optional[str] = None
        #: the effective clock of the limits on the worker: the current sandbox's own
        self.clock = ShareClock(self._reading)

    def _reading(self) -> Optional[CpuReading]:
        box = self.box
        if box is None:
            return None
        try:
            return box.cpu_reading()
        except Exception:  # noqa: BLE001 - no reading: wall-clock time, never judged idle
            return None

    # -- process ---------------------------------------------------------------------------
    def _spawn(self):
        extra = ["--statement-timeout", str(self.statement_s),
                 "--functions", ",".join(self.functions)]
        if self.skip:
            extra += ["--skip", ",".join(map(str, self.skip))]
        if self.folder:
            extra.append("--folder-on-path")
        self.box = spawn_untrusted(self.submission, extra, isolated=self.isolated, log=self.log,
                                   limits=self.limits, whole_folder=self.folder)
        self.link = WorkerLink(self.box, getattr(self.limits, "memory_mb", None))

    def close(self) -> None:
        if self.box is not None:
            self.link.send(Quit().to_line())
            self.link.close()
            self._note_stop()
            self.box.kill()
            if self.box.cpu_used_s is not None:
                from . import timing

                timing.add_process("sandbox", self.box.cpu_used_s)
            self.box = None

    def _note_stop(self) -> None:
        """A worker stopped while nobody waited on it (its memory past the bound after its last
        reply, say) is said in a note: nothing else would tell."""
        why = self.link.stopped() if self.link is not None else None
        if why is not None and why.phase[0] in ("memory", "protocol"):
            note = f"the sandbox of the submission was stopped: {why.why}"
            if note not in self.late_notes:
                self.late_notes.append(note)

    def _lines(self, deadline: Deadline):
        return self.link.lines(deadline)

    # -- loading ---------------------------------------------------------------------------
    def launch(self) -> None:
        """Start the worker now (it loads while this process imports JAX); :meth:`start`
        then waits for it."""
        self._spawn()

    def start(self) -> None:
        """Load the submission, skipping statements that hang or crash the worker."""
        deadline = self.clock.deadline(self.load_s)
        while True:
            if self.box is None:
                self._spawn()
            where = None
            try:
                for line in self._lines(deadline):
                    try:
                        rec = parse(line, allowed=(Loading, Loaded, Unready))
                    except RecordError:
                        continue
                    if isinstance(rec, Unready):
                        if where is None and not self.skip:  # its first word: nothing ran
                            self.fault = sandbox_fault(rec.missing)
                            self.defined = []
                            return
                        continue  # said after the hand-in's code ran: not believed
                    if isinstance(rec, Loading):
                        where = rec
                        continue
                    self.defined = list(rec.defined)
                    # the worker ran the hand-in's code before it said these: its words
                    self.notes += [sandbox_note(n) for n in rec.notes]
                    return
            except WorkerStopped as e:
                self.box.kill()
                self.box = None
                if where is None or deadline.expired():
                    why = (f"ran past the {self.load_s:g} s limit for loading"
                           f"{deadline.stretched()}" if e.phase[0] == "timeout" else e.why)
                    self.notes.append(f"the submission could not be loaded: {why}")
                    self.defined = []
                    return
                self.skip.append(where.stmt)
                why = "it ran too long" if e.phase[0] == "timeout" else e.why
                self.notes.append(f"the statement your code's sandbox named "
                                  f"{quoted(where.where, 80)} was skipped: {why} while it was "
                                  "being loaded")

    # -- programs --------------------------------------------------------------------------
    def submit(self, requests) -> None:
        """Send requests now (the worker exports while this side compiles earlier ones); never
        blocks, however many there are and whether or not the worker reads them."""
        if self.box is None:
            return
        for r in requests:
            if r.id not in self.sent:
                self.sent.add(r.id)
                self.pending[r.id] = r
                self.link.send(r.to_line())

    def export(self, requests, timeout: float = Limits.export_s, on_reply=None):
        """Replies for ``requests`` (sent now unless :meth:`submit` sent them already);
        ``on_reply`` sees each as it arrives."""
        if self.stopped_answering is not None:
            return {r.id: ExportReply.of(r.id, error=self.stopped_answering) for r in requests}
        if self.box is None:
            return {r.id: ExportReply.of(r.id, error="the submission could not be loaded")
                    for r in requests}
        self.submit(requests)
        want = {r.id for r in requests}
        out = {i: self.replies.pop(i) for i in list(want) if i in self.replies}
        for rec in out.values():
            if on_reply is not None:
                on_reply(rec)
        asked0, wall0 = self.clock.asked_s(), time.monotonic()
        deadline = self.clock.deadline(timeout)
        try:
            if len(out) < len(want):
                for line in self._lines(deadline):
                    try:
                        rec = parse(line, allowed=(ExportReply,))
                    except RecordError:
                        continue
                    if rec.id not in self.pending:
                        continue
                    del self.pending[rec.id]
                    self.idle_misses = 0  # it answers
                    if rec.id in want:
                        out[rec.id] = rec
                        if on_reply is not None:
                            on_reply(rec)
                    else:
                        self.replies[rec.id] = rec
                    if len(out) == len(want):
                        break
        except WorkerStopped as e:
            timed_out = e.phase[0] == "timeout"
            # a worker is never judged idle without readings of its sandbox
            asked = self.clock.asked_s() if timed_out and asked0 is not None else None
            idle = asked is not None and asked - asked0 < IDLE_SHARE * (time.monotonic() - wall0)
            self.misses += timed_out
            self.idle_misses = self.idle_misses + 1 if idle else 0
            why = (f"it ran past the {timeout:g} s time limit for tracing and exporting the "
                   f"function (a loop that never ends at trace time?){deadline.stretched()}"
                   if timed_out else
                   f"the worker tracing it stopped: {e.why}")
            for r in requests:
                out.setdefault(r.id, ExportReply.of(r.id, error=why))
                self.pending.pop(r.id, None)
            later = list(self.pending.values())
            self.box.kill()
            if self.idle_misses >= SILENT_MISSES:
                self.stopped_answering = (
                    f"the worker stopped answering: it missed the {timeout:g} s limit "
                    f"{self.idle_misses} times in a row, idle each time (waiting, not "
                    "computing: something in the submission blocks the worker itself, such as "
                    "a replaced sys.stdin, a signal handler or a sleep in every function), so "
                    "this function was not asked; `python -m autograder grade` on the file "
                    "shows whether it answers")
                self.box, self.pending = None, {}
                return out
            self.start_again()
            self.pending, self.sent = {}, set(self.replies)
            self.submit(later)
        return out

    def start_again(self) -> None:
        """A fresh worker after a hang or crash (the loading notes are not repeated)."""
        notes = list(self.notes)
        self.box = None
        self.start()
        self.notes = notes


def sandbox_fault(missing: list[str]) -> str:
    """Why no hand-in can be graded here: modules the worker needs that this (trusted) process
    imports, but the sandbox, which sees only the Python installation and the worker's part of
    the package, cannot."""
    from ..core.imports import where_found

    parts = []
    for name in missing:
        here = where_found(name)
        parts.append(f"{name} (this grader imports it from {here}, outside the Python "
                     "installation the sandbox sees: installed with pip --target, --user or "
                     "PYTHONPATH?)" if here else f"{name} (not installed)")
    return ("the grader's sandbox cannot import " + "; ".join(parts) + ", which the grader "
            "needs to read any hand-in: this is the grader's environment, not the hand-in. "
            "Install it into the Python environment the grader runs in (pip install "
            + " ".join(missing) + " in that environment, without --target or --user), check "
            "with python -m autograder doctor, then grade again")


def spawn_untrusted(target: Path, extra: list[str], *, isolated: bool,
                    log: Optional[Path] = None, limits=None, whole_folder: bool = False):
    """``python -m autograder.worker TARGET ...`` in the sandbox: ``target`` (a file, or with
    ``whole_folder`` its folder too, for a student's own assignment folder) is all it sees of
    this machine besides the Python runtime and the worker's part of the package."""
    import sys

    from ..isolation import sandbox as isolation

    target = Path(target)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": isolation.HOME,
           "TMPDIR": "/tmp", "PYTHONNOUSERSITE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONHASHSEED": "0", "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3",
           "MPLBACKEND": "Agg", "XLA_FLAGS": os.environ.get("XLA_FLAGS", "")}
    if isolated:
        inside = f"{isolation.SUBMISSION_DIR}/{target.name}"
        src = (target.parent, isolation.SUBMISSION_DIR) if whole_folder else (target, inside)
        binds = isolation.python_binds() + [src]
        env["PYTHONPATH"] = isolation.GRADER_ROOT
    else:
        import tempfile

        inside, binds = str(target), []
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        scratch = tempfile.mkdtemp(prefix="autograde-home-")  # removed when the box is killed
        env["HOME"] = env["TMPDIR"] = scratch
    argv = [sys.executable, "-s", "-P", "-m", "autograder.worker", inside, *extra]
    logf = open(log, "ab") if log else open(os.devnull, "wb")
    try:
        kw = {} if limits is None else {"limits": limits}
        box = isolation.spawn(argv, binds=binds, env=env, isolated=isolated, stderr=logf, **kw)
        if not isolated:
            box.scratch = Path(env["HOME"])
        return box
    finally:
        logf.close()
