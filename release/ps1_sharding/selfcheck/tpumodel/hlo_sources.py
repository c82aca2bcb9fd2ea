"""The source lines of a module's ops: its stack-frame tables (:func:`source_table`), the
(file, line) an op's metadata names (:func:`source_of`), set on each :class:`~.hlo_walk.Node`
(:func:`mark_sources`)."""
from __future__ import annotations

import re

from .hlo_text import string_field, unquoted_field
from .hlo_walk import Node


def mark_sources(nodes: list[Node], frames: dict[int, tuple[str, int]]) -> None:
    """Set each node's :attr:`Node.source` from its metadata and the module's ``frames``."""
    for n in nodes:
        n.source = source_of(n.attrs.get("metadata", ""), frames)


def source_table(text: str) -> dict[int, tuple[str, int]]:
    """stack frame id -> (file, line) of its innermost frame, from the module's FileNames,
    FileLocations and StackFrames tables (newer XLA prints these at the top of a module and
    an op's metadata names its frame by ``stack_frame_id``); {} where the text has none."""
    head = text.split("\n%", 1)[0].split("\nENTRY", 1)[0]
    tables: dict[str, dict[int, str]] = {}
    current = None
    for line in head.splitlines():
        word = line.strip()
        if word in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            current = tables.setdefault(word, {})
            continue
        m = re.match(r"(\d+)\s+(.*)$", word)
        if current is not None and m:
            current[int(m.group(1))] = m.group(2)
        elif not word:
            current = None
    files = {k: v.strip('"') for k, v in tables.get("FileNames", {}).items()}
    locations = {}
    for k, v in tables.get("FileLocations", {}).items():
        f, l = re.search(r"file_name_id=(\d+)", v), re.search(r"\bline=(\d+)", v)
        if f and l and int(f.group(1)) in files:
            locations[k] = (files[int(f.group(1))], int(l.group(1)))
    out = {}
    for k, v in tables.get("StackFrames", {}).items():
        loc = re.search(r"file_location_id=(\d+)", v)
        if loc and int(loc.group(1)) in locations:
            out[k] = locations[int(loc.group(1))]
    return out


def source_of(metadata: str, frames: dict[int, tuple[str, int]]) -> tuple:
    """(file, line) an op's ``metadata`` names: its stack frame's, or the older
    source_file/source_line pair; () if neither."""
    frame = unquoted_field(metadata, "stack_frame_id")
    if frame is not None and frame.isdigit() and int(frame) in frames:
        return frames[int(frame)]
    f, line = string_field(metadata, "source_file"), unquoted_field(metadata, "source_line")
    return (f, int(line)) if f is not None and line is not None and line.isdigit() else ()
