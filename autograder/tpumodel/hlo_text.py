"""The text of a per-device HLO module read into computations of instructions (:class:`Shape`,
:class:`Instr`, :class:`Computation`), with its collectives' replica groups, and
:class:`ModelError`, what the model raises for a program it cannot read or cost."""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import numpy as np


class ModelError(Exception):
    """The program holds something the model cannot cost (it falls back to wall-clock)."""



BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
         "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16, "s4": 1,
         "u4": 1, "token": 0}


def dtype_bytes(dt: str) -> int:
    if dt.startswith("f8"):
        return 1
    return BYTES.get(dt, 4)


# ----------------------------------------------------------------------------- parsing text
@dataclass
class Shape:
    dtype: str
    dims: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(int(d) for d in self.dims)  # exact: never wraps as int64 would

    @property
    def nbytes(self) -> int:
        return self.size * dtype_bytes(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass
class Instr:
    name: str
    type: Any  # Shape or list (tuple type)
    opcode: str
    operands: list[str]
    raw_operands: str
    attrs: dict[str, str]
    is_root: bool = False


@dataclass
class Computation:
    name: str
    instrs: list[Instr]
    params: dict[int, str] = field(default_factory=dict)

    @property
    def root(self) -> Instr:
        for i in self.instrs:
            if i.is_root:
                return i
        return self.instrs[-1]


#: a string as XLA prints one (``absl::CEscape``: ``\"``, ``\\``, ``\n``, ...). Its text is
#: the student's where it is an ``op_name`` (a ``named_scope``, a function's name) or a source
#: file: a quote, a bracket, a comma or a ``/*`` inside one is text, never structure (read as
#: structure, ``named_scope('"}, replica_groups={{0},{1}}, z={"')`` would hand the reader an
#: attribute of its own)
_STRING = r'"(?:[^"\\]|\\.)*"'
_STRING_OR_COMMENT = re.compile(_STRING + r"|/\*.*?\*/")


@functools.lru_cache(maxsize=None)
def _tokens(chars: str) -> re.Pattern:
    """A whole string, or one of ``chars``, or a quote no string closes."""
    return re.compile(_STRING + "|[" + re.escape(chars) + '"]')


def _outside_strings(text: str, chars: str, pos: int = 0) -> Iterator[re.Match]:
    """Each of ``chars`` in ``text`` from ``pos`` that stands outside its strings (a string
    skipped whole); a string without its closing quote is a :class:`ModelError`."""
    for m in _tokens(chars).finditer(text, pos):
        if m.group()[0] != '"':
            yield m
        elif len(m.group()) == 1:
            raise ModelError("a string without its closing quote in the HLO text")


def _match_skip(text: str, i: int, open_c: str, close_c: str) -> int:
    """The index just past the ``close_c`` that balances the first ``open_c`` from ``i`` (strings
    skipped whole)."""
    depth = 0
    for m in _outside_strings(text, open_c + close_c, i):
        depth += 1 if m.group() == open_c else -1
        if depth == 0:
            return m.end()
    raise ModelError("unbalanced brackets in HLO text")


def split_top(s: str, sep: str = ",") -> list[str]:
    """``s`` split at each ``sep`` outside brackets and strings, each part stripped (a blank
    last part left out)."""
    if sep in '()[]{}"':
        raise ValueError(f"cannot split at {sep!r}")
    out, depth, start = [], 0, 0
    for m in _outside_strings(s, "()[]{}" + sep):
        c = m.group()
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            out.append(s[start:m.start()].strip())
            start = m.end()
    if s[start:].strip():
        out.append(s[start:].strip())
    return out


def uncommented(line: str) -> str:
    """``line`` without its ``/*...*/`` comments (``/*index=5*/``); a string's text is kept."""
    if "/*" not in line:
        return line
    parts, last = [], 0
    for m in _STRING_OR_COMMENT.finditer(line):
        if m.group().startswith("/*"):
            parts.append(line[last:m.start()])
            last = m.end()
    parts.append(line[last:])
    return "".join(parts)


def _field(text: str, key: str, value: str) -> Optional[str]:
    """The first ``key=<value>`` of ``text`` outside its strings (a ``key=`` inside a string,
    ``op_name="x stack_frame_id=9"``, is the string's), as printed, or None."""
    for m in re.finditer(r"\b" + re.escape(key) + "=(" + value + ")|" + _STRING, text):
        if m.group(1) is not None:
            return m.group(1)
    return None


def string_field(text: str, key: str) -> Optional[str]:
    """The string ``key="..."`` of an attribute's ``text`` (``op_name`` of a ``metadata``),
    without its quotes, escapes kept; None where there is none."""
    found = _field(text, key, _STRING)
    return None if found is None else found[1:-1]


def unquoted_field(text: str, key: str) -> Optional[str]:
    """The unquoted value of ``key=value`` in ``text`` (``stack_frame_id`` of a ``metadata``),
    or None."""
    return _field(text, key, r'[^\s,}"]+')


_SHAPE = re.compile(r"^([a-z][a-z0-9]*)\[([0-9,\s]*)\]")


def parse_type(s: str):
    s = s.strip()
    if s.startswith("("):
        inner = s[1:_match_skip(s, 0, "(", ")") - 1]
        return [parse_type(p) for p in split_top(inner)]
    m = _SHAPE.match(s)
    if not m:
        if s.startswith("token"):
            return Shape("token", ())
        raise ModelError(f"cannot read the HLO type {s[:40]!r}")
    dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    return Shape(m.group(1), dims)


_HEAD = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*")
_COMP = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*)?\{\s*$")


def parse_module(text: str) -> tuple[dict[str, Computation], str]:
    comps: dict[str, Computation] = {}
    entry = None
    cur: Optional[Computation] = None
    for line in text.splitlines():
        line = uncommented(line.rstrip())
        if not line.strip():
            continue
        if cur is None:
            if line.startswith("HloModule"):
                continue
            m = _COMP.match(line)
            if m and "=" not in line.split("(")[0]:
                cur = Computation(m.group(2), [])
                if m.group(1):
                    entry = m.group(2)
            continue
        if line.strip() == "}":
            comps[cur.name] = cur
            cur = None
            continue
        ins = _parse_instr(line)
        if ins is not None:
            cur.instrs.append(ins)
            if ins.opcode == "parameter":
                cur.params[int(ins.raw_operands.strip())] = ins.name
    if entry is None:
        raise ModelError("no ENTRY computation in the HLO module")
    return comps, entry


#: an operand reference: ``%name``, or ``%name#i#j`` for element j of element i of the tuple
#: ``%name`` (newer XLA prints a get-tuple-element this way in place of its own instruction, e.g.
#: ``compare(%param.1#0, %constant)`` for the counter of a while loop's carry)
_OPERAND = re.compile(r"%([\w.\-]+(?:#\d+)*)")
_OPCODE = re.compile(r"([\w\-]+)\(")


def _parse_instr(line: str) -> Optional[Instr]:
    m = _HEAD.match(line)
    if not m:
        return None
    rest = line[m.end():]
    if rest.startswith("("):
        end = _match_skip(rest, 0, "(", ")")
        tstr, rest = rest[:end], rest[end:]
    else:
        sp = rest.index(" ")
        tstr, rest = rest[:sp], rest[sp:]
    rest = rest.strip()
    om = _OPCODE.match(rest)
    if not om:
        return None
    opcode = om.group(1)
    p0 = om.end() - 1
    p1 = _match_skip(rest, p0, "(", ")")
    raw = rest[p0 + 1:p1 - 1]
    attrs: dict[str, str] = {}
    tail = rest[p1:].strip()
    if tail.startswith(","):
        for part in split_top(tail[1:]):
            if "=" in part:
                k, v = part.split("=", 1)
                attrs[k.strip()] = v.strip()
    operands = [] if opcode == "constant" else _OPERAND.findall(raw)
    return Instr(m.group(2), parse_type(tstr), opcode, operands, raw, attrs,
                 is_root=bool(m.group(1)))


# ------------------------------------------------------------------------- replica groups
def device_groups(attrs: dict[str, str], n_devices: int, mesh_shape: tuple[int, ...]):
    """The replica groups of a collective as lists of device (partition) ids."""
    rg = attrs.get("replica_groups")
    if rg is None or rg in ("{}", "{{}}"):
        return [list(range(n_devices))]
    rg = rg.strip()
    if rg.startswith("mesh["):
        # mesh['axis_0'=2,'axis_1'=4] {'axis_1'}   (axes listed are the grouped ones)
        head = rg[5:rg.index("]")]
        sizes = [int(p.split("=")[1]) for p in head.split(",")]
        names = [p.split("=")[0].strip().strip("'") for p in head.split(",")]
        sel = re.findall(r"'([^']+)'", rg[rg.index("]") + 1:])
        ids = np.arange(int(np.prod(sizes))).reshape(sizes)
        keep = [i for i, nm in enumerate(names) if nm in sel]
        other = [i for i in range(len(sizes)) if i not in keep]
        ids = ids.transpose(other + keep).reshape(-1, int(np.prod([sizes[i] for i in keep])))
        return ids.tolist()
    if rg.startswith("["):
        # iota form: [G,S]<=[d0,d1,...]T(perm)
        m = re.match(r"\[([\d,]+)\]<=\[([\d,]+)\](T\(([\d,]+)\))?", rg)
        if not m:
            raise ModelError(f"cannot read replica_groups {rg!r}")
        gs = [int(v) for v in m.group(1).split(",")]
        dims = [int(v) for v in m.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if m.group(4):
            ids = ids.transpose([int(v) for v in m.group(4).split(",")])
        return ids.reshape(gs[0], -1).tolist()
    groups = re.findall(r"\{([\d,\s]*)\}", rg)
    return [[int(v) for v in g.split(",") if v.strip()] for g in groups if g.strip()]


def source_target_pairs(attrs: dict[str, str]) -> list[tuple[int, int]]:
    s = attrs.get("source_target_pairs", "")
    return [(int(a), int(b)) for a, b in re.findall(r"\{\s*(\d+)\s*,\s*(\d+)\s*\}", s)]
