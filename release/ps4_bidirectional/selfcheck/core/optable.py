"""What a graded program may contain: the op table, deny by default.

The structure rules read a program's StableHLO and the TPU model prices it; each knows the ops
and the attribute values the course's programs use, and guessed at anything else (an op priced
by its bytes whatever it computes, a comparison evaluated the way XLA does not, a collective
placed on no mesh axis). This table turns that around, as a seccomp profile does: a program may
hold only the ops listed in :data:`TABLE`, each only with the attributes and values listed for
it, on the element types listed. Anything else is refused, one message per refusal naming the
op, the attribute and its value and the source line, and the program then fails the structure
check and the speed check at once (:func:`autograder.course.reading.read_paths` and the judge's
speed check both ask :func:`refusal`); its numerics are judged as always.

The table is what the course's reference answers and the honest fixtures hold
(``tests/test_optable.py`` exports every one of their programs and shows the table admits
them), plus what JAX's public API writes for the natural variants of the problems: ``jnp``
arithmetic and reductions, ``sort``/``argsort``/``top_k`` (a ``chlo.top_k`` composite),
``cumsum`` (``reduce_window``), ``argmax``, indexing and ``.at[]`` (gather, scatter), ``cond``,
``fori_loop``/``scan``/``while_loop``, ``shard_map`` (``sdy.manual_computation``, or GSPMD's
``Sharding``/``SPMD*`` custom calls), ``with_sharding_constraint`` and the ``jax.lax``
collectives over whole mesh axes. A custom primitive or a ``jax.lax.composite`` is judged by
the ops its lowering writes, never by its name.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional, Union

#: any value of the attribute
ANY = "any"
#: collective groups that the reader places on whole mesh axes
#: (:func:`autograder.core.stablehlo.placement`)
PLACED = "placed"

#: element types a program may compute on (no float64, complex or 8-bit floats: none of the
#: course's programs uses them, and the model prices none of them)
SIGNED = frozenset({"i8", "i16", "i32", "i64"})
UNSIGNED = frozenset({"ui8", "ui16", "ui32", "ui64"})
ELEMENT_TYPES = SIGNED | UNSIGNED | frozenset({"i1", "bf16", "f16", "f32"})

#: the precisions of a float32 matmul (``precision=`` of ``jnp.dot``, ``jnp.matmul``, ``@``)
_PRECISIONS = frozenset(f"{a},{b}" for a in ("DEFAULT", "HIGH", "HIGHEST")
                        for b in ("DEFAULT", "HIGH", "HIGHEST"))
#: the dot algorithms of a float32 matmul the TPU model prices (``precision=`` of ``jnp.dot``
#: given a ``jax.lax.DotAlgorithmPreset``): HIGH's and HIGHEST's algorithms on a TPU, 3 and 6
#: MXU passes (:data:`autograder.tpumodel.cost.ALGORITHM_PASSES`); :func:`value` names them
_ALGORITHMS = frozenset({"BF16_BF16_F32_X3", "BF16_BF16_F32_X6"})
#: a collective as ``jax.lax`` writes it: a channel between devices, global device ids
_CHANNEL = frozenset({"type = 0", "type = 1"})  # 2, 3: to and from the host


@dataclass(frozen=True)
class Allow:
    """One row of the table: what an op may carry.

    ``attrs``: attribute -> its allowed values: :data:`ANY`, :data:`PLACED`, a set of values
    (as :func:`value` writes them), or ``{value: enclosing op}`` where a value is allowed only
    inside that op's region (an empty string: anywhere). An attribute not named is refused;
    ``any_attrs`` admits every attribute (the module and function frames). ``required``: the
    attributes the op must carry. ``operands``/``results``: the element types allowed (default
    :data:`ELEMENT_TYPES`). ``reducer``: the ops a collective's reduction body may apply."""

    attrs: Mapping[str, Union[str, frozenset, Mapping[str, str]]] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    operands: frozenset = ELEMENT_TYPES
    results: frozenset = ELEMENT_TYPES
    reducer: Optional[frozenset] = None
    any_attrs: bool = False


_PLAIN = Allow()
_COLLECTIVE = {"replica_groups": PLACED, "channel_handle": _CHANNEL, "use_global_device_ids": ANY}
_GROUPED = ("replica_groups", "channel_handle", "use_global_device_ids")

