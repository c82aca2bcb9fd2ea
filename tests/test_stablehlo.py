"""The StableHLO reader (autograder/core/stablehlo.py) against the jaxpr walker (autograder/core/program.py).

Every graded function of the reference solutions and of the fixtures is traced (jaxpr) and
exported (``jax.export``, serialized and deserialized as the trusted grader receives it) on the
(2, 4), (4, 2), (1, 8) and (8, 1) meshes; both programs must describe the same collectives and
matmuls and, above all, every structure rule must give the same verdict on both.

Run: /work/main/.venv/bin/python -m pytest -q tests/test_stablehlo.py
"""
from __future__ import annotations

import ast
import functools
import re
import warnings
from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from autograder.core.loader import load
from autograder.core.meshes import make_mesh
from autograder.core.program import Program, trace
from autograder.core.stablehlo import ProgramUnreadable, program_from_exported, program_from_mlir
from autograder.course import registry
from autograder.course.rules import moe as rules_moe

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ((2, 4), (4, 2), (1, 8), (8, 1))
SOURCES = sorted((ROOT / "solutions").glob("*.py")) + sorted(
    p for area in ("ps1", "ps2_moe", "ps3", "ps4")
    for p in (ROOT / "tests" / "fixtures" / area).glob("*.py")
    if not p.stem.startswith("hang_"))  # they never finish loading / tracing
#: what a trusted grader must allow for ragged_all_to_all (a custom call in StableHLO)
DISABLED = [jax.export.DisabledSafetyCheck.custom_call("ragged_all_to_all")]


def _graded(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return []
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return [p.name for p in registry.problems() if p.name in defined]


CASES = [(src, name) for src in SOURCES for name in _graded(src)]


@functools.lru_cache(maxsize=None)
def _loaded(path: Path):
    return load(path, statement_timeout=5, total_timeout=20)


def _abstract(problem, mesh, layout):
    case = problem.case(np.random.default_rng(0), *layout, "small")
    args = []
    for a, spec in zip(case.args, problem.in_specs):
        if spec is None:
            args.append(a)  # a static Python int
        else:
            sharding = NamedSharding(mesh, spec) if problem.uses_mesh else None
            args.append(jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=sharding))
    return args


def _export(fn, args, static=()):
    exp = jax.export.export(jax.jit(fn, static_argnums=static), disabled_checks=DISABLED)(*args)
    return jax.export.deserialize(exp.serialize())


# -- what both programs must agree on --------------------------------------------------------

def _shifts(op, mesh_shape: dict) -> tuple:
    n = int(np.prod([mesh_shape[a] for a in op.axes])) if op.axes else 1
    return tuple(sorted(op.shift(n))) if op.perm else ()


def _collectives(prog: Program, mesh_shape: dict, weighted: bool) -> Counter:
    """(kind, axes, in_bytes, ring shifts, count) of every collective; ``weighted`` counts
    runs instead (loops multiplied out, an unknown count stays a key of its own).

    Axes of size 1 are left out: over them a group is one device, so StableHLO's device groups
    cannot tell whether the program named them (the reader reports the smallest set of axes).
    A collective over size-1 axes alone moves nothing and is left out: JAX lowers some of them
    (all_to_all) to no op at all."""
    c: Counter = Counter()
    for o in prog.collectives():
        axes = tuple(a for a in o.axes if mesh_shape.get(a, 2) > 1)
        if not axes or o.count == 0:  # a zero-trip loop's body is not in StableHLO at all
            continue
        key = (o.kind, axes, o.in_bytes, _shifts(o, mesh_shape))
        if weighted:
            c[key + (o.count is None,)] += o.count or 1
        else:
            c[key + (o.count,)] += 1
    return c


def _dots(prog: Program) -> int:
    """Matmuls run, loops multiplied out; a zero-trip loop (fori_loop(0, Y - 1) with Y = 1) runs
    none (the jaxpr keeps its body with count 0, StableHLO drops it)."""
    return sum(1 if o.count is None else o.count for o in prog.ops if o.prim == "dot_general")


