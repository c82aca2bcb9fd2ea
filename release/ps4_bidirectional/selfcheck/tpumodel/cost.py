"""Cost rules: from the flattened per-device program to timed tasks.

Compute. Array operations are grouped into kernels the way XLA's TPU fusion would, never across
a loop body's boundary (a TPU launches each iteration's kernels anew) (elementwise
chains fuse together; an elementwise consumer fuses into the one matmul feeding it; slices,
converts and transposes feeding a matmul fuse into it), except that a matmul never takes in a
consumer that reads a transfer the matmul itself does not wait for: a kernel starts when all its
inputs are there, so such a fusion would hold the matmul back until the data arrives (in a
reduce-scatter ring, ``ppermute(acc) + t @ w[block]`` keeps the dot free to run while ``acc``
travels; the add is a small kernel of its own). Then each kernel is timed by the roofline:
``max(matmul FLOPs / MXU rate + vector ops / VPU rate, HBM bytes / HBM bandwidth) + launch
overhead``, where HBM bytes are what enters the kernel from outside plus what leaves it, and vector
ops are the elements every arithmetic op and reduction of the kernel computes (a product written
as multiply-and-sum is charged on the vector unit, where the chip would run it).

Communication. Each mesh axis is a ring with a link per direction ("+" towards higher index,
"-" towards lower). A ``collective-permute`` routes every source->target pair the short way around
(dimension by dimension) and takes ``max link load / link bandwidth + latency``; it holds the
link directions it loads. XLA's monolithic collectives run the ring algorithm: an all-gather or
reduce-scatter over n devices is n-1 steps of one shard each, an all-reduce is both, an
all-to-all routes its n-1 chunks like a permute. An all-reduce of which each device only slices
out at most 1/n (GSPMD's way of writing a reduce-scatter, e.g. a matmul whose contracting dimension
is sharded and whose output is sharded) is costed as the reduce-scatter that XLA's later passes
(``ReduceScatterCreator``) make of it; only when all its uses together read at most 1/n of it
(slices that together cover more are an all-reduce, however small each one is).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from . import chips as chipmod
from .hlo import COLLECTIVES, ModelError, Node, device_groups, source_target_pairs

HEAVY = {"dot", "convolution", "ragged-dot"}
#: array ops with a plain memory-bound cost that fuse with their neighbours
FUSIBLE = {
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder",
    "and", "or", "xor", "not", "negate", "abs", "sign", "exponential", "exponential-minus-one",
    "log", "log-plus-one", "logistic", "tanh", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan",
    "atan2", "floor", "ceil", "round-nearest-afz", "round-nearest-even", "is-finite", "compare",
    "select", "clamp", "convert", "bitcast-convert", "reduce-precision", "broadcast", "iota",
    "transpose", "slice", "dynamic-slice", "concatenate", "pad", "reverse",
    "dynamic-update-slice", "reduce", "map", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "popcnt", "count-leading-zeros", "real", "imag", "complex",
    "erf", "stochastic-convert", "constant", "rng-bit-generator", "rng", "clz",
}
#: ops that compute each element of their result on the vector unit (the rest of FUSIBLE only
#: move data: broadcast, slice, transpose, concatenate ...)
VECTOR = {
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "remainder", "and",
    "or", "xor", "not", "negate", "abs", "sign", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "logistic", "tanh", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "atan2",
    "floor", "ceil", "round-nearest-afz", "round-nearest-even", "is-finite", "compare", "select",
    "clamp", "convert", "reduce-precision", "map", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "popcnt", "count-leading-zeros", "clz", "erf", "stochastic-convert",
    "reduce", "reduce-window", "real", "imag", "complex",
}
#: array ops costed by their bytes but kept as kernels of their own
STANDALONE = {"gather", "scatter", "sort", "reduce-window", "select-and-scatter", "cholesky",
              "triangular-solve", "fft", "topk", "batch-norm-training", "batch-norm-inference",
              "batch-norm-grad", "get-dimension-size", "set-dimension-size"}
#: ops whose read of an operand is only as large as their output
SLICING = {"slice", "dynamic-slice", "gather"}
#: every op with a cost rule; any other op (a point-to-point send, an infeed, an op newer than
#: this model) fails the model: priced as plain memory traffic it could hide a transfer or a
#: computation, so the model refuses it rather than guess
PRICED = HEAVY | FUSIBLE | VECTOR | STANDALONE | COLLECTIVES


@dataclass
class Task:
    id: int
    kind: str  # 'compute' or 'comm'
    label: str
    duration: float  # seconds
    resources: tuple  # ('compute',) or (('Y', '+'), ...)
    deps: set = field(default_factory=set)
    nodes: list = field(default_factory=list)
    detail: str = ""
    flops: float = 0.0  # matmul FLOPs (MXU)
    vector: float = 0.0  # elementwise operations (VPU)
    bytes: float = 0.0
    comm_bytes: float = 0.0
    unit: str = ""  # what bounds a compute kernel: 'mxu', 'vpu' or 'mem'
    passes: int = 1  # the most MXU passes one of its float32 matmuls takes (HIGH: 3, HIGHEST: 6)
    #: the (file, line) pairs its ops were traced from, in program order (:attr:`Node.source`)
    sources: tuple = ()


# ------------------------------------------------------------------------------ mesh geometry
class Geometry:
    """Device ids (partition ids, row-major over the mesh) and ring routing on each axis."""

    def __init__(self, mesh_shape: tuple[int, ...], axis_names: tuple[str, ...]):
        self.shape = tuple(int(s) for s in mesh_shape)
        self.names = tuple(axis_names)
        self.n = int(np.prod(self.shape)) if self.shape else 1
        # every device's coordinates, read once: the model asks for them per message and task
        self._coords = [self._unravel(d) for d in range(self.n)]

    def _unravel(self, dev: int) -> tuple[int, ...]:
        return tuple(int(c) for c in np.unravel_index(dev, self.shape))

    def coords(self, dev: int) -> tuple[int, ...]:
        if 0 <= dev < self.n:
            return self._coords[dev]
        return self._unravel(dev)  # not a device of the mesh: unravel_index says so

    def group_axes(self, group: list[int]) -> list[int]:
        cs = np.array([self.coords(d) for d in group])
        return [a for a in range(len(self.shape)) if len(set(cs[:, a])) > 1]

    def route(self, src: int, dst: int):
        """Directed links (axis, dir, line, position) a message src->dst crosses."""
        a, b = list(self.coords(src)), list(self.coords(dst))
        links = []
        cur = list(a)
        for ax in range(len(self.shape)):
            n = self.shape[ax]
            d = (b[ax] - cur[ax]) % n
            if d == 0:
                continue
            if d <= n - d:
                step, hops, dirn = 1, d, "+"
            else:
                step, hops, dirn = -1, n - d, "-"
            line = tuple(cur[:ax] + cur[ax + 1:])
            for _ in range(hops):
                links.append((ax, dirn, line, cur[ax]))
                cur[ax] = (cur[ax] + step) % n
        return links

    def lane(self, ax: int, dirn: str) -> tuple[str, str]:
        return (self.names[ax], dirn)


def _pair_loads(geo: Geometry, pairs, nbytes: float):
    loads: dict = {}
    for s, d in pairs:
        if s == d:
            continue
        for link in geo.route(s, d):
            loads[link] = loads.get(link, 0.0) + nbytes
    lanes: dict = {}
    for (ax, dirn, _line, _pos), v in loads.items():
        key = geo.lane(ax, dirn)
        lanes[key] = max(lanes.get(key, 0.0), v)
    return lanes


def collective_cost(node: Node, geo: Geometry, chip: chipmod.Chip, device: int = 0,
                    used_bytes: Optional[float] = None):
    """(seconds, lanes, bytes on the busiest link, description) for one collective.
    ``used_bytes``: what the uses of its result read together (None: all of it)."""
    op = node.opcode
    W = chip.ici_bw
    alpha = chipmod.ICI_LATENCY_S
    in_bytes = float(sum(l.shape.nbytes for l in node.inputs))
    out_bytes = float(node.out_bytes)
    if op == "collective-permute":
        pairs = source_target_pairs(node.attrs)
        lanes = _pair_loads(geo, pairs, in_bytes)
        if not lanes:
            return 0.0, (), 0.0, "local copy"
        worst = max(lanes.values())
        dirs = ",".join(f"{a}{d}" for a, d in sorted(lanes))
        return worst / W + alpha, tuple(sorted(lanes)), worst, f"permute over {dirs}"
    groups = device_groups(node.attrs, geo.n, geo.shape)
    group = next((g for g in groups if device in g), groups[0])
    n = len(group)
    if n <= 1:
        return 0.0, (), 0.0, "group of one"
    axes = geo.group_axes(group) or [0]
    k = len(axes)
    names = "".join(geo.names[a] for a in axes)
    dirs = ("+", "-")[: chipmod.XLA_COLLECTIVE_DIRECTIONS]
    bw = W * k * len(dirs)
    lanes = tuple(geo.lane(a, d) for a in axes for d in dirs)
    if op in ("all-gather", "collective-broadcast"):
        shard = in_bytes
        t = (n - 1) * (shard / bw + alpha)
        return t, lanes, (n - 1) * shard / (k * len(dirs)), f"all-gather over {names} (n={n})"
    if op == "reduce-scatter":
        shard = out_bytes
        t = (n - 1) * (shard / bw + alpha)
        return t, lanes, (n - 1) * shard / (k * len(dirs)), f"reduce-scatter over {names} (n={n})"
    if op == "all-reduce" and used_bytes is not None and used_bytes * n <= in_bytes:
        shard = in_bytes / n
        t = (n - 1) * (shard / bw + alpha)
        return t, lanes, (n - 1) * shard / (k * len(dirs)), \
            f"all-reduce over {names} (n={n}), each device slicing 1/{n}: a reduce-scatter"
    if op == "all-reduce":
        shard = in_bytes / n
        t = 2 * (n - 1) * (shard / bw + alpha)
        return t, lanes, 2 * (n - 1) * shard / (k * len(dirs)), f"all-reduce over {names} (n={n})"
    if op in ("all-to-all", "ragged-all-to-all"):
        chunk = in_bytes / n
        pairs = [(s, d) for s in group for d in group if s != d]
        # every group of the mesh moves at once: load all of them
        allpairs = [(s, d) for g in groups for s in g for d in g if s != d]
        lanes_l = _pair_loads(geo, allpairs or pairs, chunk)
        worst = max(lanes_l.values()) if lanes_l else 0.0
        return worst / W + alpha * (n // 2), tuple(sorted(lanes_l)), worst, \
            f"all-to-all over {names} (n={n})"
    raise ModelError(f"no cost rule for the collective {op!r}")


# -------------------------------------------------------------------------------- fusion
def _consumers(nodes: list[Node]):
    cons: dict[int, set] = {n.id: set() for n in nodes}
    for n in nodes:
        for d in n.deps:
            cons[d].add(n.id)
    return cons


def transfers(nodes: list[Node]) -> tuple[list[int], list[int]]:
    """Per node, two sets of collectives as bit masks (bit i: the i-th collective of ``nodes``):
    ``waits``, every transfer the node depends on, however far back; ``reads``, the transfers
    whose data reach it through elementwise ops alone (the output of a matmul or of any other
    kernel of its own counts as computed data, not as a transfer)."""
    waits: list[int] = []
    reads: list[int] = []
    bit: dict[int, int] = {}
    for n in nodes:
        w = r = 0
        for d in n.deps:
            w |= waits[d]
            r |= reads[d]
        if n.opcode in COLLECTIVES:
            bit[n.id] = 1 << len(bit)
            w |= bit[n.id]
            r = bit[n.id]
        elif n.opcode in HEAVY or n.opcode in STANDALONE:
            r = 0
        waits.append(w)
        reads.append(r)
    return waits, reads


def fuse(nodes: list[Node], live_out: frozenset) -> list[list[int]]:
    """Group compute nodes into kernels; collectives stay alone. Returns member lists in order.

    An elementwise node joins the kernel of a matmul feeding it only if every transfer it reads
    (see :func:`transfers`) is one that kernel already waits for. Fusion stops at a loop body's
    boundary (:attr:`~.hlo.Node.scope`): XLA fuses within one computation, and a TPU runs each
    iteration of a while loop's body as kernels of its own, each reading its operands from HBM
    and writing its results back, with a launch each; ops before, inside and after a loop, or in
    two iterations of it, never share a kernel.

    Linear in the program (up to a log): a kernel is known by the node that made it last, which
    the nodes it absorbed point to; what decides whether it may grow (is every use of a member
    inside it, or the node joining it?) is kept as it grows, never recomputed from its members."""
    cons = _consumers(nodes)
    waits, reads = transfers(nodes)
    home: dict[int, int] = {}  # node -> its kernel, or a kernel -> the one that absorbed it
    members: dict[int, list[int]] = {}
    heavy: dict[int, bool] = {}
    alone: dict[int, bool] = {}  # a collective or a standalone op: never fused
    created: dict[int, int] = {}
    scope: dict[int, tuple] = {}  # the loop body run a kernel's members belong to
    kernel_waits: dict[int, int] = {}
    #: per kernel: the uses of its members outside it, and whether a member leaves the program
    outside: dict[int, set] = {}
    leaves: dict[int, bool] = {}
    counter = 0

    def kernel_of(m: int) -> int:
        k = home[m]
        while home.get(k, k) != k:
            k = home[k]
        home[m] = k
        return k

    def closed_to(kid: int, c: int) -> bool:
        """No member leaves the program and every use of a member is inside or is ``c``."""
        return not leaves[kid] and outside[kid] <= {c}

    for n in nodes:
        counter += 1
        kid = n.id
        home[n.id] = kid
        outside[kid], leaves[kid] = set(cons[n.id]), n.id in live_out
        scope[kid] = n.scope
        if n.opcode in COLLECTIVES:
            members[kid], heavy[kid], created[kid], alone[kid] = [n.id], False, counter, True
            kernel_waits[kid] = waits[n.id]
            continue
        is_heavy = n.opcode in HEAVY
        cands = []
        if n.opcode not in STANDALONE:
            for d in sorted(n.deps):
                k = kernel_of(d)
                if k in cands or alone[k] or scope[k] != n.scope:
                    continue  # a kernel never spans two runs of a loop body
                if closed_to(k, n.id):
                    cands.append(k)
        light = [k for k in cands if not heavy[k]]
        own_reads = 0
        for d in n.deps:
            own_reads |= reads[d]
        heavies = [k for k in cands if heavy[k] and own_reads & ~kernel_waits[k] == 0]
        chosen = list(light)
        if not is_heavy and heavies:
            chosen.append(max(heavies, key=lambda k: created[k]))
        heavy[kid] = is_heavy or any(heavy[k] for k in chosen)
        alone[kid] = n.opcode in STANDALONE
        created[kid] = counter
        kernel_waits[kid] = waits[n.id]
        # every chosen kernel is closed to n: its only outside use was n, now inside
        lists = [members.pop(k) for k in chosen] + [[n.id]]
        big = max(lists, key=len)
        for other in lists:
            if other is not big:
                big.extend(other)
        members[kid] = big
        for k in chosen:
            heavy.pop(k)
            alone.pop(k)
            outside.pop(k)
            leaves.pop(k)
            scope.pop(k)
            kernel_waits[kid] |= kernel_waits.pop(k)
            home[k] = kid
    return [sorted(ms) for _, ms in sorted(members.items(), key=lambda kv: min(kv[1]))]


#: MXU passes of a float32 matmul on a TPU, by its operands' precision as the HLO writes it
#: (``operand_precision={highest,highest}``; none written: DEFAULT). Source: the docstring of
#: ``jax.lax.Precision`` (JAX 0.10.2): DEFAULT "On TPU: performs float32 computations in
#: bfloat16" (one pass), HIGH "in 3 bfloat16 passes", HIGHEST "in 6 bfloat16" passes.
PRECISION_PASSES = {"default": 1, "high": 3, "highest": 6}
#: MXU passes of the dot algorithms the op table admits (``algorithm=dot_bf16_bf16_f32_x3``):
#: ``jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3`` "uses 3 operations to emulate higher
#: precision", ``_X6`` "6 operations" (its docstrings): the algorithms of HIGH and HIGHEST on a
#: TPU. Any other algorithm has no cost rule.
ALGORITHM_PASSES = {"dot_bf16_bf16_f32_x3": 3, "dot_bf16_bf16_f32_x6": 6}
#: MXU passes of a matmul of wide integers: the MXU multiplies bf16 (8-bit significands), so a
#: 32-bit integer product is split into bf16 pieces as a HIGHEST float32 one is, six passes: the
#: published v5e example (int32 [512, 2048] @ [2048, 2048] per chip in 224 us) is six passes at
#: the efficiency of :data:`.chips.MXU_EFFICIENCY` (``benchmarks/calibrate_tpumodel.py``)
WIDE_INTEGER_PASSES = {"s32": 6, "u32": 6, "s64": 6, "u64": 6, "s16": 6, "u16": 6}


def mxu_passes(n: Node) -> int:
    """The MXU passes a TPU runs a matmul ``n`` in, each at the one calibrated pass rate
    (:data:`.chips.PASS_FLOPS`): a float32 matmul takes the passes of the dearer of its two
    operands' precisions (:data:`PRECISION_PASSES`; a TPU multiplies at one precision, and XLA
    picks the higher of the two where it must choose, as its GPU GemmConfig does: the TPU
    compiler's own rule is not public, and the dearer is the sound price), or of its algorithm
    (:data:`ALGORITHM_PASSES`); a 16-, 32- or 64-bit integer matmul six
    (:data:`WIDE_INTEGER_PASSES`); any other operands (bf16, f16, int8, 8-bit floats) take one
    pass at any precision: the MXU multiplies them as they are."""
    algorithm = n.attrs.get("algorithm")
    if algorithm is not None and algorithm not in ALGORITHM_PASSES:
        raise ModelError(f"the matmul algorithm {algorithm!r} ({n.label or n.opcode}) has no "
                         "cost rule")
    if n.inputs and n.inputs[0].shape.dtype in WIDE_INTEGER_PASSES:
        return WIDE_INTEGER_PASSES[n.inputs[0].shape.dtype]
    if not n.inputs or n.inputs[0].shape.dtype != "f32":
        return 1
    named = n.attrs.get("operand_precision", "{}").strip("{}")
    precisions = [p.strip() for p in named.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in PRECISION_PASSES]
    if unknown:
        raise ModelError(f"the matmul precision {unknown[0]!r} ({n.label or n.opcode}) has no "
                         "cost rule")
    return max([PRECISION_PASSES[p] for p in precisions]
               + [ALGORITHM_PASSES.get(algorithm, 1)])


def dot_flops(n: Node) -> float:
    out = n.out[0]
    lhs = n.inputs[0].shape
    if n.opcode in ("dot", "ragged-dot"):
        cd = n.attrs.get("lhs_contracting_dims", "{}").strip("{}")
        k = 1
        for d in (int(v) for v in cd.split(",") if v.strip()):
            k *= lhs.dims[d]
        return 2.0 * out.size * k
    # convolution: 2 * out * (kernel elements / output features)
    rhs = n.inputs[1].shape
    m = re.search(r"->\w*?(f)", n.attrs.get("dim_labels", ""))
    feat = max(rhs.dims) if rhs.dims else 1
    if m:
        dl = n.attrs["dim_labels"].split("_")[1].split("->")[0]
        feat = rhs.dims[dl.index("o")] if "o" in dl else feat
    return 2.0 * out.size * rhs.size / max(feat, 1)


def vector_ops(n: Node) -> float:
    """Elements a vector-unit op computes: its result's (a reduction: its inputs')."""
    if n.opcode in ("reduce", "reduce-window"):
        half = max(1, len(n.inputs) // 2)  # (operands..., init values...)
        return float(sum(l.shape.size for l in n.inputs[:half]))
    return float(sum(s.size for s in n.out))


#: words of the jaxpr collectives a student writes (their names survive into HLO metadata)
_COLLECTIVE_WORDS = ("ppermute", "psum", "all_gather", "all_to_all", "scatter", "pmax", "pmin")


def _short_label(label: str) -> str:
    parts = [p for p in label.split("/") if p]
    keep = [p for p in parts if not p.startswith(("jit(", "while", "body", "closed_call",
                                                  "shard_map", "checkpoint", "remat"))]
    return (keep[-1] if keep else (parts[-1] if parts else label))[:40]


def _sources(nodes: list[Node], ms) -> tuple:
    """The distinct source lines of the ops ``ms``, in program order."""
    return tuple(dict.fromkeys(nodes[m].source for m in ms if nodes[m].source))


def _sliced_bytes(node: Node, nodes: list[Node], cons: dict, live_out: frozenset):
    """What all uses of ``node``'s result read together, when every use is a slice of it; None
    when the result leaves the program or some use reads all of it."""
    if node.id in live_out or not cons[node.id] or len(node.out) != 1:
        return None
    sizes = []
    for c in cons[node.id]:
        use = nodes[c]
        if use.opcode not in ("slice", "dynamic-slice") or use.inputs[0].deps != {node.id}:
            return None
        sizes.append(float(use.out_bytes))
    return sum(sizes)


def build_tasks(nodes: list[Node], out_value, geo: Geometry, chip: chipmod.Chip,
                device: int = 0) -> list[Task]:

    def leaves(v):
        return [l for x in v for l in leaves(x)] if isinstance(v, list) else [v]

    unpriced = next((n for n in nodes if n.opcode not in PRICED), None)
    if unpriced is not None:
        raise ModelError(f"the operation {unpriced.opcode!r} ({_short_label(unpriced.label)}) "
                         "has no cost rule")
    live_out = frozenset().union(*[l.deps for l in leaves(out_value)]) if out_value is not None \
        else frozenset()
    kernels = fuse(nodes, live_out)
    task_of: dict[int, int] = {}
    tasks: list[Task] = []
    cons = _consumers(nodes)
    for ms in kernels:
        tid = len(tasks)
        first = nodes[ms[0]]
        deps = set()
        mset = set(ms)
        for m in ms:
            task_of[m] = tid
        for m in ms:
            for d in nodes[m].deps:
                if d not in mset:
                    deps.add(d)  # node ids for now
        iters = first.loop_iter
        suffix = f" [{','.join(map(str, iters))}]" if iters else ""
        if first.opcode in COLLECTIVES:
            t, lanes, cb, desc = collective_cost(first, geo, chip, device,
                                                 _sliced_bytes(first, nodes, cons, live_out))
            shape = first.inputs[0].shape if first.inputs else first.out[0]
            lab = _short_label(first.label)
            if not any(k in lab for k in _COLLECTIVE_WORDS):
                lab = first.opcode  # inserted by GSPMD: its metadata names the op it serves
            tasks.append(Task(tid, "comm", lab + suffix, t, lanes, deps,
                              list(ms), f"{desc}, {shape}", comm_bytes=cb,
                              sources=_sources(nodes, ms)))
            continue
        vector = 0.0
        flops_by_dtype: dict[str, float] = {}
        pass_flops: dict[str, float] = {}  # FLOPs times MXU passes
        passes = 1  # the most passes one float32 matmul of the kernel takes (its precision)
        most = 1  # the most passes one matmul of any type takes (an int32 one: six)
        read: dict = {}
        written = 0.0
        for m in ms:
            n = nodes[m]
            if n.opcode in HEAVY:
                dt = n.inputs[0].shape.dtype
                f, k = dot_flops(n), mxu_passes(n)
                flops_by_dtype[dt] = flops_by_dtype.get(dt, 0.0) + f
                # the MXU's time is its passes' (FLOPs stay FLOPs: XLA's floor counts those)
                pass_flops[dt] = pass_flops.get(dt, 0.0) + f * k
                most = max(most, k)
                if dt == "f32":  # what the program chose: the speed message names it
                    passes = max(passes, k)
            elif n.opcode in VECTOR:
                vector += vector_ops(n)
            for i, l in enumerate(n.inputs):
                if l.deps and l.deps <= mset:
                    continue  # produced inside the kernel
                if not l.shape.dims:
                    continue
                if n.opcode in SLICING and i == 0:
                    read[(l.vid, m)] = float(n.out_bytes)
                elif n.opcode == "dynamic-update-slice" and i == 0:
                    continue  # updated in place
                else:
                    read[(l.vid, None)] = max(read.get((l.vid, None), 0.0),
                                              float(l.shape.nbytes))
            outside = (m in live_out) or any(c not in mset for c in cons[m])
            if outside:
                if n.opcode == "dynamic-update-slice" and len(n.inputs) > 1:
                    written += float(n.inputs[1].shape.nbytes)
                else:
                    written += float(n.out_bytes)
        nbytes = sum(read.values()) + written
        t_mxu = sum(f / chip.matmul_flops(dt) for dt, f in pass_flops.items())
        t_vpu = vector / chip.vpu_ops
        t_mem = nbytes / chip.hbm_bw
        dur = max(t_mxu + t_vpu, t_mem) + chipmod.KERNEL_OVERHEAD_S
        main = next((nodes[m] for m in ms if nodes[m].opcode in HEAVY), None)
        if main is None:
            main = max((nodes[m] for m in ms), key=lambda x: x.out_bytes)
        lab = _short_label(main.label) + suffix
        if t_mxu + t_vpu < t_mem:
            unit, bound = ("mxu" if flops_by_dtype else "mem"), "memory"
        else:
            unit, bound = ("mxu" if t_mxu >= t_vpu else "vpu"), "compute"
        desc = (f"{len(ms)} op(s), {sum(flops_by_dtype.values()) / 1e9:.2f} GFLOP"
                f"{f' in {most} MXU passes' if most > 1 else ''}, "
                f"{vector / 1e9:.2f} G vector ops, {nbytes / 2**20:.2f} MiB, {bound}-bound")
        tasks.append(Task(tid, "compute", lab, dur, ("compute",), deps, list(ms), desc,
                          flops=sum(flops_by_dtype.values()), vector=vector, bytes=nbytes,
                          unit=unit, passes=passes, sources=_sources(nodes, ms)))
    for t in tasks:
        t.deps = {task_of[d] for d in t.deps} - {t.id}
    return tasks
