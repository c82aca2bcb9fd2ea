"""grade-all on a mixed class (tests/fixtures/class, made by make_class.py).

The whole class is graded once (module fixture, quick and without the speed check, short time
limits) and every student's verdicts are checked: correct functions at full marks, broken ones
with the check and the reason they deserve, the batch finishing whatever the submissions do.
A class, not one function: the subject is the batch (workers, hangs and crashes beside
classmates, the CSV, the class report, the gradebook), so every test here reads that one
grading; ps1, the cheapest assignment, on two meshes.
"""
import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.classroom.batch import discover, grade_all
from autograder.supervisor.options import Limits, Options

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration

CLASS = Path(__file__).parent / "fixtures" / "class"
FULL = {"shard_average_jit": 3.0, "shard_average_shard_map": 3.0, "roll_diff": 4.0}
EXPECTED = {
    "alice": FULL,
    "bob": FULL,
    "carol": FULL,
    "dave": {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 4.0},
    "erin": {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 0.0},
    "frank": {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 0.0},
    # imports the course's jit baseline as her shard_map answer: the sandbox holds the worker's
    # part of the grader only, so there is nothing to import
    "grace": {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 0.0},
    # froze the clocks in her own sandbox: her (correct) programs are timed by the grader
    "heidi": FULL,
    "ivan": {"shard_average_jit": 3.0, "shard_average_shard_map": 3.0, "roll_diff": 0.0},
    "judy": FULL,
    # patched jax.numpy in his own sandbox while tracing a correct average
    "ken": {"shard_average_jit": 3.0, "shard_average_shard_map": 0.0, "roll_diff": 4.0},
}


def _opts():
    lim = Limits(per_function_s=10, load_s=45, statement_s=3, output_mb=1)
    return Options(quick=True, with_speed=False, limits=lim)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    out = tmp_path_factory.mktemp("grades")
    outcomes = grade_all(CLASS, workers=2, out=out / "grades.csv", opts=_opts(), progress=False)
    return out, {o.item.student: o.report for o in outcomes}


def _failed(report, fn, check):
    """The message of a failed check (AssertionError if it passed or is absent)."""
    for c in report["functions"][fn]["checks"]:
        if c["name"] == check:
            assert not c["passed"], (fn, check, c)
            return c["message"]
    raise AssertionError(f"no {check} check for {fn}: {report['functions'][fn]['checks']}")


def test_discover_nbgrader_layout():
    items = discover(CLASS)
    assert sorted(i.student for i in items) == sorted(EXPECTED)
    assert {i.assignment for i in items} == {"ps1_sharding"}
    assert all(i.path.suffix in (".ipynb", ".py") for i in items)


def test_discover_flat_folder(tmp_path):
    src = CLASS / "submitted"
    shutil.copy(src / "alice" / "ps1_sharding" / "ps1_sharding.ipynb",
                tmp_path / "alice_ps1_sharding.ipynb")
    shutil.copy(src / "erin" / "ps1_sharding" / "ps1_sharding.py", tmp_path / "erin.py")
    items = {i.student: i for i in discover(tmp_path)}
    assert set(items) == {"alice", "erin"}
    assert items["alice"].assignment == "ps1_sharding"
    assert items["erin"].assignment is None  # guessed later from what the file defines


def test_every_score(graded):
    _, reps = graded
    assert set(reps) == set(EXPECTED)
    got = {s: {n: f["score"] for n, f in r["functions"].items()} for s, r in reps.items()}
    assert got == EXPECTED


def test_reasons(graded):
    _, r = graded
    # hangs: Python loop at trace time, endless while_loop inside XLA; the rest still graded
    assert "time limit" in _failed(r["dave"], "shard_average_jit", "numerics")
    assert "time limit" in _failed(r["dave"], "shard_average_shard_map", "numerics")
    # ordinary failures get the numerics check with what went wrong
    assert "ValueError: not done yet" in _failed(r["erin"], "shard_average_jit", "numerics")
    assert "NaN" in _failed(r["erin"], "shard_average_shard_map", "numerics")
    assert "expected shape" in _failed(r["erin"], "roll_diff", "numerics")
    # crash of the interpreter, flood of output, an object faking equality
    assert "SIGSEGV" in _failed(r["frank"], "shard_average_jit", "numerics")
    assert "File too large" in _failed(r["frank"], "shard_average_shard_map", "numerics")
    assert any("printed more than" in n for n in r["frank"]["notes"])
    assert "AlwaysEqual" in _failed(r["frank"], "roll_diff", "numerics")
    # the course's solutions and baselines are not in the sandbox; a memory blow-up is an error
    notes = " ".join(r["grace"]["notes"])
    assert "No module named 'solutions'" in notes
    assert "No module named 'autograder.course'" in notes
    assert "not found" in _failed(r["grace"], "shard_average_jit", "numerics")
    assert "not found" in _failed(r["grace"], "shard_average_shard_map", "numerics")
    assert "MemoryError" in _failed(r["grace"], "roll_diff", "numerics")
    # tampering in the student's own process changes nothing the grader computes
    _failed(r["ivan"], "roll_diff", "numerics")  # his own process, patched: no effect here
    assert "not found" in _failed(r["ken"], "shard_average_shard_map", "numerics")


