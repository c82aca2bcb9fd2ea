"""``python -m autograder grade-all DIR``: grade a whole class.

DIR is either an nbgrader course folder (``submitted/<student>/<assignment>/*.ipynb``; DIR may
be the course root or its ``submitted`` folder) or a flat folder of notebooks / ``.py`` files
(``<student>_<assignment>.ipynb``, ``<student>.py``, ...; the assignment is read from the name
when it contains one, otherwise guessed from the functions the file defines).

Every submission is graded in its own isolated worker process (:mod:`autograder.supervisor`); up to
``--workers`` run at once, or, with ``--scheduler tls://host:8786``, each is a task on a Dask
cluster (:mod:`autograder.classroom.cluster`; the same isolation on the worker). Results go to

* ``reports/<student>/<assignment>.json``: one submission's full report plus a fingerprint of
  the file, the grader's code, the assignment's own course files and the grading options,
  signed with a key kept beside the reports (a later run reuses only a report whose signature
  and fingerprint check out: the batch is resumable; ``--force`` grades again);
* ``reports/<student>.json``: the student's report, all assignments;
* the CSV (``--out``): student, assignment, one column per graded function, total, max, and
  when it was handed in (:func:`handed_in`: nbgrader's ``timestamp.txt`` beside the notebook,
  else the file's own time) and, with ``--gradebook``, how late, as nbgrader computes it.

Only this process and the trusted graders write there; student code runs in the sandbox and
sees none of it. The trusted graders share one JAX compilation cache (warmed once with the jit
baselines), which student code never sees either.
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
import hmac
import json
import os
import re
import secrets
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..core.files import replaced
from ..core.identity import GRADER_VERSION, assignment_hash
from ..core.results import REGRADE, shown
from ..supervisor.handin import FolderRefused, own_files, read_capped, regular
from .class_report import totals
from .names import _slug

SUFFIXES = (".ipynb", ".py")


@dataclass(frozen=True)
class Item:
    student: str
    assignment: Optional[str]
    path: Path
    #: the file sits in the student's own folder (nbgrader layout), which grading may see
    own_folder: bool = False
    #: why this hand-in is refused before anything reads it (None: it is graded)
    refused: Optional[str] = None
    #: its folder holds no notebook at all (a ``.py`` in the nbgrader layout): ``nbgrader
    #: autograde`` skips such a folder and makes no submission of it, so neither does
    #: ``--gradebook`` (both list it for a look)
    no_notebook: bool = False

    @property
    def key(self) -> str:
        return f"{self.student}/{self.assignment or self.path.stem}"


def _known_assignments() -> list[str]:
    from ..course import registry

    return registry.assignments()


def _assignment_in(name: str, known: list[str]) -> Optional[str]:
    hits = [a for a in known if a in name]
    return max(hits, key=len) if hits else None


#: the file nbgrader's exchange (``nbgrader collect``) writes beside a hand-in: when it was
#: submitted
TIMESTAMP_FILE = "timestamp.txt"
#: nbgrader's exchange files beside a hand-in that say when and by whom, not what: a
#: resubmission of the same files (a new time, a new ``submission_secret.txt`` from ``nbgrader
#: submit``) is not graded again; both reach ``autograded/`` for ``release_feedback``
EXCHANGE_FILES = (TIMESTAMP_FILE, "submission_secret.txt")


def handed_in(item: Item) -> dict:
    """When ``item`` was handed in, as its report carries it (read afresh on every run, so a
    resubmission whose notebook is unchanged still gets its new time): ``timestamp`` (UTC, ISO
    format, parsed by nbgrader's own parser when nbgrader is installed) and ``timestamp_from``:
    ``"timestamp.txt"`` (nbgrader's file in the hand-in's folder, what ``nbgrader autograde``
    records; the only time ``--gradebook`` writes) or ``"file"`` (the hand-in's modification
    time: shown, never written to the gradebook, since nbgrader records none without
    ``timestamp.txt``). A ``timestamp.txt`` that cannot be read as a time gives
    ``timestamp_problem`` (nbgrader autograde fails such a hand-in) and no time."""
    if item.own_folder:
        path = item.path.parent / TIMESTAMP_FILE
        if os.path.lexists(path):
            why = regular(path)
            text = "" if why else read_capped(path)[:200].decode("utf-8", "replace").strip()
            if not why and text:
                try:
                    return {"timestamp": _utc(text), "timestamp_from": TIMESTAMP_FILE}
                except (ValueError, OverflowError):
                    why = f"{TIMESTAMP_FILE} does not hold a time: {text[:60]!r}"
            if why:
                return {"timestamp": None, "timestamp_from": TIMESTAMP_FILE,
                        "timestamp_problem": why}
    try:
        st = os.lstat(item.path)
    except OSError:
        return {"timestamp": None, "timestamp_from": None}
    from datetime import datetime, timezone

    at = datetime.fromtimestamp(st.st_mtime, timezone.utc).replace(tzinfo=None)
    return {"timestamp": at.isoformat(sep=" ", timespec="seconds"), "timestamp_from": "file"}


def _utc(text: str) -> str:
    """A ``timestamp.txt``'s time in UTC, ISO format: nbgrader's own parser (the time
    ``nbgrader autograde`` records), else the ISO format alone."""
    try:
        from nbgrader.utils import parse_utc
    except ImportError:  # pragma: no cover - without nbgrader there is no gradebook to agree with
        from datetime import datetime, timezone

        at = datetime.fromisoformat(text.replace(" UTC", "+00:00"))
        if at.tzinfo is not None:
            at = at.astimezone(timezone.utc).replace(tzinfo=None)
    else:
        at = parse_utc(text)
    return at.isoformat(sep=" ")


def _pick_notebook(folder: Path, assignment: str) -> Optional[Path]:
    files = sorted(p for p in folder.iterdir()
                   if p.suffix in SUFFIXES and not p.name.startswith(".")
                   and (p.is_symlink() or p.is_file()))
    if not files:
        return None
    named = [p for p in files if p.stem == assignment]  # the notebook before a .py twin
    if named:
        return min(named, key=lambda p: p.suffix != ".ipynb")
    nbs = [p for p in files if p.suffix == ".ipynb"]
    return (nbs or files)[0]


class UnknownStudent(ValueError):
    """``grade_all(force={...})`` named a student with no hand-in: said before any grading."""


def discover(root: Path, limits=None, roster=None) -> list[Item]:
    """The submissions under ``root`` (nbgrader layout or a flat folder). A hand-in that is a
    link or not a regular file, one whose own folder is past a cap of ``limits`` (entries,
    depth, listing time; None: the defaults of :class:`~autograder.supervisor.options.Limits`),
    and two hand-ins that map to the same student and assignment, come back refused
    (``Item.refused`` says why, naming the files): graded by nobody, and listed for a look.
    ``roster`` (:class:`~.roster.Roster`, from ``--roster``): a flat folder's file belongs to the
    student whose LMS id the LMS wrote in its name (read in the layout of ``roster.lms``, or the
    one every file name of the folder fits), never to the name text a student chose; a file
    the roster cannot place is refused alone, and keeps no one else from a grade."""
    from .seed import course_root

    root = Path(root)
    known = _known_assignments()
    #: an nbgrader course folder, which nbgrader autograde grades too: its rule on files holds
    course = course_root(root) is not None
    if (root / "submitted").is_dir() and not (root / "submitted").is_symlink():
        root = root / "submitted"
    items: list[Item] = []
    flat = [p for p in sorted(root.iterdir())
            if p.suffix in SUFFIXES and not p.name.startswith(".")
            and (p.is_symlink() or p.is_file())]
    unplaced: list[Item] = []
    lms = None
    if roster is not None:  # one layout for the whole folder: --lms, or the one all names fit
        from .roster import detect, place, readings

        lms = roster.lms or detect([p.name for p in flat])
    for p in flat:
        a = _assignment_in(p.stem, known)
        if roster is not None:
            student, why = place(p.name, roster, lms)
            if student is None:  # refused alone: it takes part in no clash
                unplaced.append(Item(p.stem, a, p, refused=why))
                continue
            # the assignment from the student's own file name, not the display name before it
            own = [r.file_name for r in readings(p.name, lms)
                   if roster.student(r.lms_id) == student]
            if own:
                a = _assignment_in(Path(own[0]).stem, known) or a
        else:
            student = p.stem
            if a:
                student = re.sub(r"[_\-. ]+$|^[_\-. ]+", "", p.stem.replace(a, "")) or p.stem
        items.append(Item(student, a, p, refused=regular(p)))
    for sdir in sorted(d for d in root.iterdir() if not d.name.startswith(".")):
        if not sdir.is_dir():
            continue
        if sdir.is_symlink():
            items.append(Item(sdir.name, None, sdir, refused=f"the folder {sdir.name} is a link: "
                              "grade-all reads no links"))
            continue
        for adir in sorted(d for d in sdir.iterdir() if not d.name.startswith(".")):
            if not adir.is_dir() or adir.name == ".ipynb_checkpoints":
                continue
            a = adir.name if adir.name in known else _assignment_in(adir.name, known)
            if adir.is_symlink():
                items.append(Item(sdir.name, a, adir, refused=f"the folder {sdir.name}/"
                                  f"{adir.name} is a link: grade-all reads no links"))
                continue
            try:  # the folder within its caps before anything else lists it
                own_files(adir, limits=limits)
            except FolderRefused as e:
                items.append(Item(sdir.name, a, adir / f"{adir.name}.ipynb", own_folder=True,
                                  refused=str(e)))
                continue
            nb = _pick_notebook(adir, adir.name)
            if nb is None:
                continue
            refused = regular(nb)
            no_notebook = False
            if refused is None and adir.name in known:
                refused, no_notebook = _not_the_release(sdir.name, adir, nb, course)
            items.append(Item(sdir.name, a, nb, own_folder=True, refused=refused,
                              no_notebook=no_notebook))
    return _refuse_clashes(items, roster) + unplaced


def _not_the_release(student: str, folder: Path, picked: Path,
                     course: bool) -> tuple[Optional[str], bool]:
    """Why a hand-in in the nbgrader layout is refused (None: it is not), and whether its
    folder holds no notebook at all. ``nbgrader autograde`` grades ``<assignment>.ipynb`` only:
    a renamed notebook stops it (the submission is made, its grades left for a look), a folder
    with no notebook (a ``.py``) is skipped (no submission). grade-all refuses a renamed file
    anywhere and, in an nbgrader course folder (``course``: one nbgrader autograde grades too),
    anything but the notebook, so that the two paths give the same gradebook: neither grades
    it, both list it for a look. Outside a course folder a ``.py`` is graded."""
    asg = folder.name
    no_notebook = picked.suffix != ".ipynb" and not any(
        p.suffix == ".ipynb" and not p.name.startswith(".") for p in folder.iterdir())
    if picked.stem != asg:
        return (f"{student}/{asg}/ holds no {asg}.ipynb (found {picked.name!r}, renamed by a "
                f"browser?): rename it to {asg}.ipynb and grade again; nbgrader autograde "
                "refuses it too"), no_notebook
    if picked.suffix == ".ipynb" or not course:
        return None, False
    return (f"{student}/{asg}/ holds {picked.name!r}, not the notebook {asg}.ipynb: in an "
            f"nbgrader course folder both grading paths grade the notebook only (nbgrader "
            f"autograde skips this folder); put the code into {asg}.ipynb and grade again, or "
            f"grade the file alone with `python -m autograder grade {picked.name}`"), no_notebook


def _refuse_clashes(items: list[Item], roster=None) -> list[Item]:
    """Two hand-ins that would be one student's report for one assignment (the same names, or
    names that are the same once made safe for a file name) are both refused, naming both.
    With a ``roster`` a flat folder's files were placed by the LMS's id, so a clash there is
    one student's own two files; without one, the message says how a roster settles it."""
    groups: dict[tuple, list[Item]] = {}
    for it in items:
        groups.setdefault((_slug(it.student), _slug(it.assignment or it.path.stem)), []).append(it)
    out = []
    for it in items:
        same = groups[(_slug(it.student), _slug(it.assignment or it.path.stem))]
        if len(same) > 1:
            names = ", ".join(str(o.path) for o in same)
            what = f"{it.student!r}, {it.assignment or it.path.stem}: {names}"
            if roster is not None:
                why = (f"two hand-ins of student {what} (placed by the LMS's id in the roster "
                       f"{roster.path.name}: that student's own): remove one and grade again")
            else:
                why = (f"two hand-ins map to student {what}; rename or remove one, or settle "
                       "it by the LMS's ids: grade-all --roster ROSTER.csv (the LMS's id and "
                       "name of each student; docs/instructor.md)")
            it = dataclasses.replace(it, refused=why)
        out.append(it)
    return out


