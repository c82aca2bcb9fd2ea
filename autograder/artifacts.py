"""Where programs come from, and how the trusted side takes them in.

An :class:`Exporter` answers :class:`~autograder.records.ExportRequest`\\ s with
:class:`~autograder.records.ExportReply`\\ s. The grader uses :class:`SandboxExporter` (the
student's code runs in :mod:`autograder.untrusted` inside the sandbox); the package's own tests
and the instructor's in-process tools use :class:`LocalExporter` on code they trust.

:func:`load_artifact` is the trusted side's door: it deserializes a reply and checks that the
program is what was asked for (argument shapes and dtypes, one output, the device count, the
platform) and that it calls nothing outside XLA (no host callbacks, no unknown custom calls),
before anything compiles or runs it.
"""
from __future__ import annotations

import os
import re
import select
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

from .exporting import CALLBACK_HINT, export_one
from .records import (ExportReply, ExportRequest, Loaded, Loading, Quit, RecordError, parse)

#: custom calls a graded program may contain: JAX's own stable targets (sharding annotations,
#: linear algebra kernels), never a host callback
_EXTRA_FORBIDDEN = {"tf.call_tf_function"}
_CALLBACKS = re.compile(r"callback", re.I)
_TARGET = re.compile(r'custom_call\s*@([\w.$-]+)|call_target_name\s*=\s*"([^"]+)"')


def allowed_custom_calls() -> frozenset:
    from jax._src.export import _export

    return frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE) - _EXTRA_FORBIDDEN


class ArtifactError(Exception):
    """A reply that cannot be graded; the message is for the student."""


@dataclass
class Artifact:
    exported: object  # jax.export.Exported
    text: str  # its StableHLO

    @property
    def call(self) -> Callable:
        return self.exported.call


def load_artifact(reply: Optional[ExportReply], request: ExportRequest) -> Artifact:
    """The checked program of ``reply``, or :class:`ArtifactError` saying what is wrong."""
    import jax
    import jax.numpy as jnp

    if reply is None:
        raise ArtifactError("no program came back for this case")
    if reply.error is not None:
        raise ArtifactError(reply.error)
    try:
        exp = jax.export.deserialize(bytearray(reply.payload()))
    except Exception as e:  # noqa: BLE001
        raise ArtifactError(f"the exported program could not be read ({type(e).__name__})")
    want = [(tuple(a.shape), jnp.dtype(a.dtype)) for a in request.args if not a.is_static]
    got = [(tuple(a.shape), jnp.dtype(a.dtype)) for a in exp.in_avals]
    if got != want:
        raise ArtifactError(f"the program takes {got}, expected {want}")
    if len(exp.out_avals) != 1:
        raise ArtifactError(f"expected one array as the result, the program returns "
                            f"{len(exp.out_avals)} values")
    devices = 1 if request.layout is None else request.layout[0] * request.layout[1]
    if exp.nr_devices != devices:
        raise ArtifactError(f"the program runs on {exp.nr_devices} devices, expected {devices}")
    if request.platform not in exp.platforms:
        raise ArtifactError(f"the program was lowered for {exp.platforms}, expected "
                            f"{request.platform}")
    if exp.ordered_effects or exp.unordered_effects:
        raise ArtifactError(CALLBACK_HINT)
    text = exp.mlir_module()
    allowed = allowed_custom_calls()
    for m in _TARGET.finditer(text):
        target = m.group(1) or m.group(2)
        if _CALLBACKS.search(target):
            raise ArtifactError(CALLBACK_HINT)
        if target not in allowed:
            raise ArtifactError(f"the program calls the custom kernel {target!r}, which the "
                                "grader does not run; write it with jax.numpy / jax.lax")
    return Artifact(exp, text)


class Exporter(Protocol):
    def export(self, requests: list[ExportRequest], timeout: float,
               on_reply: Optional[Callable[[ExportReply], None]] = None
               ) -> dict[int, ExportReply]:
        """Replies by request id (missing ids: no answer in time); ``on_reply`` is called with
        each reply as it arrives, so that its program compiles while the others export."""