def test_load_problems_cost_only_the_statement(graded):
    _, r = graded
    notes = " ".join(r["carol"]["notes"])
    assert "line 5: skipped, it ran for over" in notes  # time.sleep at import
    assert "os._exit" in notes  # the interpreter exited while loading line 6
    assert "ZeroDivisionError" not in notes  # _oops: no graded function needs it, no note
    notes = " ".join(r["bob"]["notes"])
    assert "SyntaxError" in notes


def test_forged_results_change_nothing(graded):
    _, r = graded
    assert r["judy"]["score"] == 10.0


def test_csv_and_reports(graded):
    out, reps = graded
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert [row["student"] for row in rows] == sorted(EXPECTED)
    for row in rows:
        want = EXPECTED[row["student"]]
        assert row["assignment"] == "ps1_sharding"
        for fn, pts in want.items():
            assert float(row[fn]) == pts
        assert float(row["total"]) == sum(want.values())
        assert float(row["max_total"]) == 10.0
    doc = json.loads((out / "reports" / "dave.json").read_text())
    assert doc["assignments"]["ps1_sharding"]["functions"]["roll_diff"]["score"] == 4.0
    assert doc["score"] == 4.0


def test_resume_skips_graded(graded):
    out, _ = graded
    outcomes = grade_all(CLASS, workers=1, out=out / "grades.csv", opts=_opts(), progress=False)
    assert outcomes and all(o.skipped for o in outcomes)
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert len(rows) == len(EXPECTED)


def test_cli_grade_all(tmp_path):
    from autograder.cli.main import main

    d = tmp_path / "cls" / "submitted" / "alice" / "ps1_sharding"
    d.mkdir(parents=True)
    shutil.copy(CLASS / "submitted" / "erin" / "ps1_sharding" / "ps1_sharding.py", d)
    rc = main(["grade-all", str(tmp_path / "cls"), "--workers", "1", "--quick", "--no-speed",
               "--out", str(tmp_path / "g.csv"), "--no-progress"])
    assert rc == 0
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert rows[0]["student"] == "alice" and float(rows[0]["total"]) == 0.0


def _report_totals(page: str) -> dict:
    """(student, assignment) -> (total, out of) as the class report's hand-in table shows them."""
    rows = re.findall(r'<tr class="grade" data-student="([^"]*)" data-assignment="([^"]*)">'
                      r'.*?<td class="total">([^<]*)</td><td class="max">([^<]*)</td>', page)
    return {(s, a): (float(t), float(m)) for s, a, t, m in rows}


def _csv_totals(out: Path) -> dict:
    return {(r["student"], r["assignment"]): (float(r["total"]), float(r["max_total"]))
            for r in csv.DictReader(open(out / "grades.csv"))}


def test_class_report_next_to_the_csv(graded):
    out, _ = graded
    page = (out / "class_report.html").read_text()
    assert _report_totals(page) == _csv_totals(out)
    assert "http://" not in page and "https://" not in page  # self-contained
    look = page[page.index("need a look"):page.index("Every hand-in")]
    assert "dave" in look and "time limit" in look  # his hanging function
    assert "frank" in look and "SIGSEGV" in look  # his crashing one
    assert "alice" not in look