def fingerprint(item: Item, opts) -> str:
    """What a report was made from: the hand-in's bytes (and its own folder's regular files),
    the grader's code and its assignment's course files
    (:func:`~autograder.core.identity.assignment_hash`: a change to another assignment's
    limits, rules or references regrades nothing here) and the options. Reads regular files only, capped, without following
    links."""
    h = hashlib.sha256()
    h.update(read_capped(item.path))
    if item.own_folder:  # helper files beside the notebook are graded with it
        for p in own_files(item.path.parent, limits=opts.limits):
            if p.parent == item.path.parent and p.name in EXCHANGE_FILES:
                continue  # when, not what: a resubmission of the same files is not regraded
            h.update(str(p.relative_to(item.path.parent)).encode())
            h.update(read_capped(p))
    h.update(json.dumps([GRADER_VERSION, assignment_hash(item.assignment), item.assignment,
                         opts.quick, opts.seed, opts.with_speed, opts.isolation, opts.only],
                        sort_keys=True).encode())
    return h.hexdigest()


def report_key(reports: Path) -> bytes:
    """The key reports are signed with, kept beside them (readable by the instructor only);
    made once, atomically, before any submission is graded."""
    path = reports / ".report-key"
    if not path.exists():
        tmp = reports / f".report-key.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(tmp, path)  # the first writer wins; a concurrent one reads its key
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    key = bytes.fromhex(path.read_text().strip())
    if len(key) != 32:
        raise RuntimeError(f"{path} is not a report key; delete it to grade afresh")
    return key


