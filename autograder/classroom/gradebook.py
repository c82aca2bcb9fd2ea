"""Grades from grade-all into nbgrader's gradebook, through nbgrader's own API.

``grade-all --gradebook DB`` (``DB``: an SQLAlchemy URL such as ``sqlite:///gradebook.db``, or a
path to an sqlite file) writes every graded function's score as the auto-score of its hidden
autograder cell (``grade_<function>``), so formgrader, ``nbgrader export`` and
``generate_feedback`` see the same grades as the CSV. The assignment, its notebook and its grade
cells are created from ``source/<assignment>/<assignment>.ipynb`` when the database does not
have them yet (an instructor who released with ``nbgrader generate_assignment`` already has them).
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

import nbformat

from ..course import registry

ROOT = Path(__file__).resolve().parents[2]


def db_url(target: str) -> str:
    """An SQLAlchemy URL, or a path to an sqlite file made into one."""
    return target if "://" in target else f"sqlite:///{Path(target).resolve()}"


def grade_cells(assignment: str, source: Path = ROOT / "source") -> dict[str, float]:
    """grade_id -> points of the graded cells of an assignment's instructor notebook."""
    nb = nbformat.read(Path(source) / assignment / f"{assignment}.ipynb", as_version=4)
    cells = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            cells[meta["grade_id"]] = float(meta.get("points", 0))
    if not cells:
        raise ValueError(f"{assignment}: its source notebook has no graded cells")
    return cells


def cell_of(function: str) -> str:
    """The hidden autograder cell that grades ``function`` (tools/build_notebooks.py)."""
    return f"grade_{function}"


#: SQLAlchemy's complaint about nbgrader's own ``update_or_create_submission`` (its new
#: submission is reached through a relationship before it is added to the session): nbgrader's
#: noise, printed by ``nbgrader autograde`` too, with nothing for the instructor to do
NBGRADER_AUTOFLUSH = r"Object of type <Submitted\w+> not in session"


def ignore_nbgrader_autoflush() -> None:
    """Ignore that one warning, raised from nbgrader's own ``api`` module, and nothing else
    (in the warnings filters in force: this process's, or a ``catch_warnings`` block's)."""
    try:
        from sqlalchemy.exc import SAWarning
    except ImportError:  # pragma: no cover - nbgrader brings SQLAlchemy
        return
    warnings.filterwarnings("ignore", message=NBGRADER_AUTOFLUSH, category=SAWarning,
                            module=r"nbgrader\.api")


@contextmanager
def quiet_nbgrader():
    """Silence that one warning in this block (our own calls of nbgrader's API)."""
    with warnings.catch_warnings():
        ignore_nbgrader_autoflush()
        yield


def publish(reports: Iterable[dict], target: str, source: Path = ROOT / "source") -> int:
    """Write the scores of ``reports`` (grade-all's per-submission reports) into the gradebook
    at ``target``; returns the number of grades written. Every function of a graded assignment
    gets a score (one the submission does not define scores 0); one the grader failed on
    (``needs_regrade``), and every function of a hand-in that was not graded (refused before
    grading, or the grader failed on it whole), gets none and is marked for a look, so
    formgrader shows it ungraded until a later run grades it: never a zero for it."""
    from nbgrader.api import Gradebook

    reports = [r for r in reports if r.get("assignment")]
    written = 0
    with quiet_nbgrader(), Gradebook(db_url(target)) as gb:
        for asg in sorted({r["assignment"] for r in reports}):
            registry.problems(asg)  # an unknown assignment fails before anything is written
            gb.update_or_create_assignment(asg)
            gb.update_or_create_notebook(asg, asg)
            for grade_id, points in grade_cells(asg, source).items():
                gb.update_or_create_grade_cell(grade_id, asg, asg, max_score=points,
                                               cell_type="code")
        for rep in reports:
            asg, student = rep["assignment"], str(rep["student"])
            gb.update_or_create_student(student)
            gb.update_or_create_submission(asg, student)
            functions = rep.get("functions") or {}
            for grade_id in grade_cells(asg, source):
                name = grade_id[len("grade_"):]
                grade = gb.find_grade(grade_id, asg, asg, student)
                if functions.get(name, {}).get("needs_regrade") or rep.get("error") or \
                        rep.get("refused"):
                    # the grader failed here: no auto-score, so formgrader shows it ungraded
                    grade.auto_score = None
                    grade.needs_manual_grade = True
                    continue
                grade.auto_score = float(functions.get(name, {}).get("score", 0.0))
                grade.needs_manual_grade = False
                written += 1
        gb.db.commit()
    return written
