"""Time limits that mean the same on a busy machine as on an idle one.

Every time limit of the grader (a statement while loading, tracing a function, running one case,
grading one function, the whole submission) counts *effective* seconds: on a machine with no
more runnable tasks than CPUs, one per second of wall-clock time; when more compete (a class
graded with more workers than cores), proportionally fewer (``procs_running`` in
``/proc/stat``, this process's own sampler left out), but never fewer than :data:`MIN_RATE` per
wall-clock second. An honest function that needs 10 s alone gets the same verdict when six
gradings share two cores, and a limit still ends within ``1 / MIN_RATE`` times its length
whatever the load. Where ``/proc/stat`` cannot be read, effective time is wall-clock time.

:data:`CLOCK` is the process's clock; its sampler thread starts on first use.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Optional

#: the slowest effective time runs, per wall-clock second
MIN_RATE = 0.2
#: how often the sampler reads the machine's load
SAMPLE_S = 0.25


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

    def __init__(self, min_rate: float = MIN_RATE, cpus: Optional[int] = None):
        self.min_rate = min_rate
        self.cpus = cpus or cpu_count()
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
        n = runnable()
        if n is None:
            return 1.0
        others = max(1, n - 1)  # the sampler itself is running while it reads
        return max(self.min_rate, min(1.0, self.cpus / others))

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
        return Deadline(self, self.now() + seconds)


class Deadline:
    """A point in effective time: how much is left of a limit."""

    def __init__(self, clock: LoadClock, at: float):
        self.clock = clock
        self.at = at

    def left(self) -> float:
        return self.at - self.clock.now()

    def expired(self) -> bool:
        return self.left() <= 0

    def sooner(self, other: "Deadline") -> "Deadline":
        return self if self.at <= other.at else other


#: this process's clock
CLOCK = LoadClock()
