"""Structure rules for the collective matmuls (ps3_collective_matmul and ps4_bidirectional).

They read the program the student wrote (its jaxpr, through :mod:`autograder.core.program`), never
XLA:CPU's optimised module, which may merge a chunked ring back into one collective. What they
ask for, on every mesh with more than one device along 'Y':

* no monolithic all-gather / reduce-scatter / all-to-all, and no psum of a whole operand (the
  all-reduce may psum output tiles, each at most half of the output); no other collective
  (a broadcast, a point-to-point send) either;
* the data moves round the 'Y' ring with ``ppermute`` to a neighbour (shift +1 or -1), nothing
  crosses 'X';
* the partial matmuls are interleaved with the sends: at least as many ``dot_general``\\ s run as
  there are chunks, and they are weighed, not counted: each counts up to one chunk's share of
  the device's matmul FLOPs, only if it uses the ring's data (A's blocks, or what came from
  them) and its result reaches the output, and together they carry at least
  :data:`FLOP_SHARE` of the FLOPs; the blocks that arrive are multiplied (all-gather rings)
  and the partial products are what is sent (reduce rings);
* the bytes fit the algorithm: the all-gather rings pass A's blocks (at most Y of them), the
  reduce-scatter rings only output-block partial sums ``[B/X, D/Y]`` (Y-1 of them in all);
* the bidirectional variants send about half of the data each way round the ring.

Loops may be Python ``for`` loops, ``fori_loop`` (a scan), a ``while_loop`` or unrolled code. The
grader counts how often each loop and branch ran on the grading input (a branch never taken, a
loop that never runs, count 0 and are ignored). The messages quote a count, or a byte total
that multiplies counts out, only where the program itself fixes it: a count the run measured
in a loop whose trip count the data decides, or in a branch, may encode a value of the (secret)
grading input, so it is said in words (:attr:`~autograder.core.program.Op.data_counted`).
Where a count is unknown (the self-check's
symbolic reading of a loop bound that depends on the data) the rules cannot judge the totals and
fail, saying so: they never pass on what they cannot see. With Y = 1 there is nothing to
communicate and every rule passes.
"""
from __future__ import annotations

from ...core.program import Op, Program, signed_shift
from ...core.results import CheckResult, failed, passed
from ..added import added_by_xla
from .base import CLAUSES, HOW_TO_LOOK, Rule, rule_factory, uses_shard_map

#: slack on the byte rules, as a fraction of one block (or tile): rounding and a little
#: padding fit in it, one whole extra block never does. It is relative on purpose: an absolute
#: slack in bytes would swallow a whole block at small shapes and pass a program there that
#: fails at bigger ones, so the verdict would depend on the case drawn
BLOCK_SLACK = 0.25
#: in a bidirectional ring, each direction must carry at least this share of the bytes
MIN_SHARE = 0.25
#: the partial matmuls must carry at least this share of the FLOPs of the device's matmul(s),
#: each counted up to one chunk's share (1/chunks of them): a matmul of two gathered blocks
#: counts as one chunk's, a [1, 1] decoy as almost nothing. The slack is for a step that
#: splits its matmul unevenly; a ring missing one chunk's matmul of four still passes, one
#: doing half of them in one matmul after the ring does not
FLOP_SHARE = 0.75

_MONOLITHIC = {
    "all_gather": "an all_gather, which blocks until the whole operand has arrived before any "
                  "matmul can use it",
    "psum_scatter": "a psum_scatter (reduce-scatter), which waits for the whole local product "
                    "before any partial sum moves",
    "all_to_all": "an all_to_all, which moves whole operands in one blocking step",
    "ragged_all_to_all": "a ragged_all_to_all, which moves whole operands in one blocking step",
    "pmax": "a pmax over a whole operand",
    "pmin": "a pmin over a whole operand",
}

VARIANTS = ("allgather", "allreduce", "reducescatter", "mlp")


