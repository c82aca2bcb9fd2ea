"""A memory and process bound the kernel enforces on a whole sandbox, where the machine offers
one: a control group per sandbox.

cgroup v2 (one unified hierarchy) or v1 (the ``memory`` and ``pids`` controllers mounted apart,
as on this repository's CI machine) are both used when this process may create groups below its
own. The sandbox's first process joins its group before it executes anything (in its
``preexec_fn``), so everything the student's code starts is inside, double-forked daemons too.
Past the memory bound the kernel stops the sandbox (the OOM killer, inside the group only); the
group's own counter then says why it died. Where no group can be made (no cgroup file system,
not allowed to write it), the judge's watchdog alone watches the sandbox's resident memory
(:class:`autograder.judge.channel.WorkerLink`), and ``python -m autograder doctor`` says which.
"""
from __future__ import annotations

import functools
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: Optional[str]) -> Optional[str]:
    """This process's group in the hierarchy of ``controller`` (None: the v2 hierarchy)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        num, controllers, path = line.split(":", 2)
        if controller is None and num == "0" and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return None


def _v2_mount() -> Optional[Path]:
    for candidate in (ROOT, ROOT / "unified"):
        if (candidate / "cgroup.controllers").exists():
            return candidate
    return None


@dataclass
class Group:
    """One sandbox's groups (one directory per hierarchy), made by :func:`create`."""

    kind: str
    dirs: list = field(default_factory=list)
    memory_dir: Optional[Path] = None

    def join(self) -> None:
        """Put the calling process in every group (call it in the child, before ``exec``)."""
        pid = str(os.getpid()).encode()
        for d in self.dirs:
            fd = os.open(d / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def out_of_memory(self) -> bool:
        """Whether the kernel stopped a process of the group for memory."""
        d = self.memory_dir
        if d is None:
            return False
        try:
            if self.kind == "v2":
                for line in (d / "memory.events").read_text().splitlines():
                    k, v = line.split()
                    if k in ("oom_kill", "oom") and int(v) > 0:
                        return True
                return False
            for line in (d / "memory.oom_control").read_text().splitlines():
                k, v = line.split()
                if k == "oom_kill" and int(v) > 0:
                    return True
            return int((d / "memory.failcnt").read_text()) > 0 and \
                int((d / "memory.max_usage_in_bytes").read_text()) >= \
                int((d / "memory.limit_in_bytes").read_text())
        except (OSError, ValueError):
            return False

    def remove(self) -> None:
        """Remove the groups once their processes are gone (a few tries: the kernel empties a
        group a moment after its last process dies)."""
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _make(parent: Path, files: dict[str, str]) -> Path:
    d = parent / f"autograder-{os.getpid()}-{secrets.token_hex(4)}"
    d.mkdir()
    try:
        for name, value in files.items():
            (d / name).write_text(value)
    except OSError:
        d.rmdir()
        raise
    return d


def create(memory_mb: int, processes: int) -> Optional[Group]:
    """A fresh group bounding memory to ``memory_mb`` and tasks to ``processes``, or None where
    this machine offers none to this process."""
    kind = support()
    if kind is None:
        return None
    limit = str(int(memory_mb) << 20)
    try:
        if kind == "v2":
            parent = _v2_mount() / (_own_path(None) or "/").lstrip("/")
            d = _make(parent, {"memory.max": limit, "memory.swap.max": "0",
                               "pids.max": str(processes)})
            return Group("v2", [d], d)
        mem = _make(ROOT / "memory" / (_own_path("memory") or "/").lstrip("/"),
                    {"memory.limit_in_bytes": limit})
        dirs = [mem]
        try:
            dirs.append(_make(ROOT / "pids" / (_own_path("pids") or "/").lstrip("/"),
                              {"pids.max": str(processes)}))
        except OSError:
            pass  # the rlimit on processes still holds
        return Group("v1", dirs, mem)
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def support() -> Optional[str]:
    """``'v2'`` or ``'v1'``: the kind of group this process can make for a sandbox (tried once,
    with a real group); None: none."""
    v2 = _v2_mount()
    if v2 is not None:
        own = v2 / (_own_path(None) or "/").lstrip("/")
        enabled = (own / "cgroup.subtree_control")
        try:
            if {"memory", "pids"} <= set(enabled.read_text().split()):
                d = _make(own, {})
                d.rmdir()
                return "v2"
        except OSError:
            pass
    mem = ROOT / "memory" / (_own_path("memory") or "/").lstrip("/")
    if (mem / "memory.limit_in_bytes").exists():
        try:
            d = _make(mem, {"memory.limit_in_bytes": str(1 << 30)})
            d.rmdir()
            return "v1"
        except OSError:
            pass
    return None


def describe() -> str:
    """What bounds a sandbox's memory on this machine (for ``doctor``)."""
    kind = support()
    if kind is None:
        return ("the judge's watchdog (no control group can be made here: the kernel does not "
                "enforce the bound)")
    return f"a cgroup {kind} per sandbox (the kernel enforces it), and the judge's watchdog"
