"""One secret seed per class: both grading paths draw a course's inputs from it.

``nbgrader autograde`` grades one notebook at a time and ``grade-all`` a whole folder; for the two
to give the same grade on the same hand-in they must draw the same inputs. The seed of an
nbgrader course folder is drawn once, on first use, and kept in ``<course>/.autograder/seed``
(readable by the instructor only, git-ignored; students never see the course folder). An
instructor who fixes one (``--seed``, ``c.GradeInSandbox.seed``) overrides it; deleting the file
draws a new one at the next grading.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Optional

#: where a course folder keeps its seed, relative to the folder
SEED_FILE = Path(".autograder") / "seed"


def course_root(folder: Path) -> Optional[Path]:
    """The nbgrader course folder ``folder`` is (one with an ``nbgrader_config.py``), or whose
    ``submitted/`` it is; else None (a folder nbgrader cannot grade has no course seed)."""
    folder = Path(folder).resolve()
    for candidate in (folder, folder.parent) if folder.name == "submitted" else (folder,):
        if (candidate / "nbgrader_config.py").is_file():
            return candidate
    return None


def course_seed(root: Path) -> int:
    """The course folder ``root``'s seed, drawn and written on first use (one writer wins;
    every later reader gets the same value)."""
    path = Path(root) / SEED_FILE
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".seed.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{secrets.randbits(63)}\n")
    try:
        os.link(tmp, path)  # fails if another grader wrote it first: theirs is kept
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return _read(path)


def _read(path: Path) -> int:
    text = path.read_text().strip()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{path} does not hold a seed (an integer): {text[:40]!r}; delete it "
                         "to draw a new one") from None