def _operand_bytes(op: Op) -> list[int]:
    """Bytes of each operand of a (possibly multi-operand) collective."""
    sizes = [max(1, _prod(s)) for s in op.in_shapes] or [1]
    per = op.in_bytes / max(1, sum(sizes))
    return [int(round(n * per)) for n in sizes]


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _block_bytes(info, x: int, y: int, split_cols: bool = True) -> int:
    """Bytes of one device's block of a [rows, cols] array sharded P('X', 'Y' or None)."""
    if not info:
        return 0
    shape, itemsize = info
    if len(shape) != 2:
        return 0
    return (shape[0] // x) * (shape[1] // (y if split_cols else 1)) * itemsize


def _mib(n: float) -> str:
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{int(n)} B"


def _shifts(op: Op, y: int) -> str:
    return ", ".join(signed_shift(s, y) for s in sorted(op.shift(y)))


#: how many ppermutes a message about the bytes sent names (it says how many it leaves out)
SENDS_NAMED = 4


def _describe(op: Op, y: int) -> str:
    shapes = ", ".join(str(list(s)) for s in op.in_shapes) or "?"
    runs = op.times()
    extra = f", ring shift {_shifts(op, y)}" if op.perm else ""
    return f"{op.kind} over {','.join(op.axes) or '?'} of {shapes} {runs}{extra}"


def matmul_flops(variant: str, nx: int, ny: int, arg_info) -> int | None:
    """FLOPs of one device's share of the problem's matmul(s): ``2 B K N / (X Y)`` for
    ``A[B, K] @ W[K, N]`` (the MLP: both of its matmuls); None where the arguments are not
    2-D."""
    weights = arg_info[1:3] if variant == "mlp" else arg_info[1:2]
    if not arg_info or not weights or any(len(s) != 2 for s, _ in (arg_info[0], *weights)):
        return None
    rows = int(arg_info[0][0][0])
    return sum(2 * rows * int(k) * int(n) for (k, n), _ in weights) // (nx * ny)


def _flops(n: float) -> str:
    for unit, size in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} FLOP"


def weigh_partials(prog: Program, variant: str, nx: int, ny: int, n_chunks: int,
                   what: str, perms: list, psums: list,
                   first: str = "A") -> CheckResult | None:
    """The partial matmuls weighed by what they contribute (None: they carry the matmul).

    A ``dot_general`` takes part where it uses the ring's data (``first``, the first argument,
    or what came from it: the blocks that arrive, the partial sums) and its result reaches the
    output; each run counts up to one chunk's share of :func:`matmul_flops` (more in one
    matmul is still one chunk's). Together they must carry :data:`FLOP_SHARE` of the FLOPs;
    in an all-gather ring, those using a block that arrived by ppermute must carry that share
    of the Y-1 blocks that arrive; in a reduce ring, those whose results are sent (ppermute
    or psum) that share of what is sent. Where the reader did not trace the data flow (the
    jaxpr reader of the tests), every dot takes part."""
    need = matmul_flops(variant, nx, ny, prog.arg_info)
    if not need:
        return _fail("the arguments are not the problem's 2-D matrices, so the partial "
                     "matmuls cannot be weighed.")
    if variant == "allreduce" and not perms:
        # tiles cut by rows may come out empty (more tiles than rows): the shares are the
        # tiles that hold data
        n_chunks = max(1, sum(o.runs for o in psums if o.in_bytes > 0))
    unit = need / n_chunks
    traced = prog.out_from_ops is not None
    dots = [o for o in prog.ops if o.prim == "dot_general" and o.count != 0]
    ring = [o for o in dots if not traced or (0 in (o.from_args or ())
                                              and o.index in prog.out_from_ops)]

    def share(ops) -> float:  # in chunks
        return sum(o.runs * min(1.0, o.flops / unit) for o in ops)

    secret = _data(prog, "dot_general")
    weight = share(ring)
    if weight < FLOP_SHARE * n_chunks - 1e-9:
        big = max(dots, key=lambda o: o.flops, default=None)
        found = ("the matmuls that use the ring's data and reach the output carry less than "
                 "that, counting those in loops and branches as often as the data made them "
                 "run" if secret else
                 f"the matmuls that use the ring's data and reach the output carry "
                 f"{_flops(weight * unit)} of the {_flops(need)}, "
                 f"{sum(o.runs for o in ring)} matmul(s) counted up to one share each")
        biggest = ("" if big is None or big.flops <= 1.5 * unit else
                   f"; the largest, {' x '.join(str(list(s)) for s in big.in_shapes)}, "
                   f"multiplies {big.flops / unit:.1f} chunks' worth at once, which cannot "
                   f"overlap with the ring, and counts as one")
        return _fail(f"split the matmul into partial matmuls, one per chunk ({what}), each "
                     f"multiplying the data of its step, 1/{n_chunks} of the "
                     f"{_flops(need)} a device computes ({_flops(unit)} each), so each runs "
                     f"while the next chunk travels; at least {100 * FLOP_SHARE:.0f}% of the "
                     f"FLOPs must be carried that way; {found}{biggest}. (A matmul on data "
                     f"that did not come from {first}, or whose result never reaches the "
                     f"output, counts nothing.)", prog)
    if not traced:
        return None
    if variant in ("allgather", "mlp") and perms:
        ids = {o.index for o in perms}
        used = share([o for o in ring if o.from_ops & ids])
        if used < FLOP_SHARE * (ny - 1) - 1e-9:
            found = ("less than that" if secret else
                     f"{_flops(used * unit)} ({used:.2f} blocks' worth)")
            return _fail(f"multiply each block of {first} as it arrives: the Y-1 = {ny - 1} "
                         f"blocks that come by ppermute hold {_flops((ny - 1) * unit)} of the "
                         f"matmul's FLOPs, and the partial matmuls using them must carry at "
                         f"least {100 * FLOP_SHARE:.0f}% of that; found {found}.", prog)
    elif variant in ("reducescatter", "allreduce"):
        sent = [o for o in perms + psums]
        into = set().union(*(o.from_ops or () for o in sent))
        n_sent = (ny - 1) if perms else n_chunks
        fed = share([o for o in ring if o.index in into])
        if fed < FLOP_SHARE * n_sent - 1e-9:
            found = ("less than that" if secret else
                     f"{_flops(fed * unit)} ({fed:.2f} chunks' worth)")
            return _fail(f"send the partial products: the {n_sent} chunk(s) sent round the "
                         f"ring hold {_flops(n_sent * unit)} of the matmul's FLOPs, and the "
                         f"partial matmuls whose results are sent must carry at least "
                         f"{100 * FLOP_SHARE:.0f}% of that; found {found}.", prog)
    return None