TABLE: dict[str, Allow] = {
    # -- the frame: modules, functions, calls, shard_map (Shardy) ---------------------------
    "builtin.module": Allow(any_attrs=True),
    "func.func": Allow(any_attrs=True),
    "func.call": Allow({"callee": ANY}),
    "func.return": _PLAIN,
    "sdy.mesh": Allow({"sym_name": ANY, "mesh": ANY, "stablehlo.mesh": ANY}),
    "sdy.manual_computation": Allow({"in_shardings": ANY, "out_shardings": ANY,
                                     "manual_axes": ANY}),
    "sdy.sharding_constraint": Allow({"sharding": ANY}),
    "sdy.return": _PLAIN,
    # GSPMD's shard_map and sharding annotations (JAX without Shardy); nothing else
    "stablehlo.custom_call": Allow(
        {"call_target_name": frozenset({"Sharding", "SPMDFullToShardShape",
                                        "SPMDShardToFullShape"}),
         "mhlo.sharding": ANY, "backend_config": ANY, "api_version": ANY},
        required=("call_target_name",)),
    # a composite runs its decomposition, whose ops are judged where they stand
    "stablehlo.composite": Allow({"name": ANY, "composite_attributes": ANY,
                                  "decomposition": ANY, "version": ANY}),
    # -- control flow -----------------------------------------------------------------------
    "stablehlo.while": _PLAIN,
    "stablehlo.case": _PLAIN,
    "stablehlo.return": _PLAIN,
    "stablehlo.optimization_barrier": _PLAIN,
    # -- values -----------------------------------------------------------------------------
    "stablehlo.constant": Allow({"value": ANY}),
    "stablehlo.iota": Allow({"iota_dimension": ANY}),
    "stablehlo.partition_id": _PLAIN,
    # -- elementwise arithmetic, one vector op per element ----------------------------------
    **{f"stablehlo.{op}": _PLAIN for op in (
        "abs", "negate", "sign", "exponential", "exponential_minus_one", "log", "log_plus_one",
        "logistic", "tanh", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "floor", "ceil",
        "round_nearest_even", "round_nearest_afz", "is_finite", "not", "popcnt",
        "count_leading_zeros", "convert", "bitcast_convert", "add", "subtract", "multiply",
        "divide", "remainder", "power", "atan2", "maximum", "minimum", "and", "or", "xor",
        "shift_left", "shift_right_logical", "select", "clamp")},
    # an arithmetic shift keeps the sign: of signed integers only (as ``>>`` writes it)
    "stablehlo.shift_right_arithmetic": Allow(operands=SIGNED, results=SIGNED),
    "stablehlo.reduce_precision": Allow({"exponent_bits": ANY, "mantissa_bits": ANY}),
    # TOTALORDER only orders a sort (its comparator, as jnp.sort / argsort / top_k write it)
    "stablehlo.compare": Allow({"comparison_direction": ANY,
                                "compare_type": {"SIGNED": "", "UNSIGNED": "", "FLOAT": "",
                                                 "TOTALORDER": "stablehlo.sort"}}),
    # -- moving data on one device ----------------------------------------------------------
    "stablehlo.broadcast_in_dim": Allow({"broadcast_dimensions": ANY}),
    "stablehlo.reshape": _PLAIN,
    "stablehlo.transpose": Allow({"permutation": ANY}),
    "stablehlo.slice": Allow({"start_indices": ANY, "limit_indices": ANY, "strides": ANY}),
    "stablehlo.dynamic_slice": Allow({"slice_sizes": ANY}),
    "stablehlo.dynamic_update_slice": _PLAIN,
    "stablehlo.concatenate": Allow({"dimension": ANY}),
    "stablehlo.pad": Allow({"edge_padding_low": ANY, "edge_padding_high": ANY,
                            "interior_padding": ANY}),
    "stablehlo.reverse": Allow({"dimensions": ANY}),
    "stablehlo.gather": Allow({"dimension_numbers": ANY, "slice_sizes": ANY,
                               "indices_are_sorted": ANY}),
    "stablehlo.scatter": Allow({"scatter_dimension_numbers": ANY, "indices_are_sorted": ANY,
                                "unique_indices": ANY}),
    "stablehlo.sort": Allow({"dimension": ANY, "is_stable": ANY}),
    # -- reductions and matmuls -------------------------------------------------------------
    "stablehlo.reduce": Allow({"dimensions": ANY}),
    "stablehlo.reduce_window": Allow({"window_dimensions": ANY, "window_strides": ANY,
                                      "base_dilations": ANY, "window_dilations": ANY,
                                      "padding": ANY}),
    # float32 in, float32 out, as the jit baselines multiply (no bfloat16 split of a product),
    # at a precision or dot algorithm the model prices by its MXU passes
    "stablehlo.dot_general": Allow({"dot_dimension_numbers": ANY, "precision_config": _PRECISIONS,
                                    "algorithm": _ALGORITHMS},
                                   operands=frozenset({"f32"}), results=frozenset({"f32"})),
    # -- collectives over whole mesh axes, as jax.lax writes them ---------------------------
    "stablehlo.all_reduce": Allow(_COLLECTIVE, required=_GROUPED,
                                  reducer=frozenset({"stablehlo.add", "stablehlo.maximum",
                                                     "stablehlo.minimum", "stablehlo.and",
                                                     "stablehlo.or"})),
    "stablehlo.reduce_scatter": Allow({**_COLLECTIVE, "scatter_dimension": ANY},
                                      required=_GROUPED,
                                      reducer=frozenset({"stablehlo.add"})),
    "stablehlo.all_gather": Allow({**_COLLECTIVE, "all_gather_dim": ANY}, required=_GROUPED),
    "stablehlo.all_to_all": Allow({"replica_groups": PLACED, "channel_handle": _CHANNEL,
                                   "split_dimension": ANY, "concat_dimension": ANY,
                                   "split_count": ANY},
                                  required=("replica_groups", "channel_handle")),
    "stablehlo.collective_permute": Allow({"source_target_pairs": PLACED,
                                           "channel_handle": _CHANNEL},
                                          required=("source_target_pairs", "channel_handle")),
}

