"""``python -m autograder``: the command-line way in.

    python -m autograder grade SUBMISSION [--assignment ID] [--json]
    python -m autograder grade-all DIR [--workers N] [--out class_grades.csv] [--force]
    python -m autograder collect-lms DOWNLOAD --assignment ID --roster CSV [--lms canvas|moodle]
    python -m autograder list
    python -m autograder profile SUBMISSION FUNCTION [--chip v5e] [--mesh 2x4] [--json]
    python -m autograder doctor
    python -m autograder cluster-certs FOLDER
    python -m autograder gradebook-sync [DB] [--course DIR] [--apply]

Student code runs only in the sandbox (:mod:`autograder.isolation`); the verdicts come from a
trusted process that grades the programs it exported. A submission that hangs or crashes still
gets a report (and this command still exits 0). Where the sandbox is unavailable, ``grade`` and
``grade-all`` refuse to run unless given ``--no-isolation``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.results import SubmissionResult
from .options import add_limit_options, add_trust_options, limits_of, refuse

#: wall-clock budget per graded function, and for loading the submission
def grade_path(submission: Path, assignment: str | None = None, *, quick: bool = False,
               seed: int | None = None, with_speed: bool = True, timeout: float | None = None,
               log=None, limits=None, cache_dir=None, isolation: bool = True,
               only=None, folder: bool = False, timed_speed: bool = False) -> SubmissionResult:
    """Grade one submission: student code in the sandbox, verdicts in a trusted process (see
    :mod:`autograder.supervisor`). ``folder``: the file's folder is the student's own, and its
    other files (helpers, the ``selfcheck`` package) go into the sandbox with it.
    ``cache_dir``: the trusted side's class-wide cache (default: the one ``grade-all`` and
    nbgrader's path use, :func:`~autograder.supervisor.options.default_cache_dir`): the jit
    baselines' modules, and with a ``seed`` the class's big cases and verdicts."""
    from ..supervisor import supervise as sandbox

    lim = limits or sandbox.Limits()
    if timeout:
        lim.per_submission_s = timeout
    cache = {} if cache_dir is None else {"cache_dir": cache_dir}
    opts = sandbox.Options(assignment=assignment, quick=quick, seed=seed, with_speed=with_speed,
                           limits=lim, isolation=isolation, only=only, folder=folder,
                           timed_speed=timed_speed, **cache)
    return sandbox.grade_submission(Path(submission), opts, log=log)


def in_own_folder(path: Path) -> bool:
    """Whether ``path`` lies in nbgrader's layout, ``submitted/<student>/<assignment>/``, whose
    folder is the student's own (grade-all grades it with its other files)."""
    from ..course import registry

    parts = path.resolve().parts
    return (len(parts) >= 4 and parts[-4] == "submitted" and parts[-2] in registry.assignments())


def _cmd_grade(a) -> int:
    from ..supervisor.options import IsolationUnavailable

    path = Path(a.submission)
    if not path.exists():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    folder = a.with_folder or in_own_folder(path)
    if folder and not a.json:
        print(f"graded with the other files of {path.parent} (the student's own folder), as "
              "grade-all grades it", file=sys.stderr)
    try:
        res = grade_path(path, a.assignment, quick=a.quick, seed=a.seed,
                         with_speed=not a.no_speed, isolation=not a.no_isolation, folder=folder,
                         limits=limits_of(a), timed_speed=a.timed_speed)
    except (ValueError, IsolationUnavailable) as e:
        return refuse(e)
    if a.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.report())
    return 0


