"""The walk of one device's program (:func:`run_device`, :class:`Flattener`): scalars evaluated,
loops unrolled, calls inlined, each array operation a :class:`Node`, within the model's
:class:`Budget` for one program."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from . import scalars
from .hlo_text import Computation, Instr, ModelError, Shape, string_field


class DataDependentLoop(ModelError):
    """A while loop whose trip count depends on array data: the model needs it counted
    (:mod:`autograder.tpumodel.loops` takes the count from a run on the grading input)."""



# ------------------------------------------------------------------------ symbolic execution
@dataclass
class Leaf:
    shape: Shape
    deps: frozenset  # ids of the array nodes this value was computed from
    vid: int  # identity of the buffer (aliases keep it)
    const: Any = None  # known value of a scalar (a NumPy scalar of its own element type)
    dev: bool = False  # the value depends on which device runs the program


@dataclass
class Node:
    """One array operation of the flattened per-device program."""

    id: int
    opcode: str
    label: str
    out: list  # output Shapes
    inputs: list  # (Leaf) operand values
    attrs: dict
    deps: frozenset
    loop_iter: tuple = ()
    #: (file, line) of the source line the op was traced from (:func:`source_table`); () where
    #: the op carries none (XLA or GSPMD made it)
    source: tuple = ()
    #: the loop body run it belongs to: per enclosing loop, (which entry of a while loop, which
    #: iteration); () outside every loop. XLA fuses within one computation: a TPU runs each
    #: iteration of a loop's body as kernels of its own, so ops of different runs never fuse
    #: (:func:`.cost.fuse`)
    scope: tuple = ()

    @property
    def out_bytes(self) -> int:
        return sum(s.nbytes for s in self.out)


#: ops that only rename or relabel a buffer; they cost nothing on a TPU
ALIAS_OPS = {"copy", "bitcast", "reshape", "optimization-barrier", "copy-start", "copy-done",
             "add-dependency", "domain", "opt-barrier"}
_ALIAS_CUSTOM_CALLS = ("Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                       "xla.sdy.", "MoveToHost", "MoveToDevice", "LayoutConstraint")
COLLECTIVES = {"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
               "collective-broadcast", "ragged-all-to-all"}


#: The model's own budget for one program (every device it flattens together). The model walks
#: a program's loops in Python, an instruction at a time (tens of microseconds each, and as much
#: again per array operation to cost and schedule): a program past either figure is one the
#: model cannot price, and it says so at once instead of spending minutes of the grader's time.
#: The most any honest program of the course needs (the reference answers and every fixture, at
#: the speed case): 30,527 instructions and 23,321 operations, ps2's moe_topk written with
#: loops (tests/fixtures/ps2_moe/alt_loops.py); the next, 15,273 and 11,660.
#: instructions evaluated: a loop's condition and body count at every iteration
MAX_EVALUATED = 250_000
#: array operations once the loops are unrolled (each becomes a task of the schedule)
MAX_NODES = 60_000


class RunDisagrees(ModelError):
    """The model's walk of a program (its loops' trip counts, its branches) is not what the
    instrumented run of the same program measured: the measured counts are to be used
    (:func:`autograder.tpumodel.api.model_measured`)."""


class Unpriceable(ModelError):
    """The program needs more of the model's work than its budget (:data:`MAX_EVALUATED`,
    :data:`MAX_NODES`) allows: the speed check fails it as the student's, in seconds."""


class Budget:
    """What the model may still spend on one program, shared by every device it flattens."""

    def __init__(self, evaluated: int = 0, nodes: int = 0):
        self.evaluated = evaluated or MAX_EVALUATED
        self.nodes = nodes or MAX_NODES
        self.used = 0  # instructions evaluated so far
        self.made = 0  # array operations made so far
        self.iterations = 0  # loop iterations walked so far

    def too_long(self, iterations: int, per_iteration: int, where: str) -> Unpriceable:
        return Unpriceable(
            f"its loops run {iterations:,} iterations ({where}; about {per_iteration:,} "
            f"instructions each), more than the model's budget of {self.evaluated:,} evaluated "
            "instructions for one program. The modeled TPU walks every iteration: a loop "
            "that long is not what the exercise asks for; keep loops to the few steps of a ring "
            "or of the exchange's rounds")

    def stopped(self, where: str) -> Unpriceable:
        if not self.iterations:
            return Unpriceable(f"the program has more than {self.evaluated:,} instructions, the "
                               "model's budget for one program")
        return Unpriceable(
            f"its loops run more than {self.iterations:,} iterations ({where}): past the "
            f"model's budget of {self.evaluated:,} evaluated instructions for one program. The "
            "modeled TPU walks every iteration: a loop that long is not what the exercise asks "
            "for; keep loops to the few steps of a ring or of the exchange's rounds")


