"""Grade a demo class of three students through nbgrader, end to end.

    python tools/demo.py [--dir build/demo] [ASSIGNMENT ...]

Builds a fresh course directory (its own nbgrader_config.py and sqlite gradebook), releases the
assignments, hands in three submissions per assignment and runs ``nbgrader autograde`` and
``nbgrader generate_feedback``, then prints the grade table from the gradebook:

* ``ada``   — the reference answers typed into the student notebook: full marks;
* ``ben``   — the release notebook handed in untouched: zero for every graded part;
* ``cleo``  — some answers right, some wrong (tools/demo_class/<assignment>.py): partial marks,
  with feedback saying what failed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STUDENTS = ("ada", "ben", "cleo")

CONFIG = '''\
import os
c = get_config()
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "jax-scaling-demo"
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".pytest_cache"]
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}
c.Execute.timeout = 900
c.Execute.allow_errors = True
'''


def nbgrader(course: Path, *args: str) -> None:
    exe = Path(sys.executable).with_name("nbgrader")
    cmd = [str(exe) if exe.exists() else "nbgrader", *args]
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(cmd, cwd=course, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], sep="\n")
        raise SystemExit(f"nbgrader {' '.join(args)} failed ({proc.returncode})")


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
    (dest / "timestamp.txt").write_text("2026-11-21 12:00:00.000000 UTC")


def grade_table(course: Path, assignments: list[str]) -> str:
    from nbgrader.api import Gradebook

    rows = []
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        header = ["student"] + assignments + ["total"]
        rows.append(header)
        for s in STUDENTS:
            row, total, total_max = [s], 0.0, 0.0
            for a in assignments:
                sub = gb.find_submission(a, s)
                row.append(f"{sub.score:g}/{sub.max_score:g}")
                total += sub.score
                total_max += sub.max_score
            row.append(f"{total:g}/{total_max:g}")
            rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=ROOT / "build" / "demo")
    ap.add_argument("assignments", nargs="*")
    a = ap.parse_args(argv)
    # nbgrader runs the `alembic` and `jupyter` programs of its environment by name.
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]
    assignments = a.assignments or sorted(p.name for p in (ROOT / "source").iterdir()
                                          if p.is_dir())
    course = a.dir.resolve()
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(CONFIG)
    t0 = time.time()
    for asg in assignments:
        shutil.copytree(ROOT / "source" / asg, course / "source" / asg,
                        ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    for s in STUDENTS:
        nbgrader(course, "db", "student", "add", s)
    for asg in assignments:
        nbgrader(course, "generate_assignment", asg, "--force")
        source_nb = nbformat.read(course / "source" / asg / f"{asg}.ipynb", as_version=4)
        for s in STUDENTS:
            hand_in(course, asg, s, source_nb, course / "release" / asg)
        print(f"[{time.time() - t0:5.0f}s] autograding {asg} ...", flush=True)
        nbgrader(course, "autograde", asg, "--force")
        nbgrader(course, "generate_feedback", asg, "--force")
    print(f"[{time.time() - t0:5.0f}s] done. Feedback: {course / 'feedback'}\n")
    print(grade_table(course, assignments))
    return 0


if __name__ == "__main__":
    sys.exit(main())