def sign(report: dict, key: bytes) -> str:
    body = json.dumps({k: v for k, v in report.items() if k != "signature"}, sort_keys=True)
    return hmac.new(key, body.encode(), "sha256").hexdigest()


def verified(path: Path, fp: str, key: bytes) -> Optional[dict]:
    """The report at ``path`` if this grader wrote it for this exact submission and options."""
    try:
        old = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(old, dict) or old.get("fingerprint") != fp:
        return None
    if not hmac.compare_digest(str(old.get("signature", "")), sign(old, key)):
        return None
    return old


@dataclass
class Outcome:
    item: Item
    report: dict
    skipped: bool = False
    seconds: float = 0.0


def _report_path(item: Item, reports: Path) -> Path:
    return reports / _slug(item.student) / f"{_slug(item.assignment or item.path.stem)}.json"


def _reuse(item: Item, fp: str, reports: Path, key: bytes) -> Optional[Outcome]:
    """The submission's report from an earlier run, if signed by us for this exact
    submission, grader and options (``fp``)."""
    out = _report_path(item, reports)
    if out.exists():
        old = verified(out, fp, key)
        if old is not None:
            return Outcome(item, old, skipped=True)
    return None


def _options_for(item: Item, opts, seed: Optional[int]):
    """The options one submission is graded with: its assignment, its folder, the run's
    seed (unless the instructor fixed one)."""
    import copy

    o = copy.copy(opts)
    o.assignment = item.assignment
    o.folder = item.own_folder
    if o.seed is None:
        o.seed = seed
    return o


