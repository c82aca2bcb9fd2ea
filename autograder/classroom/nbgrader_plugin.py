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

This module holds the steps nbgrader loads (``nbgrader_config.py`` names it) and is the plugin's
surface; the work on a hand-in's cells is :mod:`.handin_notebook`, the end-of-run summary
:mod:`.autograde_summary`, the notebooks made from grade-all's reports :mod:`.autograded`.
"""
from __future__ import annotations

import tempfile
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
from .autograde_summary import RUN, AutogradeOutcome, summary, without_notebook
from .autograded import REPORT_KEY, autograded_notebook, write_autograded
from .handin_notebook import (FEEDBACK_WIDTH, fill_hidden_cells, fill_student_cells,
                              graded_cells, hung_functions, keep_recorded_cells,
                              note_changed_checks, recorded_cells, restore_hidden_cells,
                              strip_own_metadata, wrap_report)

__all__ = ["FEEDBACK_WIDTH", "LOGS", "REPORT_KEY", "RESOURCES_KEY", "RUN", "AutogradeOutcome",
           "DuplicateCells", "FailOnRegrade", "GradeInSandbox", "MarkRegrades",
           "NamedDuplicates", "NeedsRegrade", "OverwriteReleasedCells", "autograded_notebook",
           "configure", "fill_hidden_cells", "fill_student_cells", "graded_cells",
           "hung_functions", "keep_recorded_cells", "note_changed_checks", "recorded_cells",
           "restore_hidden_cells", "strip_own_metadata", "summary", "without_notebook",
           "wrap_report", "write_autograded"]

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


#: where ``nbgrader autograde`` keeps the judge's log of a hand-in that needs a regrade,
#: relative to the course folder (beside the course's seed)
LOGS = Path(".autograder") / "logs"

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