def _unrolled(prog: Program) -> bool:
    return re.search(r"unroll=(True|[2-9]|\d\d+)", prog.jaxpr_text) is not None


def _verdict(res):
    return None if res is None else res.passed


@pytest.mark.parametrize("src,name", CASES, ids=[f"{s.parent.name}/{s.stem}:{n}"
                                                  for s, n in CASES])
def test_same_program_and_same_verdicts(src, name):
    problem = registry.get(name)
    fn = _loaded(src).function(name)
    assert fn is not None
    compiled = problem.assignment == "ps1_sharding"  # the only rules that read compiled text
    checked = 0
    for layout in LAYOUTS:
        mesh = make_mesh(*layout)
        args = _abstract(problem, mesh, layout)
        bound = functools.partial(fn, mesh=mesh) if problem.uses_mesh else fn
        static = problem.static_argnums
        try:
            jp = trace(bound, args, static_argnums=static, compiled_text=None if compiled else "")
        except Exception:  # noqa: BLE001  # the function fails (raises_and_nan): nothing to judge
            continue
        try:
            exp = _export(bound, args, static)
        except Exception:  # noqa: BLE001
            # An invalid program that traces but cannot be lowered (hardcoded_axis's 4-device
            # ring on a 2-device axis): the grader cannot compile it either.
            with pytest.raises(Exception):
                jax.jit(bound, static_argnums=static).lower(*args)
            continue
        text = ""
        if compiled:  # compile the artifact itself, as the trusted grader does
            dyn = [a for i, a in enumerate(args) if i not in static]
            text = jax.jit(exp.call).lower(*dyn).compile().as_text()
        sp = program_from_exported(exp, ("X", "Y"), layout, compiled_text=text)
        where = f"{src.name}:{name} on {layout}"

        shape = dict(mesh.shape)
        if _unrolled(jp):
            # scan(unroll=...) is one body run n times in the jaxpr, n straight-line copies in
            # StableHLO: the same collectives run, as more ops of smaller count.
            assert _collectives(jp, shape, True) == _collectives(sp, shape, True), where
        else:
            assert _collectives(jp, shape, False) == _collectives(sp, shape, False), where
        if "ragged_dot_general" not in jp.primitive_counts():
            # ragged_dot is a primitive of its own in the jaxpr; CPU lowers it to dot_generals.
            assert _dots(jp) == _dots(sp), where
        assert jp.uses_shard_map == sp.uses_shard_map, where
        assert (jp.arg_info, jp.out_info) == (sp.arg_info, sp.out_info), where
        assert rules_moe.input_shapes(jp) == rules_moe.input_shapes(sp), where
        assert bool(jp.compiled_collectives()) == bool(sp.compiled_collectives()), where
        for rule in problem.rules:
            a, b = rule(jp, mesh, problem), rule(sp, mesh, problem)
            assert _verdict(a) == _verdict(b), (where, a, b)
        checked += 1
    if "raises" not in src.stem and "hardcoded" not in src.stem:
        assert checked == len(LAYOUTS)


def test_fixtures_cover_every_problem():
    assert {n for _, n in CASES} == {p.name for p in registry.problems()}


# -- hand-made programs ----------------------------------------------------------------------

def _both(local, layout=(2, 4), shape=(8, 16)):
    """(jaxpr program, StableHLO program) of shard_map(local) over an f32 A sharded P('X','Y')."""
    mesh = make_mesh(*layout)
    f = jax.shard_map(local, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))
    arg = jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    return trace(f, (arg,), compiled_text=""), program_from_exported(_export(f, (arg,)),
                                                                     mesh_shape=layout)


def _ring(k):
    return lambda n: [(i, (i + k) % n) for i in range(n)]


def _cols(prog):
    return [(o.kind, o.axes, o.count, o.in_bytes) for o in prog.collectives()]