def simple_indexing(op: str, attrs: dict[str, str], inputs: list) -> tuple[str, list]:
    """``(op, inputs)`` as XLA runs them: a gather or a one-operand scatter whose indices name
    one slice (a loop trip count of 1: ``jnp.take(x, i, axis)`` or ``x.at[i].set(y)`` with a
    scalar ``i``) is a dynamic-slice, or a dynamic-update-slice ``(operand, update, indices)``,
    once XLA's gather and scatter expanders have run in their "simple" modes, as every
    backend's pipeline does after partitioning (the module read here is taken before those
    passes). Anything else stays as it is, the dearer kernel of its own: a gather of many
    indices, and also one of the whole operand, which XLA may turn into a broadcast, whose
    price here would rest on how a TPU fuses it."""
    if (op, len(inputs)) not in (("gather", 2), ("scatter", 3)):
        return op, inputs
    dims = inputs[1].shape.dims
    ivd = re.fullmatch(r"\d+", attrs.get("index_vector_dim", "").strip())
    if ivd is None:
        return op, inputs
    trips = 1
    for i, d in enumerate(dims):
        if i != int(ivd.group()):
            trips *= int(d)
    if trips != 1:
        return op, inputs
    if op == "gather":
        return "dynamic-slice", inputs
    return "dynamic-update-slice", [inputs[0], inputs[2], inputs[1]]


