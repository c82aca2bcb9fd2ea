"""Command-line options shared by ``grade`` and ``grade-all``, and how a refusal is said."""
from __future__ import annotations

import sys


def refuse(e: Exception) -> int:
    """The message and exit code for options the grader cannot run with."""
    from ..supervisor.options import IsolationUnavailable

    if isinstance(e, IsolationUnavailable):
        print(f"refusing to run student code without isolation: {e}", file=sys.stderr)
    else:
        print(str(e), file=sys.stderr)
    return 2


def add_trust_options(g) -> None:
    g.add_argument("--seed", type=int, default=None,
                   help="fix the input seed (default: a fresh secret seed for every run)")
    g.add_argument("--no-isolation", action="store_true",
                   help="run student code without the sandbox (every report then says so)")
