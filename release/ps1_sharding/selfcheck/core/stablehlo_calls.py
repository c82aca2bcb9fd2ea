"""The call rewrites a module is read and counted after: composites made plain calls, one callee
per call site of a function with loops or branches, and the numbering of its loops and
conditionals (:func:`control_flow_ops`) that the counting program and the reader share."""
from __future__ import annotations

from .stablehlo_ops import ProgramUnreadable, _callee, _string

try:
    from jax._src.lib.mlir import ir
except Exception:  # noqa: BLE001  # reported when a program is read (stablehlo.program_from_mlir)
    pass


def control_flow_ops(root) -> tuple[list, list]:
    """(loops, conditionals) of a module or op, each in pre-order: the numbering that
    :class:`RunCounts` and the counting program share."""
    loops, conds = [], []

    def visit(op):
        if op.name == "stablehlo.while":
            loops.append(op.operation)
        elif op.name in ("stablehlo.case", "stablehlo.if"):
            conds.append(op.operation)
        return ir.WalkResult.ADVANCE

    root.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return loops, conds


#: the most functions :func:`one_callee_per_call` may add (a program calling helpers with loops
#: or branches inside helpers so often that each call site's copy would not fit is unreadable)
MAX_CALL_SITES = 2000


def calls_for_composites(module) -> None:
    """Turn every ``stablehlo.composite`` into a plain ``func.call`` of its decomposition (what
    XLA runs), so that a composite is counted and read the way any called function is."""
    found = []

    def visit(op):
        if op.operation.name == "stablehlo.composite":
            found.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in found:
        callee = ir.FlatSymbolRefAttr(op.attributes["decomposition"]).value
        call = ir.Operation.create("func.call", results=[r.type for r in op.results],
                                   operands=list(op.operands),
                                   attributes={"callee": ir.FlatSymbolRefAttr.get(callee)},
                                   loc=op.location, ip=ir.InsertionPoint(op))
        for old, now in zip(op.results, call.results):
            old.replace_all_uses_with(now)
        op.erase()


def one_callee_per_call(module) -> None:
    """Give every call of a function that holds a loop or a conditional (itself or in what it
    calls) its own copy of that function, so that a run counts each call site's loops and
    branches apart. A helper jitted once and called from three places is one function in
    StableHLO: counted together, its branch taken once in three calls could not be told apart
    from one taken in every call, and the reader could only share the count out by a guess.

    Run after :func:`calls_for_composites`, on the module both the counting program and the
    reader start from, so that both number the loops and conditionals the same way. Raises
    :class:`ProgramUnreadable` for a recursive call or past :data:`MAX_CALL_SITES` copies."""
    funcs = {_string(op.operation, "sym_name"): op.operation
             for op in module.body.operations if op.operation.name == "func.func"}
    steered: dict[str, bool] = {}

    def calls_in(fn) -> list:
        found = []

        def visit(op):
            if op.operation.name == "func.call":
                found.append(op.operation)
            return ir.WalkResult.ADVANCE

        fn.walk(visit, ir.WalkOrder.PRE_ORDER)
        return found

    def is_steered(name: str, stack: tuple = ()) -> bool:
        if name in stack:
            raise ProgramUnreadable(f"a recursive call to @{name}")
        if name not in steered:
            fn = funcs.get(name)
            if fn is None:
                raise ProgramUnreadable(f"cannot follow the call to @{name}")
            loops, conds = control_flow_ops(fn)
            steered[name] = bool(loops or conds) or any(
                is_steered(_callee(c), stack + (name,)) for c in calls_in(fn))
        return steered[name]

    used: set[str] = set()
    added = 0
    todo = [funcs["main"]] if "main" in funcs else []
    while todo:
        fn = todo.pop()
        for call in calls_in(fn):
            name = _callee(call)
            if not is_steered(name):
                continue
            if name in used:
                added += 1
                if added > MAX_CALL_SITES:
                    raise ProgramUnreadable(
                        f"functions holding loops or branches are called from over "
                        f"{MAX_CALL_SITES} places; call such helpers fewer times")
                copy = funcs[name].clone(ip=ir.InsertionPoint(module.body))
                new = f"{name}__site{added}"
                while new in funcs:
                    new += "_"
                copy.attributes["sym_name"] = ir.StringAttr.get(new)
                funcs[new] = copy
                steered[new] = True
                call.attributes["callee"] = ir.FlatSymbolRefAttr.get(new)
                name = new
            used.add(name)
            todo.append(funcs[name])


def has_control_flow(text: str) -> bool:
    """Whether a StableHLO module holds a loop or a conditional (whose counts a run tells)."""
    return any(w in text for w in ("stablehlo.while", "stablehlo.case", "stablehlo.if"))
