"""nbgrader's path beside grade-all's, on one class of notebook hand-ins.

    python benchmarks/bench_nbgrader.py [--students 30] [--assignment ps1_sharding]
                                        [--workers 2] [--json FILE]

Builds one nbgrader course folder (the demo's configuration) whose students each hand in the
release notebook with the reference answers typed in, each made a program of its own (every
graded function's result goes through a chain of exact ``* 1.0`` of a length unique to the
student, as in ``bench_class.py``: nothing is reused between students, the worst case). Two
copies of it, on the same class seed, are then graded:

* ``nbgrader autograde ASSIGNMENT`` (nbgrader's own command: one hand-in after another, each
  notebook also run in the sandbox for the feedback);
* ``python -m autograder grade-all COURSE --workers W --gradebook gradebook.db``.

Each from a fresh class-wide cache holding only the jit baselines (warmed first, not counted).
It prints both times and their ratio, and checks that both gradebooks hold the same totals. The
target (instructor's-term issue): nbgrader's path takes no more than twice grade-all's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import demo  # noqa: E402
from bench_class import distinct  # noqa: E402


def build_course(course: Path, asg: str, students: int, config: str = "") -> list[str]:
    """The course folder with every student's hand-in; returns the students' names."""
    from nbgrader.api import Gradebook

    from autograder.classroom.seed import course_seed

    course.mkdir(parents=True)
    (course / "nbgrader_config.py").write_text(demo.CONFIG + config)
    demo.copy_source(asg, course)
    api = demo.nbgrader_api(course)
    demo.check(api.generate_assignment(asg, force=True), "generate_assignment")
    answers = demo.solution_cells(nbformat.read(course / "source" / asg / f"{asg}.ipynb",
                                                as_version=4))
    names = [f"s{i:03d}" for i in range(students)]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for n in names:
            gb.add_student(n)
    for i, n in enumerate(names):
        dest = course / "submitted" / n / asg
        shutil.copytree(course / "release" / asg, dest)
        nb = nbformat.read(dest / f"{asg}.ipynb", as_version=4)
        for c in nb.cells:
            gid = c.metadata.get("nbgrader", {}).get("grade_id")
            if gid in answers:
                fn = gid.removeprefix("solution_")
                c.source = distinct(answers[gid], [fn], i + 1)
        nbformat.write(nb, dest / f"{asg}.ipynb")
        (dest / "timestamp.txt").write_text("2026-11-21 12:00:00.000000 UTC")
    course_seed(course)
    return names


def totals(course: Path, asg: str, names: list[str]) -> dict[str, float]:
    return {n: demo.scores(course, n, [asg])[asg][0] for n in names}


def timed(cmd: list[str], cwd: Path, cache: Path, log: Path) -> float:
    """Seconds ``cmd`` took, from a fresh cache with the baselines warmed (not counted)."""
    from autograder.supervisor.options import Options
    from autograder.supervisor.supervise import warm_cache

    os.environ["AUTOGRADER_CACHE_DIR"] = str(cache)  # main() has put this Python on PATH
    env = {**os.environ, "JAX_NUM_CPU_DEVICES": "8", "TF_CPP_MIN_LOG_LEVEL": "3"}
    warm_cache(Options())
    t0 = time.monotonic()
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL).returncode
    secs = time.monotonic() - t0
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; its output: {log}")
    return secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--assignment", default="ps1_sharding")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-notebook-run", action="store_true",
                    help="nbgrader's path without running the notebooks for the feedback "
                         "(c.GradeInSandbox.run_student_cells = False)")
    ap.add_argument("--json", help="write the summary here")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")  # the fork warning of starting processes beside JAX
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="bench-nbgrader-") as tmp:
        tmp = Path(tmp)
        names = build_course(tmp / "nbgrader", a.assignment, a.students, config=(
            "c.GradeInSandbox.run_student_cells = False\n" if a.no_notebook_run else ""))
        os.chdir(here)
        shutil.copytree(tmp / "nbgrader", tmp / "grade-all")
        print(f"{a.students} hand-ins of {a.assignment}, each a program of its own", flush=True)
        nb_s = timed([sys.executable, "-m", "nbgrader", "autograde", a.assignment],
                     tmp / "nbgrader", tmp / "cache-nbgrader", tmp / "nbgrader.log")
        print(f"nbgrader autograde       {nb_s:7.1f} s  ({nb_s / a.students:.1f} s a hand-in)",
              flush=True)
        ga_s = timed([sys.executable, "-m", "autograder", "grade-all", str(tmp / "grade-all"),
                      "--workers", str(a.workers), "--gradebook",
                      str(tmp / "grade-all" / "gradebook.db"), "--no-progress"],
                     tmp / "grade-all", tmp / "cache-grade-all", tmp / "grade-all.log")
        print(f"grade-all --workers {a.workers}   {ga_s:7.1f} s  "
              f"({ga_s / a.students:.1f} s a hand-in)", flush=True)
        ratio = nb_s / ga_s
        print(f"nbgrader / grade-all     {ratio:7.2f}  (target: at most 2)")
        t_nb, t_ga = (totals(tmp / d, a.assignment, names) for d in ("nbgrader", "grade-all"))
        same = t_nb == t_ga
        print(f"totals equal in both gradebooks: {same} (grades: "
              f"{', '.join(f'{v:g}' for v in sorted(set(t_ga.values())))})"
              + ("" if same else f"\n  nbgrader: {t_nb}\n  grade-all: {t_ga}"))
        if a.json:
            Path(a.json).write_text(json.dumps({
                "students": a.students, "assignment": a.assignment, "workers": a.workers,
                "nbgrader_s": nb_s, "grade_all_s": ga_s, "ratio": ratio,
                "totals_equal": same}, indent=2))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