def test_fori_ring_shift_minus_one():
    def local(a):
        return jax.lax.fori_loop(0, 3, lambda i, c: jax.lax.ppermute(c, "Y", _ring(-1)(4)), a)

    jp, sp = _both(local)
    (op,) = sp.collectives()
    assert (op.kind, op.prim, op.axes, op.count, op.loop_depth) == ("ppermute", "ppermute",
                                                                    ("Y",), 3, 1)
    assert op.in_shard_map and sp.uses_shard_map
    assert op.perm == ((0, 3), (1, 0), (2, 1), (3, 2)) and op.shift(4) == {3}
    assert op.in_bytes == 4 * 4 * 4 and op.in_shapes == ((4, 4),)
    assert _cols(jp) == _cols(sp)


def test_plus_one_ring_perm_is_axis_local():
    _, sp = _both(lambda a: jax.lax.ppermute(a, "Y", _ring(1)(4)))
    (op,) = sp.collectives()
    assert op.perm == ((0, 1), (1, 2), (2, 3), (3, 0)) and op.shift(4) == {1}
    _, sp = _both(lambda a: jax.lax.ppermute(a, "X", _ring(1)(4)), layout=(4, 2))
    (op,) = sp.collectives()
    assert op.axes == ("X",) and op.perm == ((0, 1), (1, 2), (2, 3), (3, 0))


def test_python_unrolled_ring():
    def local(a):
        for _ in range(3):
            a = jax.lax.ppermute(a, "Y", _ring(1)(4)) * 2.0
        return a

    jp, sp = _both(local)
    assert [(o.count, o.loop_depth) for o in sp.collectives()] == [(1, 0)] * 3
    assert sp.count("ppermute") == 3 and sp.bytes_moved("ppermute", "Y") == 3 * 64
    assert _cols(jp) == _cols(sp)


def test_while_loop_literal_bound_and_data_dependent_bound():
    def literal(a):
        return jax.lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, jax.lax.ppermute(
            c[1], "Y", _ring(1)(4))), (0, a))[1]

    def data(a):
        n = jnp.max(a).astype(jnp.int32)
        return jax.lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, jax.lax.ppermute(
            c[1], "Y", _ring(1)(4))), (0, a))[1]

    jp, sp = _both(literal)
    assert [o.count for o in sp.collectives()] == [5] and _cols(jp) == _cols(sp)
    jp, sp = _both(data)
    assert [o.count for o in sp.collectives()] == [None] and _cols(jp) == _cols(sp)
    assert sp.has_unknown_loops()


def test_while_loop_counting_down_and_bound_in_carry():
    def down(a):
        return jax.lax.while_loop(lambda c: c[0] > 1, lambda c: (c[0] - 2, jax.lax.ppermute(
            c[1], "Y", _ring(1)(4))), (9, a))[1]

    def carried(a):  # the bound is a carry the body never changes
        body = lambda c: (c[0] + 1, c[1], jax.lax.ppermute(c[2], "X", _ring(1)(2)))
        return jax.lax.while_loop(lambda c: c[1] > c[0], body, (0, 4, a))[2]

    for fn, want in ((down, 4), (carried, 4)):
        jp, sp = _both(fn)
        assert [o.count for o in sp.collectives()] == [want]
        assert _cols(jp) == _cols(sp)


def test_nested_loops_multiply_and_unknown_propagates():
    def nested(a):
        inner = lambda i, c: jax.lax.ppermute(c, "Y", _ring(1)(4))
        return jax.lax.fori_loop(0, 2, lambda i, c: jax.lax.fori_loop(0, 3, inner, c), a)

    def unknown_outer(a):
        n = jnp.max(a).astype(jnp.int32)
        inner = lambda i, c: jax.lax.ppermute(c, "Y", _ring(1)(4))
        return jax.lax.fori_loop(0, n, lambda i, c: jax.lax.fori_loop(0, 3, inner, c), a)

    jp, sp = _both(nested)
    (op,) = sp.collectives()
    assert (op.count, op.loop_depth) == (6, 2) and _cols(jp) == _cols(sp)
    jp, sp = _both(unknown_outer)
    assert [o.count for o in sp.collectives()] == [None] and _cols(jp) == _cols(sp)


