"""Where a grading run's seconds go: named phases, summed per process.

    with phase("compile numerics"):
        ...

Each phase sums its wall-clock seconds, the CPU seconds of the thread that ran it (its own
work) and the CPU seconds this process spent while it ran (every thread's: the threads XLA
runs a program on are counted, and so is another thread's work that overlaps the phase, so
those figures of overlapping phases are not additive).
The trusted grader appends its totals, one JSON object per run, to the file named by
``$AUTOGRADER_TIMINGS`` (``benchmarks/bench_submission.py`` reads them), with the CPU seconds
of the process itself and of the sandboxed workers it started and reaped since the last
:func:`reset`; without it the phases cost two clock reads each and nothing is written.
"""
from __future__ import annotations

import contextlib
import json
import os
import resource
import threading
import time
from collections import defaultdict

_clock = time.perf_counter
_cpu = time.process_time
_own = time.thread_time
_lock = threading.Lock()
_totals: dict[str, float] = defaultdict(float)
_cpu_totals: dict[str, float] = defaultdict(float)
_own_totals: dict[str, float] = defaultdict(float)


def _usage() -> dict[str, float]:
    """CPU seconds (user and system) of this process and of its reaped children."""
    out = {}
    for name, who in (("self", resource.RUSAGE_SELF), ("children", resource.RUSAGE_CHILDREN)):
        r = resource.getrusage(who)
        out[name] = r.ru_utime + r.ru_stime
    return out


_since = _usage()


def _readings() -> tuple[float, float, float]:
    """(wall-clock, process CPU, this thread's CPU) now."""
    return _clock(), _cpu(), _own()


def _count(name: str, since: tuple[float, float, float]) -> None:
    """Add what passed since ``since`` (:func:`_readings`) to phase ``name``."""
    (t1, c1, o1), (t0, c0, o0) = _readings(), since
    with _lock:
        _totals[name] += t1 - t0
        _cpu_totals[name] += c1 - c0
        _own_totals[name] += o1 - o0


@contextlib.contextmanager
def phase(name: str):
    since = _readings()
    try:
        yield
    finally:
        _count(name, since)


def add(name: str, seconds: float) -> None:
    with _lock:
        _totals[name] += seconds


def totals() -> dict[str, float]:
    """Wall-clock seconds per phase."""
    with _lock:
        return {k: round(v, 3) for k, v in _totals.items()}


def cpu_totals() -> dict[str, float]:
    """This process's CPU seconds while each phase ran (see the module's docstring)."""
    with _lock:
        return {k: round(v, 3) for k, v in _cpu_totals.items()}


_others: dict[str, float] = defaultdict(float)


def add_process(name: str, cpu_s: float) -> None:
    """Count ``cpu_s`` CPU seconds of a process this one read from elsewhere (a sandbox's
    control group: its processes are not this one's reaped children)."""
    with _lock:
        _others[name] += cpu_s


def own_totals() -> dict[str, float]:
    """The CPU seconds of the thread that ran each phase, while it ran (its own work: not the
    other threads', nor those XLA runs a program on)."""
    with _lock:
        return {k: round(v, 3) for k, v in _own_totals.items()}


def processes() -> dict[str, float]:
    """CPU seconds since the last :func:`reset`: ``self`` (this process), ``children`` (the
    processes it started and reaped: the sandboxed workers run without a control group) and
    those counted by :func:`add_process` (``sandbox``: the workers' control groups)."""
    now = _usage()
    with _lock:
        return {**{k: round(now[k] - _since[k], 3) for k in now},
                **{k: round(v, 3) for k, v in _others.items()}}


def reset() -> None:
    """Start counting afresh (a warm grader, between submissions)."""
    global _since
    with _lock:
        _totals.clear()
        _cpu_totals.clear()
        _own_totals.clear()
        _others.clear()
        _since = _usage()


def job_record(label: str):
    """Start the ``grading`` phase of one job; returns what ends it and writes the record
    (:func:`write`), called before the job's last record is sent: the process that started
    this one may end it at once after that record."""
    since = _readings()

    def done() -> None:
        _count("grading", since)
        write(label)

    return done


def write(label: str) -> None:
    """Append this process's totals to ``$AUTOGRADER_TIMINGS`` (if set)."""
    path = os.environ.get("AUTOGRADER_TIMINGS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"label": label, "phases": totals(), "cpu": cpu_totals(),
                            "own cpu": own_totals(), "processes": processes()}) + "\n")
