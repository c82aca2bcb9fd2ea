"""Grade a demo class of three students through nbgrader, end to end.

    python tools/demo.py [--dir build/demo] [ASSIGNMENT ...]

Builds a fresh course directory (its own nbgrader_config.py and sqlite gradebook) in
``DIR/course``, releases the assignments, hands in three submissions per assignment and runs
``nbgrader autograde`` and ``nbgrader generate_feedback`` (one hand-in per core at once, each in a
copy of the course under ``DIR/grading/<student>-<assignment>``), then prints the grade table from the
gradebooks and writes it to ``DIR/grades.json``:

* ``ada``   — the reference answers typed into the student notebook: full marks;
* ``ben``   — the release notebook handed in untouched: zero for every graded part;
* ``cleo``  — some answers right, some wrong (tools/demo_class/<assignment>.py): partial marks,
  with feedback saying what failed; handed in after the due date (:data:`DUE`), so nbgrader
  flags it late and its late penalty (``penalty_method = "zero"`` below) takes her score.

Each hand-in carries the ``timestamp.txt`` nbgrader's exchange writes (:data:`HANDED_IN`).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.core.imports import light_nbformat  # noqa: E402

nbformat = light_nbformat()
STUDENTS = ("ada", "ben", "cleo")
#: every assignment's due date in the gradebook, and each student's time in timestamp.txt
DUE = "2026-11-21 18:00:00 UTC"
HANDED_IN = {"ada": "2026-11-21 12:00:00.000000 UTC", "ben": "2026-11-21 12:00:00.000000 UTC",
             "cleo": "2026-11-22 09:30:00.000000 UTC"}

CONFIG = '''\
import os
c = get_config()
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "jax-scaling-demo"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".pytest_cache"]
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}
from autograder.classroom.nbgrader_plugin import configure
configure(c)
c.Execute.timeout = 900
c.Execute.allow_errors = True
c.LateSubmissionPlugin.penalty_method = "zero"
'''


def solution_cells(nb) -> dict[str, str]:
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution")}


def wrong_answers(asg: str) -> dict[str, str]:
    """cleo's answers: function name -> source, from tools/demo_class/<asg>.py."""
    import ast

    path = ROOT / "tools" / "demo_class" / f"{asg}.py"
    if not path.exists():
        return {}
    text = path.read_text()
    lines = text.splitlines()
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = "\n".join(lines[node.lineno - 1:node.end_lineno])
    return out


def hand_in(course: Path, asg: str, student: str, source_nb, release_dir: Path) -> None:
    dest = course / "submitted" / student / asg
    shutil.copytree(release_dir, dest)
    nb_path = dest / f"{asg}.ipynb"
    nb = nbformat.read(nb_path, as_version=4)
    answers = solution_cells(source_nb)
    if student == "ada":
        for c in nb.cells:
            gid = c.metadata.get("nbgrader", {}).get("grade_id")
            if gid in answers:
                c.source = answers[gid]
    elif student == "cleo":
        wrong = wrong_answers(asg)
        for i, c in enumerate(x for x in nb.cells
                              if x.metadata.get("nbgrader", {}).get("solution")):
            name = c.metadata["nbgrader"]["grade_id"].removeprefix("solution_")
            if name in wrong:
                c.source = wrong[name]
            elif i % 2 == 0:  # right on every other function she did not get wrong
                c.source = answers[c.metadata["nbgrader"]["grade_id"]]
    nbformat.write(nb, nb_path)
    (dest / "timestamp.txt").write_text(HANDED_IN.get(student, HANDED_IN["ada"]))


def scores(course: Path, student: str, assignments: list[str]) -> dict[str, tuple]:
    """(score, max_score) per assignment for one student, from a course's gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {a: (gb.find_submission(a, student).score, gb.find_submission(a, student).max_score)
                for a in assignments}


def grade_table(grades: dict[str, dict[str, tuple]], assignments: list[str]) -> str:
    rows = [["student"] + assignments + ["total"]]
    for s, per in grades.items():
        row = [s] + [f"{per[a][0]:g}/{per[a][1]:g}" for a in assignments]
        row.append(f"{sum(v[0] for v in per.values()):g}/{sum(v[1] for v in per.values()):g}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows)


def grade_one(course: Path, student: str, asg: str) -> tuple:
    """Autograde and write feedback for one hand-in, in-process through nbgrader's API.

    Runs in a private copy of the course (its own gradebook), so hand-ins grade in parallel
    without sharing a sqlite file."""
    # nbgrader's and the kernels' chatter goes to a log beside the hand-in, not the terminal.
    log = os.open(course / "nbgrader.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 2)
    warnings.simplefilter("ignore")
    api = nbgrader_api(course)
    for step in (api.autograde, api.generate_feedback):
        check(step(asg, student), f"{step.__name__} {asg} {student}")
    return scores(course, student, [asg])[asg]


def nbgrader_warnings(logs: dict) -> str:
    """What an instructor would read in nbgrader's own log: its warnings, per hand-in."""
    lines = []
    for (student, asg), log in logs.items():
        text = log.read_text(errors="replace") if log.exists() else ""
        lines += [f"  {student}/{asg}: {l.strip()}" for l in text.splitlines()
                  if "WARNING" in l]
    head = "nbgrader's warnings while autograding"
    return f"{head}: none" if not lines else "\n".join([f"{head}:"] + lines)