def test_scan_over_xs():
    def local(a):
        def step(c, x):
            return jax.lax.ppermute(c, "Y", _ring(1)(4)) + x, jnp.sum(c @ c)

        xs = jnp.stack([a] * 5)
        c, ys = jax.lax.scan(step, a, xs)
        return c + ys.sum()

    jp, sp = _both(local)
    assert [(o.count, o.loop_depth) for o in sp.collectives()] == [(5, 1)]
    assert sp.count("dot_general") == 5 and _cols(jp) == _cols(sp)


def test_cond_branches_count_once_each():
    def local(a):
        return jax.lax.cond(jnp.sum(a) > 0, lambda x: jax.lax.ppermute(x, "Y", _ring(1)(4)),
                            lambda x: jax.lax.ppermute(x, "Y", _ring(-1)(4)), a)

    jp, sp = _both(local)
    assert sorted(tuple(o.shift(4)) for o in sp.collectives()) == [(1,), (3,)]
    assert [o.count for o in sp.collectives()] == [1, 1] and _cols(jp) == _cols(sp)


def test_group_collectives_map_to_axes():
    def local(a):
        s = jax.lax.psum(a, ("X", "Y"))
        g = jax.lax.all_gather(a, "X", tiled=True)
        m = jax.lax.pmax(a, "Y")
        r = jax.lax.psum_scatter(g, "X", scatter_dimension=0, tiled=True)
        t = jax.lax.all_to_all(a, "Y", 1, 1, tiled=True)
        return s + r + m + t

    for layout in ((2, 4), (4, 2)):
        jp, sp = _both(local, layout)
        got = [(o.kind, o.axes) for o in sp.collectives()]
        assert got == [("psum", ("X", "Y")), ("all_gather", ("X",)), ("pmax", ("Y",)),
                       ("psum_scatter", ("X",)), ("all_to_all", ("Y",))], layout
        assert _cols(jp) == _cols(sp)
        gather = sp.collectives("all_gather")[0]
        assert gather.out_bytes == layout[0] * gather.in_bytes


def test_no_mesh_shape_gives_unknown_axes():
    mesh = make_mesh(2, 4)
    f = jax.shard_map(lambda a: jax.lax.psum(a, "X"), mesh=mesh, in_specs=P("X", "Y"),
                      out_specs=P(None, "Y"))
    arg = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    sp = program_from_exported(_export(f, (arg,)))
    assert [o.axes for o in sp.collectives()] == [("?",)]


def test_gspmd_shard_map_form():
    """The older lowering: @SPMDFullToShardShape / @SPMDShardToFullShape around a call."""
    old = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", False)
    try:
        mesh = make_mesh(2, 4)
        f = jax.shard_map(lambda a: jax.lax.ppermute(a, "Y", _ring(1)(4)), mesh=mesh,
                          in_specs=P("X", "Y"), out_specs=P("X", "Y"))
        arg = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
        mlir_text = jax.jit(f).lower(arg).as_text()
    finally:
        jax.config.update("jax_use_shardy_partitioner", old)
    assert "SPMDFullToShardShape" in mlir_text
    prog = program_from_mlir(mlir_text, (2, 4), ("X", "Y"))
    (op,) = prog.collectives()
    assert prog.uses_shard_map and op.in_shard_map and op.axes == ("Y",) and op.shift(4) == {1}
    assert prog.arg_info == (((8, 16), 4),) and prog.arg_dtypes == ("f32",)


