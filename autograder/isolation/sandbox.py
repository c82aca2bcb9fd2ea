"""Running student code where it can reach nothing that matters (Linux, bubblewrap).

:func:`spawn` starts a command (the untrusted worker) inside a fresh sandbox:

* its own mount, pid, ipc, uts and network namespaces (and, when not started by root, its own
  user namespace): the file system holds only the Python runtime and the worker's part of the package,
  read-only, the submission's own copy, read-only, and a small private ``/tmp`` (a size-capped
  tmpfs). No course files, no other submissions, reports, CSV or caches, no ``/proc`` of any
  process outside the sandbox, no network but its own loopback;
* as a dedicated unprivileged uid with no capabilities and ``no_new_privs`` (when the grader runs
  as root, which a user namespace would still map to root outside; otherwise the user's own uid
  inside a user namespace);
* hard resource limits (set before ``exec``: the worker cannot raise them again): address space
  per process, file size, open files, core dumps, and the number of processes of its uid;
* ended as a whole: the sandbox's pid 1 is killed with its parent (``--die-with-parent``), which
  takes every process of the pid namespace with it, double-forked daemons included; every process
  left with the sandbox's uid is killed as well.

:func:`available` says whether this machine can do it, and why not. Where it cannot (macOS, a
container without namespaces) the grader refuses to run student code unless told
``--no-isolation``, and then every report says so.
"""
from __future__ import annotations

import functools
import itertools
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core.clock import CpuReading, thread_times
from ..core.records import Limits
from . import cgroup
from .processes import die_with_parent

#: where the worker's part of the package appears inside the sandbox (``/opt/grader/autograder``)
GRADER_ROOT = "/opt/grader"
SUBMISSION_DIR = "/submission"
HOME = "/tmp/home"
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: sudo apt-get install bubblewrap; Fedora: "
                "sudo dnf install bubblewrap) and make sure user namespaces are enabled, or pass "
                "--no-isolation to grade without it (every report then says so)")


@dataclass(frozen=True)
class SandboxLimits:
    """Hard limits for one sandbox. Sizes in MiB; the grading limits' defaults are
    :class:`~autograder.core.records.Limits`'."""

    address_space_mb: int = Limits.address_space_mb
    file_size_mb: int = Limits.output_mb
    tmp_mb: int = 256
    processes: int = 512
    open_files: int = 1024
    #: resident memory of the whole sandbox, every process in it (watched by the caller)
    memory_mb: int = Limits.student_memory_mb


@dataclass(frozen=True)
class Availability:
    ok: bool
    how: str


@functools.lru_cache(maxsize=1)
def available() -> Availability:
    """Whether :func:`spawn` can isolate here (tried once, with a real sandbox)."""
    if not sys.platform.startswith("linux"):
        return Availability(False, f"isolation needs Linux namespaces (this is {sys.platform}); "
                            + INSTALL_HINT)
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Availability(False, "bubblewrap (bwrap) is not installed; " + INSTALL_HINT)
    try:
        p = subprocess.run(_bwrap_argv(bwrap, binds=[], uid=_sandbox_uid()) + ["/bin/true"],
                           capture_output=True, timeout=30, preexec_fn=_limits_fn(
                               SandboxLimits()), pass_fds=())
    except (OSError, subprocess.SubprocessError) as e:
        return Availability(False, f"bubblewrap could not start ({e}); " + INSTALL_HINT)
    if p.returncode != 0:
        err = p.stderr.decode(errors="replace").strip().splitlines()
        return Availability(False, f"bubblewrap failed ({err[-1] if err else p.returncode}); "
                            + INSTALL_HINT)
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    mode = "a dedicated uid" if os.geteuid() == 0 else "a user namespace"
    return Availability(True, f"{version or 'bubblewrap'}, {mode}, no network")


def _sandbox_uid() -> Optional[int]:
    """A fresh unprivileged uid when running as root (None: keep ours, in a user namespace)."""
    if os.geteuid() != 0:
        return None
    return 200_000 + secrets.randbelow(1_000_000)


def _ancestors(dest: str) -> list[str]:
    parts = Path(dest).parents
    return [str(p) for p in reversed(list(parts)) if str(p) != "/"]


