"""``python -m autograder``: the command-line way in.

    python -m autograder grade SUBMISSION [--assignment ID] [--json]
    python -m autograder grade-all DIR [--workers N] [--out grades.csv] [--force]
    python -m autograder list
    python -m autograder profile SUBMISSION FUNCTION [--chip v5e] [--mesh 2x4] [--json]

Grading runs in a separate worker process with a time limit, so a submission that hangs or
crashes the interpreter still gets a report (and this command still exits 0).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .results import SubmissionResult

#: wall-clock budget per graded function, and for loading the submission
PER_FUNCTION_S = 150.0
LOAD_S = 120.0


def grade_path(submission: Path, assignment: str | None = None, *, quick: bool = False,
               seed: int = 0, with_speed: bool = True, timeout: float | None = None,
               log=None, limits=None, cache_dir=None) -> SubmissionResult:
    """Grade one submission in isolated worker processes (see :mod:`autograder.sandbox`)."""
    from . import sandbox

    lim = limits or sandbox.Limits(per_function_s=PER_FUNCTION_S, load_s=LOAD_S)
    if timeout:
        lim.per_submission_s = timeout
    opts = sandbox.Options(assignment=assignment, quick=quick, seed=seed, with_speed=with_speed,
                           cache_dir=cache_dir, limits=lim)
    return sandbox.grade_submission(Path(submission), opts, log=log)


def _cmd_grade(a) -> int:
    path = Path(a.submission)
    if not path.exists():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    res = grade_path(path, a.assignment, quick=a.quick, seed=a.seed,
                     with_speed=not a.no_speed)
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.report())
    return 0


def _cmd_list(a) -> int:
    from . import registry

    for asg in registry.assignments():
        print(asg)
        for p in registry.problems(asg):
            print(f"  {p.name:38s} {p.points:g} pts  checks: {', '.join(p.check_names)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m autograder",
                                 description="Grade JAX sharding exercises.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade one notebook or .py submission")
    g.add_argument("submission")
    g.add_argument("--assignment", help="e.g. ps1_sharding (default: guessed)")
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.add_argument("--quick", action="store_true", help="fewer meshes and cases")
    g.add_argument("--no-speed", action="store_true", help="skip the speed check")
    g.add_argument("--seed", type=int, default=0)
    g.set_defaults(func=_cmd_grade)
    from .batch import add_parser as _add_batch_parser

    _add_batch_parser(sub)
    l = sub.add_parser("list", help="list the graded functions")
    l.set_defaults(func=_cmd_list)
    from .profile_cli import add_parser as _add_profile

    _add_profile(sub)
    return ap


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    return a.func(a)