def test_multi_platform_export_skips_the_platform_index():
    mesh = make_mesh(2, 4)
    f = jax.shard_map(lambda a: jax.lax.psum(a, "Y"), mesh=mesh, in_specs=P("X", "Y"),
                      out_specs=P("X", None))
    arg = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    exp = jax.export.export(jax.jit(f), platforms=("cpu", "tpu"))(arg)
    prog = program_from_mlir(exp.mlir_module(), (2, 4), ("X", "Y"))
    assert prog.arg_info == (((8, 16), 4),)
    assert [(o.kind, o.axes) for o in prog.collectives()] == [("psum", ("Y",))]


# -- communication the walk must not miss -------------------------------------------------------

def _exported_for(local, platform: str, layout=(2, 4)):
    """shard_map(local) exported for ``platform`` (lowering needs no such device here)."""
    mesh = make_mesh(*layout)
    f = jax.shard_map(local, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"),
                      check_vma=False)
    arg = jax.ShapeDtypeStruct((8, 16), jnp.float32, sharding=NamedSharding(mesh, P("X", "Y")))
    return jax.export.export(jax.jit(f), platforms=(platform,))(arg)


def test_a_collective_inside_a_composite_is_read():
    def local(a):
        gather = jax.lax.composite(lambda x: jax.lax.all_gather(x, "Y", axis=1, tiled=True),
                                   name="course.gather")
        return gather(a)[:, :a.shape[1]] * 2.0

    jp, sp = _both(local)
    assert [(o.kind, o.axes, o.count) for o in sp.collectives()] == [("all_gather", ("Y",), 1)]
    assert _cols(jp) == _cols(sp)


def test_a_collective_in_a_loop_condition_is_read():
    def local(a):
        def test(c):
            return jax.lax.all_gather(c[1], "Y").sum() > c[0]

        return jax.lax.while_loop(test, lambda c: (c[0] + 1.0, c[1] * 0.5), (0.0, a))[1]

    jp, sp = _both(local)
    (op,) = sp.collectives()
    assert (op.kind, op.axes, op.count) == ("all_gather", ("Y",), None)  # unknown unrun
    assert _cols(jp) == _cols(sp)

    def counted(a):  # five trips: the condition runs six times
        return jax.lax.fori_loop(0, 5, lambda i, c: c * 2.0, a)

    _, sp = _both(counted)
    assert [o.count for o in sp.ops if o.prim == "compare"] == [6]


def test_broadcasts_and_sends_are_collectives():
    """``pbroadcast`` and ``psend``/``precv`` lower only for GPUs: exported for one here."""
    perm = _ring(1)(4)
    prog = program_from_exported(_exported_for(lambda a: jax.lax.pbroadcast(a, "Y", 0), "cuda"),
                                 mesh_shape=(2, 4))
    assert [(o.kind, o.axes, o.in_bytes) for o in prog.collectives()] == [
        ("collective_broadcast", ("Y",), 4 * 4 * 4)]

    def p2p(a):
        with warnings.catch_warnings():  # deprecated since JAX 0.12, still there
            warnings.simplefilter("ignore", DeprecationWarning)
            send, recv = jax.lax.psend, jax.lax.precv
        return recv(send(a, "Y", perm), a, "Y", perm)

    prog = program_from_exported(_exported_for(p2p, "cuda"), mesh_shape=(2, 4))
    assert [(o.kind, o.axes, o.shift(4)) for o in prog.collectives()] == [
        ("send", ("Y",), {1}), ("recv", ("Y",), {1})]


def _module(body: str, result: str = "tensor<8xf32>") -> str:
    return (f"module @m {{ func.func public @main(%arg0: tensor<8xf32>) -> {result} {{ {body} }} "
            "}")


_GROUPS = ("replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, "
           "channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>, "
           "use_global_device_ids")