def test_class_report_in_a_browser(graded, tmp_path):
    """What a person would see: headless chromium loads the page from disk, decodes every
    chart, and shows the CSV's totals."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed: `make test` installs it (make browser); "
                    "without it the class report is not checked in a browser")
    out, _ = graded
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         "--user-data-dir=" + str(tmp_path / "profile"), "--dump-dom",
         (out / "class_report.html").resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=True).stdout
    charts = re.search(r'data-charts="(\d+)" data-charts-drawn="(\d+)"', dom)
    assert charts, dom[:500]
    assert int(charts.group(1)) >= 2 and charts.group(1) == charts.group(2), charts.groups()
    assert _report_totals(dom) == _csv_totals(out)


def test_gradebook_grades_equal_the_csv(graded, tmp_path):
    """Grades written with --gradebook reach nbgrader's own export unchanged, per graded cell."""
    from nbgrader.api import Gradebook

    from autograder.classroom.gradebook import db_url, publish

    out, reps = graded
    db = tmp_path / "gradebook.db"
    n = publish(reps.values(), str(db))
    assert n == 3 * len(EXPECTED)  # one grade per hidden cell per hand-in
    publish(reps.values(), str(db))  # again: updated in place, not duplicated
    with Gradebook(db_url(str(db))) as gb:
        grade = gb.find_grade("grade_roll_diff", "ps1_sharding", "ps1_sharding", "dave")
        assert grade.score == 4.0 and grade.max_score == 4.0
    export = tmp_path / "export.csv"
    subprocess.run([str(Path(sys.executable).with_name("nbgrader")), "export",
                    f"--CourseDirectory.root={tmp_path}", f"--CourseDirectory.db_url={db_url(str(db))}",
                    f"--to={export}"], check=True, capture_output=True, cwd=tmp_path, timeout=300)
    # nbgrader keeps the exact scores, the CSV shows them to two decimals
    exported = {(r["student_id"], r["assignment"]): (round(float(r["score"]), 2),
                                                    round(float(r["max_score"]), 2))
                for r in csv.DictReader(open(export))}
    assert exported == _csv_totals(out)


# ------------------------------------------------------------------ one seed per class
def test_a_course_folder_keeps_one_seed_for_both_grading_paths(tmp_path):
    """grade-all on an nbgrader course folder and nbgrader autograde's GradeInSandbox draw
    the same seed (the course's own, kept in .autograder/seed); a flat folder gets a fresh one
    per run; a seed fixed in nbgrader_config.py wins."""
    from traitlets.config import Config

    from autograder.classroom.batch import class_seed
    from autograder.classroom.nbgrader_plugin import GradeInSandbox
    from autograder.classroom.seed import SEED_FILE, course_seed

    course = tmp_path / "course"
    (course / "submitted").mkdir(parents=True)
    (course / "nbgrader_config.py").write_text("")
    seed = class_seed(course)
    assert seed == class_seed(course / "submitted") == course_seed(course)
    assert (course / SEED_FILE).stat().st_mode & 0o077 == 0  # the instructor's alone

    cfg = Config()
    cfg.CourseDirectory.root = str(course)
    cfg.GradeInSandbox.function_timeout = 40.0
    step = GradeInSandbox(config=cfg)
    opts = step.options("ps1_sharding", ["roll_diff"])
    assert opts.seed == seed and opts.limits.per_function_s == 40.0 and opts.folder
    cfg.GradeInSandbox.seed = 7
    assert GradeInSandbox(config=cfg).options("ps1_sharding", ["roll_diff"]).seed == 7

    flat = tmp_path / "flat"
    flat.mkdir()
    assert class_seed(flat) != class_seed(flat)  # fresh draws (63 bits: never equal)
    assert not (flat / SEED_FILE).exists()


def test_a_corrupt_seed_file_is_named(tmp_path):
    from autograder.classroom.seed import SEED_FILE, course_seed

    (tmp_path / SEED_FILE).parent.mkdir()
    (tmp_path / SEED_FILE).write_text("not a number")
    with pytest.raises(ValueError, match="delete it"):
        course_seed(tmp_path)


def test_a_renamed_notebook_is_refused_for_a_look_as_nbgrader_does(tmp_path):
    """A browser's 'ps1_sharding (1).ipynb' in the nbgrader layout: nbgrader autograde refuses
    it, and so does grade-all, naming the file and the fix; it is not graded as a zero."""
    src = CLASS / "submitted" / "alice" / "ps1_sharding" / "ps1_sharding.ipynb"
    folder = tmp_path / "submitted" / "zoe" / "ps1_sharding"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "ps1_sharding (1).ipynb")
    (item,) = discover(tmp_path)
    assert item.assignment == "ps1_sharding"
    assert "ps1_sharding (1).ipynb" in item.refused and "rename it" in item.refused
    shutil.copy(src, folder / "ps1_sharding.ipynb")  # the right name next to it: graded
    (item,) = discover(tmp_path)
    assert item.refused is None and item.path.name == "ps1_sharding.ipynb"


