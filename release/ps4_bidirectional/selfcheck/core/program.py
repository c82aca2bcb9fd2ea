"""What a student's program does, read from its jaxpr and its compiled module.

The structure checks judge the program the student *wrote* (the jaxpr: every collective with its
axes, bytes, permutation and how many times a loop runs it), because XLA:CPU may merge or drop
collectives when it optimises. "No communication added by the compiler" is judged on the compiled
module instead, where GSPMD's own collectives appear.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from . import devices

#: jaxpr primitive -> the collective kind used in rules and messages.
COLLECTIVE_KINDS = {
    "psum": "psum",
    "psum_invariant": "psum",
    "psum2": "psum",
    "pmax": "pmax",
    "pmin": "pmin",
    "ppermute": "ppermute",
    "all_gather": "all_gather",
    "all_gather_invariant": "all_gather",
    "all_to_all": "all_to_all",
    "ragged_all_to_all": "ragged_all_to_all",
    "reduce_scatter": "psum_scatter",
    "psum_scatter": "psum_scatter",
    "pbroadcast": "collective_broadcast",
    "psend": "send",
    "precv": "recv",
}

#: HLO op names of the compiled module that move data between devices.
HLO_COLLECTIVES = (
    "all-gather",
    "all-reduce",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
    "collective-broadcast",
    "ragged-all-to-all",
    "send",
    "recv",
)
#: an instruction of one of them: after the ``=``, its type (a tuple type holds spaces: XLA's
#: combiners merge collectives into one of tuple type), then the op, maybe its async start
_COLLECTIVE_LINE = re.compile(r"=.*?\s(" + "|".join(HLO_COLLECTIVES) + r")(-start)?\(")


@dataclass
class Op:
    """One primitive application, with how often it runs (``count``; None if unknown)."""

    prim: str
    kind: str | None  # collective kind or None for compute
    axes: tuple[str, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    in_bytes: int
    out_bytes: int
    count: int | None
    loop_depth: int
    in_shard_map: bool
    params: dict = field(default_factory=dict, repr=False)
    index: int = 0  # program order
    #: the count was measured on the data the program ran on, not fixed by the program: the op
    #: sits in a loop whose trip count the program does not state, or in a branch. On a secret
    #: case such a count is secret (a program can encode an input value in a trip count), so
    #: feedback names it qualitatively (:meth:`times`), never as a number
    data_counted: bool = False
    #: FLOPs of one run of a ``dot_general`` (2 x output elements x contracted size), 0 for
    #: any other op (and where the reader did not compute them)
    flops: int = 0
    #: where the op's operands come from, where the reader traced the data flow (None: not
    #: traced; :mod:`autograder.core.stablehlo` traces it): the indices of the dots and
    #: collectives whose results reach an operand, through any computation, loop carry,
    #: branch or call, and the positions of the traced function's arguments that do
    from_ops: frozenset | None = None
    from_args: frozenset | None = None

    @property
    def perm(self) -> tuple[tuple[int, int], ...] | None:
        p = self.params.get("perm")
        return tuple(tuple(x) for x in p) if p is not None else None

    @property
    def runs(self) -> int:
        """How many times the op ran: its count (0 for a loop or branch that never ran), or
        once where the count is unknown (rules that must not pass on an unknown count check
        ``count is None`` themselves)."""
        return 1 if self.count is None else self.count

    def times(self) -> str:
        """How often the op ran, for a message: ``x3`` where the program fixes the count, else
        in words that quote no figure the data produced."""
        if self.count is None:
            return "an unknown number of times"
        if self.data_counted:
            return "in a loop or branch whose count the data decides"
        return f"x{self.count}"

    def shift(self, axis_size: int) -> set[int]:
        """The ring shifts (dst - src mod n) a ppermute uses."""
        if self.perm is None:
            return set()
        return {(d - s) % axis_size for s, d in self.perm}


def _axes_of(params: dict) -> tuple[str, ...]:
    for key in ("axes", "axis_name"):
        if key in params:
            v = params[key]
            if isinstance(v, (tuple, list, frozenset, set)):
                return tuple(str(a) for a in v)
            return (str(v),)
    return ()


def _nbytes(aval) -> int:
    try:
        return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize
    except Exception:
        return 0


def _shape(aval) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in aval.shape)
    except Exception:
        return ()


def _sub_jaxprs(params: dict) -> Iterator[tuple[str, Any]]:
    from jax.extend import core as jcore

    for k, v in params.items():
        vals = v if isinstance(v, (tuple, list)) else (v,)
        for item in vals:
            if isinstance(item, jcore.ClosedJaxpr):
                yield k, item.jaxpr
            elif isinstance(item, jcore.Jaxpr):
                yield k, item


def _literal_value(x):
    val = getattr(x, "val", None)
    if val is None:
        return None
    try:
        return int(np.asarray(val))
    except Exception:
        return None


_PASS_THROUGH = ("convert_element_type", "pvary", "pcast", "copy", "copy_p")
_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "ne": "ne"}


def _producers(jaxpr) -> dict:
    return {id(v): e for e in jaxpr.eqns for v in e.outvars}


def _through(var, producers):
    """Follow ``var`` back through dtype conversions and vma casts."""
    seen = 0
    while id(var) in producers and seen < 16:
        e = producers[id(var)]
        if e.primitive.name not in _PASS_THROUGH or len(e.invars) != 1:
            break
        var, seen = e.invars[0], seen + 1
    return var


def _while_step(eqn, pos: int) -> int | None:
    """How much carry ``pos`` changes per iteration, if the body adds/subtracts a literal."""
    body = eqn.params["body_jaxpr"].jaxpr
    bnc = eqn.params["body_nconsts"]
    if pos >= len(body.outvars) or bnc + pos >= len(body.invars):
        return None
    prods = _producers(body)
    me = body.invars[bnc + pos]
    out = _through(body.outvars[pos], prods)
    e = prods.get(id(out))
    if e is None or e.primitive.name not in ("add", "sub") or len(e.invars) != 2:
        return None
    a, b = (_through(v, prods) for v in e.invars)
    if a is me and _literal_value(b) is not None:
        k = _literal_value(b)
        return k if e.primitive.name == "add" else -k
    if b is me and e.primitive.name == "add" and _literal_value(a) is not None:
        return _literal_value(a)
    return None


def _while_trip_count(eqn) -> int | None:
    """Trip count of a ``while`` whose condition compares a counter with a known bound.

    Handles ``i < n`` (the form ``fori_loop`` produces), ``<=``, ``>``, ``>=`` and ``!=``, with the
    counter on either side, through dtype conversions and vma casts; the start value and the bound
    must be literals (or constants known at trace time) and the body must add or subtract a
    literal step. Returns None when any of that is unknown.
    """
    cond = eqn.params["cond_jaxpr"].jaxpr
    if not cond.eqns or len(cond.outvars) != 1:
        return None
    cprods = _producers(cond)
    cmp_eqn = cprods.get(id(_through(cond.outvars[0], cprods)))
    if cmp_eqn is None or cmp_eqn.primitive.name not in _FLIP or len(cmp_eqn.invars) != 2:
        return None
    op = cmp_eqn.primitive.name
    lhs, rhs = (_through(v, cprods) for v in cmp_eqn.invars)
    cnc = eqn.params["cond_nconsts"]
    bnc = eqn.params["body_nconsts"]
    consts_in = eqn.invars[:cnc]
    carry_in = eqn.invars[cnc + bnc:]

    def carry_pos(v):
        if v in cond.invars:
            p = cond.invars.index(v) - cnc
            return p if 0 <= p < len(carry_in) else None
        return None

    def known(v):
        """The value of a bound: a literal, a literal constant, or a carry never changed."""
        lit = _literal_value(v)
        if lit is not None:
            return lit
        if v in cond.invars:
            p = cond.invars.index(v)
            if p < cnc:
                return _literal_value(consts_in[p])
            p -= cnc
            if 0 <= p < len(carry_in) and _while_step(eqn, p) in (None, 0):
                return _literal_value(carry_in[p])
        return None

    pos = carry_pos(lhs)
    bound = known(rhs)
    if pos is None or bound is None or _while_step(eqn, pos) in (None, 0):
        pos2, bound2 = carry_pos(rhs), known(lhs)
        if pos2 is not None and bound2 is not None and _while_step(eqn, pos2) not in (None, 0):
            pos, bound, op = pos2, bound2, _FLIP[op]
    if pos is None or bound is None:
        return None
    start = _literal_value(carry_in[pos])
    if start is None:
        return None
    return trip_count(op, start, bound, _while_step(eqn, pos))


def trip_count(op: str, start: int, bound: int, step: int | None) -> int | None:
    """Iterations of ``for (i = start; i <op> bound; i += step)``; ``op`` is one of lt, le, gt,
    ge, ne. None when the loop never ends or the step is unknown (except ``lt``, see below).
    Shared by the jaxpr walker and :mod:`autograder.core.stablehlo`."""
    if step is None:
        # The historical assumption for ``i < n`` loops whose increment could not be read.
        if op != "lt":
            return None
        step = 1
    if step == 0:
        return None
    gap = bound - start
    if op in ("lt", "le"):
        if step < 0:
            return None if (gap > 0 or (op == "le" and gap == 0)) else 0
        n = -(-gap // step) if op == "lt" else gap // step + 1
        return max(0, n)
    if op in ("gt", "ge"):
        if step > 0:
            return None if (gap < 0 or (op == "ge" and gap == 0)) else 0
        n = -(-(-gap) // (-step)) if op == "gt" else (-gap) // (-step) + 1
        return max(0, n)
    # ne
    if gap % step == 0 and gap // step >= 0:
        return gap // step
    return None


def signed_shift(s: int, n: int) -> str:
    """A ring shift (destination - source mod n) as the notebooks say it: +1 is "to the right"
    (towards higher index), -1 "to the left"; on a ring of two they are the same neighbour."""
    d = s if s <= n // 2 else s - n
    return f"{d:+d}"


@dataclass
class Program:
    """A flattened view of a traced function: every op in program order, loops expanded by count."""

    ops: list[Op]
    jaxpr_text: str
    compiled_text: str = ""
    uses_shard_map: bool = False
    shard_map_check_vma: tuple[bool, ...] = ()
    #: (shape, itemsize) of the traced function's array arguments and outputs (global view)
    arg_info: tuple = ()
    out_info: tuple = ()
    #: short dtype names ('f32', 'i32', 'bool', ...) of the arguments, in arg_info's order
    arg_dtypes: tuple[str, ...] = ()
    #: the case's arguments (global NumPy arrays and static values) the program was read on,
    #: for rules that weigh what it moved against what the input required (None: not given)
    inputs: tuple | None = None
    #: mesh axes (of size > 1) a shard_map leaves to the compiler (``axis_names`` naming only
    #: some axes): inside it, an array spans their whole extent, and so do its bytes as read
    auto_axes: tuple[str, ...] = ()
    #: indices of the ops that ran (count not 0) on devices whose path is read as another
    #: Program (the devices ran different loop counts or branches): the compiled module, one
    #: for all devices, holds them whichever path this is
    ran_elsewhere: frozenset = frozenset()
    #: the indices of the dots and collectives whose results reach the function's outputs
    #: (None where the data flow was not traced, see :attr:`Op.from_ops`)
    out_from_ops: frozenset | None = None
    #: whether some device received different bits from an all_to_all when the reader reran
    #: the program on inputs that must not change what it receives (a rule's ``perturbations``,
    #: :func:`autograder.course.reading.read_paths`); None where that was not measured
    received_changed: bool | None = None

    # -- queries used by the structure rules -------------------------------------------------
    def collectives(self, kind: str | None = None, axis: str | None = None) -> list[Op]:
        out = [o for o in self.ops if o.kind is not None]
        if kind is not None:
            out = [o for o in out if o.kind == kind]
        if axis is not None:
            out = [o for o in out if axis in o.axes]
        return out

    def count(self, prim_or_kind: str) -> int:
        """Dynamic count (loops multiplied out; unknown trip counts count once)."""
        return sum(o.runs for o in self.ops if prim_or_kind in (o.prim, o.kind))

    def bytes_moved(self, kind: str, axis: str | None = None) -> int:
        """Operand bytes handed to collectives of ``kind``, loops multiplied out."""
        return sum(o.runs * o.in_bytes for o in self.collectives(kind, axis))

    def data_counted(self) -> bool:
        """Whether any op's count was decided by the data (see :attr:`Op.data_counted`): then
        figures that multiply counts out are secret on a secret case, and messages say them in
        words."""
        return any(o.data_counted for o in self.ops)

    def has_unknown_loops(self) -> bool:
        return any(o.count is None for o in self.ops)

    def primitive_counts(self) -> Counter:
        c: Counter = Counter()
        for o in self.ops:
            c[o.prim] += o.runs
        return c

    def compiled_collectives(self) -> list[str]:
        """Lines of the compiled module that run a collective (after XLA's own passes)."""
        return compiled_collective_lines(self.compiled_text)

    def summary(self, limit: int = 12) -> str:
        """A short listing of the collectives the program runs, for failure messages."""
        cols = self.collectives()
        if not cols:
            return "no collectives"
        lines = []
        for o in cols[:limit]:
            n = len(o.perm or ())
            extra = (f" ring shift {', '.join(signed_shift(s, n) for s in sorted(o.shift(n)))}"
                     if o.perm else "")
            lines.append(
                f"{o.kind} over {','.join(o.axes) or '?'} of {list(o.in_shapes[0]) if o.in_shapes else []}"
                f" {'x?' if o.count is None else o.times()}{extra}"
            )
        if len(cols) > limit:
            lines.append(f"... and {len(cols) - limit} more")
        return "; ".join(lines)


def compiled_collective_lines(text: str) -> list[str]:
    """The instructions of a compiled HLO module that move data between devices."""
    return [l.strip() for l in text.splitlines() if _COLLECTIVE_LINE.search(l)]


def _dot_flops(params: dict, in_avals: list, out_avals: list) -> int:
    """FLOPs of one ``dot_general``: 2 x the output's elements x the contracted size."""
    try:
        (lhs_contract, _), _ = params["dimension_numbers"]
        lhs = _shape(in_avals[0])
        return int(2 * np.prod(_shape(out_avals[0]), dtype=np.int64)
                   * np.prod([lhs[d] for d in lhs_contract], dtype=np.int64))
    except Exception:  # noqa: BLE001  # not a dot_general's parameters: nothing weighed
        return 0


def flatten(jaxpr, *, count: int | None = 1, depth: int = 0, in_shard_map: bool = False,
            ops: list[Op] | None = None, meta: dict | None = None) -> list[Op]:
    """Walk a jaxpr and everything nested in it, multiplying loop bodies by their trip count."""
    ops = [] if ops is None else ops
    meta = {"shard_map": False, "check_vma": []} if meta is None else meta
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        params = dict(eqn.params)
        kind = COLLECTIVE_KINDS.get(name)
        in_avals = [getattr(v, "aval", None) for v in eqn.invars]
        out_avals = [v.aval for v in eqn.outvars]
        if name not in ("scan", "while", "shard_map", "pjit", "jit", "cond", "closed_call",
                        "custom_jvp_call", "custom_vjp_call", "remat", "remat2", "checkpoint",
                        "composite"):
            ops.append(Op(
                prim=name, kind=kind, axes=_axes_of(params) if kind else (),
                in_shapes=tuple(_shape(a) for a in in_avals if a is not None),
                out_shapes=tuple(_shape(a) for a in out_avals),
                in_bytes=sum(_nbytes(a) for a in in_avals if a is not None),
                out_bytes=sum(_nbytes(a) for a in out_avals),
                count=count, loop_depth=depth, in_shard_map=in_shard_map,
                params={k: v for k, v in params.items() if k in ("perm", "axis_size", "tiled",
                        "all_gather_dimension", "scatter_dimension", "split_axis", "concat_axis",
                        "dimension_numbers")},
                index=len(ops),
                flops=_dot_flops(params, in_avals, out_avals) if name == "dot_general" else 0,
            ))
            continue
        sub_count, sub_depth, sub_sm = count, depth, in_shard_map
        test_count = None  # a while loop's condition: once more per entry than its body
        if name == "scan":
            n = int(params.get("length", 1))
            sub_count = None if count is None else count * n
            sub_depth = depth + 1
        elif name == "while":
            n = _while_trip_count(eqn)
            sub_count = None if (count is None or n is None) else count * n
            test_count = None if (count is None or n is None) else count * (n + 1)
            sub_depth = depth + 1
        elif name == "shard_map":
            meta["shard_map"] = True
            meta["check_vma"].append(bool(params.get("check_vma", params.get("check_rep", True))))
            sub_sm = True
        for key, sub in _sub_jaxprs(params):
            c = test_count if (name == "while" and key == "cond_jaxpr") else sub_count
            flatten(sub, count=c, depth=sub_depth, in_shard_map=sub_sm, ops=ops, meta=meta)
    return ops


def trace(fn, args, *, static_argnums=(), compiled_text: str | None = None) -> Program:
    """Trace ``fn(*args)`` (arrays or ShapeDtypeStructs) into a :class:`Program`.

    ``compiled_text`` is the compiled module's text if the caller already compiled ``fn``;
    otherwise it is compiled here.
    """
    import jax

    closed = jax.make_jaxpr(fn, static_argnums=static_argnums)(*args)
    meta: dict = {"shard_map": False, "check_vma": []}
    ops = flatten(closed.jaxpr, meta=meta)
    text = compiled_text
    if text is None:
        text = devices.lower(fn, *args, static_argnums=static_argnums).compile().as_text()
    from jax._src.dtypes import short_dtype_name

    def info(avals):
        return tuple((_shape(a), np.dtype(a.dtype).itemsize) for a in avals)

    return Program(ops=ops, jaxpr_text=str(closed), compiled_text=text,
                   uses_shard_map=meta["shard_map"], shard_map_check_vma=tuple(meta["check_vma"]),
                   arg_info=info(closed.in_avals), out_info=info(closed.out_avals),
                   arg_dtypes=tuple(short_dtype_name(a.dtype) for a in closed.in_avals))
