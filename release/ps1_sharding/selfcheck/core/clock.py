"""Time limits that mean the same on a busy machine as on an idle one.

Every time limit of the grader (a statement while loading, tracing a function, running one case,
grading one function, the whole submission) counts *effective* seconds: one per second of
wall-clock time while the work it times gets the CPU it asks for, proportionally fewer while it
does not, but never fewer than :data:`MIN_RATE` per wall-clock second. An honest function that
needs 10 s alone gets the same verdict when six gradings share two cores, and a limit still ends
within ``1 / MIN_RATE`` times its length whatever the load.

Two clocks measure that:

* :class:`ShareClock`, a sandbox's own (the limits on the student's worker: loading, tracing):
  its rate is what the sandbox's own threads got of the CPU they asked for (:func:`share_rate`,
  from its control group's usage and its threads' waits on the run queue). With the kernel
  sharing the CPU between sandboxes (:mod:`autograder.isolation.cgroup`), a sandbox that asks
  for more than its fair share still gets that share, so a neighbour's hundred busy processes
  stretch none of its limits;
* :class:`LoadClock`, a process's: :data:`CLOCK` counts what this process's own threads got of
  the CPU they asked for (the same :func:`share_rate`), for the limits on the process's own
  work (the judge running a program, the worker loading a statement); :data:`MACHINE_CLOCK`
  counts the machine's run queue (``procs_running`` in ``/proc/stat``, its own sampler left
  out), for the supervisor's limits on a whole judge and its sandbox, which it cannot read,
  and which must never end before the limits inside them. Where nothing can be read,
  effective time is wall-clock time.

Both sampler threads start on first use.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

#: the slowest effective time runs, per wall-clock second
MIN_RATE = 0.2
#: how often the sampler reads the machine's load
SAMPLE_S = 0.25
#: a sandbox asking for less CPU than this (cores, on average over a sample) is waiting, not
#: computing: its clock runs at wall-clock speed (a blocked worker's limits never stretch)
IDLE_DEMAND = 0.1
#: a limit that took more wall-clock time than this times its length was stretched, and says so
STRETCHED = 1.2


def share_rate(used_s: float, waited_s: float, wall_s: float, cpus: int,
               min_rate: float = MIN_RATE) -> float:
    """Effective seconds per wall-clock second for a group of threads that, over ``wall_s``
    seconds, ran ``used_s`` CPU-seconds and waited ``waited_s`` seconds on the run queue (ready
    to run, not running): what it got of what it would have got alone, that is of what it asked
    for (``used_s + waited_s``, at most ``cpus`` cores). A group that asks for less than
    :data:`IDLE_DEMAND` of a core runs at wall-clock speed; the rate never falls below
    ``min_rate``. Pure: the readings are the caller's."""
    if wall_s <= 0:
        return 1.0
    used_s, waited_s = max(0.0, used_s), max(0.0, waited_s)
    asked = used_s + waited_s
    if asked < IDLE_DEMAND * wall_s:
        return 1.0
    alone = min(asked, cpus * wall_s)
    return max(min_rate, min(1.0, used_s / alone))


def thread_times(tids: Iterable[int]) -> dict[int, tuple[float, float]]:
    """Seconds on a CPU and seconds waiting on a run queue of each thread (``/proc/TID/
    schedstat``), those that could be read."""
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/{tid}/schedstat", "rb") as f:
                run, wait = f.read().split()[:2]
            out[tid] = (int(run) / 1e9, int(wait) / 1e9)
        except (OSError, ValueError):
            continue
    return out


def _summed(before: dict, after: dict) -> tuple[float, float]:
    """CPU and run-queue seconds the threads of ``after`` added since ``before`` (a thread new
    since then: all of its own)."""
    run = wait = 0.0
    for tid, (r, w) in after.items():
        r0, w0 = before.get(tid, (0.0, 0.0))
        run += max(0.0, r - r0)
        wait += max(0.0, w - w0)
    return run, wait


@dataclass
class CpuReading:
    """One look at a sandbox: ``key`` names it (a new key: a new sandbox, its counters start
    from zero), ``used_s`` its control group's CPU seconds so far (None: no group to read; its
    threads' own then count), ``threads`` each live thread's (CPU, run-queue wait) seconds."""

    key: object
    used_s: Optional[float] = None
    threads: dict = field(default_factory=dict)


def cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def runnable() -> Optional[int]:
    """Tasks (threads) running or ready to run on the whole machine now (None: unknown)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"procs_running"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class LoadClock:
    """Effective seconds since the clock started (see the module's docstring).

    Only its sampler thread changes its state, and it swaps the whole state (one tuple) at
    once; :meth:`now` reads that tuple and takes no lock. A time limit's signal handler reads
    the clock in the middle of whatever the thread was doing, reading the clock included: a
    lock there would be taken twice by one thread, and every later tick would stack another
    handler on the blocked one until Python's recursion limit broke the grading."""

    def __init__(self, min_rate: float = MIN_RATE, cpus: Optional[int] = None,
                 own: bool = False, monotonic: Callable[[], float] = time.monotonic):
        self.min_rate = min_rate
        #: the wall clock of the own threads' looks (tests give their own)
        self.monotonic = monotonic
        self.cpus = cpus or cpu_count()
        #: True: this process's own threads decide the rate; False: the machine's run queue
        self.own = own
        #: the last look at this process's threads (the sampler thread alone touches it)
        self._threads: Optional[tuple[float, dict]] = None
        self._start_lock = threading.Lock()
        #: (wall-clock time of the last sample, effective seconds then, rate since)
        self._state = (time.monotonic(), 0.0, 1.0)
        self._thread: Optional[threading.Thread] = None

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The sampler thread (None until the clock is first read)."""
        return self._thread

    def rate(self) -> float:
        """Effective seconds per wall-clock second at present (smoothed)."""
        return self._state[2]

    def _sample(self) -> float:
        if self.own:
            return self._own_sample()
        n = runnable()
        if n is None:
            return 1.0
        others = max(1, n - 1)  # the sampler itself is running while it reads
        return max(self.min_rate, min(1.0, self.cpus / others))

    def _own_sample(self) -> float:
        """What this process's threads got of the CPU they asked for since the last look."""
        try:
            tids = [int(t) for t in os.listdir("/proc/self/task")]
        except (OSError, ValueError):
            return 1.0
        now, times = self.monotonic(), thread_times(tids)
        last, self._threads = self._threads, (now, times)
        if last is None or not times:
            return 1.0
        run, wait = _summed(last[1], times)
        return share_rate(run, wait, now - last[0], self.cpus, self.min_rate)

    def _advance(self) -> None:
        """The sampler's step: the time since the last one counted at the rate it had, and a
        new rate from the load now (the sampler thread alone calls this)."""
        wall, effective, rate = self._state
        fresh = self._sample()
        now = time.monotonic()
        self._state = (now, effective + (now - wall) * rate, 0.7 * rate + 0.3 * fresh)

    def _run(self) -> None:
        while True:
            time.sleep(SAMPLE_S)
            self._advance()

    def now(self) -> float:
        """Effective seconds since this clock started (never blocks once the sampler runs)."""
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    thread = threading.Thread(target=self._run, daemon=True, name="load-clock")
                    thread.start()
                    self._thread = thread
        wall, effective, rate = self._state
        return effective + (time.monotonic() - wall) * rate

    def deadline(self, seconds: float) -> "Deadline":
        return Deadline(self, self.now() + seconds, seconds)


class ShareClock:
    """A sandbox's effective seconds (see the module's docstring): each time it is read, at most
    every :data:`SAMPLE_S`, ``read()`` looks at the sandbox (a :class:`CpuReading`, or None: no
    sandbox now, wall-clock time) and the time since the last look counts at the rate
    :func:`share_rate` gives for what the sandbox got then. Nothing runs between reads: its
    reader (the judge's thread waiting on the worker) drives it. ``monotonic`` is the wall
    clock (tests give their own)."""

    def __init__(self, read: Callable[[], Optional[CpuReading]], min_rate: float = MIN_RATE,
                 cpus: Optional[int] = None, monotonic: Callable[[], float] = time.monotonic):
        self.read = read
        self.min_rate = min_rate
        self.cpus = cpus or cpu_count()
        self.monotonic = monotonic
        self._lock = threading.Lock()
        self._wall = monotonic()
        self._effective = 0.0
        self._rate = 1.0
        self._last: Optional[CpuReading] = None
        #: CPU seconds the sandboxes used and waited for since this clock started
        self.used_s = 0.0
        self.waited_s = 0.0
        #: whether the last look could read the sandbox
        self.readable = False

    def rate(self) -> float:
        return self._rate

    def _deltas(self, new: CpuReading) -> tuple[float, float]:
        old = self._last if self._last is not None and self._last.key == new.key else None
        run, wait = _summed(old.threads if old is not None else {}, new.threads)
        if new.used_s is not None:  # the group's count: ended processes' CPU included
            used0 = old.used_s if old is not None and old.used_s is not None else 0.0
            run = max(0.0, new.used_s - used0)
        return run, wait

    def _advance(self, now: float) -> None:
        """Count the time since the last look at the rate the sandbox had then (the lock held)."""
        reading = self.read()
        self.readable = reading is not None
        if reading is None:
            rate = 1.0
        else:
            used, waited = self._deltas(reading)
            self.used_s += used
            self.waited_s += waited
            rate = share_rate(used, waited, now - self._wall, self.cpus, self.min_rate)
        self._effective += (now - self._wall) * rate
        self._wall, self._rate, self._last = now, rate, reading

    def now(self) -> float:
        """Effective seconds since this clock started."""
        with self._lock:
            now = self.monotonic()
            if now - self._wall >= SAMPLE_S:
                self._advance(now)
            return self._effective + (now - self._wall) * self._rate

    def asked_s(self) -> Optional[float]:
        """CPU seconds the sandboxes asked for since this clock started (ran, or waited on the
        run queue for), read now; None: the sandbox cannot be read."""
        with self._lock:
            self._advance(self.monotonic())
            return self.used_s + self.waited_s if self.readable else None

    def deadline(self, seconds: float) -> "Deadline":
        return Deadline(self, self.now() + seconds, seconds)


class Deadline:
    """A point in effective time: how much is left of a limit ``seconds`` long."""

    def __init__(self, clock, at: float, seconds: Optional[float] = None):
        self.clock = clock
        self.at = at
        self.seconds = seconds
        self.started = time.monotonic()

    def left(self) -> float:
        return self.at - self.clock.now()

    def expired(self) -> bool:
        return self.left() <= 0

    def sooner(self, other: "Deadline") -> "Deadline":
        return self if self.at <= other.at else other

    def stretched(self) -> str:
        """Words for a limit that took more than :data:`STRETCHED` times its length in
        wall-clock time ("" if it did not): its message says so."""
        wall = time.monotonic() - self.started
        if not self.seconds or wall <= STRETCHED * self.seconds:
            return ""
        return (f" (the limit was stretched to {wall:.0f} s of wall-clock time: the work it "
                "timed got only part of the CPU it asked for on a busy machine)")


#: this process's clock: its own threads' share of the CPU
CLOCK = LoadClock(own=True)
#: the machine's clock: its run queue (the supervisor's limits on a judge and its sandbox)
MACHINE_CLOCK = LoadClock()
