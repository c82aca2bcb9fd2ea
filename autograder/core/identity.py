"""Which grader this is: a hash of its own files, so nothing another grader made is reused.

Two hashes. :func:`grader_hash` covers every file of the grader (a cluster's workers must run
this very grader). :func:`assignment_hash` is what a report or a verdict of one assignment was
judged from: the grader's code (every file but the course's data) and that assignment's own
course files: its registry module (``course/problems/<assignment>.py``) and the baselines,
references and rules it imports, followed through their imports (read from the source, not
by importing it). Changing a speed limit of ps3 then regrades ps3's hand-ins and no other
assignment's; changing a rule that ps3 and ps4 share regrades both; changing the grader's code
regrades everything.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path
from typing import Optional

from .loader import parse_python

GRADER_VERSION = "1"

#: the package whose files make up the grader (autograder/, its own tests left out)
PACKAGE = Path(__file__).resolve().parents[1]
#: the folders of the course's data, per assignment (their ``__init__.py`` count as code)
COURSE_DATA = ("course/problems", "course/baselines", "course/references", "course/rules")


def grader_files(root: Path = PACKAGE) -> list[Path]:
    """Every source file of the grader, in a fixed order."""
    return [p for p in sorted(root.rglob("*.py"))
            if "tests" not in p.relative_to(root).parts]


def _course_data(p: Path, root: Path) -> bool:
    rel = p.relative_to(root).as_posix()
    return p.name != "__init__.py" and any(rel.startswith(d + "/") for d in COURSE_DATA)


def code_files(root: Path = PACKAGE) -> list[Path]:
    """The grader's files but the course's data: what every assignment is judged with."""
    return [p for p in grader_files(root) if not _course_data(p, root)]


def _imported(path: Path, root: Path) -> list[Path]:
    """The package's files ``path`` imports by a relative import (a module, or a module named
    in ``from . import name``)."""
    out = []
    pkg = path.parent
    for node in ast.walk(parse_python(path.read_text(encoding="utf-8"), str(path))):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = pkg
        for _ in range(node.level - 1):
            base = base.parent
        if node.module:
            base = base.joinpath(*node.module.split("."))
        found = [base.with_suffix(".py")] + [base / f"{a.name}.py" for a in node.names]
        out += [f for f in found if f.is_file() and root in f.parents]
    return out


def assignment_files(assignment: str, root: Path = PACKAGE) -> Optional[list[Path]]:
    """The course files of ``assignment`` (see the module doc), in a fixed order; None when
    the course has no such assignment."""
    entry = root / "course" / "problems" / f"{assignment}.py"
    if not assignment or not entry.is_file() or entry.name == "__init__.py":
        return None
    seen: set[Path] = set()
    todo = [entry]
    while todo:
        p = todo.pop()
        if p in seen or not _course_data(p, root):
            continue
        seen.add(p)
        todo += _imported(p, root)
    return sorted(seen)


def _digest(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode())
        h.update(b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def grader_hash() -> str:
    """A hash of the grader's own files: a report from another grader is never reused."""
    return _digest(grader_files(), PACKAGE)


def assignment_hash(assignment: Optional[str], root: Path = PACKAGE) -> str:
    """A hash of what ``assignment``'s reports and verdicts are judged from (the module doc):
    the grader's code and that assignment's course files. An assignment the course does not
    have (None: not known) is judged from every file: :func:`grader_hash`'s files. ``root``:
    another copy of the package (read afresh; this grader's own is read once)."""
    if root == PACKAGE:
        return _assignment_hash(assignment)
    return _read_assignment_hash(assignment, root)


@functools.lru_cache(maxsize=None)
def _assignment_hash(assignment: Optional[str]) -> str:
    return _read_assignment_hash(assignment, PACKAGE)


def _read_assignment_hash(assignment: Optional[str], root: Path) -> str:
    files = assignment_files(assignment, root) if assignment else None
    if files is None:
        return _digest(grader_files(root), root)
    return _digest(code_files(root) + files, root)
