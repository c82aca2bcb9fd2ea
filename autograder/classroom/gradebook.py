"""Grades from grade-all into nbgrader's gradebook, through nbgrader's own API.

``grade-all --gradebook DB`` (``DB``: an SQLAlchemy URL such as ``sqlite:///gradebook.db``, or a
path to an sqlite file) writes every graded function's score as the auto-score of its hidden
autograder cell (``grade_<function>``), so formgrader, ``nbgrader export`` and
``generate_feedback`` see the same grades as the CSV. The assignment, its notebook and its grade
cells are created from ``source/<assignment>/<assignment>.ipynb`` when the database does not
have them yet (an instructor who released with ``nbgrader generate_assignment`` already has them).

It records what ``nbgrader autograde`` records, through the same calls: each submission's time
from nbgrader's ``timestamp.txt`` in the hand-in's folder (none without one, as nbgrader; a
resubmission's newer file replaces the older time), and the late penalty of nbgrader's own
``AssignLatePenalties`` step against the assignment's due date in the gradebook (the student's
extension counted; ``c.LateSubmissionPlugin.penalty_method`` and
``c.AssignLatePenalties.plugin_class`` from the course's ``nbgrader_config.py``). A folder with
no notebook (a ``.py`` handed in) gets no submission, as ``nbgrader autograde`` skips it; a
renamed notebook gets one with its grades left for a look, as nbgrader leaves them.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterable, Optional

from ..core.imports import light_nbformat
from ..course import registry

nbformat = light_nbformat()

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


def course_config(course: Optional[Path]):
    """The nbgrader configuration of the course folder ``course`` (its ``nbgrader_config.py``,
    the file ``nbgrader autograde`` reads there), or an empty one (nbgrader's defaults)."""
    from traitlets.config import Config

    path = None if course is None else Path(course) / "nbgrader_config.py"
    if path is None or not path.is_file():
        return Config()
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def _submitted_at(rep: dict) -> Optional[datetime]:
    """The time nbgrader autograde would record for this hand-in: its ``timestamp.txt``'s."""
    if rep.get("timestamp_from") != "timestamp.txt" or not rep.get("timestamp"):
        return None
    return datetime.fromisoformat(rep["timestamp"])


def _graded(rep: dict) -> bool:
    return not (rep.get("error") or rep.get("refused"))


def publish(reports: Iterable[dict], target: str, source: Path = ROOT / "source",
            config=None) -> int:
    """Write the scores of ``reports`` (grade-all's per-submission reports) into the gradebook
    at ``target``; returns the number of grades written. Every function of a graded assignment
    gets a score (one the submission does not define scores 0); one the grader failed on
    (``needs_regrade``), and every function of a hand-in that was not graded (refused before
    grading, or the grader failed on it whole), gets none and is marked for a look, so
    formgrader shows it ungraded until a later run grades it: never a zero for it. Each
    submission gets its ``timestamp.txt`` time and, when graded, nbgrader's late penalty
    (``config``: the course's nbgrader configuration, :func:`course_config`); a hand-in whose
    folder holds no notebook gets no submission (module docstring)."""
    from nbgrader.api import Gradebook

    reports = [r for r in reports if r.get("assignment") and not r.get("no_notebook")]
    written = 0
    url = db_url(target)
    with quiet_nbgrader(), Gradebook(url) as gb:
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
            at = _submitted_at(rep)
            # nbgrader autograde's own call: the time when there is one, else none given
            gb.update_or_create_submission(asg, student, **({"timestamp": at} if at else {}))
            functions = rep.get("functions") or {}
            for grade_id in grade_cells(asg, source):
                name = grade_id[len("grade_"):]
                grade = gb.find_grade(grade_id, asg, asg, student)
                if functions.get(name, {}).get("needs_regrade") or not _graded(rep):
                    # the grader failed here: no auto-score, so formgrader shows it ungraded
                    grade.auto_score = None
                    grade.needs_manual_grade = True
                    continue
                grade.auto_score = float(functions.get(name, {}).get("score", 0.0))
                grade.needs_manual_grade = False
                written += 1
        gb.db.commit()
    for rep in reports:
        if _graded(rep):  # nbgrader assigns it after saving a notebook's grades
            _assign_late_penalty(url, rep["assignment"], str(rep["student"]), config)
    return written


def _assign_late_penalty(url: str, assignment: str, student: str, config) -> None:
    """nbgrader's own ``AssignLatePenalties`` step on one submitted notebook, as ``nbgrader
    autograde`` runs it: the penalty its ``LateSubmissionPlugin`` gives for the submission's
    seconds past the due date (none when on time)."""
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config import Config

    step = AssignLatePenalties(config=config if config is not None else Config())
    resources = {"nbgrader": {"notebook": assignment, "assignment": assignment,
                              "student": student, "db_url": url}}
    with quiet_nbgrader(), _quiet_log(step):
        step.preprocess(nbformat.v4.new_notebook(), resources)


@contextmanager
def _quiet_log(step):
    """nbgrader's step logs each late hand-in as a WARNING; grade-all says it in its CSV and
    class report instead."""
    import logging

    level = step.log.level
    step.log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        step.log.setLevel(level)


def lateness(reports: Iterable[dict], target: str) -> dict[tuple[str, str], dict]:
    """(student, assignment) -> what the gradebook at ``target`` holds of each submission's
    time: ``seconds_late`` (nbgrader's ``total_seconds_late``: past the due date, the student's
    extension counted; 0 on time or without a due date or time) and ``late_penalty``."""
    from nbgrader.api import Gradebook, MissingEntry

    out = {}
    with quiet_nbgrader(), Gradebook(db_url(target)) as gb:
        for rep in reports:
            if not rep.get("assignment"):
                continue
            key = (str(rep["student"]), rep["assignment"])
            try:
                sub = gb.find_submission(key[1], key[0])
            except MissingEntry:
                continue
            out[key] = {"seconds_late": float(sub.total_seconds_late),
                        "late_penalty": float(sub.late_submission_penalty or 0.0),
                        "due": sub.duedate.isoformat(sep=" ") if sub.duedate else None}
    return out


def students(target: str) -> list[str]:
    """The ids of the students nbgrader's gradebook ``target`` lists (``nbgrader db student
    import``, and everyone who handed in)."""
    from nbgrader.api import Gradebook

    with quiet_nbgrader(), Gradebook(db_url(target)) as gb:
        return [s.id for s in gb.students]