def _write_report(item: Item, res: dict, seconds: float, fp: str, key: bytes, reports: Path,
                  **extra) -> Outcome:
    """Sign and write the report of a grading (``res``: ``SubmissionResult.to_dict()``); only
    this process does, wherever the grading ran."""
    rep = {"student": item.student, "assignment": res.get("assignment") or item.assignment,
           "submission": str(item.path), "fingerprint": fp, "seconds": round(seconds, 2),
           **extra, **res}
    rep["signature"] = sign(rep, key)
    with replaced(_report_path(item, reports)) as tmp:
        tmp.write_text(json.dumps(rep, indent=2))
    return Outcome(item, rep, seconds=seconds)


def _refused(item: Item) -> Outcome:
    """The outcome of a hand-in refused before anything read it (a renamed notebook, a link,
    two hand-ins of one student): the hand-in's own, for a person to look at, never the
    grader's fault and never graded with or without isolation."""
    rep = {"student": item.student, "assignment": item.assignment,
           "submission": str(item.path), "score": 0.0, "max_score": 0.0,
           "functions": {}, "refused": item.refused}
    if item.no_notebook:
        rep["no_notebook"] = True
    return Outcome(item, rep)


def _not_graded(item: Item, error: str) -> Outcome:
    """The outcome of a submission the grader itself failed on (no report: a later run tries
    again)."""
    return Outcome(item, {"student": item.student, "assignment": item.assignment,
                          "submission": str(item.path), "score": 0.0, "max_score": 0.0,
                          "functions": {}, "error": error})


