"""How failures of student code are put into words, and the time limit that stops it.

Shared by the worker (which runs student code), the judge (which words what went wrong with a
program) and the self-check (which runs the student's code in their own notebook).
"""
from __future__ import annotations

import signal
import threading
import traceback
from contextlib import contextmanager

CALLBACK_HINT = ("your function calls back into Python at run time (jax.pure_callback, "
                 "io_callback or jax.debug.callback); graded programs must be pure JAX that "
                 "compiles to one XLA program. Compute the value with jax.numpy / jax.lax instead")


def describe_error(e: BaseException, limit: int = 1500) -> str:
    """The error as a student should see it: its type, JAX's whole message (hint lines kept),
    and where in the submission it happened."""
    text = f"{type(e).__name__}: {e}".strip()
    low = text.lower()
    if "callback" in low and any(w in low for w in ("custom call", "serializ", "export")):
        return CALLBACK_HINT
    lines = [l for l in text.splitlines() if l.strip() and not set(l.strip()) <= {"-"}]
    lines = [l for l in lines if "JAX_TRACEBACK_FILTERING" not in l
             and "removed its internal frames" not in l]
    tb = traceback.extract_tb(e.__traceback__)
    student = [f for f in tb if f.filename.startswith("<")]
    if student:
        lines.append(f"(at {student[-1].filename} line {student[-1].lineno})")
    return cap_lines(lines, limit)


class GradingTimeout(Exception):
    """Raised inside student code that runs past its time limit."""


#: how many time limits have run out in this process: work interrupted by one (a compile, a
#: program still running on XLA's threads) may go on behind it, so a process that counts any
#: is not fit to grade more (the judge stops and the supervisor starts a fresh one)
EXPIRED = 0

#: how often a running limit looks at the (effective) clock
_TICK_S = 0.25


@contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`GradingTimeout` in this (main) thread after ``seconds`` of effective time
    (:mod:`autograder.core.clock`: wall-clock time on an idle machine, stretched on a busy one).

    Interrupts Python-level hangs (a ``while True``, a ``time.sleep``) and waits that return to
    Python (a Future, ``block_until_ready``). Off the main thread it is a no-op; the
    process-level limits of the supervisor cover that case.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    from .clock import CLOCK

    deadline = CLOCK.deadline(seconds)

    def _tick(signum, frame):
        global EXPIRED
        if deadline.expired():
            signal.setitimer(signal.ITIMER_REAL, 0)
            EXPIRED += 1
            raise GradingTimeout(f"timed out after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _tick)
    first = min(seconds, _TICK_S)
    signal.setitimer(signal.ITIMER_REAL, first, _TICK_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def cap_lines(lines: list[str], limit: int) -> str:
    """``lines`` joined, within ``limit`` characters: the first lines (what went wrong) and the
    last ones (where JAX says how to fix it, and where it happened) are kept, lines from the
    middle are left out first, and a line is cut short only when it alone is too long."""
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head, tail = [], []
    room = limit - 40  # the marker line
    for i in range(len(lines)):  # alternately from the start and from the end
        line = lines[i // 2] if i % 2 == 0 else lines[-1 - i // 2]
        if i == 0 and len(line) + 1 > room // 2:  # what went wrong, cut to leave room
            line = line[:room // 2 - 5] + " ..."
        elif len(line) + 1 > room:
            break
        (head if i % 2 == 0 else tail).append(line)
        room -= len(line) + 1
    left_out = len(lines) - len(head) - len(tail)
    marker = [f"[... {left_out} line{'s' * (left_out != 1)} left out ...]"] if left_out else []
    return "\n".join(head + marker + tail[::-1])[:limit]
