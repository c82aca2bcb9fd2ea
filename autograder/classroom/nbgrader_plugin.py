"""nbgrader without trusting the student's kernel.

``nbgrader autograde`` normally executes the submitted notebook in a kernel on the instructor's
machine and reads each hidden test cell's points from what that kernel printed, so a student
cell that runs first can change them. :class:`GradeInSandbox` takes the place of nbgrader's
``Execute`` step in ``Autograde.autograde_preprocessors`` (:func:`configure` swaps it in):

1. the student's cells run only inside the sandbox (:mod:`autograder.isolation`), in a copy of
   the student's folder, with the hidden cells blanked; their outputs are copied into the
   notebook for the feedback, and nothing they print is read for a grade;
2. the graded functions are graded like ``python -m autograder grade`` does it (programs
   exported in the sandbox, verdicts in a trusted process);
3. every hidden cell's outputs (the report and the points) are written here, by the trusted
   side. A hidden cell always gets an ``execute_result``: nbgrader would read an empty one as
   full marks.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Float, Integer

#: a hidden test cell is ``grade_<function>``, as tools/build_notebooks.py names it
_GRADE_ID = re.compile(r"^grade_(\w+)$")
_MAX_NOTEBOOK = 32 << 20


def configure(c) -> None:
    """Use :class:`GradeInSandbox` instead of nbgrader's Execute when autograding, and
    :class:`MarkRegrades` right after nbgrader saves the scores."""
    from nbgrader.converters.autograde import Autograde
    from nbgrader.preprocessors import SaveAutoGrades

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    if Execute not in steps or SaveAutoGrades not in steps:
        raise RuntimeError("this nbgrader version has no Execute or SaveAutoGrades step; the "
                           "course grader cannot plug in safely")
    out = []
    for s in steps:
        out.append(GradeInSandbox if s is Execute else s)
        if s is SaveAutoGrades:
            out.append(MarkRegrades)
    c.Autograde.autograde_preprocessors = out


def graded_cells(nb) -> dict[int, str]:
    """Index of each hidden test cell -> the graded function it stands for."""
    out = {}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and utils.is_grade(cell):
            m = _GRADE_ID.match(cell.metadata["nbgrader"].get("grade_id", ""))
            out[i] = m.group(1) if m else ""
    return out


def _points(value: float, report: str) -> list:
    return [nbformat.v4.new_output("stream", name="stdout", text=report + "\n"),
            nbformat.v4.new_output("execute_result", data={"text/plain": f"{value:g}"},
                                   execution_count=None)]


#: the autograded notebook's metadata key holding the grader's report (SubmissionResult.to_dict)
REPORT_KEY = "autograder_report"


class GradeInSandbox(NbGraderPreprocessor):
    """Run the submission in the sandbox and write every hidden cell's points from the grader."""

    isolation = Bool(True, help="Run student code in the sandbox; False grades without "
                     "isolation (the feedback then says so).").tag(config=True)
    run_student_cells = Bool(True, help="Execute the student's cells (in the sandbox) so the "
                             "feedback shows their outputs.").tag(config=True)
    cell_timeout = Integer(300, help="Seconds per student cell.").tag(config=True)
    notebook_timeout = Float(1200.0, help="Seconds for the whole notebook run.").tag(config=True)

    def preprocess(self, nb, resources):
        from ..course import registry
        from ..supervisor.options import Options
        from ..supervisor.supervise import copy_student_folder, grade_submission

        assignment = resources.get("nbgrader", {}).get("assignment")
        name = resources.get("nbgrader", {}).get("notebook", "submission")
        folder = Path(resources.get("metadata", {}).get("path") or ".")
        graded = graded_cells(nb)
        runnable = nbformat.from_dict(nb)
        for i in graded:
            runnable.cells[i].source = ""
            runnable.cells[i].outputs = []
        with tempfile.TemporaryDirectory(prefix="autograde-nb-") as tmp:
            work = Path(tmp) / (assignment or "submission")
            copy_student_folder(folder, work)
            path = work / f"{name}.ipynb"
            nbformat.write(runnable, path)
            if self.run_student_cells:
                executed = self._execute(path)
                if isinstance(executed, str):
                    self.log.warning("student cells not run: %s", executed)
                else:
                    for i, cell in enumerate(nb.cells):
                        if cell.cell_type == "code" and i not in graded:
                            cell.outputs = executed.cells[i].get("outputs", [])
                            cell.execution_count = executed.cells[i].get("execution_count")
            known = {p.name for p in registry.problems(assignment)} if assignment else set()
            only = sorted({f for f in graded.values() if f in known})
            res = None
            if only:
                res = grade_submission(path, Options(assignment=assignment, only=only,
                                                     isolation=self.isolation, folder=True))
        for i, fn in graded.items():
            cell = nb.cells[i]
            if res is None or fn not in res.functions:
                cell.outputs = _points(0.0, f"{fn or cell.metadata['nbgrader']['grade_id']}: "
                                       "not a graded function of this assignment (0 points)")
                continue
            r = res.functions[fn]
            lines = [f"note: {n}" for n in res.notes] + [r.report()]
            cell.outputs = _points(r.score, "\n".join(lines))
        if res is not None:  # the whole verdict, for a class report over autograded notebooks
            nb.metadata[REPORT_KEY] = res.to_dict()
        return nb, resources

    def _execute(self, path: Path):
        """The executed notebook, or why there is none."""
        from ..core.clock import CLOCK
        from ..core.records import ExecutedNotebook, RecordError, parse
        from ..isolation.sandbox import SandboxLimits
        from ..judge.channel import WorkerLink, WorkerStopped, spawn_untrusted

        limits = SandboxLimits()
        box = spawn_untrusted(path, ["--execute", "--cell-timeout", str(self.cell_timeout)],
                              isolated=self.isolation, whole_folder=True, limits=limits)
        try:
            link = WorkerLink(box, limits.memory_mb, max_line=_MAX_NOTEBOOK,
                              max_unread=_MAX_NOTEBOOK)
            link.close()  # it is told nothing: its stdin closes at once
            try:
                line = next(link.lines(CLOCK.deadline(self.notebook_timeout)))
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
            return executed
        finally:
            box.kill()


class MarkRegrades(NbGraderPreprocessor):
    """After nbgrader saved the hidden cells' scores: a function the grader itself failed on
    (``needs_regrade`` in the grader's report) gets no auto-score and is marked for a look, so
    formgrader shows it ungraded, never as the student's zero. A later ``nbgrader autograde``
    (or ``grade-all --gradebook``) grades it."""

    def preprocess(self, nb, resources):
        from nbgrader.api import Gradebook

        from .gradebook import cell_of

        report = nb.metadata.get(REPORT_KEY) or {}
        regrade = [n for n, f in (report.get("functions") or {}).items()
                   if f.get("needs_regrade")]
        if not regrade:
            return nb, resources
        info = resources["nbgrader"]
        with Gradebook(info["db_url"]) as gb:
            for fn in regrade:
                grade = gb.find_grade(cell_of(fn), info["notebook"], info["assignment"],
                                      info["student"])
                grade.auto_score = None
                grade.needs_manual_grade = True
            gb.db.commit()
        self.log.warning("%s: %s need(s) a regrade (the grader failed, not the student)",
                         info["student"], ", ".join(regrade))
        return nb, resources