#: what to do instead, for the ops a student may reach for (the rest get :data:`_WRITE`)
_WRITE = ("write the computation with jax.numpy and the jax.lax collectives the exercise asks "
          "for")
ADVICE = {
    "stablehlo.map": "write the computation with jnp (elementwise ops and matmuls)",
    "stablehlo.triangular_solve": "write the computation with jnp matmuls and elementwise ops",
    "stablehlo.custom_call": "write it with jax.numpy and jax.lax; no custom kernels or library "
                             "calls",
    "stablehlo.collective_broadcast": "send blocks with jax.lax.ppermute",
    "stablehlo.send": "send blocks with jax.lax.ppermute",
    "stablehlo.recv": "send blocks with jax.lax.ppermute",
    "stablehlo.dot_general": "multiply the float32 arrays as they are (jnp.dot, @, einsum; a "
                             "precision of DEFAULT, HIGH or HIGHEST, or the dot algorithm "
                             "BF16_BF16_F32_X3 or BF16_BF16_F32_X6, is fine, the default the "
                             "fastest on a TPU): a product split into bfloat16 parts, computed "
                             "in other types or with another dot algorithm is not priced",
    "stablehlo.compare": "compare with <, <=, ==, ... on the values (a TOTALORDER comparison is "
                         "only for sorting; jnp.searchsorted on floats writes one: search "
                         "integers instead, or count with jnp.sum(a <= v))",
    "stablehlo.shift_right_arithmetic": "shift signed integers, or use >> on unsigned ones "
                                        "(a logical shift)",
    "stablehlo.all_reduce": "write collectives with jax.lax (psum, pmax, pmin) over whole mesh "
                            "axes",
    "stablehlo.reduce_scatter": "write it with jax.lax.psum_scatter over whole mesh axes",
    "stablehlo.all_gather": "write it with jax.lax.all_gather over whole mesh axes",
    "stablehlo.all_to_all": "write it with jax.lax.all_to_all over whole mesh axes",
    "stablehlo.collective_permute": "write it with jax.lax.ppermute over the mesh's axes",
}


