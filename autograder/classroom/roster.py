"""Who handed in a file an LMS exported, by the id the LMS wrote, not by the name a student typed.

An LMS names each file of its download after the student, then its own ids, then the file name
the student uploaded. Each supported layout is read at its fixed places (:func:`readings`):

* Moodle: ``<display name>_<participant id>_assignsubmission_file_<file name>``;
* Canvas: ``<sortable name>[_LATE]_<user id>_<submission id>_<file name>``.

The display name and the file name are the student's own text, which can copy the LMS's fields
to read like a classmate's; the LMS's fields are read where the layout puts them, and a name
that still parses two ways is refused, naming both readings. With the instructor's roster
(``grade-all --roster FILE``, ``collect-lms --roster FILE``: a CSV of the LMS's id and the
student's name), a file belongs to the student whose id the LMS wrote; a file with no such id,
or an id the roster lacks, is refused for a look, and no one else's grade waits on it.
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
#: nbgrader's column of LMS ids in its student CSV: with it, ``id`` is the student (nbgrader's
#: student id), as ``nbgrader db student import`` reads the same file
NBGRADER_ID = "lms_user_id"
#: a roster larger than this is not a roster
MAX_BYTES = 4 << 20


class RosterError(ValueError):
    """A roster grade-all cannot use: said at start, before anything is graded (exit 2)."""


@dataclass(frozen=True)
class Roster:
    """LMS id -> student name, as the instructor's roster says."""
    path: Path
    students: dict[str, str]
    #: the LMS whose file-name layout to read (``--lms``); None: the one every name fits
    lms: Optional[str] = None

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
    """The roster in ``text`` (a CSV with a header: an LMS id column of :data:`ID_COLUMNS` and
    a name column of :data:`NAME_COLUMNS`, or nbgrader's student CSV, ``id`` and
    ``lms_user_id``). Refused (RosterError, naming the row): no
    id or name column, an empty or non-numeric id (LMS ids in file names are numbers), an empty
    name, one id twice, or two ids for one student (or for names that are one file name once made
    safe: two students would share a report)."""
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise RosterError(f"the roster {path} is empty: a CSV with a header (id,student) and "
                          "one row per student")
    header, body = rows[0], rows[1:]
    low = [h.strip().lower() for h in header]
    if low.count(NBGRADER_ID) == 1 and low.count("id") == 1:
        # nbgrader's own student CSV (nbgrader db student import): its id is the student
        ic, nc = low.index(NBGRADER_ID), low.index("id")
    else:
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


#: the LMS file-name layouts read (``--lms``): each LMS's own fields, at fixed places
LAYOUTS = ("moodle", "canvas")
#: Moodle's fixed text after the participant id (its file-submission plugin)
MOODLE_MARK = "_assignsubmission_file_"
_MOODLE = re.compile(r"_([0-9]+)" + re.escape(MOODLE_MARK))


@dataclass(frozen=True)
class Reading:
    """One way an LMS's file name reads: the LMS's own fields, then the student's file name."""
    lms: str
    lms_id: str
    #: the file name the student uploaded (Canvas's ``-1`` resubmission suffix still on it)
    file_name: str
    #: the name text before the id (the student's display name: never read for whose it is)
    display: str = ""
    #: Canvas's submission id; None for Moodle
    submission_id: Optional[str] = None
    #: Canvas's ``_LATE`` mark
    late: bool = False

    def says(self, roster: Optional[Roster] = None) -> str:
        who = roster.student(self.lms_id) if roster is not None else None
        idname = "participant id" if self.lms == "moodle" else "user id"
        return (f"{self.lms} {idname} {self.lms_id}" + (f" ({who})" if who else "")
                + f", file {self.file_name!r}")