class Flattener:
    def __init__(self, comps: dict[str, Computation], device: int = 0,
                 max_nodes: Optional[int] = None, budget: Optional[Budget] = None):
        self.comps = comps
        self.device = device
        self.budget = budget or Budget(nodes=max_nodes or 0)
        self.max_nodes = max_nodes or self.budget.nodes
        self.nodes: list[Node] = []
        self._vid = 0
        self.loop_stack: list[int] = []
        #: per enclosing loop, (its entry's number, the iteration): :attr:`Node.scope`
        self.scope_stack: list[tuple[int, int]] = []
        self._entries = 0  # while loops entered so far
        #: the while instructions being walked, innermost last
        self.loop_ins: list[Instr] = []
        self.steps = 0
        #: a loop condition or a branch index read the device's position
        self.device_dependent = False
        #: why the cost is an upper bound (branches chosen by data, all costed)
        self.bounds: list[str] = []
        #: (number of branches, branch) -> how many times the walk ran it, for conditionals
        #: whose index the walk evaluated (those chosen by data are counted in ``unknown``)
        self.branches: dict[tuple[int, int], int] = {}
        self.unknown_branches = 0
        self.out: Any = None

    def new_vid(self) -> int:
        self._vid += 1
        return self._vid

    # values ------------------------------------------------------------------------------
    def leaf(self, shape, deps=frozenset(), const=None, dev=False) -> Leaf:
        return Leaf(shape, frozenset(deps), self.new_vid(), const, dev)

    def make_out(self, typ, deps):
        if isinstance(typ, list):
            return [self.make_out(t, deps) for t in typ]
        return self.leaf(typ, deps)

    def all_deps(self, v) -> frozenset:
        if isinstance(v, list):
            out = frozenset()
            for x in v:
                out |= self.all_deps(x)
            return out
        return v.deps

    def leaves(self, v) -> list:
        if isinstance(v, list):
            return [l for x in v for l in self.leaves(x)]
        return [v]

    # execution ---------------------------------------------------------------------------
    def run(self, comp_name: str, args: list):
        comp = self.comps[comp_name]
        env: dict[str, Any] = {}
        budget = self.budget
        budget.used += len(comp.instrs)
        if budget.used > budget.evaluated:
            raise budget.stopped(_where(comp, self.loop_ins[-1] if self.loop_ins else None))
        for ins in comp.instrs:
            env[ins.name] = self.eval(ins, env, args)
        return env[comp.root.name]

    @staticmethod
    def operand(env, ref: str):
        """The value ``ref`` names: ``name`` or a tuple element path ``name#i#j``."""
        name, *path = ref.split("#")
        v = env[name]
        for i in path:
            if not isinstance(v, list) or int(i) >= len(v):
                raise ModelError(f"cannot read the operand %{ref} (not an element of a tuple)")
            v = v[int(i)]
        return v

    def eval(self, ins: Instr, env, args):
        op = ins.opcode
        ops = [self.operand(env, o) for o in ins.operands if o.split("#", 1)[0] in env]
        if op == "parameter":
            return args[int(ins.raw_operands.strip())]
        if op == "constant":
            return self.leaf(ins.type, const=_literal(ins.raw_operands, ins.type))
        if op == "tuple":
            return list(ops)
        if op == "get-tuple-element":
            return ops[0][int(ins.attrs["index"])]
        if op in ("partition-id", "replica-id"):
            return self.leaf(ins.type, const=_literal(str(self.device), ins.type), dev=True)
        if op in ALIAS_OPS:
            v = ops[0]
            if isinstance(v, list) or isinstance(ins.type, list):
                return v
            return Leaf(ins.type, v.deps, v.vid, v.const, v.dev)
        if op == "custom-call":
            target = ins.attrs.get("custom_call_target", "").strip('"')
            if any(target.startswith(t) for t in _ALIAS_CUSTOM_CALLS) and ops:
                v = ops[0]
                return v if isinstance(v, list) else Leaf(ins.type, v.deps, v.vid, v.const, v.dev)
            raise ModelError(f"custom-call {target!r} has no cost rule")
        if op in ("call", "fusion", "async-start"):
            callee = ins.attrs.get("to_apply") or ins.attrs.get("calls")
            return self.run(callee.lstrip("%"), ops)
        if op == "while":
            return self.run_while(ins, ops[0])
        if op == "conditional":
            return self.run_conditional(ins, ops)
        if op.endswith("-done") or op == "async-done":
            v = ops[0]
            return v[1] if isinstance(v, list) and op != "async-done" and len(v) == 2 and \
                not isinstance(ins.type, list) else v
        if op.endswith("-start"):
            op = op[: -len("-start")]
        # a scalar op on known scalars: evaluate it, no array work
        shapes = [l.shape for o in ops for l in self.leaves(o)]
        out_shapes = ins.type if isinstance(ins.type, list) else [ins.type]
        scalar_only = all(not s.dims for s in shapes) and all(
            isinstance(s, Shape) and not s.dims for s in out_shapes)
        if scalar_only and op not in COLLECTIVES:
            consts = [o.const if isinstance(o, Leaf) else None for o in ops]
            deps = frozenset()
            for o in ops:
                deps |= self.all_deps(o)
            if isinstance(ins.type, list):
                return self.make_out(ins.type, deps)
            val = scalars.evaluate(op, ins.type.dtype, ins.attrs, consts) if ops else None
            dev = any(l.dev for o in ops for l in self.leaves(o))
            return self.leaf(ins.type, deps, const=val, dev=dev)
        return self.add_node(ins, op, ops)

    def add_node(self, ins: Instr, op: str, ops) -> Any:
        self.budget.made += 1
        if len(self.nodes) >= self.max_nodes or self.budget.made > self.budget.nodes:
            raise Unpriceable(f"the program has over {min(self.max_nodes, self.budget.nodes):,} "
                              "array operations once its loops are unrolled (the model's budget "
                              "for one program); too large to model")
        deps = frozenset()
        for o in ops:
            deps |= self.all_deps(o)
        label = string_field(ins.attrs.get("metadata", ""), "op_name") or ins.name
        outs = ins.type if isinstance(ins.type, list) else [ins.type]
        outs = [s for s in outs if isinstance(s, Shape)]
        op, inputs = simple_indexing(op, ins.attrs, [l for o in ops for l in self.leaves(o)])
        node = Node(len(self.nodes), op, label, outs, inputs, ins.attrs, deps,
                    tuple(self.loop_stack), scope=tuple(self.scope_stack))
        self.nodes.append(node)
        return self.make_out(ins.type, {node.id})

    def run_while(self, ins: Instr, init):
        cond = ins.attrs["condition"].lstrip("%")
        body = ins.attrs["body"].lstrip("%")
        carry = init
        known = _counted_trips(self.comps[cond], self.comps[body], carry)
        if known is not None:
            per = _size(self.comps, cond) + _size(self.comps, body)
            if self.budget.used + known * per > self.budget.evaluated:
                raise self.budget.too_long(known, per, _where(self.comps[body], ins))
        entry = self._entries
        self._entries += 1
        self.loop_stack.append(0)
        self.scope_stack.append((entry, 0))
        self.loop_ins.append(ins)
        it = 0
        while True:
            c = self.run(cond, [carry])
            if not isinstance(c, Leaf) or c.const is None:
                self.loop_stack.pop()
                self.scope_stack.pop()
                self.loop_ins.pop()
                raise DataDependentLoop("a while loop whose trip count depends on array data")
            self.device_dependent |= c.dev
            if not bool(c.const):
                break
            self.steps += 1
            self.budget.iterations += 1
            self.loop_stack[-1] = it
            self.scope_stack[-1] = (entry, it)
            carry = self.run(body, [carry])
            it += 1
        self.loop_stack.pop()
        self.scope_stack.pop()
        self.loop_ins.pop()
        return carry

    def run_conditional(self, ins: Instr, ops):
        pred = ops[0]
        if "branch_computations" in ins.attrs:
            branches = re.findall(r"%?([\w.\-]+)", ins.attrs["branch_computations"].strip("{}"))
        else:
            branches = [ins.attrs["true_computation"].lstrip("%"),
                        ins.attrs["false_computation"].lstrip("%")]
        if not isinstance(pred, Leaf) or pred.const is None:
            # chosen by array data: cost every branch, one after another (an upper bound)
            self.bounds.append(f"a branch chosen by array data ({len(branches)} branches, "
                               "all costed)")
            self.unknown_branches += 1
            return _merge([self.run(b, [ops[1 + i]]) for i, b in enumerate(branches)], self)
        self.device_dependent |= pred.dev
        if "branch_computations" in ins.attrs:
            k = int(pred.const)  # XLA runs the last branch for an index out of range
            k = k if 0 <= k < len(branches) else len(branches) - 1
        else:
            k = 0 if bool(pred.const) else 1
        self.branches[(len(branches), k)] = self.branches.get((len(branches), k), 0) + 1
        return self.run(branches[k], [ops[1 + k]])

    def disagrees(self, counts) -> Optional[str]:
        """Why this walk is not what a run measured on this device (``counts``, a
        :class:`~autograder.core.stablehlo.RunCounts`), or None: the loops ran as many
        iterations in all, and the conditionals as many times each branch (by the number of
        branches and the branch), with no branch left to the data."""
        iterations = sum(counts.trips.values())
        if self.steps != iterations:
            return f"its loops ran {iterations:,} iterations, the model walked {self.steps:,}"
        ran: dict[tuple[int, int], int] = {}
        for per in counts.branches.values():
            for k, n in enumerate(per):
                if n:
                    ran[(len(per), k)] = ran.get((len(per), k), 0) + n
        if self.unknown_branches or ran != self.branches:
            return "its branches ran otherwise than the model's reading of their indices"
        return None


