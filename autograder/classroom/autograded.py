"""Autograded notebooks made from grade-all's reports, written where and as ``nbgrader autograde``
leaves them (:func:`write_autograded`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import nbformat
from nbgrader import utils

from .handin_notebook import (fill_hidden_cells, keep_recorded_cells, note_changed_checks,
                              recorded_cells, restore_hidden_cells, strip_own_metadata)

#: the autograded notebook's metadata key holding the grader's report (SubmissionResult.to_dict)
REPORT_KEY = "autograder_report"


def _function_result(name: str, d: dict):
    """A report's function entry as a FunctionResult, scored with this registry's points and
    weights (the ones the report was scored with)."""
    from ..core.results import CheckResult, FunctionResult
    from ..course import registry

    prob = registry.get(name)
    return FunctionResult(name, float(prob.points),
                          [CheckResult.from_dict(c) for c in d.get("checks", [])],
                          weights=dict(prob.weights), reused=bool(d.get("reused")),
                          regrade=d.get("needs_regrade"))


def autograded_notebook(submitted: Path, report: dict, recorded: Optional[dict] = None):
    """The handed-in notebook as ``nbgrader autograde`` leaves it, from a grade-all report:
    each hidden cell holds its function's report and points, the student's cells keep the
    outputs they were handed in with (they are not run again), and the whole report is in the
    metadata. With ``recorded`` (the gradebook's cells, :func:`recorded_cells`) its nbgrader
    cells are the gradebook's (:func:`keep_recorded_cells`). ``nbgrader generate_feedback``
    turns it into the student's feedback."""
    nb = nbformat.read(submitted, as_version=4)
    strip_own_metadata(nb)
    restored = restore_hidden_cells(nb, report.get("assignment"))
    note_changed_checks(nb)
    if recorded is not None:
        keep_recorded_cells(nb, recorded)
    functions = {n: _function_result(n, d) for n, d in (report.get("functions") or {}).items()}
    fill_hidden_cells(nb, functions, list(report.get("notes") or ()),
                      missing="not graded for this hand-in", restored=tuple(restored))
    nb.metadata[REPORT_KEY] = report
    return nb


def write_autograded(course: Path, outcomes, db: Optional[str] = None) -> list[Path]:
    """``autograded/<student>/<assignment>/`` in the nbgrader course folder ``course`` for every
    graded notebook hand-in of ``outcomes`` (grade-all's), as ``nbgrader autograde`` leaves it,
    so that nbgrader's later steps work after ``grade-all --gradebook`` as after autograde: the
    folder written afresh, holding the hand-in folder's other files (its ``timestamp.txt`` and
    the exchange's ``submission_secret.txt``, which ``release_feedback`` reads; nbgrader's
    ``CourseDirectory.ignore`` patterns left out), then the instructor's own files of
    ``source/<assignment>/`` over them (``Autograde.exclude_overwriting`` kept), and the
    autograded notebook, whose nbgrader cells are those the gradebook ``db`` records
    (:func:`keep_recorded_cells`). Returns the notebooks written."""
    import shutil

    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    from .gradebook import course_config, db_url, quiet_nbgrader

    config = course_config(Path(course))
    ignore = list(CourseDirectory(config=config).ignore) + ["*.ipynb"]
    exclude = dict(config.Autograde.get("exclude_overwriting", {}) or {})
    recorded: dict = {}
    written = []
    for o in outcomes:
        rep, item = o.report, o.item
        if (not item.own_folder or item.path.suffix != ".ipynb" or rep.get("error")
                or rep.get("refused") or not rep.get("assignment")):
            continue
        asg = rep["assignment"]
        if db is not None and asg not in recorded:
            with quiet_nbgrader(), Gradebook(db_url(db)) as gb:
                recorded[asg] = recorded_cells(gb, asg)
        dest = Path(course) / "autograded" / item.student / asg
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)  # as nbgrader replaces a hand-in's autograded folder
        dest.mkdir(parents=True, exist_ok=True)
        _copy_files(item.path.parent, dest, ignore)
        _copy_files(Path(course) / "source" / asg, dest, ignore,
                    skip={str(Path(course) / "source" / asg / x) for x in exclude.get(asg, [])})
        path = dest / item.path.name
        nbformat.write(autograded_notebook(item.path, rep, recorded.get(asg)), path)
        written.append(path)
    return written


def _copy_files(src: Path, dest: Path, ignore: list, skip=frozenset()) -> None:
    """The files under ``src`` that nbgrader's converters copy (its own ``find_all_files``
    with the ``ignore`` patterns) into ``dest``, as regular files; links are not followed."""
    import os
    import shutil

    if not src.is_dir():
        return
    for name in utils.find_all_files(str(src), ignore):
        if name in skip or os.path.islink(name) or not os.path.isfile(name):
            continue
        to = dest / os.path.relpath(name, src)
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(name, to)
