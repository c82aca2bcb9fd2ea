"""Where a grading run's seconds go: named phases, summed per process.

    with phase("compile numerics"):
        ...

The trusted grader appends its totals, one JSON object per run, to the file named by
``$AUTOGRADER_TIMINGS`` (``benchmarks/bench_submission.py --breakdown`` reads them); without it
the phases cost a clock read each and nothing is written.
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import defaultdict

_clock = time.perf_counter
_lock = threading.Lock()
_totals: dict[str, float] = defaultdict(float)


@contextlib.contextmanager
def phase(name: str):
    t0 = _clock()
    try:
        yield
    finally:
        with _lock:
            _totals[name] += _clock() - t0


def add(name: str, seconds: float) -> None:
    with _lock:
        _totals[name] += seconds


def totals() -> dict[str, float]:
    with _lock:
        return {k: round(v, 3) for k, v in _totals.items()}


def reset() -> None:
    """Start counting afresh (a warm grader, between submissions)."""
    with _lock:
        _totals.clear()


def write(label: str) -> None:
    """Append this process's totals to ``$AUTOGRADER_TIMINGS`` (if set)."""
    path = os.environ.get("AUTOGRADER_TIMINGS")
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"label": label, "phases": totals()}) + "\n")
