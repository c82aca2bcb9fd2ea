"""``nbgrader export`` for this course: a hand-in without a grade is never a plain zero.

nbgrader's own CSV (``CsvExportPlugin``) sums a submission's grades, counting a grade with no
score as 0: a hand-in refused before grading (a renamed notebook), one with a function the grader
failed on (needs a regrade) and one whose new problem is not graded yet all read ``raw_score
0.0`` with a time, which is what a TA uploads to the LMS. :class:`CourseCsvExport` (set as
``ExportApp.plugin_class`` by :func:`~.nbgrader_plugin.configure`) writes nbgrader's CSV with
its own code, then, for every submission nbgrader marks as needing a manual grade (a grade with
neither an auto-score nor a manual score), leaves ``raw_score`` and ``score`` empty and says why
in a last column, ``needs_look``; the log lists them. A manual score given in formgrader (or a
later grading) clears the mark, and the row is exported as usual.
"""
from __future__ import annotations

import csv
import os

from nbgrader.api import MissingEntry
from nbgrader.plugins.export import CsvExportPlugin

#: the column added to nbgrader's CSV, and what it says of a hand-in without a grade
NEEDS_LOOK = "needs_look"
NOT_GRADED = ("not graded: {cells} without a grade (refused before grading, needs a regrade, "
              "or a problem added since): see class_report.html or formgrader; no score to "
              "upload yet")


def ungraded_cells(submission) -> list[str]:
    """The grade cells of ``submission`` (nbgrader's SubmittedAssignment) with no score: no
    auto-score and no manual score."""
    return sorted(g.name for nb in submission.notebooks for g in nb.grades
                  if g.auto_score is None and g.manual_score is None)


class CourseCsvExport(CsvExportPlugin):
    """nbgrader's CSV, with ``raw_score`` and ``score`` left empty (and ``needs_look`` saying
    why) for a hand-in that has a grade cell without a score."""

    def export(self, gradebook) -> None:
        super().export(gradebook)
        dest = self.to or "grades.csv"
        with open(dest, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            fields = list(reader.fieldnames or []) + [NEEDS_LOOK]
        look = []
        for row in rows:
            row[NEEDS_LOOK] = ""
            try:
                sub = gradebook.find_submission(row["assignment"], row["student_id"])
            except MissingEntry:  # handed in nothing: nbgrader's 0.0, as the docs say
                continue
            cells = ungraded_cells(sub)
            if not cells:
                continue
            row["raw_score"] = row["score"] = ""
            row[NEEDS_LOOK] = NOT_GRADED.format(cells=", ".join(cells))
            look.append(f"{row['student_id']}/{row['assignment']}")
        tmp = f"{dest}.tmp{os.getpid()}"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, dest)
        if look:
            self.log.warning("%d hand-in(s) without a grade yet, exported with empty raw_score "
                             "and score (the needs_look column says why): %s", len(look),
                             ", ".join(look))