def nbgrader_api(course: Path):
    """nbgrader's Python API on a course directory (saves starting one program per step)."""
    os.chdir(course)
    os.environ.update(JAX_NUM_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3")
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def check(res: dict, what: str) -> None:
    if not res["success"]:
        raise RuntimeError(f"nbgrader {what} failed:\n"
                           f"{res.get('error') or res.get('log', '')[-3000:]}")


def copy_source(asg: str, course: Path) -> None:
    """``source/<asg>`` into ``course/source/<asg>`` with its ``selfcheck`` package written
    fresh: that package is generated (git-ignored in source/), so a fresh clone has none, and
    a notebook run for the feedback imports it."""
    sys.path.insert(0, str(ROOT / "tools"))
    from build_notebooks import PACKAGE, write_package

    dest = course / "source" / asg
    shutil.copytree(ROOT / "source" / asg, dest,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", PACKAGE))
    write_package(asg, dest)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT / "build" / "demo")
    ap.add_argument("--workers", type=int, default=max(1, min(len(STUDENTS), os.cpu_count() or 1)),
                    help="students graded at once (default: one per core)")
    ap.add_argument("assignments", nargs="*")
    a = ap.parse_args(argv)
    # nbgrader runs the `alembic` and `jupyter` programs of its environment by name.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    assignments = a.assignments or sorted(p.name for p in (ROOT / "source").iterdir()
                                          if p.is_dir())
    if a.dir.exists():
        shutil.rmtree(a.dir)
    course = a.dir.resolve() / "course"
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    t0 = time.time()
    for asg in assignments:
        copy_source(asg, course)
    from nbgrader.api import Gradebook

    api = nbgrader_api(course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for s in STUDENTS:
            gb.add_student(s)
    for asg in assignments:
        check(api.generate_assignment(asg, force=True), f"generate_assignment {asg}")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            gb.update_or_create_assignment(asg, duedate=DUE)
        source_nb = nbformat.read(course / "source" / asg / f"{asg}.ipynb", as_version=4)
        for s in STUDENTS:
            hand_in(course, asg, s, source_nb, course / "release" / asg)
    # one secret seed for the class (kept in course/.autograder/seed), copied into every
    # private copy below: each hand-in is graded on the class's inputs, as in a real course
    from autograder.classroom.seed import course_seed

    course_seed(course)
    tasks = [(s, asg) for s in STUDENTS for asg in assignments]  # the heaviest (ada) first
    copies = {}
    for s, asg in tasks:
        copies[s, asg] = a.dir.resolve() / "grading" / f"{s}-{asg}"
        shutil.copytree(course, copies[s, asg], ignore=lambda d, names, s=s, asg=asg: (
            [n for n in names if n != s] if d.endswith("submitted") else
            [n for n in names if n != asg] if Path(d).parent.name == "submitted" else []))
    print(f"[{time.time() - t0:5.0f}s] autograding {len(tasks)} hand-ins, {a.workers} at a "
          "time ...", flush=True)
    with ProcessPoolExecutor(a.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(grade_one, copies[t], *t): t for t in tasks}
        got = {}
        for fut in as_completed(futures):  # a line per graded hand-in, as each one ends
            s, asg = futures[fut]
            got[s, asg] = fut.result()
            print(f"[{time.time() - t0:5.0f}s] {s}/{asg}: {got[s, asg][0]:g}/"
                  f"{got[s, asg][1]:g} ({len(got)}/{len(tasks)}; nbgrader's log: "
                  f"{copies[s, asg] / 'nbgrader.log'})", flush=True)
        grades = {s: {asg: got[s, asg] for asg in assignments} for s in STUDENTS}
    for s, asg in tasks:
        for sub in ("autograded", "feedback"):
            shutil.copytree(copies[s, asg] / sub / s / asg, course / sub / s / asg)
    (a.dir / "grades.json").write_text(json.dumps(grades, indent=2))
    print(nbgrader_warnings({t: copies[t] / "nbgrader.log" for t in tasks}))
    report = write_class_report(course, a.dir / "class_report.html", tasks, copies)
    print(f"[{time.time() - t0:5.0f}s] done. Feedback: {course / 'feedback'}\n")
    print(grade_table(grades, assignments))
    print(f"\nClass report: {report}")
    return 0


def write_class_report(course: Path, out: Path, tasks, copies: dict) -> Path:
    """The class report of the demo class, from the grader's report each autograded notebook
    carries and, for when it was handed in and how late, each hand-in's gradebook (in its
    private copy of the course, ``copies``); each hand-in links to its nbgrader feedback page."""
    import os

    from autograder.classroom.class_report import HandIn, render
    from autograder.classroom.gradebook import lateness
    from autograder.classroom.nbgrader_plugin import REPORT_KEY
    from nbgrader.api import Gradebook

    hand_ins = []
    for s, asg in tasks:
        nb = nbformat.read(course / "autograded" / s / asg / f"{asg}.ipynb", as_version=4)
        rep = nb.metadata.get(REPORT_KEY)
        if rep is None:
            raise RuntimeError(f"{s}/{asg}: the autograded notebook carries no grader report")
        link = os.path.relpath(course / "feedback" / s / asg / f"{asg}.html", out.parent)
        db = copies[s, asg] / "gradebook.db"
        with Gradebook(f"sqlite:///{db}") as gb:
            at = gb.find_submission(asg, s).timestamp
        when = {"timestamp": at and at.isoformat(sep=" "), "timestamp_from": "timestamp.txt",
                **lateness([{"student": s, "assignment": asg}], str(db)).get((s, asg), {})}
        hand_ins.append(HandIn.from_report({"student": s, **rep, **when}, link))
    out.write_text(render(hand_ins, title="Demo class"))
    return out.resolve()


if __name__ == "__main__":
    sys.exit(main())