def grade_one(item: Item, opts, reports: Path, key: bytes, *, force: bool = False,
              seed: Optional[int] = None) -> Outcome:
    """Grade ``item`` (or reuse its verified report). ``seed``: the run's secret seed, shared
    by every submission of the run, so that identical programs are graded once."""
    if item.refused:
        return _refused(item)
    try:
        return _grade_one(item, opts, reports, key, force=force, seed=seed)
    except FolderRefused as e:  # the folder grew past a cap since it was listed
        return _refused(dataclasses.replace(item, refused=str(e)))


def _to_grade(item: Item, opts, reports: Path, key: bytes, force: bool) -> bool:
    """Whether :func:`grade_one` would grade ``item`` (not refused, and forced or without a
    verified report that needs nothing graded again)."""
    if item.refused:
        return False
    if force:
        return True
    try:
        old = _reuse(item, fingerprint(item, opts), reports, key)
    except FolderRefused:
        return False
    return old is None or bool(old.report.get("needs_regrade"))


def _grade_one(item: Item, opts, reports: Path, key: bytes, *, force: bool,
               seed: Optional[int]) -> Outcome:
    from ..supervisor.supervise import grade_submission

    fp = fingerprint(item, opts)
    if not force:
        old = _reuse(item, fp, reports, key)
        if old is not None and not old.report.get("needs_regrade"):
            return old
        if old is not None:  # the grader failed on some functions last time: those again
            o = _options_for(item, opts, seed)
            o.only = list(old.report["needs_regrade"])
            t0 = time.monotonic()
            res = grade_submission(item.path, o)
            merged = merge_regrade(old.report, res.to_dict())
            return _write_report(item, merged, time.monotonic() - t0, fp, key, reports)
    t0 = time.monotonic()
    res = grade_submission(item.path, _options_for(item, opts, seed))
    return _write_report(item, res.to_dict(), time.monotonic() - t0, fp, key, reports)


_REPORT_FIELDS = ("assignment", "score", "max_score", "functions", "notes", "needs_regrade",
                  "isolated")


def merge_regrade(old: dict, new: dict) -> dict:
    """An earlier report (``SubmissionResult.to_dict()`` fields) with the functions graded
    again in ``new`` put in place of those that needed a regrade."""
    functions = dict(old.get("functions") or {})
    functions.update(new.get("functions") or {})
    regrade = [n for n, f in functions.items() if f.get("needs_regrade")]
    out = {k: old[k] for k in _REPORT_FIELDS if k in old}
    out.update(functions=functions,
               score=round(sum(f.get("score", 0.0) for f in functions.values()), 4),
               max_score=round(sum(f.get("max_score", 0.0) for f in functions.values()), 4),
               isolated=bool(old.get("isolated", False)) and bool(new.get("isolated", False)))
    notes = list(old.get("notes") or []) + [n for n in new.get("notes") or []
                                            if n not in (old.get("notes") or [])]
    out.pop("notes", None)
    out.pop("needs_regrade", None)
    if notes:
        out["notes"] = notes
    if regrade:
        out["needs_regrade"] = regrade
    return out


