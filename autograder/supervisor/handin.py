"""Reading a hand-in from disk: regular files only, capped, never through a link.

A student's hand-in is a notebook or a ``.py`` file, in the nbgrader layout with the files of
the student's own folder beside it. Whatever reads it (grade-all's fingerprint, the copy the
sandbox sees) reads only regular files, opened without following links and without blocking,
up to :data:`MAX_HANDIN` bytes: a link to a classmate's file or to ``/proc/kmsg``, a pipe, a
device or a huge file is never read.

A student's own folder is listed one directory at a time (no recursion, so no depth can exhaust
Python's stack), within caps on the entries listed, on how deep its folders nest and on the time
the listing takes (:class:`~autograder.supervisor.options.Limits`: ``folder_entries``,
``folder_depth``, ``folder_s``); past one of them the hand-in is refused with the reason
(:class:`FolderRefused`), the student's to fix, never graded by halves.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

from ..core.clock import CLOCK

#: the largest hand-in (a notebook or .py file, or the files of the student's own folder
#: together) grade-all reads
MAX_HANDIN = 64 << 20


def regular(p: Path) -> Optional[str]:
    """None when ``p`` is a regular file of at most :data:`MAX_HANDIN` bytes (not a link, a
    pipe, a device...), else why it is refused."""
    try:
        st = os.lstat(p)
    except OSError as e:
        return f"{p.name} cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return f"{p.name} is a link, not a file handed in: grade-all reads no links"
    if not stat.S_ISREG(st.st_mode):
        return f"{p.name} is not a regular file"
    if st.st_size > MAX_HANDIN:
        return f"{p.name} is larger than {MAX_HANDIN >> 20} MB"
    return None


class FolderRefused(ValueError):
    """A student's own folder over a cap on entries, depth or listing time: the hand-in's
    refusal (a person looks at it), never the grader's failure."""


def own_files(folder: Path, limit: int = MAX_HANDIN, limits=None) -> list[Path]:
    """The regular files of a student's own folder, its hidden ones and anything behind a link
    left out (links are not followed, to files or to folders), in a fixed order (each folder's
    files, then its subfolders in turn), up to ``limit`` bytes in all.

    Listed iteratively, within ``limits`` (a :class:`~autograder.supervisor.options.Limits`;
    None: its defaults): every entry listed counts, hidden ones included, and the listing
    stops at the first entry past a cap. :class:`FolderRefused` says which cap and how to fix
    it."""
    if limits is None:
        from .options import Limits

        limits = Limits()
    deadline = CLOCK.deadline(limits.folder_s)
    out, total, seen = [], 0, 0
    stack = [(Path(folder), 0)]  # folders still to list, the next one last
    while stack:
        top, depth = stack.pop()
        files, dirs = [], []
        try:
            entries = os.scandir(top)
        except OSError:
            continue  # unreadable: nothing of it is handed in
        with entries:
            for e in entries:
                seen += 1
                if seen > limits.folder_entries:
                    raise FolderRefused(
                        f"the folder {Path(folder).name}/ holds more than "
                        f"{limits.folder_entries:,} entries (files and folders, hidden ones "
                        "included): nothing was graded; hand in the notebook with only the "
                        "files it needs")
                if seen % 256 == 0 and deadline.expired():
                    raise FolderRefused(
                        f"listing the folder {Path(folder).name}/ took more than "
                        f"{limits.folder_s:g} s ({seen:,} entries so far): nothing was graded; "
                        "hand in the notebook with only the files it needs")
                if e.name.startswith("."):
                    continue
                try:
                    if e.is_dir(follow_symlinks=False):
                        dirs.append(e.name)
                    else:
                        files.append(e.name)
                except OSError:
                    continue
        if dirs and depth + 1 > limits.folder_depth:
            raise FolderRefused(
                f"the folder {Path(folder).name}/ nests folders more than "
                f"{limits.folder_depth} deep ({Path(top, dirs[0]).relative_to(folder)}...): "
                "nothing was graded; hand in the notebook with only the files it needs")
        for name in sorted(files):
            p = top / name
            if regular(p) is not None:
                continue
            total += p.stat().st_size
            if total > limit:
                return out
            out.append(p)
        stack.extend((top / d, depth + 1) for d in sorted(dirs, reverse=True))
    return out


def read_capped(p: Path) -> bytes:
    """A regular file's bytes, opened without following a link and without blocking."""
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_HANDIN + 1)
