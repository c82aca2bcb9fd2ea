"""The op table (autograder/core/optable.py): it admits every program of the course's answers
and honest fixtures, and refuses each form it does not list with one message naming the op,
the attribute, its value and the source line; a refused program fails structure and speed.

The honest programs are exported once each (the first numerics case of each function, on its
first mesh): about 130 exports, a few tenths of a second each."""
from __future__ import annotations

import functools

import re

import jax
import jax.numpy as jnp
import pytest
from conftest import SEED, check_of, grade, load_fixture, loaded
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from test_verdicts import ENTRIES, key, recorded

from autograder.core.meshes import make_mesh
from autograder.core.optable import TABLE, refusal

HONEST = [e for e in ENTRIES if recorded()[key(*e)]["checks"].get("structure")]


# -- every honest program is admitted ---------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _first_program(path: str, function: str) -> tuple:
    """(StableHLO text, layout) of the function's first numerics case, exported as the sandbox
    exports it."""
    from autograder.course import registry
    from autograder.judge.grading import plan_for
    from autograder.worker.exporting import export_one

    plan = plan_for(registry.get(function), seed=SEED, quick=True, with_speed=False)
    request = plan.all_requests()[0]
    reply = export_one(loaded(path).function(function), request, make_mesh)
    assert reply.error is None, reply.error
    return jax.export.deserialize(bytearray(reply.payload())).mlir_module(), request.layout


@pytest.mark.parametrize("path, function", HONEST, ids=[key(*e) for e in HONEST])
def test_the_table_admits_every_honest_program(path, function):
    text, layout = _first_program(path, function)
    got = refusal(text, layout)
    assert got is None, f"{key(path, function)}: {got}"


def test_the_honest_programs_are_many_and_use_most_of_the_table():
    """The list above is not empty by accident, and it exercises the rows that matter."""
    assert len(HONEST) >= 80
    used: set = set()
    for path, function in HONEST:
        used.update(re.findall(r"\b((?:stablehlo|sdy)\.\w+)", _first_program(path, function)[0]))
    for op in ("stablehlo.dot_general", "stablehlo.collective_permute", "stablehlo.all_to_all",
               "stablehlo.all_gather", "stablehlo.all_reduce", "stablehlo.reduce_scatter",
               "stablehlo.while", "stablehlo.sort", "stablehlo.scatter", "stablehlo.gather",
               "sdy.manual_computation", "stablehlo.compare"):
        assert op in used, op


# -- what JAX's public API writes for natural variants is admitted ----------------------------
MESH = make_mesh(2, 4)
_X = jax.ShapeDtypeStruct((16, 32), jnp.float32, sharding=NamedSharding(MESH, P("X", "Y")))


def _text(fn, *args, platform: str = "cpu") -> str:
    exported = jax.export.export(jax.jit(fn), platforms=[platform])(*(args or (_X,)))
    return exported.mlir_module()


def _in_shard_map(body):
    return lambda a: jax.shard_map(body, mesh=MESH, in_specs=P("X", "Y"), out_specs=P("X", "Y"),
                                   check_vma=False)(a)


