"""What this process's ``nbgrader autograde`` did with each hand-in (:class:`AutogradeOutcome`),
and the one summary block it prints on stderr when it ends (:func:`summary`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional


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