def _cell(value):
    """A CSV cell a spreadsheet shows as text: a string that would start a formula (``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return first) is led by an apostrophe."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def isolated_cell(report: dict) -> str:
    """The CSV's ``isolated`` cell: whether the student's code ran in the sandbox, or why
    nothing of it ran."""
    if report.get("refused"):
        return "not graded: refused"
    if report.get("error"):
        return "not graded: the grader failed"
    return "yes" if report.get("isolated", False) else "NO"


#: the CSV's last columns: when the hand-in was handed in (UTC) and where that time comes from
#: (:func:`handed_in`); with ``--gradebook``, the seconds past the due date (nbgrader's
#: ``total_seconds_late``, the student's extension counted) and nbgrader's late penalty (its
#: ``LateSubmissionPlugin``), as ``nbgrader export`` shows them; empty where not known
LATE_COLUMNS = ("timestamp", "timestamp_from", "seconds_late", "late_penalty")


def _late_cell(value):
    if value is None:
        return ""
    return shown(value) if isinstance(value, float) else _cell(str(value))


def write_outputs(outcomes: list[Outcome], csv_path: Path, reports: Path) -> None:
    from ..course import registry

    order = {p.name: i for i, p in enumerate(registry.problems())}
    fnames: list[str] = []
    for o in outcomes:
        for n in o.report.get("functions", {}):
            if n not in fnames:
                fnames.append(n)
    fnames.sort(key=lambda n: order.get(n, 1 << 30))
    rows = sorted(outcomes, key=lambda o: (o.item.student, o.report.get("assignment") or ""))
    with replaced(csv_path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment"] + fnames
                   + ["total", "max_total", "isolated", "needs_regrade"] + list(LATE_COLUMNS))
        for o in rows:
            fs = o.report.get("functions", {})
            # a function the grader failed on has no grade: its cell says so, never a 0
            total, max_total = totals(o.report)
            w.writerow([_cell(o.item.student), _cell(o.report.get("assignment") or "")]
                       + [(REGRADE if fs[n].get("needs_regrade") else shown(fs[n]["score"]))
                          if n in fs else "" for n in fnames]
                       + [total, max_total, isolated_cell(o.report),
                          " ".join(o.report.get("needs_regrade") or [])]
                       + [_late_cell(o.report.get(k)) for k in LATE_COLUMNS])
    by_student: dict[str, list[dict]] = {}
    for o in rows:
        by_student.setdefault(o.item.student, []).append(o.report)
    for student, reps in by_student.items():
        doc = {"student": student,
               "score": round(sum(r.get("score", 0) for r in reps), 4),
               "max_score": round(sum(r.get("max_score", 0) for r in reps), 4),
               "assignments": {(r.get("assignment") or Path(r["submission"]).stem): r
                               for r in reps}}
        (reports / f"{_slug(student)}.json").write_text(json.dumps(doc, indent=2))


def grade_all(root: Path, *, workers: int = 1, out: Optional[Path] = None,
              reports: Optional[Path] = None, force: bool | frozenset = False, opts=None,
              progress: bool = True, warm: bool = True,
              scheduler: Optional[str] = None, security=None,
              insecure_scheduler: bool = False, roster=None) -> list[Outcome]:
    """Grade every submission under ``root``: here, ``workers`` at a time, or, given a Dask
    ``scheduler`` address, as tasks on that cluster (:mod:`autograder.classroom.cluster`; ``workers``
    is then unused; ``security``: the course's client credentials for its ``tls://`` address,
    :meth:`~autograder.classroom.credentials.ClusterCredentials.security`, or a Dask Gateway
    cluster's ``.security``; ``insecure_scheduler``: a plain address, on a private machine
    only). Either way this process alone writes the reports and the CSV.
    ``force``: True grades every hand-in again; a set of student names grades theirs again
    (the others' verified reports are reused, so the CSV still lists the whole class).
    ``roster``: the instructor's roster (:func:`.roster.read`), which places a flat folder's
    files by the LMS's id (:func:`discover`)."""
    from ..supervisor.options import Options
    from ..supervisor.supervise import JUDGES, warm_cache

    opts = opts or Options()
    root = Path(root)
    items = discover(root, opts.limits, roster)
    JUDGES.reserve(workers)  # a warm trusted grader for each submission graded at once
    if isinstance(force, (set, frozenset)):
        unknown = sorted(force - {it.student for it in items})
        if unknown:
            raise UnknownStudent(f"no hand-in of student(s) {unknown} under {root}; "
                                 f"known: {sorted({it.student for it in items})}")
        forced = {it.key for it in items if it.student in force}
    else:
        forced = {it.key for it in items} if force else set()
    out = Path(out) if out else Path("class_grades.csv")
    reports = Path(reports) if reports else out.parent / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    key = report_key(reports)
    if warm and not scheduler and any(_to_grade(it, opts, reports, key, it.key in forced)
                                      for it in items):
        warm_cache(opts)  # not for a class whose every hand-in keeps its report
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    bar = None
    if progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(items), unit="submission", desc="grading", file=sys.stderr)
        except ImportError:  # pragma: no cover
            bar = None

    def record(o: Outcome) -> None:
        # when it was handed in: read on every run, never taken from a reused report
        o.report.update(handed_in(o.item))
        with lock:
            outcomes.append(o)
            write_outputs(outcomes, out, reports)  # progress survives an interruption
        if bar is not None:
            bar.set_postfix_str(f"{o.item.key}: {shown(o.report.get('score', 0)):g}/"
                                f"{shown(o.report.get('max_score', 0)):g}"
                                + (" (done before)" if o.skipped else ""))
            bar.update(1)

    # One secret seed for the whole run (unless the instructor fixed one): every submission
    # is graded on the same unpredictable inputs, and identical programs are graded once. An
    # nbgrader course folder keeps its own, which `nbgrader autograde` uses too (.seed).
    run_seed = class_seed(root) if opts.seed is None else opts.seed
    try:
        if scheduler:
            _grade_on_cluster(items, opts, reports, key, scheduler, forced=forced, seed=run_seed,
                              record=record, security=security, insecure=insecure_scheduler)
        else:
            with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
                futs = {pool.submit(grade_one, it, opts, reports, key, force=it.key in forced,
                                    seed=run_seed): it for it in items}
                for fut in as_completed(futs):
                    it = futs[fut]
                    try:
                        o = fut.result()
                    except Exception as e:  # noqa: BLE001 - the grader itself failed here
                        o = _not_graded(it, f"{type(e).__name__}: {e}")
                    record(o)
    finally:
        if bar is not None:
            bar.close()
    write_all(outcomes, out, reports, roster.students.values() if roster is not None else ())
    return outcomes