def _where(comp: Computation, ins: Optional[Instr] = None) -> str:
    """Which loop a budget message is about: the while's op_name where known."""
    name = string_field(ins.attrs.get("metadata", ""), "op_name") if ins else None
    return f"the loop {name}" if name else f"the loop whose body is {comp.name}"


def _size(comps: dict[str, Computation], name: str, _seen: Optional[dict] = None) -> int:
    """Instructions one run of computation ``name`` evaluates at least: its own and those of
    the computations it calls (a nested loop or a branch counted as its one instruction)."""
    seen = {} if _seen is None else _seen
    if name in seen:
        return seen[name]
    seen[name] = 0  # a cycle (never in valid HLO) counts nothing more
    n = 0
    for ins in comps[name].instrs:
        n += 1
        callee = ins.attrs.get("to_apply") or ins.attrs.get("calls")
        if ins.opcode in ("call", "fusion", "async-start") and callee \
                and callee.lstrip("%") in comps:
            n += _size(comps, callee.lstrip("%"), seen)
    seen[name] = n
    return n


def _element_of_param(comp: Computation, ref: str) -> Optional[int]:
    """k where operand ``ref`` of ``comp`` is element k of its tuple parameter, else None."""
    by_name = {i.name: i for i in comp.instrs}
    param = comp.params.get(0)
    name, *path = ref.split("#")
    if len(path) == 1 and name == param:
        return int(path[0])
    ins = by_name.get(name)
    if ins is not None and not path and ins.opcode == "get-tuple-element" \
            and ins.operands == [param] and "index" in ins.attrs:
        return int(ins.attrs["index"])
    return None