@dataclass(frozen=True)
class Refusal:
    """What the table refuses: ``op`` (its StableHLO name), the ``attribute`` and ``value``
    (empty when the op itself is refused), ``where`` (the source line, when the program says),
    and what to do instead."""

    op: str
    attribute: str = ""
    value: str = ""
    where: str = ""
    advice: str = _WRITE

    def message(self) -> str:
        what = self.op
        if self.attribute == "element types":
            what = f"{self.op} on {self.value}"
        elif self.attribute and self.value == "(missing)":
            what = f"{self.op} without {self.attribute}"
        elif self.attribute:
            what = f"{self.op} with {self.attribute} = {self.value}"
        at = f" (at {self.where})" if self.where else ""
        return f"{what}{at} is not part of this course's programs: {self.advice}"

    def __str__(self) -> str:
        return self.message()


# ------------------------------------------------------------------------------ reading values
_ENUM = re.compile(r"#stablehlo<\w+ (\w+)>")
_CHANNEL_TYPE = re.compile(r"type\s*=\s*(\d+)")
_DOT_ALGORITHM = re.compile(
    r"#stablehlo\.dot_algorithm<lhs_precision_type = (\w+), rhs_precision_type = (\w+), "
    r"accumulation_type = (\w+), lhs_component_count = 1, rhs_component_count = 1, "
    r"num_primitive_operations = (\d+), allow_imprecise_accumulation = false>")
_FILE_LINE = re.compile(r'"([^"]+)":(\d+):\d+')


def value(name: str, attr) -> str:
    """An attribute's value as the table writes it: an enum's keyword (``FLOAT``), a list of
    them joined by commas (``HIGHEST,HIGHEST``), a string's text, a channel's type (``type =
    0``), a dot algorithm by the name of its ``jax.lax.DotAlgorithmPreset``
    (``BF16_BF16_F32_X3``; one of no preset's shape as MLIR prints it); anything else as MLIR
    prints it."""
    text = str(attr)
    if name == "channel_handle":
        m = _CHANNEL_TYPE.search(text)
        return f"type = {m.group(1)}" if m else text
    if name == "algorithm":
        m = _DOT_ALGORITHM.fullmatch(text)
        if m is None:
            return text
        lhs, rhs, acc, ops = m.groups()
        return f"{lhs}_{rhs}_{acc}".upper() + (f"_X{ops}" if ops != "1" else "")
    enums = _ENUM.findall(text)
    if enums:
        return ",".join(enums)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def source_line(op) -> str:
    """The source line an op came from (``file line N``), '' when the program does not say."""
    for m in _FILE_LINE.finditer(str(op.location)):
        if m.group(1) != "-":  # the parser's own name for text without locations
            return f"{os.path.basename(m.group(1)) or m.group(1)} line {m.group(2)}"
    return ""


def _element_type(t) -> Optional[str]:
    from jax._src.lib.mlir import ir

    if isinstance(t, ir.RankedTensorType):
        return str(t.element_type)
    return None  # a token, a tuple, an unranked tensor


def _inside(op, name: str) -> bool:
    """Whether ``op`` stands in a region of an op called ``name`` (at any depth)."""
    parent = op.parent
    while parent is not None:
        parent = getattr(parent, "operation", parent)
        if parent.name == name:
            return True
        parent = parent.parent
    return False


def _types(values) -> list:
    return [_element_type(v.type) for v in values]


# ------------------------------------------------------------------------------ the check
def check_op(op, placed) -> Optional[Refusal]:
    """The refusal of one op (an ``ir.Operation``) by the table, or None.
    ``placed(name, attr)``: None where a collective's groups sit on whole mesh axes, else
    why not."""
    name = op.name
    row = TABLE.get(name)
    where = source_line(op)
    advice = ADVICE.get(name, _WRITE)
    if row is None:
        return Refusal(name, where=where, advice=advice)
    ins, outs = _types(op.operands), _types(op.results)
    bad = [t for t in ins if t not in row.operands] + [t for t in outs if t not in row.results]
    if bad:
        shown = f"{', '.join(str(t) for t in ins)} -> {', '.join(str(t) for t in outs)}"
        return Refusal(name, "element types", shown, where, advice)
    present = {}
    for i in range(len(op.attributes)):
        named = op.attributes[i]
        present[named.name] = named.attr
    for attr in row.required:
        if attr not in present:
            return Refusal(name, attr, "(missing)", where, advice)
    if row.any_attrs:
        return None
    for attr, raw in present.items():
        allowed = row.attrs.get(attr)
        if allowed is None:
            return Refusal(name, attr, value(attr, raw)[:80], where, advice)
        if allowed == ANY:
            continue
        if allowed == PLACED:
            why = placed(name, raw)
            if why is not None:
                return Refusal(name, attr, _short(str(raw)), where, f"{advice} ({why})")
            continue
        got = value(attr, raw)
        if isinstance(allowed, Mapping):
            if got not in allowed or (allowed[got] and not _inside(op, allowed[got])):
                return Refusal(name, attr, got, where, advice)
        elif got not in allowed:
            return Refusal(name, attr, got, where, advice)
    if row.reducer is not None:
        body = _reducer(op.regions[0].blocks[0], row.reducer)
        if body is not None:
            return Refusal(name, "reduction", body, where, advice)
    return None