def _bwrap_argv(bwrap: str, *, binds: list[tuple[Optional[str], str]], uid: Optional[int],
                env: Optional[dict] = None, tmp_mb: int = 256, chdir: str = HOME) -> list[str]:
    """The bubblewrap command line: system dirs and ``binds`` (src, dest) read-only."""
    argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--hostname", "sandbox"]
    if uid is None:
        argv += ["--unshare-user", "--cap-drop", "ALL"]
    # the private /tmp first: a runtime that lives under /tmp is bound on top of it
    argv += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    for d in ("/usr", "/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        if os.path.exists(d):
            argv += ["--ro-bind", d, d]
    for d in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(d):
            argv += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            argv += ["--ro-bind", d, d]
    made: set[str] = {"/usr", "/etc", "/tmp"}
    for src, dest in binds:
        if src is None:  # a mask: an empty, read-only folder over what a bind above exposed
            argv += ["--perms", "0555", "--tmpfs", dest, "--remount-ro", dest]
            continue
        for a in _ancestors(dest):
            if a not in made and not any(a == d or a.startswith(d + "/") for _, d in binds):
                argv += ["--perms", "0755", "--dir", a]
                made.add(a)
        argv += ["--ro-bind", src, dest]
    argv += ["--perms", "0777", "--dir", HOME, "--chdir", chdir, "--clearenv"]
    for k, v in (env or {}).items():
        argv += ["--setenv", k, v]
    argv.append("--")
    if uid is not None:
        argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    return argv


def _limits_fn(lim: SandboxLimits, uid: Optional[int] = None, group=None):
    """preexec_fn: the sandbox's control group (:mod:`.cgroup`, where one could be made),
    hard limits, inherited by everything the sandbox starts, and death with this process
    (:func:`~autograder.isolation.processes.die_with_parent`)."""
    orphan_guard = die_with_parent()

    def apply():
        if group is not None:
            group.join()
        orphan_guard()
        def hard(which, value):
            _, current = resource.getrlimit(which)
            if current != resource.RLIM_INFINITY:
                value = min(value, current)  # a limit can only go down
            resource.setrlimit(which, (value, value))

        hard(resource.RLIMIT_AS, lim.address_space_mb << 20)
        hard(resource.RLIMIT_FSIZE, lim.file_size_mb << 20)
        hard(resource.RLIMIT_CORE, 0)
        hard(resource.RLIMIT_NOFILE, lim.open_files)
        n = lim.processes
        if uid is None:  # our own uid: allow what it already runs, plus the cap
            n += _count_processes(os.getuid())
        hard(resource.RLIMIT_NPROC, n)

    return apply


def _count_processes(uid: int) -> int:
    n = 0
    for pid in _pids():
        if _uid_of(pid) == uid:
            n += _threads(pid)
    return n


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k] = v.strip()
    except OSError:
        pass
    return out


def _uid_of(pid: int) -> Optional[int]:
    s = _status(pid).get("Uid")
    return int(s.split()[0]) if s else None


def _threads(pid: int) -> int:
    s = _status(pid).get("Threads")
    return int(s) if s else 1


_SERIALS = itertools.count()


class Sandboxed:
    """A running sandboxed command: its pipes, its memory, and a way to end all of it."""

    def __init__(self, proc: subprocess.Popen, uid: Optional[int], isolated: bool,
                 group=None):
        self.proc = proc
        self.uid = uid
        self.isolated = isolated
        #: its control group (the kernel's memory and process bound), or None: none here
        self.group = group
        #: CPU seconds its processes used in all, read from its control group when it was
        #: killed (None before, or without a group: its processes were then the caller's
        #: children, counted in the caller's own usage of reaped children)
        self.cpu_used_s: Optional[float] = None
        #: a host folder used as the worker's home without isolation (removed at the end)
        self.scratch: Optional[Path] = None
        #: names this sandbox in its clock's readings (never reused, unlike an object's id)
        self.serial = next(_SERIALS)

    def members(self) -> list[int]:
        """Every process of the sandbox: those of its uid, or else every descendant of the
        process started (inside a pid namespace, orphans are re-parented to its pid 1, so
        they stay descendants)."""
        if self.uid is not None:
            return [p for p in _pids() if _uid_of(p) == self.uid]
        return _descendants(self.proc.pid)

    def rss_mb(self) -> float:
        """Resident memory of the whole sandbox, children included."""
        total = 0
        for pid in self.members():
            v = _status(pid).get("VmRSS")
            if v:
                total += int(v.split()[0])
        return total / 1024

    def threads(self) -> list[int]:
        """Every thread of the sandbox: its control group's, or else those of :meth:`members`."""
        tids = self.group.threads() if self.group is not None else None
        if tids is not None:
            return tids
        out = []
        for pid in self.members():
            try:
                out += [int(t) for t in os.listdir(f"/proc/{pid}/task")]
            except (OSError, ValueError):
                continue
        return out

    def cpu_reading(self) -> CpuReading:
        """What the sandbox's own effective clock reads (:class:`~autograder.core.clock.
        ShareClock`): its group's CPU seconds (ended processes included; None without a
        group), and each of its threads' CPU and run-queue seconds."""
        used = self.group.usage_s() if self.group is not None else None
        return CpuReading(key=self.serial, used_s=used, threads=thread_times(self.threads()))

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:  # whatever still runs under the sandbox's uid
            for _ in range(3):
                left = [p for p in _pids() if _uid_of(p) == self.uid]
                if not left:
                    break
                for p in left:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
                time.sleep(0.05)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if self.group is not None:
            self.cpu_used_s = self.group.usage_s()
            self.group.remove()

    def out_of_memory(self) -> bool:
        """Whether the kernel stopped it for going past its memory bound (its control group's
        own count; False where it has none)."""
        return self.group is not None and self.group.out_of_memory()


