"""Where a modeled task came from in the student's code: the source lines of its ops (read from
the module's stack frames, :func:`autograder.tpumodel.hlo.source_table`), and whether XLA made it
from several of them or from none. Shared by the profile's text and its timeline picture."""
from __future__ import annotations

import os

#: the course package's own folder: a source line there is the course's code (a baseline, a
#: wrapper), not the student's
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def origin(task, known: bool = True) -> tuple[tuple, bool]:
    """(the student's source lines ``task`` was traced from, whether XLA made it): XLA made a
    kernel it put together from ops of several lines, or an op none of the student's lines
    wrote (a collective GSPMD added, a copy). ``known``: the program carries source lines at
    all (else nothing is said of any task)."""
    if not known:
        return (), False
    lines = tuple(s for s in getattr(task, "sources", ()) if s and not
                  os.path.abspath(s[0]).startswith(_PACKAGE + os.sep))
    return lines, len(lines) != 1


def has_sources(tl) -> bool:
    """Whether the program behind timeline ``tl`` carries source lines (JAX's stack frames)."""
    return any(getattr(t, "sources", ()) for t in getattr(tl, "tasks", ()))


def short_origin(task, known: bool = True) -> str:
    """The timeline's tag for ``task``: 'line 11', 'XLA: lines 9, 11', 'XLA' or ''."""
    lines, made = origin(task, known)
    if not lines:
        return "XLA" if made and not getattr(task, "sources", ()) else ""
    nums = ", ".join(map(str, sorted({l for _, l in lines})))
    return f"XLA: line{'s' * (',' in nums)} {nums}" if made else f"line {nums}"