def _data(prog: Program, kind: str) -> bool:
    """Whether a total over the ops of ``kind`` (a collective kind or a primitive) depends on a
    count the data decided, theirs or a zero (a branch not taken): secret on a secret case, so
    the messages say it in words."""
    return any(o.data_counted for o in prog.ops if kind in (o.kind, o.prim))


def _fail(msg: str, prog: Program | None = None) -> CheckResult:
    if prog is not None and prog.auto_axes:
        auto = ", ".join(f"'{a}'" for a in prog.auto_axes)
        msg += (f" (Your shard_map leaves {auto} to the compiler: inside it each array spans "
                f"the whole of {auto}, and so do the bytes read here. Make it manual over every "
                f"axis, the specs naming both 'X' and 'Y'.)")
    return failed("structure", msg + " " + HOW_TO_LOOK)


def ring_budget(variant: str, nx: int, ny: int, arg_info, out_info, *, ring: bool = True):
    """``(budget, per_send, need)``: the bytes one device may send in all, the most one ppermute
    may carry, and both in words, for a ring ``variant`` on an ``nx`` x ``ny`` mesh.

    ``arg_info``/``out_info`` are ``(global shape, itemsize)`` of the first argument and of the
    output. ``ring``: the all-reduce is written as a ppermute ring (tiled psums have no byte
    budget). ``(None, None, None)`` where nothing is budgeted.
    """
    budget = per_op = need = None
    if variant == "allgather":
        blk = _block_bytes(arg_info, nx, ny)
        budget, per_op = ny * blk, blk
        need = f"at most Y = {ny} blocks of A's [B/X, D/Y] ({_mib(blk)} each)"
    elif variant == "reducescatter":
        blk = _block_bytes(out_info, nx, ny)
        budget, per_op = (ny - 1) * blk, blk
        need = (f"only output-block partial sums [B/X, D/Y] ({_mib(blk)} each), Y-1 = "
                f"{ny - 1} of them in all")
    elif variant == "mlp":
        blk = _block_bytes(out_info, nx, ny)
        budget, per_op = (2 * ny - 1) * blk, blk
        need = (f"blocks of [B/X, D/Y] ({_mib(blk)} each): at most Y = {ny} for the "
                f"all-gather ring and Y-1 = {ny - 1} partial sums for the reduce-scatter "
                f"ring")
    elif variant == "allreduce" and ring:  # a ring: reduce-scatter, then all-gather of tiles
        tile = _block_bytes(out_info, nx, ny, split_cols=False) // ny
        budget = 2 * (ny - 1) * tile
        need = (f"at most 2(Y-1) = {2 * (ny - 1)} output tiles of [B/X, F/Y] "
                f"({_mib(tile)} each: Y-1 to reduce, Y-1 to share)")
    return budget, per_op, need


