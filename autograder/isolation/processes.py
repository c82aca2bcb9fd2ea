"""Process trees that end with their parent.

Every process the grader starts (the judge, the sandboxed worker, a notebook run) is asked, in
its ``preexec_fn``, to receive SIGKILL when its parent dies (``PR_SET_PDEATHSIG``): killing
``grade``, ``grade-all``, ``nbgrader autograde`` or a Dask worker, by any signal, ends the judge
it started, which ends its sandbox (bubblewrap's ``--die-with-parent`` does the same one level
down, and the sandbox's pid namespace takes every process inside with it).

Linux sends the signal when the *thread* that started the child ends, not the process: the
grader starts each child from the thread that then waits for it, so the two end together.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1

try:  # loaded here, in the parent: a child between fork and exec only calls it
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") \
        else None
except (OSError, AttributeError):  # pragma: no cover - not Linux
    _prctl = None


def die_with_parent():
    """A ``preexec_fn`` step: the child gets SIGKILL when the calling thread of this process
    ends (and exits at once if this process is already gone)."""
    parent = os.getpid()

    def apply() -> None:
        if _prctl is None:
            return
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)

    return apply
