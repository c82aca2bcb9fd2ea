"""Who handed in a file of a flat folder, by the id the LMS wrote, not by the name a student typed.

A flat folder is an LMS's export: Canvas names each file ``<name>[_LATE]_<user id>_<submission
id>_<the student's own file name>``, Moodle ``<Full Name>_<participant id>_assignsubmission_file_
<the student's own file name>``. The text before the first id and the id itself are the LMS's;
what follows is the student's, who can make it read like a classmate's name. Without a roster,
grade-all can only read names from that text, and two files that read as one student's are both
refused. With the instructor's roster (``grade-all --roster FILE``: a CSV of the LMS's id and the
student's name), a file belongs to the student whose id the LMS wrote first in its name; a file
with no such id, or an id the roster lacks, is refused for a look, and no one else's grade waits
on it.
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .names import _slug

#: the roster's column of LMS ids, by any of the names exports give it (case-insensitive)
ID_COLUMNS = ("id", "lms_id", "user_id", "userid", "canvas_id", "participant_id", "sis_user_id")
#: the roster's column of student names (the name reports and the CSV use)
NAME_COLUMNS = ("student", "name", "login", "username")
#: a roster larger than this is not a roster
MAX_BYTES = 4 << 20


class RosterError(ValueError):
    """A roster grade-all cannot use: said at start, before anything is graded (exit 2)."""


@dataclass(frozen=True)
class Roster:
    """LMS id -> student name, as the instructor's roster says."""
    path: Path
    students: dict[str, str]

    def student(self, lms_id: Optional[str]) -> Optional[str]:
        return self.students.get(lms_id) if lms_id is not None else None


def _column(header: list[str], names: tuple[str, ...], what: str, path: Path) -> int:
    low = [h.strip().lower() for h in header]
    hits = [i for i, h in enumerate(low) if h in names]
    if len(hits) != 1:
        found = "none" if not hits else ", ".join(header[i] for i in hits)
        raise RosterError(
            f"the roster {path} needs one column of {what} (named one of {', '.join(names)}); "
            f"its header is {header!r} (matching: {found}): give the LMS's export with that "
            "header, or add it")
    return hits[0]


def parse(text: str, path: Path) -> Roster:
    """The roster in ``text`` (a CSV with a header). Refused (RosterError, naming the row): no
    id or name column, an empty or non-numeric id (LMS ids in file names are numbers), an empty
    name, one id twice, or two ids for one student (or for names that are one file name once made
    safe: two students would share a report)."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise RosterError(f"the roster {path} is empty: a CSV with a header (id,student) and "
                          "one row per student")
    header, body = rows[0], rows[1:]
    ic = _column(header, ID_COLUMNS, "LMS ids", path)
    nc = _column(header, NAME_COLUMNS, "student names", path)
    students: dict[str, str] = {}
    owner: dict[str, tuple[str, int]] = {}
    for n, row in enumerate(body, start=2):
        lms_id = row[ic].strip() if ic < len(row) else ""
        name = row[nc].strip() if nc < len(row) else ""
        if not lms_id.isdigit() or not lms_id.isascii():
            raise RosterError(f"the roster {path}, row {n}: the id {lms_id!r} is not a number "
                              "(the LMS's user id, as its export writes it in file names)")
        if not name:
            raise RosterError(f"the roster {path}, row {n}: id {lms_id} has no student name")
        if lms_id in students:
            raise RosterError(f"the roster {path}, row {n}: the id {lms_id} is there twice "
                              f"({students[lms_id]!r} and {name!r}): one row per student")
        key = _slug(name)
        if key in owner:
            other, m = owner[key]
            raise RosterError(f"the roster {path}, rows {m} and {n}: {other!r} and {name!r} "
                              "would share one report: give each student a distinct name")
        students[lms_id] = name
        owner[key] = (name, n)
    if not students:
        raise RosterError(f"the roster {path} lists no student")
    return Roster(Path(path), students)


def read(path: Path) -> Roster:
    """The roster at ``path``, checked (:func:`parse`); RosterError if it cannot be read."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise RosterError(f"cannot read the roster {path}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise RosterError(f"the roster {path} is over {MAX_BYTES >> 20} MiB: not a roster")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise RosterError(f"the roster {path} is not UTF-8 text: save it as CSV (UTF-8)") from None
    return parse(text, path)


def lms_id(file_name: str) -> Optional[str]:
    """The id the LMS wrote in an export's file name: its first ``_``-separated part made only
    of digits (Canvas ``name[_LATE]_<user id>_...``, Moodle ``Full Name_<id>_...``; the parts
    after it, the student's own file name included, are never read for it). None: no such part."""
    for part in Path(file_name).name.split("_"):
        if re.fullmatch(r"[0-9]+", part):
            return part
    return None


def place(file_name: str, roster: Roster) -> tuple[Optional[str], Optional[str]]:
    """``(student, None)``: the roster's student whose LMS id ``file_name`` carries; ``(None,
    why)``: the file cannot be placed, with what to do."""
    found = lms_id(file_name)
    if found is None:
        return None, (f"{file_name!r} carries no LMS id (the roster {roster.path.name} places "
                      "files by the id the LMS writes in their names, like Canvas's "
                      "name_12345_67890_file.ipynb): find whose it is and rename it with that "
                      "student's id, or grade it alone")
    student = roster.student(found)
    if student is None:
        return None, (f"{file_name!r} carries the LMS id {found}, which the roster "
                      f"{roster.path.name} does not list: add that student to the roster, or "
                      "find whose file it is")
    return student, None