def _descendants(root: int) -> list[int]:
    """``root`` and every process below it, from each process's parent in /proc."""
    parent = {}
    for pid in _pids():
        pp = _status(pid).get("PPid")
        if pp:
            parent[pid] = int(pp)
    out, frontier = [], {root} if root in parent else set()
    while frontier:
        out += frontier
        frontier = {p for p, pp in parent.items() if pp in frontier}
    return out


def spawn(argv: list[str], *, binds: list[tuple[Optional[Path], str]], env: dict,
          isolated: bool, limits: SandboxLimits = SandboxLimits(), stderr=None) -> Sandboxed:
    """Start ``argv`` (paths as seen inside) in a sandbox with pipes on stdin/stdout.

    ``binds`` are (host path, path inside) pairs, mounted read-only. With ``isolated`` False the
    command runs as a plain child process with the same limits (the caller has been told
    ``--no-isolation``): the paths in ``argv`` must then be host paths.
    """
    if isolated:
        avail = available()
        if not avail.ok:
            raise RuntimeError(f"cannot isolate student code: {avail.how}")
        uid = _sandbox_uid()
        binds_ = [(None if s is None else str(s), d) for s, d in binds]
        cmd = _bwrap_argv(shutil.which("bwrap"), binds=binds_, uid=uid, env=env,
                          tmp_mb=limits.tmp_mb) + list(argv)
        group = cgroup.create(limits.memory_mb, limits.processes)
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, start_new_session=True, close_fds=True,
                                preexec_fn=_limits_fn(limits, uid, group))
        return Sandboxed(proc, uid, True, group)
    group = cgroup.create(limits.memory_mb, limits.processes)
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=stderr, start_new_session=True, close_fds=True, env=env,
                            preexec_fn=_limits_fn(limits, group=group))
    return Sandboxed(proc, None, False, group)


#: the parts of the package the untrusted worker may read (it imports nothing else): the
#: course's references, baselines and rules, the judge and the class tools stay outside
WORKER_PARTS = ("__init__.py", "core", "worker")


def python_binds() -> list[tuple[Optional[Path], str]]:
    """The Python runtime (the base installation and this virtual environment), read-only at
    the same paths, and the worker's part of the package (:data:`WORKER_PARTS`) under
    :data:`GRADER_ROOT`. ``(None, dest)`` masks ``dest`` (the installed package itself, when
    the runtime holds it)."""
    pkg = Path(__file__).resolve().parent.parent
    binds = []
    prefixes = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    for p in prefixes:
        if not str(p).startswith("/usr"):
            binds.append((p, str(p)))
    binds.sort(key=lambda b: len(str(b[1])))
    # Installed from a wheel, the whole package lies inside the runtime bound above (its
    # site-packages), references, baselines and judge included: an empty folder hides it.
    if any(pkg.is_relative_to(p) for p in prefixes | {Path("/usr")}):
        binds.append((None, str(pkg)))
    binds += [(pkg / part, f"{GRADER_ROOT}/autograder/{part}") for part in WORKER_PARTS]
    return binds


def describe_exit(rc: int, *, runs_submission: bool = True) -> str:
    """Why a process ended, from its exit status (bubblewrap reports a child killed by signal
    N as 128 + N). ``runs_submission`` False: a process that never runs the hand-in's code
    (the judge), whose plain exit is the grader's own error."""
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
    if not runs_submission:
        return (f"the grading process exited with code {rc} (an error in the grader, not in the "
                "submission: its log says which)")
    return f"the Python process exited with code {rc} (os._exit / sys.exit in the submission?)"
