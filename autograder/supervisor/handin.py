"""Reading a hand-in from disk: regular files only, capped, never through a link.

A student's hand-in is a notebook or a ``.py`` file, in the nbgrader layout with the files of
the student's own folder beside it. Whatever reads it (grade-all's fingerprint, the copy the
sandbox sees) reads only regular files, opened without following links and without blocking,
up to :data:`MAX_HANDIN` bytes: a link to a classmate's file or to ``/proc/kmsg``, a pipe, a
device or a huge file is never read.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Optional

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


def own_files(folder: Path, limit: int = MAX_HANDIN) -> list[Path]:
    """The regular files of a student's own folder, its hidden ones and anything behind a link
    left out (links are not followed, to files or to folders), in a fixed order, up to
    ``limit`` bytes in all."""
    out, total = [], 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            p = Path(top) / name
            if name.startswith(".") or regular(p) is not None:
                continue
            total += p.stat().st_size
            if total > limit:
                return out
            out.append(p)
    return out


def read_capped(p: Path) -> bytes:
    """A regular file's bytes, opened without following a link and without blocking."""
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_HANDIN + 1)