NATURAL = {
    "sort, argsort, top_k": lambda a: jnp.sort(a, 0) + jnp.argsort(a, 1) + jax.lax.top_k(a, 32)[0],
    "cumsum, argmax, one_hot": lambda a: jnp.cumsum(a, 1) + jax.nn.one_hot(jnp.argmax(a, 1), 32),
    "indexing and .at[]": lambda a: a.at[jnp.argmax(a, 1)].add(1.0)
    + jnp.take(a, jnp.argmin(a, 1), 0),
    "bincount, segment_sum": lambda a: jnp.bincount(jnp.argmax(a, 1), length=32)[None, :16].T
    + jax.ops.segment_sum(a, jnp.argmax(a, 1), num_segments=16),
    "softmax, gelu, relu": lambda a: jax.nn.softmax(a) + jax.nn.gelu(a) + jax.nn.relu(a),
    "precision": lambda a: jnp.matmul(a, a.T, precision="highest") @ a
    + jnp.matmul(a, a.T, precision="high") @ a,
    # HIGH's and HIGHEST's algorithms on a TPU, priced at their 3 and 6 MXU passes
    "dot algorithms": lambda a: jnp.matmul(a, a.T, precision="BF16_BF16_F32_X3") @ a
    + jnp.matmul(a, a.T, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X6) @ a,
    "cond, fori_loop, scan": lambda a: jax.lax.cond(a.sum() > 0, lambda b: b * 2, lambda b: -b, a)
    + jax.lax.fori_loop(0, 3, lambda i, b: b + i, a)
    + jax.lax.scan(lambda c, r: (c, r * c), a[0], a)[1],
    "integers": lambda a: ((a.astype(jnp.int32) >> 1)
                           ^ (a.astype(jnp.uint32) >> 2).astype(jnp.int32)).astype(jnp.float32),
    "sharding constraint": lambda a: jax.lax.with_sharding_constraint(
        a * 2, NamedSharding(MESH, P("X", None))),
    "collectives": _in_shard_map(
        lambda b: jax.lax.psum(b, "X") + jax.lax.pmax(b, "Y") + jax.lax.pmin(b, ("X", "Y"))
        + jax.lax.all_gather(b, "Y", tiled=True)[:8] + jax.lax.psum_scatter(
            jnp.tile(b, (4, 1)), "Y", tiled=True) + jax.lax.all_to_all(b, "Y", 0, 0, tiled=True)
        + jax.lax.ppermute(b, "Y", [(i, (i + 1) % 4) for i in range(4)])
        + jax.lax.axis_index("Y")),
    "composite": lambda a: jax.lax.composite(lambda b: b * 2, name="my.double")(a),
}


@pytest.mark.parametrize("name", NATURAL)
def test_the_table_admits_what_jax_writes_for_natural_variants(name):
    assert refusal(_text(NATURAL[name]), (2, 4)) is None


# -- each form the table refuses, with its message --------------------------------------------
def _module(body: str, result: str = "tensor<8xf32>", arg: str = "tensor<8xf32>") -> str:
    return f"module @m {{ func.func public @main(%arg0: {arg}) -> {result} {{ {body} }} }}"


def _all_reduce(attrs: str, reducer: str = "add") -> str:
    return _module(
        f'%0 = "stablehlo.all_reduce"(%arg0) <{{{attrs}}}> ({{ '
        f'^bb0(%x: tensor<f32>, %y: tensor<f32>): %s = stablehlo.{reducer} %x, %y : tensor<f32> '
        f'stablehlo.return %s : tensor<f32> }}) : (tensor<8xf32>) -> tensor<8xf32> '
        f'loc("attack.py":7:3) return %0 : tensor<8xf32>')


_CHANNEL = "channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>"
_ROWS = "replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>"

TEXTS = {
    # a K-term dot inside a map: one vector op per output element, if priced by its name
    "map": (_module(
        '%0 = "stablehlo.map"(%arg0, %arg0) ({ ^bb0(%a: tensor<f32>, %b: tensor<f32>): '
        '%s = stablehlo.multiply %a, %b : tensor<f32> stablehlo.return %s : tensor<f32> }) '
        '{dimensions = array<i64: 0>} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> '
        'loc("attack.py":12:3) return %0 : tensor<8xf32>'),
        "stablehlo.map (at attack.py line 12) is not part of this course's programs: write the "
        "computation with jnp"),
    # a matmul written as a triangular solve, priced by its bytes
    "triangular_solve": (_module(
        '%0 = "stablehlo.triangular_solve"(%arg0, %arg0) {left_side = true, lower = true, '
        'unit_diagonal = false, transpose_a = #stablehlo<transpose NO_TRANSPOSE>} : '
        '(tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32> return %0 : tensor<4x4xf32>',
        "tensor<4x4xf32>", "tensor<4x4xf32>"),
        "stablehlo.triangular_solve is not part of this course's programs"),
    # replica_groups={{0}} by hand: no channel, no global ids ("a group of one")
    "all_reduce by hand": (_all_reduce("replica_groups = dense<[[0]]> : tensor<1x1xi64>"),
                           "stablehlo.all_reduce without channel_handle (at attack.py line 7)"),
    "all_reduce without global ids": (
        _all_reduce(f"{_ROWS}, {_CHANNEL}"),
        "stablehlo.all_reduce without use_global_device_ids (at attack.py line 7)"),
    "all_reduce of one device": (
        _all_reduce(f"replica_groups = dense<[[0]]> : tensor<1x1xi64>, {_CHANNEL}, "
                    "use_global_device_ids"),
        "with replica_groups = dense<0> : tensor<1x1xi64> (at attack.py line 7) is not part "
        "of this course's programs: write collectives with jax.lax (psum, pmax, pmin) over "
        "whole mesh axes (these devices do not form whole axes of the 2x4 mesh)"),
    "all_reduce to the host": (
        _all_reduce(f"{_ROWS}, {_CHANNEL.replace('type = 1', 'type = 2')}, "
                    "use_global_device_ids"),
        "stablehlo.all_reduce with channel_handle = type = 2"),
    "all_reduce by product": (
        _all_reduce(f"{_ROWS}, {_CHANNEL}, use_global_device_ids", reducer="multiply"),
        "stablehlo.all_reduce with reduction = stablehlo.multiply"),
    "all_reduce doubling": (
        _all_reduce(f"{_ROWS}, {_CHANNEL}, use_global_device_ids").replace(
            "stablehlo.add %x, %y", "stablehlo.add %x, %x"),
        "stablehlo.all_reduce with reduction = stablehlo.add not of its two operands"),
    "unknown custom call": (_module(
        '%0 = stablehlo.custom_call @my_kernel(%arg0) : (tensor<8xf32>) -> tensor<8xf32> '
        'return %0 : tensor<8xf32>'),
        "stablehlo.custom_call with call_target_name = my_kernel is not part of this course's "
        "programs"),
    "float64": (_module('%0 = stablehlo.convert %arg0 : (tensor<8xf32>) -> tensor<8xf64> '
                        'return %0 : tensor<8xf64>', "tensor<8xf64>"),
                "stablehlo.convert on f32 -> f64 is not part of this course's programs"),
}


