"""Changing the course mid-term: the build stops on a cell that names a removed function,
``gradebook-sync`` brings nbgrader's gradebook in line with the registry, and the feedback of a
class graded before the change still reaches every student."""
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

#: pure Python on hand-made notebooks and a tiny gradebook: make test-latest leaves it out
pytestmark = pytest.mark.orchestration

sys.path.insert(0, str(ROOT / "tools"))


def _notebook(*cells):
    nb = new_notebook(cells=list(cells))
    for i, c in enumerate(nb.cells):
        c["id"] = f"ps9-{i:03d}"
    return nb


def test_build_names_each_cell_that_calls_a_removed_function():
    from build_notebooks import unknown_names

    nb = _notebook(
        new_markdown_cell("# PS 9\n\n| `mlp_block(In, W, mesh)` | `matmul(A, B)` | `relu(x)` |"),
        new_code_cell("import numpy as np\nfrom selfcheck import check\n\n"
                      "def matmul(A, B):\n    return A @ B"),
        new_code_cell('check("matmul", matmul)\n%timeit matmul(1, 2)'),
        new_code_cell("mine = mlp_block(np.ones(3), W, mesh)\ntry:\n    pass\n"
                      "except ValueError as e:\n    print(e)"),
    )
    errors = unknown_names(nb, {"matmul"}, library=lambda n: n == "relu")
    assert len(errors) == 4, errors
    text, w, mesh, mlp = errors  # in cell order, then by name
    assert text.startswith("cell ps9-000 (markdown: '# PS 9')") and "`mlp_block(...)`" in text
    assert mlp.startswith("cell ps9-003 (code: 'mine = mlp_block(") and "`mlp_block`" in mlp
    assert "NameError" in mlp and "`mesh`" in mesh and "`W`" in w


def test_build_passes_a_notebook_whose_names_are_defined():
    from build_notebooks import unknown_names

    nb = _notebook(new_markdown_cell("Write `matmul(A, B)`; `jnp.roll(x)` is JAX's."),
                   new_code_cell("def matmul(A, B):\n    return [a for a in A]"),
                   new_code_cell("matmul([1], [2])"))
    assert unknown_names(nb, {"matmul"}) == []


def test_build_stops_naming_the_notebook(monkeypatch):
    import build_notebooks

    nb = _notebook(new_code_cell("mlp_block(1)"))
    with pytest.raises(SystemExit) as e:
        build_notebooks.check_names("ps3_collective_matmul", nb)
    assert "notebooks/ps3_collective_matmul.py" in str(e.value)
    assert "cell ps9-000" in str(e.value) and "`mlp_block`" in str(e.value)


def test_plan_says_what_differs_cell_by_cell():
    from autograder.classroom.gradebook_sync import plan_assignments, plan_cells

    current = {"grade": {"grade_a": {"max_score": 3.0, "cell_type": "code"},
                         "grade_gone": {"max_score": 6.0, "cell_type": "code"}},
               "source": {"grade_a": {"source": "old", "cell_type": "code"}}}
    target = {"grade": {"grade_a": {"max_score": 4.0, "cell_type": "code"},
                        "grade_new": {"max_score": 2.0, "cell_type": "code"}},
              "source": {"grade_a": {"source": "new", "cell_type": "code"}}}
    texts = [c.text() for c in plan_cells("ps9", current, target, submissions=5)]
    assert texts == [
        "ps9: remove grade cell grade_gone, 6 point(s) (5 submission(s) have a grade in it)",
        "ps9: add grade cell grade_new, 2 point(s) (an empty grade in each of the 5 "
        "submission(s), until they are graded again)",
        "ps9: update grade cell grade_a: points 3 -> 4",
        "ps9: update source cell grade_a (source)"]
    assert plan_cells("ps9", target, target, submissions=5) == []
    texts = [c.text() for c in plan_assignments({"ps9": {"ps9": 2, "extra": 0}, "ps0": {"ps0": 1}},
                                                {"ps9"})]
    assert texts == ["ps0: not in the course: remove the assignment from the gradebook, with "
                     "its 1 submission(s)", "ps9: remove notebook 'extra'"]


ASG = "ps1_sharding"