@rule_factory
def ring_rule(variant: str, *, bidirectional: bool = False) -> Rule:
    """The structure rule for one collective-matmul variant.

    ``variant``: 'allgather' (A[B_X, D_Y] @ W[D, F_Y]), 'allreduce' (A[B_X, D_Y] @ W[D_Y, F] ->
    [B_X, F]), 'reducescatter' (T[B_X, F_Y] @ W2[F_Y, D] -> [B_X, D_Y]) or 'mlp' (the two rings
    chained).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")

    def rule(prog: Program, mesh, problem) -> CheckResult | None:
        sm = uses_shard_map(prog, mesh, problem)
        if not sm.passed:
            return sm
        nx, ny = int(mesh.shape["X"]), int(mesh.shape["Y"])
        # every collective that ran, scalars too: a scalar all_gather in a loop moves a whole
        # array an element at a time
        cols = [o for o in prog.collectives() if o.count != 0]
        added = added_by_xla(prog, mesh)
        if added:
            o = added[0]
            return _fail(f"write every transfer yourself, and give shard_map the in_specs and "
                         f"out_specs of the arguments and the output, so that nothing moves "
                         f"outside it; XLA adds {len(added)} collective(s) your program does "
                         f"not write, e.g. a {o.kind} over {','.join(o.axes)} of "
                         f"{list(o.in_shapes[0]) if o.in_shapes else []} ({o.prim}).")

        across_x = [o for o in cols if "X" in o.axes]
        if across_x and nx > 1:
            return _fail(f"keep every exchange on the 'Y' axis: nothing needs to cross 'X' "
                         f"(every output row block stays where its input rows are); found "
                         f"{_describe(across_x[0], ny)}.")
        if ny == 1:
            return passed("structure", "with Y = 1 every device already holds what it needs: "
                          "no communication, as expected")

        for o in cols:
            if o.kind in _MONOLITHIC:
                return _fail(f"send the data in chunks with ppermute round the 'Y' ring, so "
                             f"the matmuls run while it travels; found {_MONOLITHIC[o.kind]}: "
                             f"{_describe(o, ny)}.")
            if o.kind not in ("ppermute", "psum"):  # any other way of moving data
                return _fail(f"move the data with ppermute round the 'Y' ring (and, for the "
                             f"all-reduce, psums of output tiles), the collectives these "
                             f"exercises are about; found a {o.kind}: {_describe(o, ny)}.")

        out_info = prog.out_info[0] if prog.out_info else None
        arg_info = prog.arg_info[0] if prog.arg_info else None
        psums = [o for o in cols if o.kind == "psum"]
        perms = [o for o in cols if o.kind == "ppermute"]

        if psums:
            if variant != "allreduce" or bidirectional:
                why = ("send the partial sums both ways round the ring with ppermute (a psum "
                       "has no ring direction)" if bidirectional else
                       "pass the data round the ring with ppermute")
                return _fail(f"replace the psum of array data: {why}; found "
                             f"{_describe(psums[0], ny)}.")
            out_local = _block_bytes(out_info, nx, ny, split_cols=False)
            for o in psums:
                if out_local and o.in_bytes > out_local / 2:
                    return _fail(
                        f"tile the output columns and psum each tile, so each tile's reduction "
                        f"overlaps the next tile's matmul; found one psum of "
                        f"{_mib(o.in_bytes)}, the whole local output is {_mib(out_local)}: "
                        f"{_describe(o, ny)}.")

        for o in perms:
            if tuple(o.axes) != ("Y",):
                return _fail(f"run the ring along the 'Y' axis alone; found "
                             f"{_describe(o, ny)}.")
            bad = o.shift(ny) - {1, ny - 1}
            if bad:
                found = ", ".join(signed_shift(b, ny) for b in sorted(bad))
                return _fail(f"pass data only to a ring neighbour (shift +1 or -1 mod {ny}); "
                             f"found shift {found} in {_describe(o, ny)}.")

        if variant != "allreduce" and not perms:
            return _fail("pass the blocks round the 'Y' ring with ppermute; found no "
                         "ppermute in the program.")
        if variant == "allreduce" and not perms and not psums:
            return _fail("reduce along 'Y' (psums of output tiles, or a ppermute ring); found "
                         "no communication.")

        # -- chunks interleaved with partial matmuls --------------------------------------
        dots = [o for o in prog.ops if o.prim == "dot_general" and o.count != 0]
        n_dots = sum(o.runs for o in dots)
        unknown = [o for o in dots + perms + psums if o.count is None]
        if unknown:
            return _fail(f"run the ring a known number of steps (a Python for, or fori_loop / "
                         f"while_loop bounded by the axis size): how many times "
                         f"{_describe(unknown[0], ny)} runs depends on the data, so the "
                         f"chunks and matmuls cannot be counted.")
        if variant == "allreduce" and not perms:
            n_chunks = sum(o.runs for o in psums)
            if n_chunks < 2:
                found = ("fewer than two psums run (in a loop or branch whose count the data "
                         "decides)" if _data(prog, "psum") else f"{n_chunks} psum")
                return _fail(f"reduce the output in several tiles, one psum each; found "
                             f"{found}.")
            what = f"{n_chunks} psum'd output tiles"
        else:
            n_chunks = ny * (2 if variant == "mlp" else 1)
            what = f"{n_chunks} chunks ({'two rings of ' if variant == 'mlp' else ''}Y = {ny})"
        if n_dots < n_chunks:
            found = (f"found {n_dots} dot_general(s)" if not _data(prog, "dot_general") else
                     f"found fewer dot_generals, run in a loop or branch whose count the data "
                     f"decides")
            return _fail(f"split the matmul into partial matmuls, at least one per chunk "
                         f"({what}), each running while the next chunk travels (one big matmul "
                         f"before or after the ring cannot overlap with it); {found}.")
        names = problem.arg_names or ("A",)
        weighed = weigh_partials(prog, variant, nx, ny, n_chunks, what, perms, psums, names[0])
        if weighed is not None:
            return weighed

        # -- bytes ---------------------------------------------------------------------
        notes = []
        total = sum(o.runs * o.in_bytes for o in perms)
        budget, per_op, need = ring_budget(variant, nx, ny, arg_info, out_info,
                                           ring=bool(perms))
        unit = per_op or (budget / (2 * (ny - 1)) if budget else None)
        if per_op:
            for o in perms:
                big = max(_operand_bytes(o))
                if big > (1 + BLOCK_SLACK) * per_op:
                    return _fail(f"send one block at a time ({need}); found a ppermute of "
                                 f"{_mib(big)}: {_describe(o, ny)}.", prog)
        if budget is not None:
            if total > budget + BLOCK_SLACK * unit:
                sent = ("more than that sent with ppermute, in a loop or branch whose count "
                        "the data decides" if _data(prog, "ppermute") else
                        f"{_mib(total)} sent with ppermute")
                more = len(perms) - SENDS_NAMED
                listed = "; ".join(_describe(o, ny) for o in perms[:SENDS_NAMED]) + (
                    f"; and {more} more ppermute{'s' * (more != 1)}" if more > 0 else "")
                return _fail(f"send {need}: {_mib(budget)} per device in all; "
                             f"found {sent} ({listed}).", prog)

        # -- both directions -------------------------------------------------------------
        if bidirectional:
            if not perms:
                return _fail("send with ppermute in both ring directions; found no ppermute.")
            if ny > 2:
                fwd = back = 0.0
                for o in perms:
                    s = o.shift(ny)
                    b = o.runs * o.in_bytes
                    if s == {1}:
                        fwd += b
                    elif s == {ny - 1}:
                        back += b
                    else:
                        fwd += b / 2
                        back += b / 2
                tot = fwd + back
                if min(fwd, back) < MIN_SHARE * tot:
                    secret = _data(prog, "ppermute")
                    found = (f"found less than {100 * MIN_SHARE:.0f}% of the bytes sent one "
                             f"way, counting the ppermutes in loops and branches as often as "
                             f"the data made them run" if secret else
                             f"found {_mib(fwd)} sent with shift +1 and {_mib(back)} with "
                             f"shift -1 ({100 * fwd / max(tot, 1):.0f}% / "
                             f"{100 * back / max(tot, 1):.0f}%)")
                    return _fail(
                        f"split the data between both ring directions, about half each way "
                        f"(shift +1 and shift -1 mod {ny}); {found}.")
                notes.append("both ring directions" if _data(prog, "ppermute") else
                             f"both ring directions ({100 * fwd / tot:.0f}% / "
                             f"{100 * back / tot:.0f}% of the bytes)")
            else:
                notes.append("on a ring of two, +1 and -1 reach the same neighbour")

        kind = "tiled psums" if (variant == "allreduce" and not perms) else "a ppermute ring"
        n = "enough" if _data(prog, "dot_general") else n_dots
        msg = f"communication in chunks ({kind}){CLAUSES}{n} partial matmuls interleaved with it"
        if budget is not None:
            msg += CLAUSES + (f"within the budget of {_mib(budget)} sent per device"
                              if _data(prog, "ppermute") else
                              f"{_mib(total)} sent per device (budget {_mib(budget)})")
        if notes:
            msg += CLAUSES + CLAUSES.join(notes)
        return passed("structure", msg)

    return Rule(check=rule,
                name=f"ring_rule_{variant}{'_bidirectional' if bidirectional else ''}",
                variant=variant, bidirectional=bidirectional)  # read by autograder.course.bars
