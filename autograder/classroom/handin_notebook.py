"""A hand-in notebook's cells as the grader leaves them: its planted ``autograder*`` metadata
dropped, its hidden cells found, put back and filled with reports and points, the student's cells
given the feedback run's outputs, and its nbgrader cells made the gradebook's."""
from __future__ import annotations

import re
from typing import Optional

import nbformat
from nbgrader import utils
from nbgrader.api import MissingEntry

#: a hidden test cell is ``grade_<function>``, as tools/build_notebooks.py names it
_GRADE_ID = re.compile(r"^grade_(\w+)$")


def graded_cells(nb) -> dict[int, str]:
    """Index of each hidden test cell -> the graded function it stands for."""
    out = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and utils.is_grade(cell):
            m = _GRADE_ID.match(cell.metadata["nbgrader"].get("grade_id", ""))
            out[i] = m.group(1) if m else ""
    return out


#: the prefix of every metadata key the grader writes into a notebook
OWN_METADATA = "autograder"


def strip_own_metadata(nb) -> list[str]:
    """Drop every ``autograder*`` metadata key of ``nb`` and of its cells (what a hand-in
    carries there was planted: only the grader writes such keys, after grading); the keys
    dropped, for the log."""
    dropped = []
    for where, meta in [("notebook", nb.metadata)] + [
            (f"cell {i + 1}", c.get("metadata", {})) for i, c in enumerate(nb.cells)]:
        for k in [k for k in meta if str(k).startswith(OWN_METADATA)]:
            del meta[k]
            dropped.append(f"{where}: {k}")
    return dropped


#: how the notebook's "what the grader checks" cell of a function begins (course/bars.py)
_CHECKS_HEAD = re.compile(r"\*\*What the grader checks for `(\w+)`\*\*")


def note_changed_checks(nb) -> list[str]:
    """Where a function's "What the grader checks" cell in the hand-in says other than the
    grader that graded it (a limit changed after the hand-out), that cell now shows the
    grader's checks and says so, with the hand-out's text below it: the feedback page never
    sets the old limit beside the new one without a word. The functions whose cell changed."""
    from ..course import bars, registry

    changed, graded = [], {p.name for p in registry.problems()}
    for cell in nb.cells:
        m = _CHECKS_HEAD.match(cell.get("source", "")) if cell.cell_type == "markdown" else None
        if m is None or m.group(1) not in graded:
            continue
        now = bars.bar(registry.get(m.group(1))).markdown()
        if cell.source.strip() == now.strip():
            continue
        old = "\n".join(f"> {line}" for line in cell.source.strip().splitlines())
        cell.source = (f"{now}\n\n*Changed since this notebook was handed out: the checks "
                       f"above are the ones this hand-in was graded with. The hand-out said:*"
                       f"\n\n{old}")
        changed.append(m.group(1))
    return changed


def restore_hidden_cells(nb, assignment: str | None) -> list[str]:
    """Put back the hidden cell (``grade_<function>``) of every graded function of
    ``assignment`` that the hand-in no longer has, after its ``check_``/``solution_`` cell (or
    at the end), so that its grade reaches nbgrader's gradebook as ``grade-all`` writes it
    there; the functions whose cell was put back."""
    from ..course import registry

    if not assignment or assignment not in registry.assignments():
        return []
    have = set(graded_cells(nb).values())
    ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): i
           for i, c in enumerate(nb.cells)}
    restored = []
    for prob in registry.problems(assignment):
        if prob.name in have:
            continue
        cell = nbformat.v4.new_code_cell(
            f"# The course autograder grades `{prob.name}` here (this hidden cell was removed "
            "from the notebook and put back by the grader).")
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": f"grade_{prob.name}",
                                     "locked": True, "points": float(prob.points),
                                     "schema_version": 3, "solution": False}
        at = ids.get(f"check_{prob.name}", ids.get(f"solution_{prob.name}"))
        if at is None:
            nb.cells.append(cell)
        else:
            nb.cells.insert(at + 1, cell)
        ids = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): i
               for i, c in enumerate(nb.cells)}
        restored.append(prob.name)
    return restored


#: what a put-back hidden cell says above its function's report
RESTORED = ("the hidden cell of {fn} was removed from the notebook; the grader put it back and "
            "graded {fn} from your code, as it grades every function of the assignment")


def hung_functions(res) -> list[str]:
    """The graded functions of ``res`` (a SubmissionResult, or None) that ran past a time
    limit while graded: running the notebook's cells would only wait for them again."""
    if res is None:
        return []
    return sorted(n for n, r in res.functions.items()
                  if any("time limit" in (c.message or "") for c in r.checks))


#: the width feedback lines are wrapped at (nbgrader's feedback shows outputs unwrapped)
FEEDBACK_WIDTH = 96


def wrap_report(report: str, width: int = FEEDBACK_WIDTH) -> str:
    """``report`` with each long line wrapped, its continuation indented under its start."""
    import textwrap

    out = []
    for line in report.splitlines():
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out.append(textwrap.fill(line, width, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False) if len(line) > width else line)
    return "\n".join(out)