def _counted_trips(cond: Computation, body: Computation, carry) -> Optional[int]:
    """The trip count of a counted loop (``fori_loop``, or one the grader pinned), read without
    walking it: the condition is ``element k < constant N``, the body adds 1 to element k, and
    element k starts at a known value. None for any other loop (it is walked, and the budget
    stops it there)."""
    root = cond.root
    if root.opcode != "compare" or root.attrs.get("direction") != "LT" \
            or len(root.operands) != 2 or not isinstance(carry, list):
        return None
    k = _element_of_param(cond, root.operands[0])
    by_name = {i.name: i for i in cond.instrs}
    bound = by_name.get(root.operands[1])
    if k is None or bound is None or bound.opcode != "constant" or k >= len(carry):
        return None
    n = _literal(bound.raw_operands, bound.type)
    start = carry[k].const if isinstance(carry[k], Leaf) else None
    if n is None or start is None or np.dtype(type(n)).kind not in "iu":
        return None
    step = body.root
    if step.opcode != "tuple" or k >= len(step.operands):
        return None
    body_by_name = {i.name: i for i in body.instrs}
    add = body_by_name.get(step.operands[k])
    if add is None or add.opcode != "add" or len(add.operands) != 2:
        return None
    refs = [_element_of_param(body, o) for o in add.operands]
    ones = [body_by_name.get(o) for o in add.operands]
    for i in (0, 1):
        one = ones[1 - i]
        if refs[i] == k and one is not None and one.opcode == "constant" \
                and _literal(one.raw_operands, one.type) == 1:
            return max(0, int(n) - int(start))
    return None


def _merge(values: list, fl: "Flattener"):
    """The result of a conditional whose branch is not known: it depends on every branch's
    result, and a scalar is known only if every branch computed the same value."""
    first = values[0]
    if isinstance(first, list):
        return [_merge([v[i] for v in values], fl) for i in range(len(first))]
    deps = frozenset().union(*[v.deps for v in values])
    consts = [v.const for v in values]
    same = all(c is not None for c in consts) and all(
        bool(np.asarray(c == consts[0]).all()) for c in consts)
    return fl.leaf(first.shape, deps, const=consts[0] if same else None,
                   dev=any(v.dev for v in values))


def _literal(raw: str, typ):
    if not isinstance(typ, Shape) or typ.dims:
        return None
    return scalars.literal(raw, typ.dtype)


def run_device(comps: dict[str, Computation], entry: str, device: int = 0,
               max_nodes: Optional[int] = None, budget: Optional[Budget] = None) -> Flattener:
    """Flatten the entry computation for ``device``; the result is in ``.nodes`` and ``.out``.
    ``budget``: what the model may still spend (shared by the devices of one program); past it
    :class:`Unpriceable` is raised."""
    fl = Flattener(comps, device=device, max_nodes=max_nodes, budget=budget)
    ent = comps[entry]
    args = []
    for i in range(len(ent.params)):
        pname = ent.params[i]
        typ = next(x.type for x in ent.instrs if x.name == pname)
        args.append(fl.make_out(typ, frozenset()))
    fl.out = fl.run(entry, args)
    return fl
