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


#: where ``grade``'s inputs come from when no ``--seed`` is given
SEED_HELP_GRADE = "fix the input seed (default: a fresh secret seed for every run)"
#: and ``grade-all``'s: a course folder keeps one seed for both grading paths (classroom/seed.py)
SEED_HELP_GRADE_ALL = ("fix the input seed (default: an nbgrader course folder's own secret "
                       "seed, kept in <course>/.autograder/seed and shared with nbgrader "
                       "autograde; a flat folder: a fresh secret seed for every run)")


def add_trust_options(g, seed_help: str = SEED_HELP_GRADE) -> None:
    g.add_argument("--seed", type=int, default=None, help=seed_help)
    g.add_argument("--no-isolation", action="store_true",
                   help="run student code without the sandbox (every report then says so)")
