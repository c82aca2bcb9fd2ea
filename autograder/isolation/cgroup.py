"""A memory and process bound the kernel enforces on a whole sandbox, and a fair share of the
CPU, where the machine offers them: a control group per sandbox.

cgroup v2 (one unified hierarchy) or v1 (the ``memory`` and ``pids`` controllers mounted apart,
as on this repository's CI machine) are both used when this process may create groups below its
own. The sandbox's first process joins its group before it executes anything (in its
``preexec_fn``), so everything the student's code starts is inside, double-forked daemons too.
Past the memory bound the kernel stops the sandbox (the OOM killer, inside the group only); the
group's own counter then says why it died. Where no group can be made (no cgroup file system,
not allowed to write it), the judge's watchdog alone watches the sandbox's resident memory
(:class:`autograder.judge.channel.WorkerLink`), and ``python -m autograder doctor`` says which.

The CPU: each sandbox's group has the ``cpu`` controller with the same weight as every other
(``cpu.shares`` 1024 in v1, ``cpu.weight`` 100 in v2), so the kernel shares the CPU between
sandboxes, not between their processes: one hand-in's hundred busy processes get one share,
as a classmate's one process does. Its usage (``cpuacct.usage`` in v1, ``cpu.stat``'s
``usage_usec`` in v2) and its threads feed the sandbox's own effective clock
(:class:`autograder.core.clock.ShareClock`). Where the ``cpu`` controller is missing, the
group still bounds memory and tasks, :func:`cpu_describe` says so (``doctor`` prints it), and
nothing shares the CPU fairly.
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
    #: where its CPU weight is set (None: no ``cpu`` controller here, no fair share)
    cpu_dir: Optional[Path] = None
    #: where its CPU usage and its threads are read (None: nowhere)
    acct_dir: Optional[Path] = None

    @property
    def cpu_shared(self) -> bool:
        """Whether the kernel gives this group its own, equal share of the CPU."""
        return self.cpu_dir is not None

    def usage_s(self) -> Optional[float]:
        """CPU seconds every process of the group has used so far, those already ended
        included (None: unreadable)."""
        d = self.acct_dir
        if d is None:
            return None
        try:
            if self.kind == "v2":
                for line in (d / "cpu.stat").read_text().splitlines():
                    k, v = line.split()
                    if k == "usage_usec":
                        return int(v) / 1e6
                return None
            return int((d / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def threads(self) -> Optional[list[int]]:
        """The ids of every thread in the group now (None: unreadable)."""
        d = self.acct_dir or self.memory_dir
        if d is None:
            return None
        try:
            text = (d / ("cgroup.threads" if self.kind == "v2" else "tasks")).read_text()
            return [int(t) for t in text.split()]
        except (OSError, ValueError):
            return None

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


#: every sandbox's CPU weight: the same for all (the kernel's default for a group)
CPU_SHARES_V1 = 1024
CPU_WEIGHT_V2 = 100


def _v1_parent(controller: str) -> Optional[Path]:
    """This process's group in the v1 hierarchy holding ``controller`` (None: not mounted)."""
    base = ROOT / controller
    if not base.is_dir():  # mounted with others under a joint name ("cpu,cpuacct")?
        try:
            base = next(d for d in ROOT.iterdir()
                        if d.is_dir() and controller in d.name.split(","))
        except (OSError, StopIteration):
            return None
    return base / (_own_path(controller) or "/").lstrip("/")


def create(memory_mb: int, processes: int) -> Optional[Group]:
    """A fresh group bounding memory to ``memory_mb`` and tasks to ``processes``, with its own,
    equal share of the CPU where the ``cpu`` controller is there (:func:`cpu_support`), or
    None where this machine offers no group to this process."""
    kind = support()
    if kind is None:
        return None
    limit = str(int(memory_mb) << 20)
    try:
        if kind == "v2":
            parent = _v2_mount() / (_own_path(None) or "/").lstrip("/")
            files = {"memory.max": limit, "memory.swap.max": "0", "pids.max": str(processes)}
            shared = cpu_support() is not None
            if shared:
                files["cpu.weight"] = str(CPU_WEIGHT_V2)
            d = _make(parent, files)
            # cpu.stat's usage_usec is there whether or not the cpu controller is
            return Group("v2", [d], d, cpu_dir=d if shared else None, acct_dir=d)
        mem = _make(_v1_parent("memory"), {"memory.limit_in_bytes": limit})
        group = Group("v1", [mem], mem)
        try:
            group.dirs.append(_make(_v1_parent("pids"), {"pids.max": str(processes)}))
        except (OSError, TypeError):
            pass  # the rlimit on processes still holds
        if cpu_support() is not None:
            try:
                cpu = _make(_v1_parent("cpu"), {"cpu.shares": str(CPU_SHARES_V1)})
                group.dirs.append(cpu)
                group.cpu_dir = cpu
            except OSError:
                pass  # the probe made one: this is rare, and the sandbox says so (no share)
        acct = _v1_parent("cpuacct")
        if group.cpu_dir is not None and (group.cpu_dir / "cpuacct.usage").exists():
            group.acct_dir = group.cpu_dir  # cpu and cpuacct mounted together
        elif acct is not None and (acct / "cpuacct.usage").exists():
            try:
                group.acct_dir = _make(acct, {})
                group.dirs.append(group.acct_dir)
            except OSError:
                pass  # no usage: the sandbox's clock reads its threads alone
        return group
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


@functools.lru_cache(maxsize=1)
def cpu_support() -> Optional[str]:
    """Where a sandbox's group gets its own CPU share (the hierarchy, for ``doctor``), tried
    once with a real group; None: the ``cpu`` controller is not available to this process
    (:func:`cpu_describe` says why)."""
    kind = support()
    if kind == "v2":
        own = _v2_mount() / (_own_path(None) or "/").lstrip("/")
        try:
            if "cpu" in (own / "cgroup.subtree_control").read_text().split():
                d = _make(own, {"cpu.weight": str(CPU_WEIGHT_V2)})
                d.rmdir()
                return f"cgroup v2 cpu.weight {CPU_WEIGHT_V2}"
        except OSError:
            pass
        return None
    if kind == "v1":
        cpu = _v1_parent("cpu")
        if cpu is not None and (cpu / "cpu.shares").exists():
            try:
                d = _make(cpu, {"cpu.shares": str(CPU_SHARES_V1)})
                d.rmdir()
                return f"cgroup v1 cpu.shares {CPU_SHARES_V1}"
            except OSError:
                pass
    return None


def cpu_describe() -> str:
    """How sandboxes share the CPU on this machine (for ``doctor``)."""
    where = cpu_support()
    if where is not None:
        return (f"each sandbox gets its own equal share ({where}): a hand-in's busy processes "
                "take no classmate's CPU, and its time limits run on its own clock")
    why = ("no control group can be made here" if support() is None else
           "the cgroup cpu controller is not available to this process (v2: not in "
           "cgroup.subtree_control; v1: no writable cpu hierarchy)")
    return (f"NOT shared fairly: {why}; a hand-in's busy processes can slow a classmate's "
            "(its limits are then stretched to match, up to 5x, and its verdict kept)")


def describe() -> str:
    """What bounds a sandbox's memory on this machine (for ``doctor``)."""
    kind = support()
    if kind is None:
        return ("the judge's watchdog (no control group can be made here: the kernel does not "
                "enforce the bound)")
    return f"a cgroup {kind} per sandbox (the kernel enforces it), and the judge's watchdog"