@pytest.mark.parametrize("name", TEXTS)
def test_the_table_refuses_a_form_it_does_not_list(name):
    text, says = TEXTS[name]
    got = refusal(text, (2, 4))
    assert got is not None and says in str(got), got


def test_a_collective_in_a_one_device_function_is_refused():
    text = _all_reduce(f"{_ROWS}, {_CHANNEL}, use_global_device_ids")
    assert refusal(text, (2, 4)) is None
    assert "runs on one device" in str(refusal(text, None))


def _line_of(text: str) -> int:
    """The line of this file that holds ``text``."""
    return next(i for i, line in enumerate(open(__file__).read().splitlines(), 1)
                if text in line)


PROGRAMS = {
    # bfloat16 parts of a float32 product, accumulated in float32 (the "bf16x3" split)
    "bf16 dot": (lambda a: jnp.dot(  # bf16 dot here
        a.astype(jnp.bfloat16), a.T.astype(jnp.bfloat16), preferred_element_type=jnp.float32) @ a,
                 "stablehlo.dot_general on bf16, bf16 -> f32", "# bf16 dot here"),
    # a dot algorithm the model has no passes for (one bf16 pass, as the default is on a TPU)
    "dot algorithm": (lambda a: jnp.dot(  # algorithm here
        a, a.T, precision="BF16_BF16_F32") @ a,
        "stablehlo.dot_general with algorithm = BF16_BF16_F32", "# algorithm here"),
    # TOTALORDER outside a sort: -0.0 < +0.0 is true there; jnp.searchsorted on floats writes it
    "TOTALORDER": (lambda a: a + jnp.searchsorted(a[0], a[1, 0]),  # totalorder here
                   "stablehlo.compare with compare_type = TOTALORDER", "# totalorder here"),
    # an arithmetic shift of an unsigned value
    "unsigned shift": (lambda a: a + jax.lax.shift_right_arithmetic(  # shift here
        a.astype(jnp.uint32), jnp.uint32(1)).astype(jnp.float32),
        "stablehlo.shift_right_arithmetic on ui32, ui32 -> ui32", "# shift here"),
    # a library kernel JAX calls on CPU (LAPACK's triangular solve)
    "library call": (lambda a: a[:4, :4] + jax.scipy.linalg.solve_triangular(  # library here
        jnp.tril(a[:4, :4]) + 4 * jnp.eye(4), a[:4, :4], lower=True),
        "stablehlo.custom_call with call_target_name = lapack_strsm_ffi", "# library here"),
}