@pytest.fixture
def course(tmp_path):
    """A course folder holding ps1's instructor notebook, and a gradebook recorded before the
    course changed: ps1 with a removed problem (grade and solution cells, a graded submission)
    and without two of its problems, and an assignment the course no longer has."""
    import shutil

    from nbgrader.api import Gradebook

    from autograder.classroom.gradebook import quiet_nbgrader

    (tmp_path / "source" / ASG).mkdir(parents=True)
    shutil.copy(ROOT / "source" / ASG / f"{ASG}.ipynb", tmp_path / "source" / ASG)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    db = tmp_path / "gradebook.db"
    with quiet_nbgrader(), Gradebook(f"sqlite:///{db}") as gb:
        gb.add_assignment(ASG)
        gb.add_notebook(ASG, ASG)
        gb.add_grade_cell("grade_shard_average_jit", ASG, ASG, max_score=3, cell_type="code")
        gb.add_grade_cell("grade_mlp_block", ASG, ASG, max_score=6, cell_type="code")
        gb.add_solution_cell("solution_mlp_block", ASG, ASG)
        gb.add_source_cell("grade_mlp_block", ASG, ASG, cell_type="code", source="grade()",
                           locked=True)
        gb.add_student("ada")
        gb.add_submission(ASG, "ada")
        for cell, score in (("grade_shard_average_jit", 2.0), ("grade_mlp_block", 6.0)):
            grade = gb.find_grade(cell, ASG, ASG, "ada")
            grade.auto_score, grade.needs_manual_grade = score, False
        gb.db.commit()
        gb.add_assignment("ps0_gone")
        gb.add_notebook("ps0_gone", "ps0_gone")
        gb.add_submission("ps0_gone", "ada")
    return tmp_path, db


def _state(db):
    from nbgrader.api import Grade, Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:
        nb = gb.find_notebook(ASG, ASG)
        return ({a.name for a in gb.assignments}, {c.name: c.max_score for c in nb.grade_cells},
                {c.name for c in nb.solution_cells}, {c.name for c in nb.source_cells},
                {(g.cell.name, g.auto_score, g.needs_manual_grade)
                 for g in gb.db.query(Grade).all()})


def test_gradebook_sync_removes_and_adds_cells_only_with_apply(course):
    from autograder.classroom.gradebook_sync import sync
    from autograder.course import registry

    folder, db = course
    before = _state(db)
    said = [c.text() for c in sync(str(db), folder)]
    assert _state(db) == before  # a dry run writes nothing
    assert said[0].startswith("ps0_gone: not in the course")
    assert f"{ASG}: remove grade cell grade_mlp_block, 6 point(s)" in said[1]
    assert f"{ASG}: remove solution cell solution_mlp_block" in said
    assert any(s.startswith(f"{ASG}: add grade cell grade_roll_diff") for s in said)
    assert f"{ASG}: remove source cell grade_mlp_block" in said

    assert [c.text() for c in sync(str(db), folder, write=True)] == said
    assignments, grade_cells, solution_cells, source_cells, grades = _state(db)
    assert assignments == {ASG}
    assert grade_cells == {f"grade_{p.name}": float(p.points) for p in registry.problems(ASG)}
    assert "solution_mlp_block" not in solution_cells and "grade_mlp_block" not in source_cells
    assert source_cells >= set(grade_cells)  # recorded as generate_assignment records them
    # ada's graded cell is kept, the removed one's grade is gone, the new ones wait for grading
    assert grades == {("grade_shard_average_jit", 2.0, False),
                      ("grade_shard_average_shard_map", None, True),
                      ("grade_roll_diff", None, True)}
    assert sync(str(db), folder) == []  # in line now


