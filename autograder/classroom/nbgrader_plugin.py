"""nbgrader without trusting the student's kernel.

``nbgrader autograde`` normally executes the submitted notebook in a kernel on the instructor's
machine and reads each hidden test cell's points from what that kernel printed, so a student
cell that runs first can change them. :class:`GradeInSandbox` takes the place of nbgrader's
``Execute`` step in ``Autograde.autograde_preprocessors`` (:func:`configure` swaps it in):

1. the student's cells, up to the last hidden cell, run only inside the sandbox
   (:mod:`autograder.isolation`), in a copy of the student's folder, with the hidden cells
   blanked; their outputs are copied into the notebook for the feedback, and nothing they
   print is read for a grade;
2. the graded functions are graded like ``python -m autograder grade`` does it (programs
   exported in the sandbox, verdicts in a trusted process);
3. every hidden cell's outputs (the report and the points) are written here, by the trusted
   side. A hidden cell always gets an ``execute_result``: nbgrader would read an empty one as
   full marks.

The notebook is data, never a witness: whatever ``autograder_*`` metadata a hand-in carries
(the notebook's or a cell's) is dropped before anything reads it, every graded function of the
assignment is graded whether or not its hidden cell is still there, and a hidden cell the
student removed is put back (:func:`restore_hidden_cells`) with its function's grade and a line
saying so, as ``grade-all`` grades it: the two paths give one grade. What :class:`MarkRegrades`
and :class:`FailOnRegrade` read comes from this process (nbgrader's ``resources``), never from
the notebook.

``nbgrader autograde`` then says what happened: a hand-in with a function the grader failed on
fails nbgrader's step for it (:class:`FailOnRegrade`: exit status 1, graded again by the next
run), the judge's log of such a hand-in is kept under ``.autograder/logs/``, a cell stopped by
``cell_timeout`` is named in that student's feedback, and the command ends with one summary
block on stderr (:func:`summary`).
"""
from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import nbformat
from nbgrader import utils
from nbgrader.api import MissingEntry
from nbgrader.preprocessors import (
    ClearHiddenTests,
    DeduplicateIds,
    Execute,
    NbGraderPreprocessor,
    OverwriteCells,
)
from traitlets import Bool, Float, Integer

from ..core.records import Limits

#: a hidden test cell is ``grade_<function>``, as tools/build_notebooks.py names it
_GRADE_ID = re.compile(r"^grade_(\w+)$")
_MAX_NOTEBOOK = 32 << 20


