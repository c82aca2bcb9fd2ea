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


def add_limit_options(g) -> None:
    """The time and memory limits a course may set from the command line, with
    :class:`~autograder.supervisor.options.Limits`'s own defaults (declared there once)."""
    from ..supervisor.options import Limits

    d = Limits()
    g.add_argument("--function-timeout", type=float, default=d.per_function_s,
                   help=f"seconds per graded function (default {d.per_function_s:g})")
    g.add_argument("--load-timeout", type=float, default=d.load_s,
                   help=f"seconds to load one submission (default {d.load_s:g})")
    g.add_argument("--statement-timeout", type=float, default=d.statement_s,
                   help="seconds for one top-level statement of a submission while it loads "
                        f"(default {d.statement_s:g})")
    g.add_argument("--memory-mb", type=int, default=d.memory_mb,
                   help=f"resident memory of the trusted grader (default {d.memory_mb})")


def limits_of(a):
    """The :class:`~autograder.supervisor.options.Limits` of :func:`add_limit_options`'s
    arguments."""
    from ..supervisor.options import Limits

    return Limits(per_function_s=a.function_timeout, load_s=a.load_timeout,
                  statement_s=a.statement_timeout, memory_mb=a.memory_mb)
