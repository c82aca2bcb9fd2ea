"""``python -m autograder collect-lms DOWNLOAD``: an LMS's download into ``submitted/``
(:mod:`autograder.classroom.lms_collect`)."""
from __future__ import annotations

import sys
from pathlib import Path


def add_parser(sub) -> None:
    g = sub.add_parser(
        "collect-lms", help="put an LMS's download of one assignment (Canvas or Moodle) into "
        "submitted/<student>/<assignment>/, each file placed by the id the LMS wrote in its name")
    g.add_argument("download", help="the LMS's download: its zip, or the folder it unpacks to")
    g.add_argument("--assignment", required=True, help="the assignment it holds, e.g. "
                   "ps1_sharding")
    g.add_argument("--roster", required=True, metavar="CSV",
                   help="the LMS's ids and the students' names (a CSV with a header: id or "
                   "user_id or participant_id, and student or name); the name is the folder "
                   "under submitted/ (nbgrader's student id)")
    g.add_argument("--lms", choices=("canvas", "moodle"),
                   help="the LMS whose file-name layout the download has (default: the one "
                   "every name fits)")
    g.add_argument("--course", default=".", help="the nbgrader course folder (default: .)")
    g.set_defaults(func=_cmd)


def _cmd(a) -> int:
    from ..classroom.lms_collect import CollectError, collect
    from ..classroom.roster import RosterError, read
    from ..classroom.seed import course_root
    from ..course import registry

    if a.assignment not in registry.assignments():
        print(f"unknown assignment {a.assignment!r}: one of "
              f"{', '.join(registry.assignments())}", file=sys.stderr)
        return 2
    course = course_root(Path(a.course))
    if course is None:
        print(f"{a.course} is not an nbgrader course folder (no nbgrader_config.py): give it "
              "with --course", file=sys.stderr)
        return 2
    if not Path(a.download).exists():
        print(f"no such file or folder: {a.download}", file=sys.stderr)
        return 2
    try:
        roster = read(Path(a.roster))
        done = collect(Path(a.download), course, a.assignment, roster, a.lms)
    except (RosterError, CollectError) as e:
        print(e, file=sys.stderr)
        return 2
    where = course / "submitted"
    for student, (src, helpers) in sorted(done.placed.items()):
        extra = f" with {', '.join(helpers)}" if helpers else ""
        print(f"placed: {student}/{a.assignment}/{a.assignment}.ipynb{extra} <- {src}")
    for student, note in done.notes:
        print(f"note: {student}: {note}")
    for src, why in done.refused:
        print(f"refused: {src}: {why}", file=sys.stderr)
    print(f"{len(done.placed)} hand-in(s) of {a.assignment} placed under {where} (read as "
          f"{done.lms}'s layout), {len(done.refused)} file(s) refused, {len(done.missing)} "
          "student(s) on the roster handed in nothing"
          + (f" ({', '.join(done.missing)})" if done.missing else ""), file=sys.stderr)
    print(f"no timestamp.txt written: {done.lms}'s download names carry no hand-in time, so "
          "nbgrader records none and flags no lateness; where the due date counts, write "
          "each time the LMS shows into submitted/<student>/"
          f"{a.assignment}/timestamp.txt", file=sys.stderr)
    if done.late:
        print(f"Canvas marked late: {', '.join(done.late)}", file=sys.stderr)
    if done.refused:
        print("refused files are placed nowhere: find whose each is and put it in place by "
              "hand, then grade", file=sys.stderr)
        return 1
    return 0