#: a collective in a reduction's body: no walk of calls, loops and branches reaches it
_IN_A_REDUCTION = (
    '%c = stablehlo.constant dense<0.0> : tensor<f32> '
    '%0 = stablehlo.reduce(%arg0 init: %c) across dimensions = [0] : '
    '(tensor<8xf32>, tensor<f32>) -> tensor<f32> '
    'reducer(%a: tensor<f32>, %b: tensor<f32>) { '
    '%1 = "stablehlo.all_reduce"(%b) <{' + _GROUPS + '}> ({ '
    '^bb0(%x: tensor<f32>, %y: tensor<f32>): %s = stablehlo.add %x, %y : tensor<f32> '
    'stablehlo.return %s : tensor<f32> }) : (tensor<f32>) -> tensor<f32> '
    '%2 = stablehlo.add %a, %1 : tensor<f32> stablehlo.return %2 : tensor<f32> } '
    'return %0 : tensor<f32>')


@pytest.mark.parametrize("body, result, says", [
    (_IN_A_REDUCTION, "tensor<f32>", "stablehlo.all_reduce inside stablehlo.reduce"),
    # a hand-written kernel: its own code may copy data to other devices
    ('%0 = stablehlo.custom_call @tpu_custom_call(%arg0) {backend_config = "k"} : '
     '(tensor<8xf32>) -> tensor<8xf32> return %0 : tensor<8xf32>', "tensor<8xf32>",
     "hand-written kernel"),
])
def test_communication_the_walk_cannot_place_is_unreadable(body, result, says):
    with pytest.raises(ProgramUnreadable, match=says):
        program_from_mlir(_module(body, result), (2, 4), ("X", "Y"))


def test_ring_rules_refuse_any_other_collective():
    """A broadcast moves a whole block to every device at once: not a ring step."""
    exported = _exported_for(lambda a: jax.lax.pbroadcast(a, "Y", 0), "cuda")
    prog = program_from_exported(exported, mesh_shape=(2, 4))
    problem = registry.get("matmul_allgather")
    (rule,) = problem.rules
    res = rule(prog, make_mesh(2, 4), problem)
    assert not res.passed and "found a collective_broadcast" in res.message, res.message


def test_an_unreadable_program_fails_the_structure_check_with_its_reason():
    """The op table admits an all_reduce, but not where no walk reaches it; a hand-written
    kernel the table refuses first, by its target (tests/test_optable.py)."""
    from autograder.course.reading import read_paths

    class Exported:  # what read_paths reads of a jax.export.Exported
        in_avals = out_avals = ()

        def __init__(self, text):
            self.text = text

        def mlir_module(self, serialized: bool = True):
            if serialized:
                return self.text
            from jax._src.lib.mlir import ir

            return ir.Module.parse(self.text)  # in the caller's context, as JAX deserializes

    paths = read_paths(Exported(_module(_IN_A_REDUCTION, "tensor<f32>")), make_mesh(2, 4),
                       "", [], ())
    assert not paths.programs and paths.refused is None
    assert "inside stablehlo.reduce" in paths.error and "cannot be judged" in paths.error
    paths = read_paths(Exported(_module('%0 = stablehlo.custom_call @tpu_custom_call(%arg0) '
                                        '{backend_config = "k"} : (tensor<8xf32>) -> '
                                        'tensor<8xf32> return %0 : tensor<8xf32>')),
                       make_mesh(2, 4), "", [], ())
    assert not paths.programs
    assert "call_target_name = tpu_custom_call is not part of this course's programs" in \
        paths.refused == paths.error


def test_a_shard_map_manual_over_some_axes_says_which_it_leaves_to_the_compiler():
    """Inside ``shard_map(..., axis_names={'Y'})`` an array spans the whole of 'X': its bytes
    as read are not one device's, and a byte rule that fails says why."""
    mesh = make_mesh(2, 4)
    ring = _ring(1)(4)

    def partial_manual(a, w, mesh):
        def local(a, w):  # one send, and a matmul per chunk
            b = jax.lax.ppermute(a, "Y", ring)
            return sum(b @ w[:a.shape[1]] * k for k in range(4))

        return jax.shard_map(local, mesh=mesh, in_specs=(P(None, "Y"), P(None, "Y")),
                             out_specs=P(None, "Y"), axis_names={"Y"}, check_vma=False)(a, w)

    def spec(shape, s):
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, s))

    args = (spec((8, 16), P("X", "Y")), spec((16, 8), P(None, "Y")))
    prog = program_from_exported(_export(functools.partial(partial_manual, mesh=mesh), args),
                                 mesh_shape=(2, 4))
    assert prog.auto_axes == ("X",)
    (op,) = prog.collectives()
    assert op.in_shapes == ((8, 4),)  # all of 'X'
    problem = registry.get("matmul_allgather")
    res = problem.rules[0](prog, mesh, problem)
    assert not res.passed and "leaves 'X' to the compiler" in res.message, res.message
    _, full = _both(lambda a: jax.lax.ppermute(a, "Y", ring))
    assert full.auto_axes == ()


