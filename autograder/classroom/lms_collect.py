"""``collect-lms``: an LMS's download of one assignment into nbgrader's ``submitted/`` layout.

Each file of the download (a folder, or the zip the LMS gave) belongs to the student whose id
the LMS wrote in its name (:mod:`.roster`: Moodle's and Canvas's layouts, read at their fixed
places, never from the student's own text), as the instructor's roster names that student. The
student's files go to ``submitted/<roster name>/<assignment>/``: the notebook as
``<assignment>.ipynb``, helper modules beside it under the names the student gave them. Of a
file Canvas renamed for a resubmission (``ps1_sharding-1.ipynb``, ``-2``, ...) the latest is
kept, under the name without the suffix. Neither layout carries the hand-in time, so no
``timestamp.txt`` is written (nbgrader then records no time and flags no lateness); Canvas's
``_LATE`` mark is reported. A student's folder is written afresh from the download.
"""
from __future__ import annotations

import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .roster import LAYOUTS, LmsNameError, Reading, Roster, detect, read_name

#: a file larger than this is no hand-in of this course (a notebook with its outputs is far less)
MAX_FILE_BYTES = 50 << 20
#: files nbgrader's exchange writes beside a hand-in: what says when and by whom, never the
#: student's to give (an uploaded ``timestamp.txt`` would set its own hand-in time)
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+-]*")
_CANVAS_SUFFIX = re.compile(r"^(?P<stem>.+?)-(?P<n>[0-9]+)(?P<ext>\.[A-Za-z0-9]+)?$")


class CollectError(ValueError):
    """A download or a course folder collect-lms cannot work with: nothing is written."""


@dataclass
class _File:
    reading: Reading
    #: the name in the download (the LMS's, with the folder's for Moodle's folders)
    where: str
    #: the student's file name, Canvas's resubmission suffix taken off
    name: str
    #: Canvas's resubmission number (0: none)
    attempt: int
    read: Callable[[], bytes]


@dataclass
class Collected:
    """What :func:`collect` did: the students placed, the files refused and why."""
    lms: str
    #: student -> (the notebook's name in the download, the other files placed beside it)
    placed: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    #: (name in the download, why): placed nowhere
    refused: list[tuple[str, str]] = field(default_factory=list)
    #: (student, what was set aside: older resubmissions, the exchange's own file names)
    notes: list[tuple[str, str]] = field(default_factory=list)
    #: students whose kept notebook Canvas marked _LATE
    late: list[str] = field(default_factory=list)
    #: students on the roster with no file in the download
    missing: list[str] = field(default_factory=list)