class LocalExporter:
    """Exports functions of this process (the package's own tests; trusted code only).

    Each export runs under a per-request time limit (a Python loop that never ends at trace
    time); after one times out the function's other requests fail the same way."""

    def __init__(self, functions: dict, per_request_s: float | None = None):
        self.functions = functions
        self.per_request_s = per_request_s

    @classmethod
    def of(cls, name: str, fn, per_request_s: float | None = None) -> "LocalExporter":
        return cls({name: fn} if callable(fn) else {}, per_request_s)

    def export(self, requests, timeout=None, on_reply=None):
        from .loader import time_limit
        from .meshes import make_mesh

        out, hung = {}, None
        for r in requests:
            fn = self.functions.get(r.function)
            if not callable(fn):
                out[r.id] = ExportReply.of(r.id, error=f"function {r.function!r} not found in "
                                           "the submission")
            elif hung is not None:
                out[r.id] = ExportReply.of(r.id, error=hung)
            else:
                with time_limit(self.per_request_s or timeout):
                    out[r.id] = export_one(fn, r, make_mesh)
                if out[r.id].error and "timed out after" in out[r.id].error:
                    hung = out[r.id].error
            if on_reply is not None:
                on_reply(out[r.id])
        return out


class LineReader:
    """Lines from a sandboxed worker's stdout, read within a deadline, a line-size cap and a
    cap on the resident memory of the whole sandbox (then :class:`WorkerStopped`)."""

    def __init__(self, box, memory_mb: Optional[int] = None, max_line: int = 64 << 20):
        self.box = box
        self.memory_mb = memory_mb
        self.max_line = max_line
        self.buf = b""

    def lines(self, deadline: float):
        fd = self.box.proc.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                yield line
            if len(self.buf) > self.max_line:
                raise WorkerStopped("it wrote an oversized record", ("protocol", None))
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerStopped("timeout", ("timeout", None))
            if self.memory_mb and self.box.rss_mb() > self.memory_mb:
                raise WorkerStopped(f"it used more than {self.memory_mb} MB of memory (all its "
                                    "processes together) and was stopped", ("memory", None))
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    rc = self.box.proc.wait()
                    raise WorkerStopped(describe_exit(rc), ("exit", rc))
                self.buf += chunk


class WorkerStopped(Exception):
    """The untrusted worker died or ran out of time; ``phase`` says where."""

    def __init__(self, why: str, phase: tuple):
        super().__init__(why)
        self.why = why
        self.phase = phase