@pytest.mark.parametrize("name", PROGRAMS)
def test_the_refusal_names_the_source_line(name):
    fn, says, mark = PROGRAMS[name]
    got = refusal(_text(fn), (2, 4))
    assert got is not None and says in str(got), got
    assert f"at test_optable.py line {_line_of(mark)})" in str(got), got
    assert "is not part of this course's programs" in str(got)


def _primitive(name: str, lowering):
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    prim = Primitive(name)
    prim.def_impl(lambda x: x * 2)
    prim.def_abstract_eval(lambda x: x)
    mlir.register_lowering(prim, lowering)
    return prim


def _map_lowering(ctx, x):
    """``x + x`` written as a stablehlo.map by hand: what no jnp function writes."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo
    from jax.interpreters import mlir

    aval = ctx.avals_out[0]
    op = hlo.MapOp(mlir.aval_to_ir_type(ctx.module_context, aval), [x],
                   ir.DenseI64ArrayAttr.get(list(range(aval.ndim))))
    block = op.regions[0].blocks.append(
        ir.RankedTensorType.get([], mlir.dtype_to_ir_type(aval.dtype)))
    with ir.InsertionPoint(block):
        hlo.return_([hlo.add(block.arguments[0], block.arguments[0])])
    return op.results


def test_a_custom_primitive_is_judged_by_its_ops_never_by_its_name():
    from jax.interpreters import mlir

    named_like_a_collective = _primitive("ppermute", mlir.lower_fun(lambda x: x * 2,
                                                                     multiple_results=False))
    innocently_named = _primitive("add_any", _map_lowering)
    assert refusal(_text(lambda a: named_like_a_collective.bind(a)), (2, 4)) is None
    got = refusal(_text(lambda a: innocently_named.bind(a)), (2, 4))  # map here
    assert str(got).startswith(f"stablehlo.map (at test_optable.py line {_line_of('# map here')})"
                               f" is not part of this course's programs: write the computation "
                               "with jnp"), got


def test_totalorder_inside_a_sort_is_the_sort_s_own():
    assert refusal(_text(lambda a: jnp.sort(a, axis=1)), (2, 4)) is None


# -- a refused program fails structure and speed, with the refusal ----------------------------
def test_a_refused_program_fails_structure_and_speed_with_its_message():
    """The reference ring with each partial product split into bfloat16 parts: its values pass
    and, without the table, so did its structure (12 partial matmuls in a ppermute ring). The
    structure check says the refusal; speed, which counts only with structure, is not
    measured."""
    from autograder.core.results import NOT_CREDITED

    res = grade("attacks", "bf16_split_matmul", "matmul_allgather", with_speed=True, quick=True)
    assert check_of(res, "numerics").passed, res.report()
    says = "stablehlo.dot_general on bf16, bf16 -> f32 (at <bf16_split_matmul.py> line 19)"
    structure, speed = check_of(res, "structure"), check_of(res, "speed")
    assert not structure.passed and says in structure.message, structure.message
    # the refusal fails structure (with or without rules), so speed fails unmeasured
    assert not speed.passed and speed.message.startswith(f"{NOT_CREDITED}. Not measured: "), \
        speed.message


def test_the_self_check_says_the_same_refusal():
    from autograder.public import check as public

    fn = load_fixture("attacks", "bf16_split_matmul").function("matmul_allgather")
    with pytest.raises(AssertionError) as e:
        public.check("matmul_allgather", fn, layouts=((2, 4),), cases=1, verbose=False,
                     big=False)
    assert ": structure: stablehlo.dot_general on bf16, bf16 -> f32" in str(e.value), e.value


def test_the_reader_refuses_before_it_counts():
    """read_paths holds a program to the table before it runs anything: a refused program
    with a loop is never run to count its trips."""
    from autograder.course.reading import read_paths

    def looped(a):
        return jax.lax.fori_loop(0, 2, lambda i, b: jnp.dot(
            b.astype(jnp.bfloat16), b.T.astype(jnp.bfloat16),
            preferred_element_type=jnp.float32) @ b, a)

    exported = jax.export.export(jax.jit(looped))(_X)
    paths = read_paths(exported, MESH, "", [], (),
                       count=lambda *a: pytest.fail("counted a refused program"))
    assert not paths.programs and paths.refused == paths.error
    assert paths.error.startswith("stablehlo.dot_general on bf16, bf16 -> f32"), paths.error