#: what the feedback says in a cell that the cell limit stopped
STOPPED = ("[grader] this cell was stopped after {s:g} s, the limit for one cell when the grader "
           "runs your notebook for this feedback; the cells below it were not run and show the "
           "outputs they were handed in with. Your grade does not depend on it: your graded "
           "functions were graded apart, from your code. Make the cell finish sooner (a smaller "
           "size, fewer steps) to see its output here.")
#: what the feedback says in the first code cell after the last graded cell
NOT_RUN = ("[grader] this cell and the ones below it were not run for this feedback (they come "
           "after the last graded cell and decide nothing); they show the outputs they were "
           "handed in with.")


def _grader_line(text: str):
    return nbformat.v4.new_output("stream", name="stderr", text=wrap_report(text) + "\n")


def fill_student_cells(nb, executed, graded, *, until: Optional[int], stopped: Optional[int],
                       cell_timeout: float) -> None:
    """The student's code cells of ``nb`` get their outputs from ``executed`` (the run for the
    feedback, which ran the cells before ``until`` and stopped at cell ``stopped`` if the cell
    limit ended it); a cell that did not run keeps the outputs it was handed in with, the
    stopped cell says so, and so does the first code cell after ``until``."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or i in graded:
            continue
        if (until is not None and i >= until) or (stopped is not None and i > stopped):
            continue  # not run: as handed in
        cell.outputs = executed.cells[i].get("outputs", [])
        cell.execution_count = executed.cells[i].get("execution_count")
    if stopped is not None:
        nb.cells[stopped].outputs.append(_grader_line(STOPPED.format(s=cell_timeout)))
    elif until is not None:
        after = next((c for c in nb.cells[until:] if c.cell_type == "code" and c.source.strip()
                      and not utils.is_grade(c)), None)
        if after is not None:
            after.outputs = [_grader_line(NOT_RUN)] + list(after.get("outputs", []))


def _points(value: float, report: str) -> list:
    report = wrap_report(report)
    return [nbformat.v4.new_output("stream", name="stdout", text=report + "\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{value:g}"},
                                   execution_count=None)]


def fill_hidden_cells(nb, functions: dict, notes: list, *, missing: str,
                      restored: tuple = ()) -> None:
    """Every hidden cell of ``nb`` gets its function's report (the ``notes`` first) and points
    from ``functions`` (name -> FunctionResult); a cell with no result gets 0 points and
    ``missing`` as its reason; a cell put back (its function in ``restored``) says so first. A
    hidden cell always gets an execute_result: nbgrader would read an empty one as full
    marks."""
    lines = [f"note: {n}" for n in notes]
    for i, fn in graded_cells(nb).items():
        cell = nb.cells[i]
        r = functions.get(fn)
        first = [f"note: {RESTORED.format(fn=fn)}"] if fn in restored else []
        if r is None:
            cell.outputs = _points(0.0, "\n".join(first + [
                f"{fn or cell.metadata['nbgrader']['grade_id']}: {missing} (0 points)"]))
        else:
            cell.outputs = _points(r.score, "\n".join(first + lines + [r.report()]))


def recorded_cells(gb, assignment: str, notebook: Optional[str] = None) -> Optional[dict]:
    """The cells the gradebook ``gb`` records for ``notebook`` (default: the assignment's own)
    of ``assignment``: kind (``grade``, ``solution``, ``task``) -> their names; None when it
    records no such notebook."""
    try:
        nb = gb.find_notebook(notebook or assignment, assignment)
    except MissingEntry:
        return None
    return {kind: {c.name for c in getattr(nb, f"{kind}_cells")}
            for kind in ("grade", "solution", "task")}


def keep_recorded_cells(nb, recorded: dict) -> list[str]:
    """Make the nbgrader cells of ``nb`` the gradebook's (``recorded``, :func:`recorded_cells`):
    a hidden test cell the gradebook does not grade (a problem removed mid-term, handed in with
    the release before the change) is dropped; a solution or task cell it does not record loses
    that role, and a cell left with no role loses its nbgrader metadata (the student's code
    stays, as a plain cell). nbgrader's later steps (``generate_feedback``'s grades and
    comments, ``autograde``'s SaveAutoGrades) look each graded cell up in the gradebook and
    fail on one it does not have. Returns the cells' names dropped or demoted, for the log."""
    out, keep = [], []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        name = (meta or {}).get("grade_id")
        if not meta or name is None:
            keep.append(cell)
            continue
        stale = [kind for kind in ("grade", "solution", "task")
                 if meta.get(kind) and name not in recorded.get(kind, ())]
        if not stale:
            keep.append(cell)
            continue
        out.append(name)
        if stale == ["grade"] and not meta.get("solution") and not meta.get("task"):
            continue  # a hidden test cell of a problem no longer graded: nothing of the student's
        for kind in stale:
            meta[kind] = False
        if not any(meta.get(k) for k in ("grade", "solution", "task")):
            del cell.metadata["nbgrader"]
        keep.append(cell)
    nb.cells = keep
    return out