def _reducer(block, allowed: frozenset) -> Optional[str]:
    """None where a collective's reduction body applies one allowed op to its two arguments
    and returns the result (``psum``'s add, ``pmax``'s maximum ...), as jax.lax writes it;
    else what the body does."""
    ops = [o.operation for o in block.operations]
    names = " then ".join(o.name for o in ops[:-1]) or "(nothing)"
    if len(ops) != 2 or ops[0].name not in allowed or ops[1].name != "stablehlo.return":
        return names
    args = [_arg_number(v) for v in ops[0].operands]
    if (len(list(block.arguments)) != 2 or None in args or sorted(args) != [0, 1]
            or list(ops[1].operands) != list(ops[0].results)):
        return f"{names} not of its two operands"
    return None


def _arg_number(v):
    from jax._src.lib.mlir import ir

    return v.arg_number if isinstance(v, ir.BlockArgument) else None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 80 else text[:77] + "..."


def refusal(text: str, mesh_shape: Optional[tuple[int, ...]] = None,
            axis_names: tuple[str, ...] = ("X", "Y")) -> Optional[Refusal]:
    """The first op of a StableHLO module (as text) that the table refuses, in program order,
    or None when the table admits every op. ``mesh_shape``: the mesh the program runs on
    (None: one device, where no collective is admitted)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    from .stablehlo import placement

    ctx = mlir.make_ir_context()
    module = ir.Module.parse(text, context=ctx)
    with ctx:
        group_axes, permute_axes = placement(module, mesh_shape, tuple(axis_names))

        def placed(name: str, attr) -> Optional[str]:
            if mesh_shape is None:
                return "this function runs on one device: it needs no collective"
            try:
                axes = (permute_axes(attr)[0] if name == "stablehlo.collective_permute"
                        else group_axes(attr))
            except (TypeError, ValueError):
                axes = ("?",)
            if "?" in axes:
                shape = "x".join(str(n) for n in mesh_shape)
                return f"these devices do not form whole axes of the {shape} mesh"
            return None

        found: list[Refusal] = []

        ops: list = []

        def visit(op):
            got = check_op(op.operation, placed)
            if got is not None:
                found.append(got)
                ops.append(op.operation)
                return ir.WalkResult.INTERRUPT
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
        if found and not found[0].where:  # in a function JAX wrote: the line that calls it
            return replace(found[0], where=_caller_line(module, ops[0]))
    return found[0] if found else None


def _caller_line(module, op) -> str:
    """The source line of the call that leads to ``op``: inside a function of the library
    (``jnp.searchsorted``'s, say), whose ops carry no line of the student's, the line of the
    first ``func.call`` or ``stablehlo.composite`` that reaches it, followed outwards."""
    from jax._src.lib.mlir import ir

    callers: dict = {}

    def visit(o):
        o = o.operation
        for name in ("callee", "decomposition"):
            if name in o.attributes and o.name in ("func.call", "stablehlo.composite"):
                callers.setdefault(ir.FlatSymbolRefAttr(o.attributes[name]).value, o)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    seen: set = set()
    while True:
        func = op
        while func is not None and func.name != "func.func":
            func = getattr(func.parent, "operation", func.parent)
        if func is None:
            return ""
        name = ir.StringAttr(func.attributes["sym_name"]).value
        if name in seen or name not in callers:
            return ""
        seen.add(name)
        op = callers[name]
        line = source_line(op)
        if line:
            return line


__all__ = ["ADVICE", "ANY", "ELEMENT_TYPES", "PLACED", "TABLE", "Allow", "Refusal", "check_op",
           "refusal", "source_line", "value"]