def _entries(download: Path) -> list[tuple[str, Optional[str], Callable[[], bytes]]]:
    """(outer name, inner name or None, reader) of every file of the download: a folder's
    files and the files one level into its folders, or a zip's members the same way."""
    out = []
    if download.is_file() and zipfile.is_zipfile(download):
        with zipfile.ZipFile(download) as z:
            infos = [i for i in z.infolist() if not i.is_dir()]
        for info in infos:
            parts = info.filename.split("/")
            if any(p in ("", ".", "..") for p in parts) or len(parts) > 2 or "\\" in info.filename:
                out.append((info.filename, None, None))  # refused: not the LMS's layout
                continue

            def read(info=info):
                if info.file_size > MAX_FILE_BYTES:
                    raise CollectError(f"{info.filename} is over {MAX_FILE_BYTES >> 20} MiB")
                with zipfile.ZipFile(download) as z, z.open(info) as f:
                    data = f.read(MAX_FILE_BYTES + 1)
                if len(data) > MAX_FILE_BYTES:
                    raise CollectError(f"{info.filename} is over {MAX_FILE_BYTES >> 20} MiB")
                return data
            out.append((parts[0], parts[1] if len(parts) == 2 else None, read))
        return out
    if not download.is_dir():
        raise CollectError(f"{download} is neither a folder nor a zip file: give the LMS's "
                           "download (its zip, or the folder it unpacks to)")

    def reader(p: Path):
        def read():
            if p.stat().st_size > MAX_FILE_BYTES:
                raise CollectError(f"{p.name} is over {MAX_FILE_BYTES >> 20} MiB")
            return p.read_bytes()
        return read

    for p in sorted(download.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_symlink():
            out.append((p.name, None, None))
        elif p.is_dir():
            for q in sorted(p.iterdir()):
                if q.name.startswith("."):
                    continue
                ok = q.is_file() and not q.is_symlink()
                out.append((p.name, q.name, reader(q) if ok else None))
        elif p.is_file():
            out.append((p.name, None, reader(p)))
    return out


def _unsuffixed(name: str, lms: str) -> tuple[str, int]:
    """The student's file name without Canvas's resubmission suffix, and its number."""
    m = _CANVAS_SUFFIX.match(name) if lms == "canvas" else None
    if not m:
        return name, 0
    return m.group("stem") + (m.group("ext") or ""), int(m.group("n"))


def collect(download: Path, course: Path, assignment: str, roster: Roster,
            lms: Optional[str] = None) -> Collected:
    """Put the hand-ins of ``download`` into ``course``'s ``submitted/<student>/<assignment>/``
    (see the module's text). ``lms``: the layout (``moodle`` or ``canvas``); None: the one every
    name of the download fits. Raises CollectError when the layout cannot be told."""
    entries = _entries(Path(download))
    if not entries:
        raise CollectError(f"{download} holds no file")
    lms = lms or detect(sorted({outer for outer, _, _ in entries}))
    if lms is None:
        raise CollectError(
            f"the names in {download} do not all fit one LMS's layout ({', '.join(LAYOUTS)}): "
            "say which with --lms")
    done = Collected(lms)
    files: dict[str, list[_File]] = {}
    for outer, inner, read in entries:
        where = f"{outer}/{inner}" if inner is not None else outer
        if read is None:
            done.refused.append((where, "not a regular file where the LMS puts one (a link, "
                                 "or a folder deeper than the LMS makes): put it in place by "
                                 "hand if it is a hand-in"))
            continue
        try:
            r = read_name(outer, lms, roster)
        except LmsNameError as e:
            done.refused.append((where, str(e)))
            continue
        own = inner if inner is not None else r.file_name
        if inner is not None and r.file_name:
            done.refused.append((where, f"a file inside {outer!r}, which {lms} names as a "
                                 "file, not a folder: put it in place by hand"))
            continue
        if not own:
            done.refused.append((where, f"{lms} names a folder so; it is a file"))
            continue
        name, attempt = _unsuffixed(own, lms)
        files.setdefault(roster.student(r.lms_id), []).append(
            _File(r, where, name, attempt, read))
    course = Path(course)
    for student in sorted(files):
        if not _SAFE.fullmatch(student):
            for f in files[student]:
                done.refused.append((f.where, f"the roster names its student {student!r}, which "
                                     "cannot be a folder of submitted/ (nbgrader's student id): "
                                     "give the roster plain ids (letters, digits, _ . @ + -)"))
            continue
        _place(student, files[student], course, assignment, done)
    done.missing = sorted(set(roster.students.values()) - set(files))
    return done


def _place(student: str, own: list[_File], course: Path, assignment: str,
           done: Collected) -> None:
    latest: dict[str, _File] = {}
    for f in own:  # the latest of each file name: Canvas's highest -N, then its later id
        key = (f.attempt, int(f.reading.submission_id or 0))
        old = latest.get(f.name)
        if old is None or key > (old.attempt, int(old.reading.submission_id or 0)):
            if old is not None:
                done.notes.append((student, f"{old.where} set aside: {f.where} is later"))
            latest[f.name] = f
        else:
            done.notes.append((student, f"{f.where} set aside: {old.where} is later"))
    for name in EXCHANGE_FILES:
        if name in latest:
            done.notes.append((student, f"{latest.pop(name).where} set aside: {name} is written "
                               "by nbgrader's exchange, never taken from a hand-in"))
    for name in [n for n in latest if not _SAFE.fullmatch(n)]:
        done.notes.append((student, f"{latest.pop(name).where} set aside: {name!r} is no name "
                           "a notebook can import"))
    notebooks = sorted(n for n in latest if n.endswith(".ipynb"))
    target = f"{assignment}.ipynb"
    if target in notebooks:
        nb = target
    elif len(notebooks) == 1:
        nb = notebooks[0]
        done.notes.append((student, f"{latest[nb].where} placed as {target} (the only notebook "
                           "handed in)"))
    else:
        why = (f"{len(notebooks)} notebooks, none named {target}: put the right one in place by "
               "hand" if notebooks else f"no notebook ({target}) among the files handed in")
        done.refused.extend((f.where, f"{student}: {why}") for f in own)
        return
    try:
        blobs = {(target if n == nb else n): latest[n].read() for n in latest}
    except (CollectError, OSError) as e:
        done.refused.extend((f.where, f"{student}: cannot be read: {e}") for f in own)
        return
    folder = course / "submitted" / student / assignment
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{assignment}.collect-{os.getpid()}"
    old = folder.parent / f".{assignment}.replaced-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for n, data in blobs.items():
        (tmp / n).write_bytes(data)
    if folder.exists() or folder.is_symlink():
        os.replace(folder, old)
    os.replace(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)
    done.placed[student] = (latest[nb].where, sorted(n for n in blobs if n != target))
    if latest[nb].reading.late:
        done.late.append(student)