def test_not_a_program():
    with pytest.raises(ValueError, match="@main"):
        program_from_mlir("module {}", (2, 4), ("X", "Y"))


def test_replica_groups_written_as_mesh_axes():
    """Newer JAX (0.12) names a collective's groups by the axes of a module mesh instead of a
    matrix of device ids: both forms must give the same groups, in the order the axes are
    named (so the axes read back are the same on every JAX of the range)."""
    from autograder.core.stablehlo import mesh_axes_groups, module_mesh

    meshes = {"mesh_0": module_mesh('#sdy.mesh<["X"=2, "Y"=4]>'),
              "perm": module_mesh('#sdy.mesh<["X"=2, "Y"=2], device_ids=[3, 2, 1, 0]>')}

    def groups(axes, mesh="mesh_0"):
        refs = ", ".join(f'#stablehlo.axis_ref<name = "{a}">' for a in axes)
        got = mesh_axes_groups(f"#stablehlo.replica_group_mesh_axes<mesh = @{mesh}, "
                               f"axes = [{refs}]>", meshes)
        return None if got is None else got.tolist()

    assert groups(["Y"]) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert groups(["X"]) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert groups(["X", "Y"]) == [list(range(8))]
    assert groups(["Y", "X"]) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert groups([]) == [[i] for i in range(8)]
    assert groups(["X"], "perm") == [[3, 1], [2, 0]]
    assert groups(["Z"]) is None and groups(["X"], "nowhere") is None
    sub = ('#stablehlo.replica_group_mesh_axes<mesh = @mesh_0, axes = [#stablehlo.axis_ref<'
           'name = "Y", sub_axis_info = #stablehlo.sub_axis_info<pre_size = 1, size = 2>>]>')
    assert mesh_axes_groups(sub, meshes) is None  # part of an axis: not guessed


def test_group_axes_in_every_order_and_layout():
    """Axes named in either order, on every course layout, read back as the jaxpr has them."""
    def local(a):
        b = jax.lax.all_gather(a, ("Y", "X"), tiled=True)
        c = jax.lax.psum(a, ("X", "Y"))
        return c + b.sum()

    for layout in ((2, 4), (4, 2)):
        jp, sp = _both(local, layout)
        assert [(o.kind, o.axes) for o in sp.collectives()] == [
            ("all_gather", ("Y", "X")), ("psum", ("X", "Y"))], layout
        assert _cols(jp) == _cols(sp)


def test_module_text_is_made_once_per_artifact_and_forgotten_with_it(monkeypatch):
    """One grading reads each program's text in several places: it is deserialized and printed
    once per artifact (``module_text``), is the artifact's own text, and leaves the cache when
    the artifact is collected (a warm judge grades thousands of programs)."""
    import gc

    from autograder.core import stablehlo

    exp = _export(lambda x: jnp.sin(x) * 2, (jnp.ones(4),))
    real = type(exp).mlir_module
    calls = []

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(type(exp), "mlir_module", counted)
    text = stablehlo.module_text(exp)
    assert text == real(exp) and "stablehlo.sine" in text
    assert stablehlo.module_text(exp) is text and len(calls) == 1
    key = id(exp)
    assert key in stablehlo._TEXTS
    del exp
    gc.collect()
    assert key not in stablehlo._TEXTS