def configure(c) -> None:
    """Use :class:`GradeInSandbox` instead of nbgrader's Execute when autograding,
    :class:`MarkRegrades` right after nbgrader saves the scores, :class:`FailOnRegrade` last,
    :class:`OverwriteReleasedCells` and :class:`NamedDuplicates` for the OverwriteCells and
    DeduplicateIds of nbgrader's sanitizing steps, and :class:`~.export.CourseCsvExport` for
    ``nbgrader export``."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import SaveAutoGrades

    traits = Autograde.class_traits()
    steps = list(traits["autograde_preprocessors"].default())
    sanitize = list(traits["sanitize_preprocessors"].default())
    if Execute not in steps or SaveAutoGrades not in steps or OverwriteCells not in sanitize:
        raise RuntimeError("this nbgrader version has no Execute, SaveAutoGrades or "
                           "OverwriteCells step; the course grader cannot plug in safely")
    out = []
    for s in steps:
        out.append(GradeInSandbox if s is Execute else s)
        if s is SaveAutoGrades:
            out.append(MarkRegrades)
    c.Autograde.autograde_preprocessors = out + [FailOnRegrade]
    mine = {OverwriteCells: OverwriteReleasedCells, DeduplicateIds: NamedDuplicates}
    c.Autograde.sanitize_preprocessors = [mine.get(s, s) for s in sanitize]
    # nbgrader export: a hand-in without a grade is left empty and flagged, never a plain 0.0
    from .export import CourseCsvExport

    c.ExportApp.plugin_class = CourseCsvExport
    # nbgrader's own update_or_create_submission (every hand-in it autogrades) makes SQLAlchemy
    # warn about nbgrader's code: noise with nothing for the instructor to do (gradebook.py)
    from .gradebook import ignore_nbgrader_autoflush

    ignore_nbgrader_autoflush()


def _released(source: str) -> str:
    """A locked cell's text as students received it: its hidden tests stripped, as
    ``nbgrader generate_assignment`` strips them (nbgrader's own ClearHiddenTests)."""
    cell = nbformat.v4.new_code_cell(source)
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


class OverwriteReleasedCells(OverwriteCells):
    """nbgrader's OverwriteCells, without its false alarm on hidden tests.

    nbgrader keeps a locked cell's *source* (hidden tests included) and compares its checksum
    with the handed-in cell, which was released without them: every untouched hidden-test cell
    then reads "Attribute 'checksum' ... has changed!", the warning meant for a student who
    edited a locked cell. Here a locked cell handed in exactly as released gets its source back
    first, so the warning stays for cells that really changed (which nbgrader then restores, as
    always).

    First, the notebook's nbgrader cells are made the gradebook's (:func:`keep_recorded_cells`):
    a hand-in of the release before a problem was removed keeps that problem's cells, which
    nbgrader would half-strip here and then fail on (``MissingEntry`` in SaveAutoGrades, and
    in ``generate_feedback`` after it)."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        from .gradebook import quiet_nbgrader

        info = resources["nbgrader"]
        with quiet_nbgrader(), Gradebook(info["db_url"]) as gb:
            recorded = recorded_cells(gb, info["assignment"], info["notebook"])
        if recorded is not None:
            gone = keep_recorded_cells(nb, recorded)
            if gone:
                self.log.warning("cell(s) the gradebook does not record (a problem removed "
                                 "from the course?), no longer graded: %s", ", ".join(gone))
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, cell_index):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                src = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                      self.assignment_id)
            except MissingEntry:
                src = None
            if src is not None and src.locked and cell.source != src.source \
                    and cell.source == _released(src.source):
                cell.source = src.source
        return super().preprocess_cell(cell, resources, cell_index)


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


class DuplicateCells(ValueError):
    """A hand-in whose notebook has two cells of one nbgrader name."""


class NamedDuplicates(DeduplicateIds):
    """nbgrader's DeduplicateIds, saying what is wrong.

    nbgrader empties the metadata of every cell but the last of one name, and its metadata
    check then reads the emptied cell as "an old version of the nbgrader metadata format" and
    stops the whole run. Here the hand-in fails alone (nbgrader goes on with the others), and
    the log names the cell: "this hand-in's notebook has two cells named grade_roll_diff"."""

    def preprocess(self, nb, resources):
        seen: dict[str, int] = {}
        for cell in nb.cells:
            if utils.is_grade(cell) or utils.is_solution(cell) or utils.is_locked(cell):
                gid = cell.metadata["nbgrader"].get("grade_id")
                seen[gid] = seen.get(gid, 0) + 1
        twice = {gid: n for gid, n in seen.items() if n > 1}
        if twice:
            count = {2: "two", 3: "three"}
            names = "; ".join(f"{count.get(n, n)} cells named {gid}"
                              for gid, n in twice.items())
            msg = (f"this hand-in's notebook has {names}: keep the one the assignment released "
                   "(delete the other copy from the hand-in's notebook) and autograde this "
                   "student again")
            self.log.error(msg)
            raise DuplicateCells(msg)
        return super().preprocess(nb, resources)


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


#: where ``nbgrader autograde`` keeps the judge's log of a hand-in that needs a regrade,
#: relative to the course folder (beside the course's seed)
LOGS = Path(".autograder") / "logs"

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


@dataclass
class AutogradeOutcome:
    """What ``nbgrader autograde`` did with one hand-in, for the end-of-run summary."""

    student: str
    assignment: str
    #: the functions the grader failed on (the grader's fault: graded again next run)
    regrade: tuple = ()
    #: why the hand-in was refused before grading (its own fault), or ""
    refused: str = ""
    #: the grader's own error on the whole hand-in, or ""
    error: str = ""
    #: the notebook's cell (1-based) that the cell limit stopped in the run for the feedback
    stopped_cell: Optional[int] = None
    #: the judge's log kept for a hand-in that needs a regrade
    log: Optional[Path] = None


def without_notebook(root: Path, assignments, students: str = "*") -> list[tuple[str, str, str]]:
    """(student, assignment, file) of each hand-in folder ``submitted/<student>/<assignment>/``
    (``students``: nbgrader's ``--student`` pattern) that holds no notebook but a file handed in
    in its place (a ``.py``): nbgrader autograde skips such a folder with a warning and makes no
    submission of it; grade-all refuses it (batch.py). Both list it for a look."""
    import fnmatch

    out = []
    for asg in sorted(set(assignments)):
        for folder in sorted(Path(root).glob(f"submitted/*/{asg}")):
            student = folder.parent.name
            if not fnmatch.fnmatch(student, students or "*") or not folder.is_dir():
                continue
            names = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
            if any(n.endswith(".ipynb") for n in names):
                continue
            handed = [n for n in names if n.endswith(".py")]
            if handed:
                out.append((student, asg, handed[0]))
    return out


def summary(handins: list, cell_timeout: float, skipped=()) -> str:
    """One short block: how many hand-ins were graded, refused, need a regrade, had a cell
    stopped by the cell limit; each one that needs a look, and what to do. ``skipped``:
    :func:`without_notebook`'s hand-ins, which nbgrader did not grade."""
    refused = [h for h in handins if h.refused]
    failed = [h for h in handins if h.error and not h.refused]
    regrade = [h for h in handins if h.regrade and not h.error and not h.refused]
    stopped = [h for h in handins if h.stopped_cell is not None]
    graded = len(handins) - len(refused) - len(failed) - len(regrade)
    lines = [f"course grader: {len(handins)} hand-in(s) in this run: {graded} graded, "
             f"{len(refused)} refused, {len(regrade) + len(failed)} need a regrade, "
             f"{len(stopped)} with a cell stopped by cell_timeout ({cell_timeout:g} s)"]
    for h in refused:
        lines.append(f"  refused: {h.student}/{h.assignment}: {h.refused} (the hand-in's "
                     "fault: fix it, then run the same command again)")
    for h in regrade:
        lines.append(f"  needs regrade: {h.student}/{h.assignment}: {', '.join(h.regrade)} "
                     "(the grader failed, not the student)"
                     + (f"; the grader's log: {h.log}" if h.log else ""))
    for h in failed:
        lines.append(f"  needs regrade: {h.student}/{h.assignment}: not graded ({h.error})")
    for student, asg, name in skipped:
        lines.append(f"  not graded: {student}/{asg}: holds {name}, not the notebook "
                     f"{asg}.ipynb: nbgrader grades the notebook only (no submission made; "
                     "grade-all refuses it too): ask for the notebook")
    for h in stopped:
        lines.append(f"  cell stopped: {h.student}/{h.assignment}: cell {h.stopped_cell} ran "
                     f"past {cell_timeout:g} s in the run for the feedback (its feedback says "
                     "so; the grade does not depend on it)")
    if refused or regrade or failed:
        lines.append("  exit 1: run the same command again; it grades again the hand-ins above "
                     "and skips the rest (--force grades every hand-in again)")
    return "\n".join(lines)


class _Run:
    """The hand-ins of this process's ``nbgrader autograde``; the command line's run prints
    their :func:`summary` to stderr when it ends (after nbgrader's own last lines)."""

    def __init__(self):
        import threading

        self._lock = threading.Lock()
        self._handins: list = []
        self._timeout = 0.0
        self._registered = False
        self._course: Optional[tuple] = None  # (root, student pattern) of this run

    def add(self, handin: AutogradeOutcome, step: "GradeInSandbox") -> None:
        if not _command_line():  # nbgrader's API: its caller reads the warnings in the log
            return
        with self._lock:
            self._handins.append(handin)
            self._timeout = step.cell_timeout
            if self._course is None:
                from nbgrader.coursedir import CourseDirectory

                cd = CourseDirectory(config=step.config)
                self._course = (Path(cd.root), cd.student_id)
            if not self._registered:
                import atexit

                atexit.register(self.print_summary)
                self._registered = True

    def take(self) -> tuple:
        """The hand-ins so far (and the cell limit), forgotten here."""
        with self._lock:
            out, self._handins = self._handins, []
            return out, self._timeout

    def print_summary(self) -> None:
        import sys

        handins, timeout = self.take()
        if handins:
            skipped = ()
            if self._course is not None:
                root, students = self._course
                skipped = without_notebook(root, {h.assignment for h in handins}, students)
            print("\n" + summary(handins, timeout, skipped), file=sys.stderr, flush=True)


def _command_line() -> bool:
    """Whether this process runs ``nbgrader autograde`` from the command line (not nbgrader's
    Python API, whose caller reads the log, or formgrader)."""
    try:
        from nbgrader.apps import AutogradeApp
    except ImportError:  # pragma: no cover
        return False
    return AutogradeApp.initialized()


#: this process's autograde run
RUN = _Run()


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


#: the autograded notebook's metadata key holding the grader's report (SubmissionResult.to_dict)
REPORT_KEY = "autograder_report"
#: the key of nbgrader's ``resources`` under which GradeInSandbox hands MarkRegrades the
#: grader's report (this process's own, never read from the notebook)
RESOURCES_KEY = "autograder_report"


class GradeInSandbox(NbGraderPreprocessor):
    """Run the submission in the sandbox and write every hidden cell's points from the grader."""

    isolation = Bool(True, help="Run student code in the sandbox; False grades without "
                     "isolation (the feedback then says so).").tag(config=True)
    run_student_cells = Bool(True, help="Execute the student's cells (in the sandbox) so the "
                             "feedback shows their outputs.").tag(config=True)
    cell_timeout = Integer(150, help="Seconds per student cell in the notebook run that fills "
                           "the feedback (which runs the cells up to the last graded one, and "
                           "is stopped when a function hangs while graded). A cell past it "
                           "ends the run; its feedback says so and the summary counts it."
                           ).tag(config=True)
    notebook_timeout = Float(1200.0, help="Seconds for the whole notebook run.").tag(config=True)
    seed = Integer(None, allow_none=True, help="The secret seed every hand-in's inputs are "
                   "drawn from; None: the course folder's own (drawn once, kept in "
                   ".autograder/seed), which `grade-all` on this folder uses too.").tag(config=True)
    quick = Bool(False, help="Fewer meshes and cases (as grade --quick).").tag(config=True)
    with_speed = Bool(True, help="Run the speed check.").tag(config=True)
    function_timeout = Float(Limits.per_function_s,
                             help="Seconds per graded function.").tag(config=True)
    load_timeout = Float(Limits.load_s, help="Seconds to load one hand-in.").tag(config=True)
    memory_mb = Integer(Limits.memory_mb,
                        help="Resident memory of the trusted grader.").tag(config=True)

    def options(self, assignment: str, only: list):
        """The grading options of one hand-in: this step's configuration, the course's seed."""
        from nbgrader.coursedir import CourseDirectory

        from ..supervisor.options import Limits, Options
        from .seed import course_seed

        seed = self.seed
        if seed is None:
            seed = course_seed(Path(CourseDirectory(config=self.config).root))
        limits = Limits(per_function_s=self.function_timeout, load_s=self.load_timeout,
                        memory_mb=self.memory_mb)
        return Options(assignment=assignment, only=only, isolation=self.isolation,
                       folder=True, quick=self.quick, seed=seed, with_speed=self.with_speed,
                       limits=limits)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        handin = AutogradeOutcome(str(info.get("student", "")), str(info.get("assignment", "")))
        try:
            nb, resources = self._grade(nb, resources, handin)
        except Exception as e:
            from ..supervisor.handin import FolderRefused

            if isinstance(e, FolderRefused):
                handin.refused = str(e)
            else:
                handin.error = f"{type(e).__name__}: {e}"
            RUN.add(handin, self)
            raise
        RUN.add(handin, self)
        return nb, resources

    def _grade(self, nb, resources, handin: "AutogradeOutcome"):
        from ..course import registry
        from ..supervisor.supervise import copy_student_folder, grade_submission

        assignment = resources.get("nbgrader", {}).get("assignment")
        name = resources.get("nbgrader", {}).get("notebook", "submission")
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        resources.pop(RESOURCES_KEY, None)
        dropped = strip_own_metadata(nb)
        if dropped:
            self.log.warning("the hand-in carried the grader's metadata, dropped: %s",
                             ", ".join(dropped))
        restored = restore_hidden_cells(nb, assignment)
        if restored:
            self.log.warning("hidden cell(s) removed from the hand-in, put back and graded: %s",
                             ", ".join(restored))
        note_changed_checks(nb)
        graded = graded_cells(nb)
        runnable = nbformat.from_dict(nb)
        for i in graded:
            runnable.cells[i].source = ""
            runnable.cells[i].outputs = []
        # the feedback run ends with the last graded cell: what comes after decides nothing
        until = max(graded) + 1 if graded else None
        # every function of the assignment, whatever cells the notebook has (as grade-all)
        known = ([p.name for p in registry.problems(assignment)]
                 if assignment in registry.assignments() else [])
        only = sorted(known)
        opts = self.options(assignment, only) if only else None
        handin.log = self.kept_log(handin)
        with tempfile.TemporaryDirectory(prefix="autograde-nb-") as tmp:
            work = Path(tmp) / (assignment or "submission")
            # a folder past a cap (entries, depth, listing time) stops here, with the reason,
            # as nbgrader stops on a hand-in it refuses
            copy_student_folder(folder, work, limits=opts.limits if opts else None)
            path = work / f"{name}.ipynb"
            nbformat.write(runnable, path)
            # the notebook runs for the feedback while the functions are graded (two
            # processes, side by side); a function that hung while graded stops that run
            run = (_Background(lambda p, started: self._execute(p, started, until), path)
                   if self.run_student_cells else None)
            res = None
            try:
                if opts is not None:
                    res = grade_submission(path, opts, keep_log=handin.log)
            except BaseException:
                if run is not None:
                    run.cancel()
                raise
            hung = hung_functions(res)
            if run is not None and hung:
                run.cancel()
                self.log.warning("student cells not run: %s ran past a time limit while graded",
                                 ", ".join(hung))
            elif run is not None:
                executed = run.result()
                if isinstance(executed, str):
                    self.log.warning("student cells not run: %s", executed)
                else:
                    executed, stopped = executed
                    fill_student_cells(nb, executed, graded, until=until, stopped=stopped,
                                       cell_timeout=self.cell_timeout)
                    if stopped is not None:
                        handin.stopped_cell = stopped + 1
                        self.log.warning("%s/%s: cell %d was stopped after %g s "
                                         "(GradeInSandbox.cell_timeout); the cells below it "
                                         "were not run for the feedback", handin.student,
                                         handin.assignment, stopped + 1, self.cell_timeout)
        notes = list(res.notes) if res is not None else []
        if run is not None and hung:
            notes.append(f"the notebook's own cells were not run for this feedback: "
                         f"{', '.join(hung)} ran past a time limit while graded")
        fill_hidden_cells(nb, res.functions if res is not None else {}, notes,
                          missing="not a graded function of this assignment",
                          restored=tuple(restored))
        if res is not None:  # the whole verdict, for a class report over autograded notebooks
            nb.metadata[REPORT_KEY] = res.to_dict()
            resources[RESOURCES_KEY] = res.to_dict()
            handin.regrade = tuple(res.regrade)
        if handin.log is not None and not handin.log.exists():
            handin.log = None
        return nb, resources

    def kept_log(self, handin: "AutogradeOutcome") -> Optional[Path]:
        """Where the judge's log of a hand-in that needs a regrade is kept: under the course
        folder's ``.autograder/logs/`` (a stale one from an earlier run is removed first)."""
        from nbgrader.coursedir import CourseDirectory

        from .names import _slug

        if not handin.student:  # not nbgrader's autograde: nobody would look for it
            return None
        logs = Path(CourseDirectory(config=self.config).root) / LOGS
        path = logs / f"{_slug(handin.student)}-{_slug(handin.assignment)}.grader.log"
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError:
            return None
        return path

    def _execute(self, path: Path, started=lambda box: None, until: Optional[int] = None):
        """The executed notebook and the index of the cell the cell limit stopped (or None),
        or why there is none. ``started`` is told the sandbox, which the caller may kill to
        stop the run; only the cells before ``until`` are run."""
        from ..core.clock import ShareClock
        from ..core.records import ExecutedNotebook, RecordError, parse
        from ..isolation.sandbox import SandboxLimits
        from ..judge.channel import WorkerLink, WorkerStopped, spawn_untrusted

        limits = SandboxLimits()
        argv = ["--execute", "--cell-timeout", str(self.cell_timeout)]
        if until is not None:
            argv += ["--until", str(until)]
        box = spawn_untrusted(path, argv, isolated=self.isolation, whole_folder=True,
                              limits=limits)
        started(box)
        try:
            link = WorkerLink(box, limits.memory_mb, max_line=_MAX_NOTEBOOK,
                              max_unread=_MAX_NOTEBOOK)
            link.close()  # it is told nothing: its stdin closes at once
            try:
                # the sandbox's own clock: a classmate's busy sandbox stretches none of it
                clock = ShareClock(box.cpu_reading)
                line = next(link.lines(clock.deadline(self.notebook_timeout)))
            except WorkerStopped as e:
                why = "it ran too long" if e.phase[0] == "timeout" else e.why
                return f"the notebook did not finish: {why}"
            try:
                rec = parse(line, allowed=(ExecutedNotebook,))
                executed = nbformat.reads(rec.text, as_version=4)
            except (RecordError, Exception) as e:  # noqa: BLE001
                return f"the executed notebook could not be read ({type(e).__name__})"
            if len(executed.cells) != len(nbformat.read(path, as_version=4).cells):
                return "the executed notebook does not match the submission"
            stopped = rec.stopped_cell
            if stopped is not None and not 0 <= stopped < (len(executed.cells) if until is None
                                                            else until):
                stopped = None  # the worker's word only places a line in this feedback
            return executed, stopped
        finally:
            box.kill()


class _Background:
    """``execute(path, started=...)`` in a thread; ``cancel`` kills the sandbox it started,
    ``result`` waits for it."""

    def __init__(self, execute, path: Path):
        import threading

        self._box = None
        self._lock = threading.Lock()
        self._cancelled = False
        self._out = None
        self._thread = threading.Thread(target=self._run, args=(execute, path), daemon=True)
        self._thread.start()

    def _started(self, box) -> None:
        with self._lock:
            self._box = box
            if self._cancelled:
                box.kill()

    def _run(self, execute, path) -> None:
        try:
            self._out = execute(path, started=self._started)
        except Exception as e:  # noqa: BLE001 - the feedback run failing is not a grade
            self._out = f"the notebook run failed: {type(e).__name__}: {e}"

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._box is not None:
                self._box.kill()
        self._thread.join()

    def result(self):
        self._thread.join()
        return self._out


class MarkRegrades(NbGraderPreprocessor):
    """After nbgrader saved the hidden cells' scores: a function the grader itself failed on
    (``needs_regrade`` in the grader's report) gets no auto-score and is marked for a look, so
    formgrader shows it ungraded, never as the student's zero. A later ``nbgrader autograde``
    (or ``grade-all --gradebook``) grades it."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        from .gradebook import cell_of, quiet_nbgrader

        regrade = _regrade_of(resources)
        if not regrade:
            return nb, resources
        info = resources["nbgrader"]
        with quiet_nbgrader(), Gradebook(info["db_url"]) as gb:
            for fn in regrade:
                grade = gb.find_grade(cell_of(fn), info["notebook"], info["assignment"],
                                      info["student"])
                grade.auto_score = None
                grade.needs_manual_grade = True
            gb.db.commit()
        self.log.warning("%s: %s need(s) a regrade (the grader failed, not the student)",
                         info["student"], ", ".join(regrade))
        return nb, resources


def _regrade_of(resources) -> list:
    """The functions the grader failed on, from GradeInSandbox's report in ``resources``
    (this process's own, never the notebook's)."""
    report = resources.get(RESOURCES_KEY) or {}
    return [n for n, f in (report.get("functions") or {}).items() if f.get("needs_regrade")]


class NeedsRegrade(Exception):
    """A hand-in the grader failed on (its fault, not the student's): nbgrader's own failure
    for that hand-in."""


class FailOnRegrade(NbGraderPreprocessor):
    """The last step: a hand-in with a function that needs a regrade fails, the way nbgrader
    fails a hand-in it could not process. The gradebook keeps what the steps before wrote (the
    other functions' scores, late penalties, the regrade marked by :class:`MarkRegrades`);
    nbgrader then removes the hand-in's autograded copy (``generate_feedback`` sends no
    feedback with a missing grade), ends with exit status 1, and its next run grades that
    hand-in again without ``--force``, as it grades any hand-in not yet autograded."""

    def preprocess(self, nb, resources):
        regrade = _regrade_of(resources)
        if regrade:
            info = resources.get("nbgrader", {})
            raise NeedsRegrade(
                f"{info.get('student')}/{info.get('assignment')}: {', '.join(regrade)} "
                "need(s) a regrade (the grader failed, not the student): run `nbgrader "
                f"autograde {info.get('assignment')}` again, which grades this hand-in again")
        return nb, resources


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