def test_gradebook_sync_command_dry_run_exits_1(course, capsys):
    from autograder.cli.main import main

    folder, db = course
    assert main(["gradebook-sync", str(db), "--course", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "would change" in out and "grade_mlp_block" in out and "--apply" in out


def test_grade_all_refuses_an_out_of_line_gradebook_before_grading(course, capsys):
    from autograder.cli.main import main

    folder, db = course
    assert main(["grade-all", str(folder), "--gradebook", str(db)]) == 2
    err = capsys.readouterr().err
    assert "out of line with the course" in err and "grade_mlp_block" in err
    assert "gradebook-sync" in err and "nothing was graded" in err
    assert not (folder / "class_grades.csv").exists()


def _stale_hand_in(folder, student: str) -> None:
    """``student``'s ps1 hand-in of the release before mlp_block was removed from ps1: today's
    release notebook with that problem's solution cell (the student's code) and hidden cell,
    and the files nbgrader's exchange leaves beside it."""
    import nbformat
    from nbformat.v4 import new_code_cell

    nb = nbformat.read(ROOT / "release" / ASG / f"{ASG}.ipynb", as_version=4)
    solution = new_code_cell("def mlp_block(In, W, mesh):\n    return In @ W")
    solution.metadata["nbgrader"] = {"grade": False, "grade_id": "solution_mlp_block",
                                     "locked": False, "schema_version": 3, "solution": True}
    hidden = new_code_cell("# the course autograder grades `mlp_block` here")
    hidden.metadata["nbgrader"] = {"grade": True, "grade_id": "grade_mlp_block", "locked": True,
                                   "points": 6.0, "schema_version": 3, "solution": False}
    nb.cells += [solution, hidden]
    sub = folder / "submitted" / student / ASG
    sub.mkdir(parents=True)
    nbformat.write(nb, sub / f"{ASG}.ipynb")
    (sub / "timestamp.txt").write_text("2026-11-21 12:00:00.000000 UTC")
    (sub / "submission_secret.txt").write_text(f"secret-of-{student}")


def _graded_before(folder, students, opts) -> None:
    """Each student's ps1 report as grade-all signed it when it graded the class (full marks
    on every function of today's ps1), so that grade-all reuses it and grades nothing."""
    from autograder.classroom.batch import _write_report, discover, fingerprint, report_key
    from autograder.core.results import CheckResult, FunctionResult, SubmissionResult
    from autograder.course import registry

    reports = folder / "reports"
    reports.mkdir(exist_ok=True)
    key = report_key(reports)
    res = SubmissionResult({p.name: FunctionResult(p.name, float(p.points),
                                                   [CheckResult("numerics", True, "right")],
                                                   weights=dict(p.weights))
                            for p in registry.problems(ASG)}, assignment=ASG, isolated=False)
    for item in discover(folder):
        assert item.student in students and not item.refused, item
        _write_report(item, res.to_dict(), 1.0, fingerprint(item, opts), key, reports)


def test_a_removed_problem_leaves_feedback_and_its_release_working(course, tmp_path, capsys):
    """A class graded before mlp_block left ps1 (its hand-ins keep the removed problem's
    cells), brought in line as the README says (gradebook-sync --apply, grade-all
    --gradebook): the autograded notebooks' graded cells are the gradebook's, so nbgrader's
    generate_feedback and release_feedback succeed for every student, and so they do after
    the next grade-all, which writes the autograded notebooks again. No hand-in is graded: the
    reports of the earlier grading are reused, as a rerun reuses them."""
    import subprocess

    import nbformat

    from autograder.classroom.gradebook_sync import sync
    from autograder.cli.main import main
    from autograder.supervisor.options import Options

    folder, db = course
    with (folder / "nbgrader_config.py").open("a") as f:
        f.write('c.CourseDirectory.course_id = "course101"\n')
    students = ("ada", "ben")
    for s in students:
        _stale_hand_in(folder, s)
    _graded_before(folder, students, Options(isolation=False))
    sync(str(db), folder, write=True)

    nbgrader = str(Path(sys.executable).parent / "nbgrader")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    for run in ("grade-all", "grade-all again"):
        assert main(["grade-all", str(folder), "--gradebook", str(db), "--no-isolation",
                     "--no-progress", "--out", str(folder / "class_grades.csv")]) == 0, run
        err = capsys.readouterr().err  # said in words, not only as a count
        assert "nothing was graded" in err and "--force grades every hand-in again" in err, err
        for s in students:
            nb = nbformat.read(folder / "autograded" / s / ASG / f"{ASG}.ipynb", as_version=4)
            ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
            assert "grade_mlp_block" not in ids and "solution_mlp_block" not in ids, (run, s)
            assert any("return In @ W" in c.source for c in nb.cells)  # her code is kept
            assert (folder / "autograded" / s / ASG / "submission_secret.txt").is_file()
        for cmd in (["generate_feedback", ASG, "--force"],
                    ["release_feedback", ASG, f"--Exchange.root={exchange}"]):
            p = subprocess.run([nbgrader] + cmd, cwd=folder, capture_output=True, text=True,
                               timeout=300, env=env)
            assert p.returncode == 0 and "MissingEntry" not in p.stderr, \
                (run, cmd, p.stderr[-3000:])
        for s in students:
            html = (folder / "feedback" / s / ASG / f"{ASG}.html").read_text()
            assert "roll_diff" in html and "mlp_block: " not in html, (run, s)
        assert len(list((exchange / "course101" / "feedback").glob("*.html"))) == 2, run


def test_nbgraders_autograde_drops_a_removed_problems_cells_before_saving_grades(course):
    """nbgrader autograde's sanitizing step (the course's OverwriteCells) makes a stale
    hand-in's cells the gradebook's: the removed problem's hidden cell is gone, its solution
    cell is the student's plain code, and every graded cell left is one the gradebook has (its
    SaveAutoGrades and generate_feedback look each one up)."""
    import nbformat
    from nbgrader import utils

    from autograder.classroom.gradebook import db_url
    from autograder.classroom.gradebook_sync import sync
    from autograder.classroom.nbgrader_plugin import OverwriteReleasedCells

    folder, db = course
    sync(str(db), folder, write=True)
    _stale_hand_in(folder, "ada")
    nb = nbformat.read(folder / "submitted" / "ada" / ASG / f"{ASG}.ipynb", as_version=4)
    resources = {"nbgrader": {"notebook": ASG, "assignment": ASG, "student": "ada",
                              "db_url": db_url(str(db))}}
    nb, _ = OverwriteReleasedCells().preprocess(nb, resources)
    graded = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if utils.is_grade(c)}
    assert graded == {f"grade_{p}" for p in ("shard_average_jit", "shard_average_shard_map",
                                             "roll_diff")}
    mine = [c for c in nb.cells if "return In @ W" in c.source]
    assert len(mine) == 1 and "nbgrader" not in mine[0].metadata


def test_gradebook_sync_sees_submissions_recorded_before_the_release(tmp_path, capsys):
    """The slip of `nbgrader autograde` before `generate_assignment`: the assignment (added
    with its due date) has no notebook, and autograde recorded a submission with nothing to
    grade in it. gradebook-sync says so and names the fix instead of "in line", grade-all
    --gradebook refuses before grading, and --apply records the release's notebook and cells
    and gives the submission an empty grade in each, as nbgrader's add_submission does."""
    import shutil

    from nbgrader.api import Gradebook

    from autograder.classroom.gradebook import quiet_nbgrader
    from autograder.classroom.gradebook_sync import before_grading
    from autograder.cli.main import main

    (tmp_path / "source" / ASG).mkdir(parents=True)
    shutil.copy(ROOT / "source" / ASG / f"{ASG}.ipynb", tmp_path / "source" / ASG)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")
    db = tmp_path / "gradebook.db"
    with quiet_nbgrader(), Gradebook(f"sqlite:///{db}") as gb:
        gb.add_assignment(ASG, duedate="2026-11-21 18:00:00 UTC")
        gb.add_student("ada")
        gb.add_submission(ASG, "ada")
    sync = ["gradebook-sync", str(db), "--course", str(tmp_path)]
    assert main(sync) == 1
    out = capsys.readouterr().out
    assert f"{ASG}: no release recorded" in out and "1 submission(s) recorded without it" in out
    assert "--apply" in out
    why = before_grading(str(db), tmp_path)
    assert why and "no release recorded" in why and "nothing was graded" in why
    assert main(sync + ["--apply"]) == 0
    with Gradebook(f"sqlite:///{db}") as gb:
        nb = gb.find_notebook(ASG, ASG)
        assert {c.name for c in nb.grade_cells} == {
            f"grade_{p}" for p in ("shard_average_jit", "shard_average_shard_map", "roll_diff")}
        (submitted,) = gb.find_submission(ASG, "ada").notebooks
        assert {(g.name, g.auto_score, g.needs_manual_grade) for g in submitted.grades} == {
            (c.name, None, True) for c in nb.grade_cells}
        assert {c.name for c in submitted.comments} == {c.name for c in nb.solution_cells}
    capsys.readouterr()
    assert main(sync) == 0 and "in line" in capsys.readouterr().out


def test_a_changed_limit_is_said_on_the_feedback_page():
    """A hand-in's "What the grader checks" cell that says other than the grader that graded
    it (a limit changed after the hand-out) is shown with the grader's checks, a sentence saying
    they changed, and the hand-out's text below it; a cell that still says what the grader does
    is left alone."""
    from autograder.classroom.nbgrader_plugin import note_changed_checks
    from autograder.core.imports import light_nbformat

    nb = light_nbformat().read(ROOT / "release" / "ps1_sharding" / "ps1_sharding.ipynb",
                               as_version=4)
    assert note_changed_checks(nb) == []  # the release says what the grader checks
    cell = next(c for c in nb.cells if c.cell_type == "markdown"
                and c.source.startswith("**What the grader checks for `roll_diff`**"))
    before = cell.source
    cell.source = before.replace("**at most 1.3**", "**at most 1.2**")
    assert cell.source != before, "the roll_diff cell names no 1.3 limit to change"
    old_line = next(line for line in cell.source.splitlines() if "at most 1.2" in line)
    untouched = [c.source for c in nb.cells if c is not cell]
    assert note_changed_checks(nb) == ["roll_diff"]
    assert cell.source.startswith(before), cell.source[:300]
    assert "Changed since this notebook was handed out" in cell.source
    assert f"> {old_line}" in cell.source
    assert [c.source for c in nb.cells if c is not cell] == untouched
