"""nbgrader end to end: a real course directory with a sqlite gradebook (tools/demo.py)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo course (three students through nbgrader autograde, ps1 only), once for every
    test that reads it: nbgrader's path is a whole course (its gradebook, its notebooks)."""
    out = tmp_path_factory.mktemp("demo") / "demo"
    p = subprocess.run([sys.executable, "tools/demo.py", "--dir", str(out), "ps1_sharding"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out, p.stdout


def _scores(out):
    """Scores straight from each student's gradebook (not from the demo's printed table)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import demo

    return {s: demo.scores(out / "grading" / f"{s}-ps1_sharding", s, ["ps1_sharding"])["ps1_sharding"]
            for s in ("ada", "ben", "cleo")}


def test_reference_full_untouched_zero_partial_in_between(demo):
    course, out = demo
    scores = _scores(course)
    assert json.loads((course / "grades.json").read_text())["cleo"]["ps1_sharding"][0] == \
        scores["cleo"][0]
    assert scores["ada"] == (10, 10), out
    assert scores["ben"][0] == 0, out
    assert 0 < scores["cleo"][0] < 10, out
    assert "ada" in out and "ps1_sharding" in out  # the grade table is printed


def test_feedback_is_readable_and_reveals_no_hidden_inputs(demo):
    course, _ = demo
    html = (course / "course" / "feedback" / "cleo" / "ps1_sharding" / "ps1_sharding.html").read_text()
    assert "FAIL" in html and "numerics" in html
    assert "structure" in html  # cleo's all-gather is named in her feedback
    assert "make_case" not in html and "default_rng" not in html


def _course_with_student(tmp_path, monkeypatch, student: str, config: str = ""):
    """A fresh nbgrader course for ps1 (the demo's config plus ``config``) with ``student``
    in its gradebook and the release copied to their submitted folder: (demo module, nbgrader
    API, course folder, submitted folder). nbgrader's API works from the course folder."""
    import shutil

    sys.path.insert(0, str(ROOT / "tools"))
    import demo
    from nbgrader.api import Gradebook

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text(demo.CONFIG + config)
    demo.copy_source("ps1_sharding", course)
    api = demo.nbgrader_api(course)
    demo.check(api.generate_assignment("ps1_sharding", force=True), "generate")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        gb.add_student(student)
    sub = course / "submitted" / student / "ps1_sharding"
    shutil.copytree(course / "release" / "ps1_sharding", sub)
    return demo, api, course, sub


def _hand_in(sub, nb) -> None:
    """Write the student's notebook and the timestamp nbgrader reads beside it."""
    import nbformat

    nbformat.write(nb, sub / "ps1_sharding.ipynb")
    (sub / "timestamp.txt").write_text("2026-11-21 12:00:00.000000 UTC")


def _cell_texts(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


ATTACK_CELL = '''\
import sys, types
fake = types.ModuleType("autograder.classroom.cells")
fake.grade = lambda name, ns=None, **kw: print(10) or 10.0
sys.modules["autograder.classroom.cells"] = fake
import builtins
_real_import = builtins.__import__
builtins.__import__ = lambda n, *a, **k: fake if n == "autograder.classroom.cells" else _real_import(n, *a, **k)
print("grader replaced in this kernel")
'''


ENDLESS_CELL = "import time\nwhile True:  # never ends\n    time.sleep(0.1)"


def test_autograde_ignores_what_the_kernel_says_and_says_what_happened(tmp_path, monkeypatch):
    """Through the ``nbgrader autograde`` command itself, on a class of two:

    * mallory's cell replaces the grader in her kernel (so a hidden cell run there would print
      full marks), with every answer left unsolved: she still scores zero; her cell did run (in
      the sandbox); her next cell never ends: the run for the feedback stops there at the cell
      limit, and her feedback says so;
    * rex's roll_diff (the reference) meets a bug of the grader's: it is left ungraded in the
      gradebook (never his zero), nbgrader keeps no autograded copy of his hand-in, and the
      command exits 1;
    * the command ends with one summary block that says all this, where the grader's log is,
      and no SQLAlchemy warning."""
    import shutil

    import nbformat
    from nbgrader.api import Gradebook
    from test_honest import FAULTY_GRADER, _in_every_judge

    from autograder.classroom.nbgrader_plugin import LOGS

    demo, api, course, sub = _course_with_student(
        tmp_path, monkeypatch, "mallory", "c.GradeInSandbox.cell_timeout = 5\n"
        "c.GradeInSandbox.quick = True\nc.GradeInSandbox.with_speed = False\n")
    nb = nbformat.read(sub / "ps1_sharding.ipynb", as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(ATTACK_CELL))
    nb.cells.insert(2, nbformat.v4.new_code_cell(ENDLESS_CELL))
    _hand_in(sub, nb)
    rex = course / "submitted" / "rex" / "ps1_sharding"
    shutil.copytree(course / "release" / "ps1_sharding", rex)
    source = nbformat.read(course / "source" / "ps1_sharding" / "ps1_sharding.ipynb", 4)
    nb = nbformat.read(rex / "ps1_sharding.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "solution_roll_diff":
            c.source = demo.solution_cells(source)["solution_roll_diff"]
    _hand_in(rex, nb)
    _in_every_judge(FAULTY_GRADER, tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOGRADER_TEST_FAULT", "roll_diff")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "8")
    p = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "autograde",
                        "ps1_sharding", "--create"], cwd=course, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 1, p.stderr[-3000:]
    block = p.stderr[p.stderr.index("course grader: "):]
    assert block.startswith("course grader: 2 hand-in(s) in this run: 1 graded, 0 refused, "
                            "1 need a regrade"), block
    log = course / LOGS / "rex-ps1_sharding.grader.log"
    assert f"needs regrade: rex/ps1_sharding: roll_diff (the grader failed, not the student); "\
           f"the grader's log: {log}" in block, block
    assert "injected bug" in log.read_text()
    assert "cell stopped: mallory/ps1_sharding: cell 3 ran past 5 s" in block, block
    assert "SAWarning" not in p.stderr
    assert demo.scores(course, "mallory", ["ps1_sharding"])["ps1_sharding"] == (0, 10)
    graded = nbformat.read(course / "autograded" / "mallory" / "ps1_sharding" /
                           "ps1_sharding.ipynb", as_version=4)
    assert any("grader replaced" in o.get("text", "") for o in graded.cells[1].outputs)
    assert "this cell was stopped after 5 s" in _cell_texts(graded.cells[2])
    assert not (course / "autograded" / "rex" / "ps1_sharding").exists()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        g = gb.find_grade("grade_roll_diff", "ps1_sharding", "ps1_sharding", "rex")
        assert g.auto_score is None and g.needs_manual_grade


def test_autograde_stopped_mid_run_leaves_no_process_behind(tmp_path, monkeypatch):
    """``nbgrader autograde`` killed while the grader runs a hand-in's program that never ends:
    the judge and its sandbox end with it."""
    import signal

    import nbformat
    from conftest import HANGS_IN_XLA
    from test_honest import _alive, _cmdline, _tree

    demo, api, course, sub = _course_with_student(tmp_path, monkeypatch, "hal")
    nb = nbformat.read(sub / "ps1_sharding.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "def shard_average_jit" in c.source)
    cell.source = HANGS_IN_XLA
    # its own check cell would hang the notebook's run first: the student took it out
    nb.cells = [c for c in nb.cells if 'check("shard_average_jit"' not in c.source]
    _hand_in(sub, nb)
    p = subprocess.Popen([str(Path(sys.executable).parent / "nbgrader"), "autograde",
                          "ps1_sharding", "--student", "hal"], cwd=course,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        t0 = time.monotonic()
        while not any(b"autograder.judge" in _cmdline(q).encode() for q in _tree(p.pid)):
            assert p.poll() is None and time.monotonic() - t0 < 600, "no judge started"
            time.sleep(0.5)
        time.sleep(8.0)  # the judge is running the program that never ends
        below = _tree(p.pid) - {p.pid}
        os.kill(p.pid, signal.SIGKILL)
        end = time.monotonic() + 15
        while _alive(below) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _alive(below), [_cmdline(q)[:100] for q in _alive(below)]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)


def test_untouched_locked_cells_raise_no_checksum_alarm(demo):
    """nbgrader warns "Attribute 'checksum' ... has changed!" when a student edits a locked
    cell; a hidden-test cell handed in as released must not trigger it (the course's
    OverwriteReleasedCells), and the demo prints nbgrader's warnings for the instructor."""
    course, out = demo
    logs = list((course / "grading").glob("*/nbgrader.log"))
    assert logs
    for log in logs:
        assert "Attribute 'checksum'" not in log.read_text(errors="replace"), log
    assert "nbgrader's warnings while autograding" in out


def test_the_demo_class_is_graded_on_one_seed(demo):
    course, _ = demo
    from autograder.classroom.seed import SEED_FILE

    seeds = {p.read_text() for p in (course / "grading").glob(f"*/{SEED_FILE}")}
    assert len(seeds) == 1 and (course / "course" / SEED_FILE).read_text() in seeds


def _submissions(db: Path, students) -> dict:
    """What a gradebook holds of each student's ps1_sharding submission, field by field (None:
    no submission): its time, seconds late, late penalty, and each grade cell's auto-score and
    whether it is left for a look."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with Gradebook(f"sqlite:///{db}") as gb:
        for s in students:
            try:
                sub = gb.find_submission("ps1_sharding", s)
            except MissingEntry:
                out[s] = None
                continue
            (nb,) = sub.notebooks
            out[s] = {"timestamp": sub.timestamp, "seconds_late": sub.total_seconds_late,
                      "late_penalty": nb.late_submission_penalty,
                      "needs_manual_grade": sub.needs_manual_grade,
                      "grades": {g.name: (g.auto_score, g.needs_manual_grade)
                                 for g in nb.grades}}
    return out


def test_grade_all_gives_the_gradebook_nbgrader_autograde_gave(demo, tmp_path):
    """The two grading paths on one class: grade-all --gradebook on (a copy of) the demo's
    course folder draws the course's seed, as each nbgrader autograde did, and writes the same
    gradebook, field by field: every grade, every submission's time from timestamp.txt, cleo's
    late flag and nbgrader's late penalty (the demo's due date and penalty method); ben's
    first hand-in is replaced by his resubmission (the same notebook, a newer timestamp.txt:
    not graded again); dan's ps1_sharding.py is skipped by nbgrader autograde and refused by
    grade-all, listed for a look, with no submission in either gradebook. The CSV and the class
    report show the late hand-in; the autograded folders hold what nbgrader autograde leaves
    there (the hand-in's timestamp.txt and the exchange's submission_secret.txt), so nbgrader
    generate_feedback makes the feedback and release_feedback puts it on an exchange, as
    after nbgrader autograde."""
    import csv
    import shutil

    course, _ = demo
    folder = tmp_path / "course"
    shutil.copytree(course / "course", folder,
                    ignore=shutil.ignore_patterns("autograded", "feedback"))
    ben = folder / "submitted" / "ben" / "ps1_sharding" / "timestamp.txt"
    resubmitted = ben.read_text()
    ben.write_text("2026-11-20 08:00:00.000000 UTC")  # his first hand-in
    dan = folder / "submitted" / "dan" / "ps1_sharding"
    dan.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "ps1_sharding.py", dan)
    (dan / "timestamp.txt").write_text("2026-11-21 11:00:00.000000 UTC")
    secrets = {}
    for s in ("ada", "ben", "cleo"):  # as nbgrader collect leaves a hand-in of the exchange
        secrets[s] = f"secret-of-{s}"
        (folder / "submitted" / s / "ps1_sharding" / "submission_secret.txt").write_text(
            secrets[s])
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    out = tmp_path / "class_grades.csv"
    nbgrader = str(Path(sys.executable).parent / "nbgrader")

    def grade_all():
        p = subprocess.run([sys.executable, "-m", "autograder", "grade-all", str(folder),
                            "--out", str(out), "--no-progress", "--gradebook",
                            str(folder / "gradebook.db")], cwd=tmp_path, capture_output=True,
                           text=True, timeout=1200, env=env)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        return p.stderr

    grade_all()
    first = _submissions(folder / "gradebook.db", ["ben"])["ben"]["timestamp"]
    assert str(first) == "2026-11-20 08:00:00"
    ben.write_text(resubmitted)
    err = grade_all()
    assert "4 submission(s): 0 graded, 1 refused, 3 unchanged since the last run" in err, err
    assert "refused: dan/ps1_sharding: dan/ps1_sharding/ holds 'ps1_sharding.py'" in err, err
    # nbgrader autograde on dan's folder: skipped (nbgrader says so), no submission made
    p = subprocess.run([nbgrader, "autograde", "ps1_sharding", "--student", "dan"], cwd=folder,
                       capture_output=True, text=True, timeout=300, env=env)
    assert "No notebooks were matched" in p.stderr and "dan" in p.stderr, p.stderr[-2000:]

    students = ("ada", "ben", "cleo")
    want = {s: _submissions(course / "grading" / f"{s}-ps1_sharding" / "gradebook.db", [s])[s]
            for s in students}
    got = _submissions(folder / "gradebook.db", students + ("dan",))
    assert got.pop("dan") is None
    assert got == want
    assert want["cleo"]["seconds_late"] == 15.5 * 3600 and want["cleo"]["late_penalty"] > 0
    assert want["ada"]["seconds_late"] == 0 and not want["ada"]["late_penalty"]
    assert not any(w["needs_manual_grade"] for w in want.values())

    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    totals = {s: (float(r["total"]), float(r["max_total"])) for s, r in rows.items() if s != "dan"}
    # the CSV shows scores to two decimals; the gradebook keeps them exact
    assert totals == {s: tuple(round(float(x), 2) for x in v) for s, v in _scores(course).items()}
    assert rows["dan"]["total"] == "refused"
    assert rows["cleo"]["timestamp"] == "2026-11-22 09:30:00"
    assert float(rows["cleo"]["seconds_late"]) == 55800.0
    assert float(rows["cleo"]["late_penalty"]) == round(want["cleo"]["late_penalty"], 2)
    assert float(rows["ada"]["seconds_late"]) == 0.0
    page = (tmp_path / "class_report.html").read_text()
    assert "1 late hand-in(s)" in page and "late by 15 h 30 min" in page, page[-3000:]
    look = page[page.index("need a look"):page.index("Every hand-in")]
    assert "dan" in look and "not the notebook ps1_sharding.ipynb" in look

    p = subprocess.run([nbgrader, "generate_feedback", "ps1_sharding"], cwd=folder,
                       capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    html = (folder / "feedback" / "cleo" / "ps1_sharding" / "ps1_sharding.html").read_text()
    assert "FAIL" in html and "numerics" in html
    for s in ("ada", "ben", "cleo"):
        handed = folder / "submitted" / s / "ps1_sharding"
        for name in ("timestamp.txt", "submission_secret.txt"):
            assert (folder / "autograded" / s / "ps1_sharding" / name).read_text() == \
                (handed / name).read_text(), (s, name)
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    p = subprocess.run([nbgrader, "release_feedback", "ps1_sharding",
                        f"--Exchange.root={exchange}"], cwd=folder, capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    from nbgrader.utils import notebook_hash

    released = exchange / "jax-scaling-demo" / "feedback"
    # each student's page under the name their own nbgrader fetch_feedback looks for
    assert sorted(p.name for p in released.iterdir()) == sorted(
        f"{notebook_hash(secret=secrets[s], notebook_id='ps1_sharding')}.html" for s in secrets)


def test_the_feedback_run_does_not_repeat_the_checks(demo):
    """nbgrader autograde runs the student's cells for the feedback with NBGRADER_EXECUTION
    set, as nbgrader's own Execute does: the public check and the profiles step aside (the
    hidden cell below each holds the grader's verdict), so the run costs the student's cells."""
    import nbformat

    course, _ = demo
    nb = nbformat.read(course / "course" / "autograded" / "ada" / "ps1_sharding" /
                       "ps1_sharding.ipynb", as_version=4)
    cell = next(c for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "check_roll_diff")
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "steps aside while nbgrader runs the notebook" in text, cell.outputs


HANG_CELL = '''\
def roll_diff(A, shift, mesh):
    while True:  # never stops tracing
        pass

roll_diff(None, 1, None)  # and the notebook's own cell waits on it too
'''


def test_a_hang_costs_one_limit_not_two(tmp_path, monkeypatch):
    """Under nbgrader autograde a hand-in whose function never returns costs the function's
    limit once: the notebook run for the feedback goes on beside the grading and is stopped
    when the grading finds the hang, instead of waiting out its own cell limit afterwards. The
    limits come from nbgrader_config.py."""
    import time

    import nbformat

    demo, api, course, sub = _course_with_student(
        tmp_path, monkeypatch, "hal", "c.GradeInSandbox.function_timeout = 10\n"
        "c.GradeInSandbox.cell_timeout = 600\nc.GradeInSandbox.with_speed = False\n")
    nb = nbformat.read(sub / "ps1_sharding.ipynb", as_version=4)
    (answer,) = [c for c in nb.cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "solution_roll_diff"]
    answer.source = HANG_CELL
    _hand_in(sub, nb)
    t0 = time.monotonic()
    demo.check(api.autograde("ps1_sharding", "hal"), "autograde")
    took = time.monotonic() - t0
    assert took < 300, took  # the notebook's own 600 s cell limit was not waited out
    graded = nbformat.read(course / "autograded" / "hal" / "ps1_sharding" /
                           "ps1_sharding.ipynb", as_version=4)
    cell = next(c for c in graded.cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == "grade_roll_diff")
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "time limit" in text and "were not run for this feedback" in text, text


def test_the_notebook_is_data_never_a_witness(tmp_path, monkeypatch):
    """A hand-in with every hidden cell deleted and a report planted in its metadata (the
    notebook's and a cell's) saying every function needs a regrade: nbgrader autograde grades
    every function all the same (roll_diff, the reference answer: full marks; the two left
    unsolved: 0), none is left for manual grading, the planted report is gone and the cells are
    back saying so; grade-all, on the same seed, gives the same scores."""
    import nbformat
    from nbgrader.api import Gradebook

    from autograder.classroom.batch import grade_all
    from autograder.classroom.nbgrader_plugin import REPORT_KEY, autograded_notebook
    from autograder.supervisor.options import Options

    demo, api, course, sub = _course_with_student(
        tmp_path, monkeypatch, "pia", "c.GradeInSandbox.quick = True\n"
        "c.GradeInSandbox.with_speed = False\nc.GradeInSandbox.run_student_cells = False\n"
        "c.GradeInSandbox.seed = 7\n")
    source = nbformat.read(course / "source" / "ps1_sharding" / "ps1_sharding.ipynb", 4)
    nb = nbformat.read(sub / "ps1_sharding.ipynb", as_version=4)
    for c in nb.cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") == "solution_roll_diff":
            c.source = demo.solution_cells(source)["solution_roll_diff"]
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]
    planted = {"assignment": "ps1_sharding", "functions": {
        n: {"score": 0.0, "needs_regrade": "planted"}
        for n in ("shard_average_jit", "shard_average_shard_map", "roll_diff")}}
    nb.metadata[REPORT_KEY] = planted
    nb.cells[0].metadata["autograder_note"] = "planted"
    _hand_in(sub, nb)
    demo.check(api.autograde("ps1_sharding", "pia"), "autograde")
    want = {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 4.0}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        got = {n: gb.find_grade(f"grade_{n}", "ps1_sharding", "ps1_sharding", "pia")
               for n in want}
        assert {n: g.auto_score for n, g in got.items()} == want
        assert not any(g.needs_manual_grade for g in got.values())
    graded = nbformat.read(course / "autograded" / "pia" / "ps1_sharding" /
                           "ps1_sharding.ipynb", as_version=4)
    assert "planted" not in json.dumps(graded.metadata) + json.dumps(
        [c.metadata for c in graded.cells])
    texts = ["".join(o.get("text", "") for o in c.outputs) for c in graded.cells
             if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(texts) == 3 and all("was removed from the notebook" in t for t in texts), texts
    # grade-all on the same hand-in and seed: the same scores, the same cells put back
    (o,) = grade_all(course, out=tmp_path / "g.csv", progress=False, warm=False,
                     opts=Options(quick=True, with_speed=False, seed=7))
    assert {n: f["score"] for n, f in o.report["functions"].items()} == want
    again = autograded_notebook(sub / "ps1_sharding.ipynb", o.report)
    assert "planted" not in json.dumps(again.metadata)
    assert sum("was removed from the notebook" in json.dumps(c.get("outputs", []))
               for c in again.cells) == 3


def test_the_feedback_says_which_cell_the_cell_limit_stopped():
    """The run for the feedback stopped at a cell (nbgrader's cell_timeout): that cell says so,
    with the limit; the cells below it keep the outputs they were handed in with; a hidden cell
    is left to the grader. Without a stop, the first code cell after the last graded cell says
    it was not run."""
    import nbformat

    from autograder.classroom.nbgrader_plugin import fill_student_cells

    def notebook(ran: bool):
        nb = nbformat.v4.new_notebook()
        for i in range(5):
            c = nbformat.v4.new_code_cell(f"x = {i}")
            c.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                text=("ran " if ran else "handed in ") + str(i))]
            nb.cells.append(c)
        nb.cells[3].metadata["nbgrader"] = {"grade": True, "grade_id": "grade_roll_diff"}
        return nb

    nb = notebook(False)
    fill_student_cells(nb, notebook(True), {3: "roll_diff"}, until=4, stopped=1,
                       cell_timeout=7)
    texts = [_cell_texts(c) for c in nb.cells]
    assert texts[0] == "ran 0"
    assert texts[1].startswith("ran 1") and "stopped after 7 s" in texts[1], texts[1]
    assert texts[2] == "handed in 2" and texts[3] == "handed in 3" and texts[4] == "handed in 4"
    nb = notebook(False)
    fill_student_cells(nb, notebook(True), {3: "roll_diff"}, until=4, stopped=None,
                       cell_timeout=7)
    texts = [_cell_texts(c) for c in nb.cells]
    assert texts[:3] == ["ran 0", "ran 1", "ran 2"] and texts[3] == "handed in 3"
    assert "were not run for this feedback" in texts[4] and texts[4].endswith("handed in 4")


def test_the_run_for_the_feedback_stops_at_a_cell_past_its_limit(tmp_path, monkeypatch):
    """The worker's run for the feedback (a real kernel, no grading): a cell that never ends is
    stopped at the cell limit and named in the record; the cells below it and those from
    ``until`` on are not run."""
    import nbformat

    from autograder.core.records import ExecutedNotebook, parse
    from autograder.worker.process import execute_notebook

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in (
        "print('first')", "import time\nwhile True:\n    time.sleep(0.1)", "print('below')")]
    folder = tmp_path / "hand-in"
    folder.mkdir()
    nbformat.write(nb, folder / "nb.ipynb")
    rec = parse(execute_notebook(folder / "nb.ipynb", 3).to_line(), allowed=(ExecutedNotebook,))
    out = nbformat.reads(rec.text, as_version=4)
    assert rec.stopped_cell == 1
    assert "first" in _cell_texts(out.cells[0]) and not out.cells[2].outputs
    rec = execute_notebook(folder / "nb.ipynb", 3, until=1)
    out = nbformat.reads(rec.text, as_version=4)
    assert rec.stopped_cell is None and len(out.cells) == 3
    assert "first" in _cell_texts(out.cells[0]) and out.cells[1].execution_count is None
    # the kernel was told it runs under nbgrader; this process was not (the checks of the
    # next test on this worker must not step aside)
    assert "NBGRADER_EXECUTION" not in os.environ


def test_the_summary_says_what_happened_in_one_block():
    from autograder.classroom.nbgrader_plugin import AutogradeOutcome as O
    from autograder.classroom.nbgrader_plugin import summary

    text = summary([O("ann", "ps1"), O("bob", "ps1", regrade=("roll_diff",), log=Path("/b.log")),
                    O("cy", "ps1", refused="too many files"), O("dee", "ps1", stopped_cell=4),
                    O("eve", "ps1", error="RuntimeError: boom")], 150)
    first, *rest = text.splitlines()
    assert first.endswith("5 hand-in(s) in this run: 2 graded, 1 refused, 2 need a regrade, "
                          "1 with a cell stopped by cell_timeout (150 s)"), first
    assert "needs regrade: bob/ps1: roll_diff" in text and "the grader's log: /b.log" in text
    assert "refused: cy/ps1: too many files" in text and "cell stopped: dee/ps1: cell 4" in text
    assert "needs regrade: eve/ps1: not graded (RuntimeError: boom)" in text
    assert rest[-1].startswith("  exit 1: run the same command again")
    assert "exit 1" not in summary([O("ann", "ps1")], 150)


def test_the_summary_lists_a_py_nbgrader_did_not_grade(tmp_path):
    """A hand-in folder holding ps1_sharding.py and no notebook: nbgrader autograde skips it
    (no submission); the course's end-of-run summary lists it for a look, as grade-all does.
    A folder with the notebook, and a student outside --student, are not listed."""
    from autograder.classroom.nbgrader_plugin import AutogradeOutcome as O
    from autograder.classroom.nbgrader_plugin import summary, without_notebook

    for student, name in (("ann", "ps1_sharding.ipynb"), ("dan", "ps1_sharding.py"),
                          ("eve", "ps1_sharding.py")):
        folder = tmp_path / "submitted" / student / "ps1_sharding"
        folder.mkdir(parents=True)
        (folder / name).write_text("x = 1\n")
        (folder / "timestamp.txt").write_text("2026-11-21 12:00:00 UTC")
    assert without_notebook(tmp_path, ["ps1_sharding"]) == [
        ("dan", "ps1_sharding", "ps1_sharding.py"), ("eve", "ps1_sharding", "ps1_sharding.py")]
    skipped = without_notebook(tmp_path, ["ps1_sharding"], "d*")
    assert skipped == [("dan", "ps1_sharding", "ps1_sharding.py")]
    text = summary([O("ann", "ps1_sharding")], 150, skipped)
    assert "not graded: dan/ps1_sharding: holds ps1_sharding.py, not the notebook " \
           "ps1_sharding.ipynb" in text, text
    assert "exit 1" not in text


def test_a_duplicated_grade_cell_is_named():
    """A hand-in with two cells named grade_roll_diff: nbgrader's own steps call it "an old
    version of the nbgrader metadata format" and stop the run; the course's says which cell,
    and fails that hand-in alone. A notebook without duplicates passes through."""
    import nbformat
    from traitlets.config import Config

    from autograder.classroom.nbgrader_plugin import DuplicateCells, NamedDuplicates, configure

    def graded(gid):
        cell = nbformat.v4.new_code_cell("pass")
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "locked": True,
                                     "points": 4.0, "schema_version": 3, "solution": False}
        return cell

    nb = nbformat.v4.new_notebook(cells=[graded("grade_roll_diff"), graded("grade_other")])
    assert NamedDuplicates().preprocess(nb, {})[0] is nb
    nb.cells.append(graded("grade_roll_diff"))
    with pytest.raises(DuplicateCells, match="this hand-in's notebook has two cells named "
                                             "grade_roll_diff"):
        NamedDuplicates().preprocess(nb, {})
    c = Config()
    configure(c)
    assert NamedDuplicates in c.Autograde.sanitize_preprocessors