class SandboxExporter:
    """The untrusted worker in its sandbox, driven over its stdin/stdout.

    :meth:`start` loads the submission (statements that hang or crash are skipped on a
    restart); :meth:`export` sends requests and collects replies within a time limit. Every
    line it reads is parsed as an untrusted record.
    """

    def __init__(self, submission: Path, *, isolated: bool, statement_s: float = 20.0,
                 load_s: float = 120.0, log: Optional[Path] = None, limits=None,
                 folder: bool = False):
        self.submission = Path(submission)
        self.folder = folder
        self.isolated = isolated
        self.statement_s = statement_s
        self.load_s = load_s
        self.log = log
        self.limits = limits
        self.skip: list[int] = []
        self.notes: list[str] = []
        self.defined: list[str] = []
        self.box = None
        self.reader: Optional[LineReader] = None
        #: requests sent to the current worker (each once), those not answered yet, and
        #: replies that came before they were asked for
        self.sent: set[int] = set()
        self.pending: dict[int, ExportRequest] = {}
        self.replies: dict[int, ExportReply] = {}

    # -- process ---------------------------------------------------------------------------
    def _spawn(self):
        extra = ["--statement-timeout", str(self.statement_s)]
        if self.skip:
            extra += ["--skip", ",".join(map(str, self.skip))]
        if self.folder:
            extra.append("--folder-on-path")
        self.box = spawn_untrusted(self.submission, extra, isolated=self.isolated, log=self.log,
                                   limits=self.limits, whole_folder=self.folder)
        self.reader = LineReader(self.box, getattr(self.limits, "memory_mb", None))

    def close(self) -> None:
        if self.box is not None:
            try:
                self.box.proc.stdin.write(Quit().to_line().encode())
                self.box.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            self.box.kill()
            self.box = None

    def _lines(self, deadline: float):
        return self.reader.lines(deadline)

    # -- loading ---------------------------------------------------------------------------
    def launch(self) -> None:
        """Start the worker now (it loads while this process imports JAX); :meth:`start`
        then waits for it."""
        self._spawn()

    def start(self) -> None:
        """Load the submission, skipping statements that hang or crash the worker."""
        deadline = time.monotonic() + self.load_s
        while True:
            if self.box is None:
                self._spawn()
            where = None
            try:
                for line in self._lines(deadline):
                    try:
                        rec = parse(line, allowed=(Loading, Loaded))
                    except RecordError:
                        continue
                    if isinstance(rec, Loading):
                        where = rec
                        continue
                    self.defined = list(rec.defined)
                    self.notes += list(rec.notes)
                    return
            except WorkerStopped as e:
                self.box.kill()
                self.box = None
                if where is None or time.monotonic() >= deadline:
                    why = (f"ran past the {self.load_s:g} s limit for loading"
                           if e.phase[0] == "timeout" else e.why)
                    self.notes.append(f"the submission could not be loaded: {why}")
                    self.defined = []
                    return
                self.skip.append(where.stmt)
                why = "it ran too long" if e.phase[0] == "timeout" else e.why
                self.notes.append(f"{where.where}: skipped, {why} while this statement was "
                                  "being loaded")

    # -- programs --------------------------------------------------------------------------
    def submit(self, requests) -> None:
        """Send requests now (the worker exports while this side compiles earlier ones)."""
        if self.box is None:
            return
        try:
            for r in requests:
                if r.id not in self.sent:
                    self.sent.add(r.id)
                    self.pending[r.id] = r
                    self.box.proc.stdin.write(r.to_line().encode())
            self.box.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def export(self, requests, timeout=120.0, on_reply=None):
        """Replies for ``requests`` (sent now unless :meth:`submit` sent them already);
        ``on_reply`` sees each as it arrives."""
        if self.box is None:
            return {r.id: ExportReply.of(r.id, error="the submission could not be loaded")
                    for r in requests}
        self.submit(requests)
        want = {r.id for r in requests}
        out = {i: self.replies.pop(i) for i in list(want) if i in self.replies}
        for rec in out.values():
            if on_reply is not None:
                on_reply(rec)
        try:
            if len(out) < len(want):
                for line in self._lines(time.monotonic() + timeout):
                    try:
                        rec = parse(line, allowed=(ExportReply,))
                    except RecordError:
                        continue
                    if rec.id not in self.pending:
                        continue
                    del self.pending[rec.id]
                    if rec.id in want:
                        out[rec.id] = rec
                        if on_reply is not None:
                            on_reply(rec)
                    else:
                        self.replies[rec.id] = rec
                    if len(out) == len(want):
                        break
        except WorkerStopped as e:
            why = (f"it ran past the {timeout:g} s time limit for tracing and exporting the "
                   "function (a loop that never ends at trace time?)" if e.phase[0] == "timeout" else
                   f"the worker tracing it stopped: {e.why}")
            for r in requests:
                out.setdefault(r.id, ExportReply.of(r.id, error=why))
                self.pending.pop(r.id, None)
            later = list(self.pending.values())
            self.box.kill()
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


def spawn_untrusted(target: Path, extra: list[str], *, isolated: bool,
                    log: Optional[Path] = None, limits=None, whole_folder: bool = False):
    """``python -m autograder.untrusted TARGET ...`` in the sandbox: ``target`` (a file, or with
    ``whole_folder`` its folder too, for a student's own assignment folder) is all it sees of
    this machine besides the Python runtime and the grader's package."""
    import sys

    from . import isolation

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
        env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
        scratch = tempfile.mkdtemp(prefix="autograde-home-")  # removed when the box is killed
        env["HOME"] = env["TMPDIR"] = scratch
    argv = [sys.executable, "-s", "-P", "-m", "autograder.untrusted", inside, *extra]
    logf = open(log, "ab") if log else open(os.devnull, "wb")
    try:
        kw = {} if limits is None else {"limits": limits}
        box = isolation.spawn(argv, binds=binds, env=env, isolated=isolated, stderr=logf, **kw)
        if not isolated:
            box.scratch = Path(env["HOME"])
        return box
    finally:
        logf.close()


def describe_exit(rc: int) -> str:
    """Why a process ended, from its exit status (bubblewrap reports a child killed by signal
    N as 128 + N)."""
    if rc > 128 and rc - 128 < 65:
        rc = -(rc - 128)
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