def write_all(outcomes: list[Outcome], out: Path, reports: Path, students=()) -> None:
    """The CSV, each student's report and the class report, from ``outcomes`` (written again
    by ``grade-all --gradebook`` once the gradebook said which hand-ins are late).
    ``students``: the class by the roster or gradebook: the class report names those of them
    who handed in nothing."""
    from .class_report import write as write_class_report

    write_outputs(outcomes, out, reports)
    write_class_report(reports, class_report_path(out), students=students)


def class_seed(root: Path) -> int:
    """The seed a class run draws its inputs from: the course's own (:mod:`.seed`) for an
    nbgrader course folder, so both grading paths agree; a fresh one for a flat folder."""
    from .seed import course_root, course_seed

    course = course_root(root)
    return secrets.randbits(63) if course is None else course_seed(course)


def class_report_path(csv_path: Path) -> Path:
    """Where grade-all puts the class report: next to its CSV."""
    return Path(csv_path).parent / "class_report.html"


def _grade_on_cluster(items: list[Item], opts, reports: Path, key: bytes, scheduler: str, *,
                      forced: set, seed: int, record, security=None,
                      insecure: bool = False) -> None:
    """The cluster path of :func:`grade_all`: reports reused here, the rest graded as Dask
    tasks, each result signed and written here as it arrives."""
    from .cluster import grade_on_cluster

    todo: list[Item] = []
    fps: dict[Item, str] = {}
    for it in items:
        if it.refused:
            record(_refused(it))
            continue
        try:
            fps[it] = fingerprint(it, opts)
        except FolderRefused as e:  # the folder grew past a cap since it was listed
            record(_refused(dataclasses.replace(it, refused=str(e))))
            continue
        old = None if it.key in forced else _reuse(it, fps[it], reports, key)
        if old is not None and not old.report.get("needs_regrade"):
            record(old)
        else:
            todo.append(it)
    if not todo:
        return
    for it, got in grade_on_cluster(todo, opts, scheduler, seed=seed, security=security,
                                    insecure=insecure):
        if got.error is not None or got.result is None:
            record(_not_graded(it, got.error or "no result"))
        else:
            record(_write_report(it, got.result, got.seconds, fps[it], key, reports,
                                 worker=f"{got.hostname} ({got.worker})"))