def _cmd_list(a) -> int:
    from ..course import registry

    names = set(a.functions or ())
    unknown = names - {p.name for p in registry.problems()}
    if unknown:
        print(f"unknown graded function(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if names:  # the bar of each named function: what passes each check, and its points
        from ..course.bars import bar

        print("\n\n".join(bar(registry.get(n)).text() for n in a.functions))
        return 0
    for asg in registry.assignments():
        print(asg)
        for p in registry.problems(asg):
            print(f"  {p.name:38s} {p.points:g} pts  checks: {', '.join(p.check_names)}")
    print("\npython -m autograder list FUNCTION ... prints what passes each check")
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
    g.add_argument("--timed-speed", action="store_true",
                   help="time the speed case against the jit baseline even on emulated CPU "
                   "devices (real accelerators always are): a test of the timed path, not a "
                   "grade on CPU")
    g.add_argument("--with-folder", action="store_true",
                   help="the file's folder is the student's own: its other files (helpers, "
                   "selfcheck/) go into the sandbox with it (automatic in nbgrader's "
                   "submitted/<student>/<assignment>/ layout, as in grade-all)")
    add_trust_options(g)
    add_limit_options(g)
    g.set_defaults(func=_cmd_grade)
    from .grade_all import add_parser as _add_batch_parser

    _add_batch_parser(sub)
    from .collect_lms import add_parser as _add_collect_lms

    _add_collect_lms(sub)
    from .cluster_certs import add_parser as _add_cluster_certs

    _add_cluster_certs(sub)
    l = sub.add_parser("list", help="list the graded functions, or the bar of the named ones "
                       "(what passes each check)")
    l.add_argument("functions", nargs="*", help="graded functions to show the bar of")
    l.set_defaults(func=_cmd_list)
    from .profile import add_parser as _add_profile

    _add_profile(sub)
    from .doctor import add_parser as _add_doctor

    _add_doctor(sub)
    c = sub.add_parser("class-report", help="rebuild the HTML class report from grade-all's "
                       "reports")
    c.add_argument("reports", help="the reports folder grade-all wrote")
    c.add_argument("--out", default="class_report.html")
    c.add_argument("--title", default="Class report")
    c.set_defaults(func=_cmd_class_report)
    s = sub.add_parser("gradebook-sync", help="bring nbgrader's gradebook in line with the "
                       "course after a problem was added or removed (says what differs; "
                       "--apply writes it)")
    s.add_argument("gradebook", nargs="?", default=None, metavar="DB",
                   help="the gradebook (an SQLAlchemy URL or an sqlite file; default: the "
                   "course folder's gradebook.db)")
    s.add_argument("--course", default=".", metavar="DIR",
                   help="the course folder: source/ built by `make release` from today's "
                   "registry, and its nbgrader_config.py (default: .)")
    s.add_argument("--apply", action="store_true",
                   help="write the changes (copy the gradebook first: removed cells take "
                   "their grades with them)")
    s.set_defaults(func=_cmd_gradebook_sync)
    return ap


def _cmd_gradebook_sync(a) -> int:
    from ..classroom.gradebook_sync import sync

    try:
        import nbgrader.api  # noqa: F401
    except ImportError:  # pragma: no cover - nbgrader is optional
        print("gradebook-sync needs nbgrader: pip install '.[nbgrader]'", file=sys.stderr)
        return 2
    course = Path(a.course)
    target = a.gradebook or str(course / "gradebook.db")
    if "://" not in target and not Path(target).is_file():
        print(f"no gradebook at {target}", file=sys.stderr)
        return 2
    try:
        changes = sync(target, course, write=a.apply)
    except (ValueError, FileNotFoundError) as e:
        print(e, file=sys.stderr)
        return 2
    if not changes:
        print(f"the gradebook {target} is in line with the course")
        return 0
    print(("changed" if a.apply else "would change") + f" in the gradebook {target}:")
    for ch in changes:
        print("  " + ch.text())
    if a.apply:
        print("grade the changed assignments again (grade-all grades them again by itself), "
              "then nbgrader generate_feedback ASSIGNMENT --force")
        return 0
    print("nothing written: the same command with --apply writes it (copy the gradebook first)")
    return 1


def _cmd_class_report(a) -> int:
    from ..classroom.class_report import write

    print(write(Path(a.reports), Path(a.out), a.title))
    return 0


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    return a.func(a)