def readings(file_name: str, lms: str) -> list[Reading]:
    """Every way ``file_name`` (a name, not a path) fits the layout of ``lms``, reading the
    LMS's fields at their fixed places, never the display name's or the file name's text:

    * Moodle: ``<display name>_<participant id>_assignsubmission_file_<file name>`` (a folder of
      Moodle's "download submissions in folders" is named ``<display name>_<participant
      id>_assignsubmission_file`` or with the trailing ``_``, and its file name is empty): the id
      is the number just before ``_assignsubmission_file_``;
    * Canvas: ``<sortable name>[_LATE]_<user id>_<submission id>_<file name>``: two numbers in
      a row, with a name before and a file name after.

    A display name or file name that copies the LMS's fields can add a reading: more than one
    reading is a name that parses two ways (:func:`read_name` refuses it)."""
    name = Path(file_name).name
    out: list[Reading] = []
    if lms == "moodle":
        folder = re.fullmatch(r"(.+)_([0-9]+)_assignsubmission_file_?", name)
        if folder:
            out.append(Reading("moodle", folder.group(2), "", display=folder.group(1)))
        for m in _MOODLE.finditer(name):
            display, rest = name[:m.start()], name[m.end():]
            if display and rest:
                out.append(Reading("moodle", m.group(1), rest, display=display))
    elif lms == "canvas":
        parts = name.split("_")
        for i in range(1, len(parts) - 2):
            uid, sid = parts[i], parts[i + 1]
            if not (uid.isdigit() and uid.isascii() and sid.isdigit() and sid.isascii()):
                continue
            before, rest = parts[:i], "_".join(parts[i + 2:])
            late = len(before) > 1 and before[-1] == "LATE"
            display = "_".join(before[:-1] if late else before)
            if display and rest:
                out.append(Reading("canvas", uid, rest, display=display, submission_id=sid,
                                   late=late))
    else:
        raise ValueError(f"unknown LMS layout {lms!r}: one of {', '.join(LAYOUTS)}")
    return out


class LmsNameError(ValueError):
    """A file name that does not say whose it is in one way only."""


def read_name(file_name: str, lms: str, roster: Optional[Roster] = None) -> Reading:
    """The one reading of ``file_name`` in the layout of ``lms``. With a ``roster``, readings
    whose id it does not list are set aside (a file name's digits that name no student cannot
    make an honest name ambiguous). Raises LmsNameError (with what to do) for a name that fits
    the layout in no way, one whose only ids the roster lacks, and one that parses two ways
    (naming each reading: a display name or file name copying the LMS's fields)."""
    found = readings(file_name, lms)
    example = ("Alice Smith_1234_assignsubmission_file_ps1_sharding.ipynb" if lms == "moodle"
               else "smithalice_12345_67890_ps1_sharding.ipynb")
    if not found:
        raise LmsNameError(
            f"{file_name!r} is not named as {lms} names a hand-in (like {example!r}): find whose "
            "it is and put it in place by hand, or give the right --lms")
    if roster is not None:
        listed = [r for r in found if roster.student(r.lms_id) is not None]
        if not listed:
            ids = ", ".join(sorted({r.lms_id for r in found}))
            raise LmsNameError(
                f"{file_name!r} carries the {lms} id {ids}, which the roster "
                f"{roster.path.name} does not list: add that student to the roster, or find "
                "whose file it is")
        found = listed
    if len(found) > 1:
        raise LmsNameError(
            f"{file_name!r} parses two ways as a {lms} name: "
            + "; ".join(r.says(roster) for r in found)
            + ": a display name or file name copies the LMS's fields, so the name cannot say "
            "whose it is; find out from the LMS and put it in place by hand")
    return found[0]


def detect(names: list[str]) -> Optional[str]:
    """The layout that every one of ``names`` fitting some layout fits (at least one reading
    each; a name that fits none, a file put there by hand, is left to be refused alone), or
    None when no name fits or both layouts fit them all (then ``--lms`` says which). One
    student's names cannot make a folder of classmates' names fit another layout."""
    fitting = [n for n in names if any(readings(n, lms) for lms in LAYOUTS)]
    fits = [lms for lms in LAYOUTS if fitting and all(readings(n, lms) for n in fitting)]
    return fits[0] if len(fits) == 1 else None


def place(file_name: str, roster: Roster,
          lms: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """``(student, None)``: the roster's student whose id the LMS wrote in ``file_name`` (in
    the layout of ``lms``); ``(None, why)``: the file cannot be placed, with what to do."""
    if lms is None:
        return None, (f"{file_name!r}: the folder's file names do not all fit one LMS's layout "
                      f"({', '.join(LAYOUTS)}), so whose each is cannot be read: say which with "
                      "--lms")
    try:
        r = read_name(file_name, lms, roster)
    except LmsNameError as e:
        return None, str(e)
    return roster.student(r.lms_id), None