def test_one_student_is_graded_again_and_the_class_kept(graded):
    """grade-all --student NAME: that student's hand-ins are graded again, every other report
    is reused, and the CSV still lists the whole class; an unknown name grades nothing."""
    from autograder.classroom.batch import UnknownStudent

    out, before = graded
    with pytest.raises(UnknownStudent, match="nobody"):
        grade_all(CLASS, out=out / "grades.csv", opts=_opts(), progress=False,
                  force=frozenset({"nobody"}))
    outcomes = grade_all(CLASS, workers=2, out=out / "grades.csv", opts=_opts(),
                         progress=False, force=frozenset({"alice"}))
    fresh = sorted(o.item.student for o in outcomes if not o.skipped)
    assert fresh == ["alice"]
    assert {o.item.student for o in outcomes} == set(before)
    rows = list(csv.DictReader((out / "grades.csv").open()))
    assert {r["student"] for r in rows} == set(before)


def test_a_refused_hand_in_is_its_own_not_the_graders(tmp_path):
    """The renamed notebook, through grade-all: listed for a look as refused (the hand-in's
    fault), never as the grader's ('run the same command again' would never fix it), never
    'graded without isolation' (nothing ran), and grade-all exits 0: grading ran."""
    src = CLASS / "submitted" / "alice" / "ps1_sharding" / "ps1_sharding.ipynb"
    folder = tmp_path / "submitted" / "zoe" / "ps1_sharding"
    folder.mkdir(parents=True)
    shutil.copy(src, folder / "ps1_sharding (1).ipynb")
    out = tmp_path / "out" / "grades.csv"
    run = subprocess.run([sys.executable, "-m", "autograder", "grade-all",
                          str(tmp_path / "submitted"), "--out", str(out), "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "refused before grading (the hand-in, not the grader" in run.stderr, run.stderr
    assert "grader's fault" not in run.stderr, run.stderr
    (row,) = list(csv.DictReader(out.open()))
    assert row["student"] == "zoe" and row["isolated"] == "not graded: refused"
    assert row["needs_regrade"] == ""
    from autograder.classroom.batch import class_report_path

    page = class_report_path(out).read_text()
    assert "refused (the hand-in" in page and "graded without isolation" not in page


def _deep(folder: Path, levels: int) -> Path:
    """``levels`` folders, one inside the next, under ``folder`` (made without recursion)."""
    import os

    here = folder
    for _ in range(levels):
        here = here / "d"
        os.mkdir(here)
    return here


def _remove_deep(folder: Path) -> None:
    """Remove what :func:`_deep` made, deepest first (shutil.rmtree recurses, and fails)."""
    import os

    paths = []
    here = folder
    while (here / "d").is_dir():
        here = here / "d"
        paths.append(here)
    for p in reversed(paths):
        for f in p.iterdir():
            f.unlink()
        os.rmdir(p)


def test_a_folder_past_its_caps_is_the_hand_ins_refusal(tmp_path):
    """Folders that cost what they hold: one with more entries than the cap (50 here, through
    Limits), one 1,200 folders deep (past Python's recursion limit, were it walked
    recursively). Each is refused at once with its reason, listed for a look, never graded
    and never the grader's fault ("isolated" says so); grading it directly refuses it too,
    before any process starts."""
    import time

    from autograder.classroom.batch import grade_one
    from autograder.supervisor.handin import FolderRefused
    from autograder.supervisor.supervise import grade_submission

    src = CLASS / "submitted" / "alice" / "ps1_sharding" / "ps1_sharding.ipynb"
    many = tmp_path / "submitted" / "mia" / "ps1_sharding"
    deep = tmp_path / "submitted" / "dan" / "ps1_sharding"
    fine = tmp_path / "other" / "submitted" / "fay" / "ps1_sharding"
    for d in (many, deep, fine):
        d.mkdir(parents=True)
        shutil.copy(src, d)
    for i in range(60):
        (many / f"empty{i}.txt").write_text("")
    (fine / "helper.py").write_text("X = 1\n")
    _deep(fine, 3)
    _deep(deep, 1200)
    try:
        lim = Limits(folder_entries=50, folder_depth=32)
        t0 = time.monotonic()
        items = {i.student: i for i in discover(tmp_path, lim)}
        assert time.monotonic() - t0 < 10
        assert "more than 50 entries" in items["mia"].refused, items["mia"].refused
        assert "more than 32 deep" in items["dan"].refused, items["dan"].refused
        (fay,) = discover(tmp_path / "other", lim)
        assert fay.refused is None and fay.own_folder
        out = tmp_path / "out" / "grades.csv"
        outcomes = grade_all(tmp_path, out=out, opts=Options(limits=lim), progress=False,
                             warm=False)
        assert sorted(o.item.student for o in outcomes) == ["dan", "mia"]
        rows = {r["student"]: r for r in csv.DictReader(out.open())}
        for who in ("mia", "dan"):
            assert rows[who]["isolated"] == "not graded: refused", rows[who]
            assert rows[who]["needs_regrade"] == ""
            rep = next(o.report for o in outcomes if o.item.student == who)
            assert rep["refused"] and not rep.get("error")
        # straight to the supervisor (grade, nbgrader): refused before any process starts
        opts = Options(assignment="ps1_sharding", folder=True, isolation=False, limits=lim)
        for d in (many, deep):
            with pytest.raises(FolderRefused):
                grade_submission(d / "ps1_sharding.ipynb", opts)
        # a folder grown past a cap after it was listed: still the hand-in's refusal
        grown = grade_one(fay, Options(limits=Limits(folder_depth=2)),
                          tmp_path / "reports2", b"k" * 32)
        assert "more than 2 deep" in grown.report["refused"]
    finally:
        _remove_deep(deep)


# ------------------------------------------------------------------ when it was handed in
def test_a_py_in_a_course_folder_is_listed_for_a_look_as_nbgrader_skips_it(tmp_path):
    """nbgrader autograde grades <assignment>.ipynb only: a folder holding ps1_sharding.py is
    skipped (no submission in its gradebook). In a course folder (one with nbgrader_config.py)
    grade-all refuses it for a look too, saying why and what to do, and marks it as having no
    notebook, so --gradebook makes no submission of it either; outside a course folder the
    same .py is graded."""
    src = CLASS / "submitted" / "erin" / "ps1_sharding" / "ps1_sharding.py"
    folder = tmp_path / "submitted" / "dan" / "ps1_sharding"
    folder.mkdir(parents=True)
    shutil.copy(src, folder)
    (item,) = discover(tmp_path)
    assert item.refused is None and not item.no_notebook  # not a course folder: graded
    (tmp_path / "nbgrader_config.py").write_text("")
    (item,) = discover(tmp_path)
    assert item.no_notebook and "not the notebook ps1_sharding.ipynb" in item.refused
    assert "nbgrader autograde skips this folder" in item.refused, item.refused
    (o,) = grade_all(tmp_path, out=tmp_path / "g.csv", progress=False, warm=False, opts=_opts())
    assert o.report["no_notebook"] and o.report["refused"] == item.refused
    shutil.copy(CLASS / "submitted" / "alice" / "ps1_sharding" / "ps1_sharding.ipynb", folder)
    (item,) = discover(tmp_path)  # the notebook beside it: the notebook is graded
    assert item.refused is None and item.path.name == "ps1_sharding.ipynb"


def test_the_time_handed_in_is_nbgraders_timestamp_else_the_files(tmp_path):
    """nbgrader's timestamp.txt beside the notebook, read by nbgrader's own parser (a time
    zone is made UTC); without one, the file's own time, said to be one; an unreadable one is
    named. The time is not part of what is graded: a resubmission of the same files (a new
    timestamp.txt only) reuses the report."""
    import os

    from autograder.classroom.batch import fingerprint, handed_in

    folder = tmp_path / "submitted" / "ann" / "ps1_sharding"
    folder.mkdir(parents=True)
    shutil.copy(CLASS / "submitted" / "alice" / "ps1_sharding" / "ps1_sharding.ipynb", folder)
    os.utime(folder / "ps1_sharding.ipynb", (1_700_000_000, 1_700_000_000))
    (item,) = discover(tmp_path)
    assert handed_in(item) == {"timestamp": "2023-11-14 22:13:20", "timestamp_from": "file"}
    before = fingerprint(item, _opts())
    (folder / "timestamp.txt").write_text("2026-11-22 10:30:00.000000 CET\n")
    assert handed_in(item) == {"timestamp": "2026-11-22 09:30:00",
                               "timestamp_from": "timestamp.txt"}
    assert fingerprint(item, _opts()) == before
    (folder / "timestamp.txt").write_text("yesterday-ish")
    got = handed_in(item)
    assert got["timestamp"] is None and "'yesterday-ish'" in got["timestamp_problem"], got
