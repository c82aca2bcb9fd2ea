"""The modeled-TPU timing: known answers, calibration, ordering, determinism, grading hook."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.core.devices import setup_devices

setup_devices()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P

from autograder import tpumodel  # noqa: E402
from autograder.core.meshes import make_mesh  # noqa: E402
from autograder.core.problem import Problem  # noqa: E402
from autograder.tpumodel import chips  # noqa: E402
from autograder.tpumodel.api import ModelRequest, compile_partitioned, model_function  # noqa: E402
from autograder.tpumodel.cost import Geometry, Task  # noqa: E402
from autograder.tpumodel.schedule import schedule  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import collective_matmuls as cm  # noqa: E402

V5E = chips.CHIPS["v5e"]
US = 1e-6


@pytest.fixture(scope="module")
def mesh():
    return make_mesh(2, 4)


def _put(mesh, shape, spec, dtype=jnp.float32):
    return jax.device_put(jnp.zeros(shape, dtype), NamedSharding(mesh, spec))


def _model(fn, args, mesh, **kw):
    return model_function(functools.partial(fn, mesh=mesh), args, mesh, **kw)


def _sm(body, mesh, in_specs, out_specs):
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=False))


# -------------------------------------------------------------------------- known answers
def test_pure_matmul_is_roofline(mesh):
    a = _put(mesh, (1024, 2048), P("X", None))
    w = _put(mesh, (2048, 8192), P(None, "Y"))
    m = _model(cm.matmul_unsharded_contracting, (a, w), mesh)
    flops = 2 * 512 * 2048 * 2048
    expect = flops / V5E.matmul_flops("f32") + chips.KERNEL_OVERHEAD_S
    assert m.timeline.makespan == pytest.approx(expect, rel=1e-9)
    s = m.timeline.summary()
    assert s["comm_us"] == 0 and s["exposed_comm_us"] == pytest.approx(0, abs=1e-9)
    # a bf16 dot is one MXU pass, as an f32 one at JAX's default precision is on a TPU: the
    # same time for the same FLOPs (both compute-bound here), so splitting an f32 product into
    # bf16 dots buys nothing
    ab, wb = _put(mesh, (1024, 2048), P("X", None), jnp.bfloat16), _put(
        mesh, (2048, 8192), P(None, "Y"), jnp.bfloat16)
    mb = _model(cm.matmul_unsharded_contracting, (ab, wb), mesh)
    assert mb.timeline.makespan == pytest.approx(m.timeline.makespan, rel=1e-9)
    assert V5E.matmul_flops("bf16") == V5E.matmul_flops("f32") == V5E.bf16_flops * chips.PASS_FLOPS


def test_pure_all_gather_is_ring(mesh):
    f = _sm(lambda a: jax.lax.all_gather(a, "Y", axis=0, tiled=True), mesh, P("X", "Y"),
            P("X", None))
    a = _put(mesh, (1024, 2048), P("X", "Y"))
    m = model_function(f, (a,), mesh)
    shard = 512 * 512 * 4
    expect = 3 * (shard / V5E.ici_bw + chips.ICI_LATENCY_S)  # n - 1 ring steps over Y
    assert m.timeline.makespan == pytest.approx(expect, rel=1e-9)
    assert m.timeline.summary()["exposed_comm_us"] == pytest.approx(expect / US, rel=1e-9)


def test_ring_of_permutes(mesh):
    def body(a):
        for _ in range(3):  # n - 1 dependent hops around the Y ring
            a = jax.lax.ppermute(a, "Y", [(j, (j + 1) % 4) for j in range(4)])
        return a

    a = _put(mesh, (1024, 2048), P("X", "Y"))
    m = model_function(_sm(body, mesh, P("X", "Y"), P("X", "Y")), (a,), mesh)
    one = 512 * 512 * 4 / V5E.ici_bw + chips.ICI_LATENCY_S
    assert m.timeline.makespan == pytest.approx(3 * one, rel=1e-9)
    comm = [t for t in m.timeline.tasks if t.kind == "comm"]
    assert len(comm) == 3 and all(t.resources == (("Y", "+"),) for t in comm)


def test_two_hop_permute_loads_two_links(mesh):
    a = _put(mesh, (1024, 2048), P("X", "Y"))
    f = _sm(lambda x: jax.lax.ppermute(x, "Y", [(j, (j + 2) % 4) for j in range(4)]), mesh,
            P("X", "Y"), P("X", "Y"))
    m = model_function(f, (a,), mesh)
    assert m.timeline.makespan == pytest.approx(
        2 * 512 * 512 * 4 / V5E.ici_bw + chips.ICI_LATENCY_S, rel=1e-9)


def test_fully_overlappable_pair(mesh):
    """An independent matmul and permute run side by side: time = the longer one."""
    def body(a, w):
        return a @ w, jax.lax.ppermute(a, "Y", [(j, (j + 1) % 4) for j in range(4)])

    a = _put(mesh, (1024, 2048), P("X", "Y"), jnp.bfloat16)
    w = _put(mesh, (512, 32768), P(None, "Y"), jnp.bfloat16)
    f = _sm(body, mesh, (P("X", "Y"), P(None, "Y")), (P("X", "Y"), P("X", "Y")))
    m = model_function(f, (a, w), mesh)
    s = m.timeline.summary()
    assert s["comm_us"] > 0 and s["compute_us"] > s["comm_us"]
    assert s["time_us"] == pytest.approx(s["compute_us"], rel=1e-9)
    assert s["exposed_comm_us"] == pytest.approx(0.0, abs=1e-6)


def test_scheduler_by_hand():
    t = [Task(0, "compute", "a", 3.0, ("compute",)),
         Task(1, "comm", "p", 2.0, (("Y", "+"),)),
         Task(2, "compute", "b", 1.0, ("compute",), {1}),
         Task(3, "comm", "q", 5.0, (("Y", "-"),)),
         Task(4, "compute", "c", 1.0, ("compute",), {3, 2})]
    tl = schedule(t)
    assert tl.start == {0: 0.0, 1: 0.0, 3: 0.0, 2: 3.0, 4: 5.0}
    assert tl.makespan == 6.0 and tl.compute_time == 5.0 and tl.comm_time == 5.0
    assert tl.exposed_comm_time == 1.0


def test_geometry_routes_short_way():
    g = Geometry((2, 4), ("X", "Y"))
    assert [l[:2] for l in g.route(0, 3)] == [(1, "-")]
    assert [l[:2] for l in g.route(0, 2)] == [(1, "+"), (1, "+")]
    assert [l[:2] for l in g.route(0, 5)] == [(0, "+"), (1, "+")]


# ------------------------------------------------------- overlap: a matmul waits for what it reads
def test_matmul_does_not_wait_for_a_transfer_only_its_consumer_reads(mesh):
    """``ppermute(acc) + t @ w``: the dot is not fused with the add, so it needs no transfer
    and can run while ``acc`` travels; the add waits for both."""
    def body(acc, t, w):
        return jax.lax.ppermute(acc, "Y", _RIGHT) + t @ w

    acc, t = _put(mesh, (1024, 1024), P("X", "Y")), _put(mesh, (1024, 4096), P("X", "Y"))
    w = _put(mesh, (4096, 256), P("Y", None))
    m = model_function(_sm(body, mesh, (P("X", "Y"), P("X", "Y"), P("Y", None)), P("X", "Y")),
                       (acc, t, w), mesh)
    tasks = m.timeline.tasks
    (send,) = [tk for tk in tasks if tk.kind == "comm"]
    (dot,) = [tk for tk in tasks if tk.kind == "compute" and tk.flops > 0]
    (add,) = [tk for tk in tasks if tk.kind == "compute" and tk.flops == 0]
    assert dot.deps == set() and add.deps == {send.id, dot.id}
    assert m.timeline.start[dot.id] == 0.0 and m.timeline.start[send.id] == 0.0


def test_all_reduce_sliced_to_one_block_costs_a_reduce_scatter(mesh):
    """``psum`` then each device's own block is GSPMD's reduce-scatter (jit writes a matmul
    with a sharded contracting dimension and a sharded output so): costed as ``psum_scatter``;
    a psum whose whole result is used stays an all-reduce, twice as long."""
    def sliced(x):
        block = x.shape[1] // 4
        return jax.lax.dynamic_slice_in_dim(jax.lax.psum(x, "Y"), jax.lax.axis_index("Y") * block,
                                            block, axis=1)

    def scattered(x):
        return jax.lax.psum_scatter(x, "Y", scatter_dimension=1, tiled=True)

    x = _put(mesh, (1024, 4096), P("X", None))
    comm = {}
    for name, f, out in (("sliced", sliced, P("X", "Y")), ("scattered", scattered, P("X", "Y")),
                         ("whole", lambda v: jax.lax.psum(v, "Y"), P("X", None))):
        m = model_function(_sm(f, mesh, P("X", None), out), (x,), mesh)
        comm[name] = m.timeline.summary()["comm_us"]
    assert comm["sliced"] == pytest.approx(comm["scattered"], rel=1e-9)
    assert comm["whole"] == pytest.approx(2 * comm["scattered"], rel=1e-9)


#: every overlapped reference ring at a compute-bound shape (global shapes of the arguments, in
#: bf16: one MXU pass per product, as a float32 one at default precision, and half the bytes on
#: the links), and how many of its longest transfers may stay exposed: one, the last, for a ring
#: whose final step is followed by work that needs it (a matmul's last partial product, or the
#: add of the last partial sum); the two-way all-reduce then shares the finished tiles in
#: ny - 1 = 3 more steps that no compute is left to hide, each direction's started after the add
#: of its last partial sum (memory-bound kernels, a fifth of a step each in bf16), so 5 in all
#: (4 steps and those adds). Each ring step's partial matmul
#: outlasts its transfer by about 1.6x (2.9x for the all-reduces).
RINGS = {
    "matmul_allgather": (((1024, 1024), (1024, 16384)), 1),
    "matmul_reducescatter": (((1024, 16384), (16384, 1024)), 1),
    "mlp_block": (((1024, 1024), (1024, 16384), (16384, 1024)), 1),
    "matmul_allreduce": (((1024, 32768), (32768, 2048)), 1),
    "matmul_allgather_bidirectional": (((1024, 1024), (1024, 16384)), 1),
    "matmul_reducescatter_bidirectional": (((1024, 16384), (16384, 1024)), 1),
    "matmul_allreduce_bidirectional": (((1024, 32768), (32768, 2048)), 5),
}


def _reference_model(mesh, name, shapes):
    from autograder.core.loader import load
    from autograder.course import registry

    problem = registry.get(name)
    fn = load(ROOT / "solutions" / f"{problem.assignment}.py").function(name)
    args = [_put(mesh, shape, spec, jnp.bfloat16)
            for shape, spec in zip(shapes, problem.in_specs, strict=True)]
    return _model(fn, args, mesh)


@pytest.mark.parametrize("name", sorted(RINGS))
def test_reference_ring_hides_its_transfers(mesh, name):
    shapes, steps = RINGS[name]
    m = _reference_model(mesh, name, shapes)
    s = m.timeline.summary()
    assert s["compute_us"] > s["comm_us"] > 0, f"not a compute-bound shape: {s}"
    step_us = max(t.duration for t in m.timeline.tasks if t.kind == "comm") / US
    assert s["exposed_comm_us"] <= steps * step_us + 1e-6, (s, step_us)


@pytest.mark.parametrize("fixture,name", [("monolithic_allgather", "matmul_allgather"),
                                          ("psum_scatter", "matmul_reducescatter")])
def test_blocking_collective_stays_exposed(mesh, fixture, name):
    """all_gather before the matmul, or psum_scatter after it: nothing to overlap with."""
    from autograder.core.loader import load
    from autograder.course import registry

    problem = registry.get(name)
    fn = load(ROOT / "tests" / "fixtures" / "ps3" / f"{fixture}.py").function(name)
    args = [_put(mesh, shape, spec) for shape, spec in zip(RINGS[name][0], problem.in_specs,
                                                            strict=True)]
    s = _model(fn, args, mesh).timeline.summary()
    assert s["comm_us"] > 0 and s["exposed_comm_us"] == pytest.approx(s["comm_us"], rel=1e-9)


# ------------------------------------------------------------------------------ calibration
@pytest.fixture(scope="module")
def published(mesh):
    """The chapter's v5e example: its arrays come from jnp.arange, int32 (six MXU passes)."""
    B, D, F = 1024, 2048, 8192
    a, w = _put(mesh, (B, D), P("X", "Y"), jnp.int32), _put(mesh, (D, F), P(None, "Y"), jnp.int32)
    a_whole = _put(mesh, (B, D), P("X", None), jnp.int32)
    out = NamedSharding(mesh, P("X", "Y"))
    return {
        "jit": _model(cm.matmul_allgather_jit, (a, w), mesh, out_shardings=out),
        "uni": _model(cm.matmul_allgather_unidirectional, (a, w), mesh),
        "bidi": _model(cm.matmul_allgather_bidirectional, (a, w), mesh),
        "unsharded": _model(cm.matmul_unsharded_contracting, (a_whole, w), mesh),
    }


def test_calibration_ratios(published):
    """The published example within 10% (int32 [512, 2048] @ [2048, 2048] per chip, six bf16
    passes, 224 us), and the ratios of the other rows to jit's."""
    assert published["unsharded"].time_us == pytest.approx(224, rel=0.10)
    passes = {t.detail for t in published["unsharded"].timeline.tasks if t.kind == "compute"}
    assert any("in 6 MXU passes" in d for d in passes), passes
    jit = published["jit"].time_us
    assert published["uni"].time_us / jit == pytest.approx(244 / 311, rel=0.10)
    assert published["unsharded"].time_us / jit == pytest.approx(224 / 311, rel=0.10)
    # the jit baseline blocks on its all-gather; the collective matmuls hide theirs
    assert published["jit"].timeline.summary()["exposed_comm_us"] > 50
    for k in ("uni", "bidi"):
        s = published[k].timeline.summary()
        assert s["comm_us"] > 30 and s["exposed_comm_us"] < 0.05 * s["time_us"]


@pytest.fixture(scope="module")
def comm_bound(mesh):
    """bf16 at B, D, F = 1024, 2048, 2048: 38 us of one-way transfers against about 9 us of
    matmuls (one MXU pass at the fitted 0.58 of the bf16 peak), so each ring step's transfer
    outlasts its partial matmul, and two link directions halve the transfer time."""
    B, D, F = 1024, 2048, 2048
    a = _put(mesh, (B, D), P("X", "Y"), jnp.bfloat16)
    w = _put(mesh, (D, F), P(None, "Y"), jnp.bfloat16)
    return {k: _model(f, (a, w), mesh) for k, f in (
        ("mono", cm.matmul_allgather_monolithic), ("uni", cm.matmul_allgather_unidirectional),
        ("bidi", cm.matmul_allgather_bidirectional))}


def test_ordering_on_comm_bound_shape(comm_bound):
    t = {k: m.time_us for k, m in comm_bound.items()}
    assert t["mono"] > t["uni"] > t["bidi"]
    assert t["uni"] / t["bidi"] >= 1.5
    # communication-bound: the one-way ring's transfers outlast its matmuls
    s = comm_bound["uni"].timeline.summary()
    assert s["comm_us"] > 3 * s["compute_us"], s
    lanes = {r for tk in comm_bound["bidi"].timeline.tasks for r in tk.resources}
    assert {("Y", "+"), ("Y", "-")} <= lanes


def test_xla_cpu_rewrites_do_not_leak(mesh):
    """Four chunked psums stay four all-reduces (XLA:CPU would combine them later)."""
    def body(a):
        k = a.shape[1] // 4
        return jnp.concatenate([jax.lax.psum(a[:, i * k:(i + 1) * k], "Y") for i in range(4)], 1)

    a = _put(mesh, (64, 128), P("X", "Y"))
    f = _sm(body, mesh, P("X", "Y"), P("X", None))
    m = model_function(f, (a,), mesh)
    comm = [t for t in m.timeline.tasks if t.kind == "comm"]
    assert len(comm) == 4 and all("all-reduce over Y" in t.detail for t in comm)


def test_fori_loop_unrolled_like_python_loop(mesh):
    def rolled(a):
        return jax.lax.fori_loop(0, 3, lambda i, x: jax.lax.ppermute(
            x, "Y", [(j, (j + 1) % 4) for j in range(4)]), a)

    a = _put(mesh, (1024, 2048), P("X", "Y"))
    m = model_function(_sm(rolled, mesh, P("X", "Y"), P("X", "Y")), (a,), mesh)
    assert sum(t.kind == "comm" for t in m.timeline.tasks) == 3


def test_one_slice_gathers_and_scatters_priced_as_xla_runs_them(mesh):
    """``jnp.take(w, k)`` and ``x.at[k].set(y)`` with a scalar index are a gather and a scatter
    of one slice, which XLA's expanders turn into a dynamic-slice and a dynamic-update-slice:
    modeled like the program written with those. A gather of many rows stays a kernel of its
    own, dearer."""
    def block(w, k):
        return w.reshape(4, w.shape[0] // 4, w.shape[1])[k]  # dynamic_slice

    def taken(w, k):
        return jnp.take(w.reshape(4, w.shape[0] // 4, w.shape[1]), k, axis=0)

    def rows(w, k):  # many indices: a real gather
        return jnp.take(w, (jnp.arange(w.shape[0] // 4) * 4 + k) % w.shape[0], axis=0)

    def matmul(pick):
        def body(a, w):
            k = jax.lax.axis_index("Y")
            out = a @ pick(w, k)
            return out, jax.lax.dynamic_update_slice_in_dim(w, out[:, :1].T, 0, axis=0)
        return body

    def setting(w, out):
        return out, w.at[0].set(out[:, 0])

    a = _put(mesh, (1024, 2048), P("X", "Y"))
    w = _put(mesh, (2048, 2048), P(None, "Y"))

    def t(pick, write=None):
        body = matmul(pick)
        if write is not None:
            inner = body

            def body(a, w):
                out, _ = inner(a, w)
                return write(w, out)
        fn = _sm(body, mesh, (P("X", "Y"), P(None, "Y")), (P("X", "Y"), P(None, "Y")))
        return model_function(fn, (a, w), mesh).timeline.makespan

    assert t(taken) == pytest.approx(t(block), rel=0.01)  # its bounds check: a select
    assert t(block, setting) == pytest.approx(t(block), rel=0.01)
    assert t(rows) > t(block) * 1.01


def _hops(body, mesh, shape=(1024, 2048)):
    a = _put(mesh, shape, P("X", "Y"))
    m = model_function(_sm(body, mesh, P("X", "Y"), P("X", "Y")), (a,), mesh)
    return sum(t.kind == "comm" for t in m.timeline.tasks)


_RIGHT = [(j, (j + 1) % 4) for j in range(4)]


@pytest.mark.parametrize("loop,hops", [
    (lambda x: jax.lax.fori_loop(2, 7, lambda i, v: jax.lax.ppermute(v, "Y", _RIGHT) * i, x), 5),
    (lambda x: jax.lax.fori_loop(0, 4, lambda i, v: jax.lax.ppermute(v, "Y", _RIGHT), x,
                                 unroll=2), 4),
    (lambda x: jax.lax.scan(lambda c, _: (jax.lax.ppermute(c, "Y", _RIGHT), None), x, None,
                            length=3)[0], 3),
    (lambda x: jax.lax.scan(lambda c, s: (jax.lax.ppermute(c, "Y", _RIGHT) * s, None), x,
                            jnp.arange(3.0))[0], 3),
    (lambda x: jax.lax.while_loop(lambda c: c[0] < 3, lambda c: (
        c[0] + 1, jax.lax.ppermute(c[1], "Y", _RIGHT)), (0, x))[1], 3),
    (lambda x: jax.lax.while_loop(lambda c: c[0] > 0, lambda c: (
        c[0] - 2, jax.lax.ppermute(c[1], "Y", _RIGHT)), (5, x))[1], 3),
    (lambda x: jax.lax.fori_loop(0, 2, lambda i, v: jax.lax.fori_loop(
        0, 3, lambda j, w: jax.lax.ppermute(w, "Y", _RIGHT), v), x), 6),
], ids=["fori_from_2", "fori_unroll_2", "scan_length", "scan_over_xs", "while_up",
        "while_down_by_2", "nested_fori"])
def test_static_loops_are_read_on_every_jax(mesh, loop, hops):
    """fori_loop, scan and while with a static trip count, as this JAX lowers them: every
    iteration is modeled (newer XLA prints a loop counter as ``%param#0``, see below)."""
    assert _hops(loop, mesh, (64, 128)) == hops


def test_tuple_element_operands_in_hlo_text():
    """``%p#0`` is element 0 of the tuple %p (newer XLA's shorthand for a get-tuple-element):
    the loop counter and bound are read through it, and the body's arrays too."""
    from autograder.tpumodel.hlo import flatten

    text = """HloModule m, num_partitions=8

%body (p: (s32[], f32[64,64])) -> (s32[], f32[64,64]) {
  %p = (s32[], f32[64,64]{1,0}) parameter(0)
  %one = s32[] constant(1)
  %next = s32[] add(%p#0, %one)
  %send = f32[64,64]{1,0} collective-permute(%p#1), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0},{4,5},{5,6},{6,7},{7,4}}
  ROOT %t = (s32[], f32[64,64]{1,0}) tuple(%next, %send)
}

%cond (q: (s32[], f32[64,64])) -> pred[] {
  %q = (s32[], f32[64,64]{1,0}) parameter(0)
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%q#0, %n), direction=LT
}

ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[64,64]{1,0}) tuple(%zero, %x)
  %loop = (s32[], f32[64,64]{1,0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[64,64]{1,0} get-tuple-element(%loop), index=1
}
"""
    nodes, _ = flatten(text)
    sends = [n for n in nodes if n.opcode == "collective-permute"]
    assert len(sends) == 4 and [n.loop_iter for n in sends] == [(0,), (1,), (2,), (3,)]
    assert all(n.inputs[0].shape.dims == (64, 64) for n in sends)
    # a send depends on the one before it (the carried buffer goes round)
    assert all(sends[i].id in sends[i + 1].deps for i in range(3))
    with pytest.raises(tpumodel.ModelError, match="not an element of a tuple"):
        flatten(text.replace("add(%p#0, %one)", "add(%p#5, %one)"))


def test_an_op_without_a_cost_rule_is_a_model_error():
    """A point-to-point send is a transfer: priced as local memory traffic it would be free."""
    text = """HloModule m, num_partitions=8

ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %tok = token[] after-all()
  %s = (f32[64,64]{1,0}, u32[], token[]) send(%x, %tok), channel_id=1
  %sd = token[] send-done(%s), channel_id=1
  %r = (f32[64,64]{1,0}, u32[], token[]) recv(%tok), channel_id=2
  %rd = (f32[64,64]{1,0}, token[]) recv-done(%r), channel_id=2
  %got = f32[64,64]{1,0} get-tuple-element(%rd), index=0
  ROOT %y = f32[64,64]{1,0} add(%got, %x)
}
"""
    with pytest.raises(tpumodel.ModelError, match="'send' .* has no cost rule"):
        tpumodel.api.model_hlo(text, (2, 4), ("X", "Y"))
    # lax.top_k's HLO op is priced, by its bytes
    topk = """HloModule m, num_partitions=8

ENTRY %main (x: f32[64,64]) -> f32[64,4] {
  %x = f32[64,64]{1,0} parameter(0)
  %t = (f32[64,4]{1,0}, s32[64,4]{1,0}) topk(%x), k=4, largest=true
  ROOT %v = f32[64,4]{1,0} get-tuple-element(%t), index=0
}
"""
    assert tpumodel.api.model_hlo(topk, (2, 4), ("X", "Y")).timeline.summary()["n_compute"] == 1


def _one_dot(attrs: str = "", dtype: str = "f32") -> str:
    """A per-device module of one [1024, 1024] @ [1024, 1024] matmul (compute-bound on every
    chip at any pass count) carrying ``attrs`` (``operand_precision={...}``, ``algorithm=...``)."""
    t = f"{dtype}[1024,1024]{{1,0}}"
    return f"""HloModule m

ENTRY %main (a: {t}, b: {t}) -> f32[1024,1024] {{
  %a = {t} parameter(0)
  %b = {t} parameter(1)
  ROOT %d = f32[1024,1024]{{1,0}} dot(%a, %b), lhs_contracting_dims={{1}}, \
rhs_contracting_dims={{0}}{attrs}
}}
"""


def _mxu_us(text: str) -> float:
    """The matmul's modeled time less the kernel launch, microseconds."""
    m = tpumodel.model_hlo(text)
    return m.timeline.summary()["compute_us"] - chips.KERNEL_OVERHEAD_S / US


@pytest.mark.orchestration
def test_a_float32_matmul_costs_the_mxu_passes_of_its_precision():
    """A TPU runs a float32 matmul at HIGH in 3 bf16 MXU passes and at HIGHEST in 6 (the
    ``jax.lax.Precision`` docstring), the dearer of the two operands' precisions deciding, as do
    the dot algorithms BF16_BF16_F32_X3/_X6; a bf16 matmul is one pass at any precision. The
    FLOPs stay FLOPs (XLA's floor compares those): only the time is the passes'."""
    from autograder.tpumodel.work import static_work

    one = _mxu_us(_one_dot())
    assert one == pytest.approx(2 * 1024 ** 3 / V5E.matmul_flops("f32") / US, rel=1e-9)
    for attrs, passes in ((", operand_precision={default,default}", 1),
                          (", operand_precision={high,high}", 3),
                          (", operand_precision={highest,highest}", 6),
                          (", operand_precision={highest,default}", 6),
                          (", operand_precision={default,high}", 3),
                          (", algorithm=dot_bf16_bf16_f32_x3", 3),
                          (", algorithm=dot_bf16_bf16_f32_x6", 6)):
        text = _one_dot(attrs)
        assert _mxu_us(text) == pytest.approx(passes * one, rel=1e-9), attrs
        assert static_work(text) == 2 * 1024 ** 3, attrs
        summary = tpumodel.model_hlo(text).summary()
        assert summary.get("mxu_passes", 1) == passes, (attrs, summary)
    bf16 = _one_dot(", operand_precision={highest,highest}", dtype="bf16")
    assert _mxu_us(bf16) == pytest.approx(one, rel=1e-9)
    # one pass runs at the fitted efficiency of the bf16 peak; an int32 product takes six (the
    # published example's), and the speed message's precision clause is not about it
    assert one == pytest.approx(2 * 1024 ** 3 / (chips.MXU_EFFICIENCY * V5E.bf16_flops) / US,
                                rel=1e-9)
    int32 = _one_dot(dtype="s32")
    assert _mxu_us(int32) == pytest.approx(6 * one, rel=1e-9)
    assert "mxu_passes" not in tpumodel.model_hlo(int32).summary()
    with pytest.raises(tpumodel.ModelError, match="algorithm 'dot_tf32_tf32_f32' .* no cost"):
        tpumodel.model_hlo(_one_dot(", algorithm=dot_tf32_tf32_f32"))


@pytest.mark.orchestration
def test_the_speed_message_says_what_highest_costs():
    from autograder.course import checks, registry
    from autograder.tpumodel.api import precision_clause

    assert precision_clause(1) == ""
    says = precision_clause(6)
    assert says.startswith("precision=HIGHEST (or the algorithm BF16_BF16_F32_X6) costs 6 MXU "
                           "passes per matmul on a TPU; the jit baseline uses the default "
                           "precision (1 pass)"), says
    m = {"chip": "v5e", "student_us": 60.0, "baseline_us": 10.0, "ratio": 6.0, "threshold": 1.5,
         "precision_clause": says}
    got = checks.speed(registry.get("matmul_allgather"), checks.Timing(1.0, 1.0, 1.0, 0, "cpu", m))
    assert not got.passed and says in got.message, got.message


def test_deterministic(mesh):
    a = _put(mesh, (256, 512), P("X", "Y"), jnp.bfloat16)
    w = _put(mesh, (512, 512), P(None, "Y"), jnp.bfloat16)
    runs = [_model(cm.matmul_allgather_bidirectional, (a, w), mesh).timeline.summary()
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_chips_selectable(mesh):
    a = _put(mesh, (256, 512), P("X", "Y"))
    w = _put(mesh, (512, 512), P(None, "Y"))
    t = {c: _model(cm.matmul_allgather_jit, (a, w), mesh, chip=c,
                   out_shardings=NamedSharding(mesh, P("X", "Y"))).time_us
         for c in ("v4", "v5e", "v5p", "v6e")}
    assert t["v5p"] < t["v5e"] and t["v6e"] < t["v5e"]
    with pytest.raises(KeyError):
        chips.get_chip("v9z")


def test_data_dependent_loop_is_a_model_error(mesh):
    def body(a):
        return jax.lax.while_loop(lambda x: x.sum() < 10.0, lambda x: x + 1.0, a)

    a = _put(mesh, (64, 128), P("X", "Y"))
    with pytest.raises(tpumodel.ModelError):
        model_function(_sm(body, mesh, P("X", "Y"), P("X", "Y")), (a,), mesh)


# --------------------------------------------------------------- the grading hook, profile
def _problem():
    from autograder.course.references import (
        ps1_sharding as ref,  # any numpy maker; not used here
    )

    return Problem(name="tpumodel_test_matmul", assignment="tpumodel_test", points=1,
                   statement="", arg_names=("A", "W"), in_specs=(P("X", "Y"), P(None, "Y")),
                   out_spec=P("X", "Y"), make_case=ref.shard_average_case,
                   reference=ref.shard_average_reference, baseline=cm.matmul_allgather_jit)


def test_grading_modeler_and_fallback(mesh):
    prob = _problem()
    a = _put(mesh, (1024, 2048), P("X", "Y"), jnp.bfloat16)
    w = _put(mesh, (2048, 2048), P(None, "Y"), jnp.bfloat16)
    d = tpumodel.grading_modeler(ModelRequest.of_function(
        prob, cm.matmul_allgather_bidirectional, mesh, [a, w]))
    assert set(d) >= {"chip", "student_us", "baseline_us", "ratio", "threshold"}
    assert d["ratio"] < 1.0 and d["chip"] == "v5e"

    def data_loop(A, W, mesh):  # three more products, a count the compiler cannot see
        n = (jnp.abs(A).max() > -1.0).astype(jnp.int32) * 3

        def body(c):
            return c[0] + 1, c[1] @ W

        return jax.lax.while_loop(lambda c: c[0] < n, body, (jnp.int32(0), A @ W))[1]

    # given the function, the model counts the loop on these arrays and models it pinned
    d = tpumodel.grading_modeler(ModelRequest.of_function(prob, data_loop, mesh, [a, w]))
    assert d["ratio"] > 2.5, d

    # given only the partitioned texts and no way to pin, it says it cannot price the program
    # (the speed check then fails; it never falls back to a laxer basis)
    lowered = jax.jit(functools.partial(data_loop, mesh=mesh)).lower(a, w)
    _, text = compile_partitioned(lowered)
    d = tpumodel.grading_modeler(ModelRequest.of_modules(prob, mesh, (text, text),
                                                         args=[a, w]))
    assert set(d) == {"unreadable"} and "array data" in d["unreadable"], d


def test_a_model_request_says_its_mode_and_refuses_what_its_mode_does_not_read(mesh):
    """The modeler takes one declared request: a field its mode would ignore is refused when
    the request is made, never dropped in silence."""
    from autograder.tpumodel.api import ModelMode

    prob = _problem()
    assert ModelRequest.of_modules(prob, mesh, ("st", "base")).mode is ModelMode.MODULES
    assert ModelRequest.of_program(prob, abs, mesh, []).mode is ModelMode.PROGRAM
    with pytest.raises(ValueError, match="texts: read only by a MODULES request"):
        ModelRequest(prob, ModelMode.FUNCTION, mesh, (), fn=abs, texts=("st", "base"))
    with pytest.raises(ValueError, match="measured, compiled: read only by a MODULES"):
        ModelRequest(prob, ModelMode.PROGRAM, mesh, (), fn=abs, compiled=object(),
                     measured=list)
    with pytest.raises(ValueError, match="not fn"):
        ModelRequest(prob, ModelMode.MODULES, mesh, (), fn=abs, texts=("st", "base"))
    with pytest.raises(ValueError, match="baseline"):
        ModelRequest.of_modules(prob, mesh, ("st", None))
    with pytest.raises(ValueError, match="needs fn"):
        ModelRequest(prob, ModelMode.FUNCTION, mesh)
    with pytest.raises(TypeError, match="ModelMode"):
        ModelRequest(prob, "modules", mesh, texts=("st", "base"))
    with pytest.raises(TypeError, match="ModelRequest"):
        tpumodel.grading_modeler(prob)
    with pytest.raises(TypeError):  # the old eleven keywords are gone
        tpumodel.grading_modeler(prob, abs, mesh, [], program=True)


def test_speed_check_uses_model(mesh):
    from autograder.course import checks

    prob = _problem()
    a = _put(mesh, (256, 512), P("X", "Y"), jnp.bfloat16)
    w = _put(mesh, (512, 512), P(None, "Y"), jnp.bfloat16)

    def slow(A, W, mesh):  # the same product computed five times over
        out = A @ W
        for i in range(4):
            out = out + (A * (i + 1.0)) @ W
        return out

    d = tpumodel.grading_modeler(ModelRequest.of_function(prob, slow, mesh, [a, w]))
    t = checks.Timing(1.0, 1.0, 1.0, 15, "cpu", d)
    res = checks.speed(prob, t)
    assert not res.passed and "modeled on TPU v5e" in res.message


def test_profile_api_png(mesh, tmp_path):
    prob = _problem()
    a = _put(mesh, (256, 512), P("X", "Y"))
    w = _put(mesh, (512, 512), P(None, "Y"))
    p = tpumodel.profile(cm.matmul_allgather_unidirectional, prob, mesh, [a, w],
                         png=str(tmp_path / "t.png"))
    d = p.to_dict()
    for k in ("student_us", "baseline_us", "ratio", "compute_us", "comm_us",
              "exposed_comm_us", "png"):
        assert k in d
    assert Path(d["png"]).stat().st_size > 1000
    assert "your function" in p.text()


def test_profile_cli_json(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "autograder", "profile", str(ROOT / "solutions/ps1_sharding.py"),
         "roll_diff", "--json", "--png", str(tmp_path / "r.png")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    d = json.loads(out.stdout)
    assert d["ratio"] == pytest.approx(1.0, rel=0.05) and d["comm_us"] == 0
    assert Path(d["png"]).exists()


# ------------------------------------------- the floor: XLA's FLOP count of the same program
def _heavy_reducer(a, b):  # forty operations per element where a sum has one
    y = a
    for _ in range(20):
        y = y * b + a
    return y


def test_static_work_counts_each_loop_body_once_as_xla_does():
    from autograder.tpumodel.work import static_work, xla_flops

    v = jnp.ones((1000,))
    f = jax.jit(lambda a: jax.lax.fori_loop(0, 7, lambda k, c: c * 2.0, a))
    compiled, text = compile_partitioned(f.lower(v))
    assert static_work(text) == xla_flops(compiled)[0] == 1000 + 2  # the body, the counter


def test_xla_flops_reads_a_dict_a_list_and_says_when_there_is_none():
    from autograder.tpumodel.work import xla_flops

    class Compiled:
        def __init__(self, got):
            self.got = got

        def cost_analysis(self):
            if isinstance(self.got, Exception):
                raise self.got
            return self.got

    assert xla_flops(Compiled({"flops": 12.0})) == (12.0, "")
    assert xla_flops(Compiled([{"flops": 3.0}, {"flops": 5.0}])) == (5.0, "")
    assert xla_flops(Compiled({"bytes accessed": 8.0})) == (0.0, "XLA counts no FLOPs")
    for got in (None, RuntimeError("no cost model")):
        flops, why = xla_flops(Compiled(got))
        assert flops is None and "cost analysis" in why, why


def test_the_floor_scales_a_program_the_model_undercounts():
    """A reduction whose reducer does forty operations per element: the model charges one (a
    reduce is a sum to it), XLA counts forty; the floor uses XLA's count and says so."""
    from autograder.tpumodel.work import Floor, floored, static_work, xla_flops

    f = jax.jit(lambda x: jax.lax.reduce(x, 0.0, _heavy_reducer, (1,)))
    compiled, text = compile_partitioned(f.lower(jnp.ones((512, 512))))
    floor = Floor(static_work(text), *xla_flops(compiled))
    assert floor.applies and floor.factor > 30 and floor.used == floor.xla, floor
    m = tpumodel.model_hlo(text)
    compute = m.timeline.summary()["compute_us"]
    assert floored(m, floor).timeline.summary()["compute_us"] == pytest.approx(
        floor.factor * compute, rel=1e-9)
    assert floor.clause().startswith(f"XLA counts {floor.xla / 1e9:.4g} GFLOP where the model "
                                     f"counted {floor.model / 1e9:.4g}"), floor.clause()
    assert floor.clause().endswith("the higher is used")


def test_the_speed_check_says_when_the_floor_applied(mesh, monkeypatch):
    """The grading hook compares the model's count with XLA's for the executable it is given,
    scales the student's compute where the model's is lower, and the speed message says it in
    one clause; where the model's is not lower, the message gives both counts."""
    from autograder.course import checks
    from autograder.tpumodel import api

    prob = _problem()
    a = _put(mesh, (256, 512), P("X", "Y"))
    w = _put(mesh, (512, 512), P(None, "Y"))
    fn = functools.partial(cm.matmul_allgather_unidirectional, mesh=mesh)
    compiled, text = compile_partitioned(jax.jit(fn).lower(a, w))
    base = api.baseline_hlo(prob, mesh, [a, w])
    honest = tpumodel.grading_modeler(ModelRequest.of_modules(prob, mesh, (text, base),
                                                              args=[a, w], compiled=compiled))
    assert not honest["flops"]["applied"] and honest["flops"]["xla"] > 0, honest["flops"]
    says = checks.speed(prob, checks.Timing(1.0, 1.0, 1.0, 0, "cpu", honest)).message
    assert "each loop body once, the model counts" in says and "higher is used" not in says

    # the model's count a tenth of what it is: XLA's is used, ten times the compute
    counted = api.static_work(text)
    monkeypatch.setattr(api, "static_work", lambda t: counted / 10)
    low = tpumodel.grading_modeler(ModelRequest.of_modules(prob, mesh, (text, base),
                                                           args=[a, w], compiled=compiled))
    assert low["flops"]["applied"] and low["flops"]["used"] == low["flops"]["xla"]
    assert low["student"]["compute_us"] == pytest.approx(
        honest["student"]["compute_us"] * low["flops"]["xla"] / (counted / 10), rel=1e-6)
    assert low["ratio"] > honest["ratio"]
    says = checks.speed(prob, checks.Timing(1.0, 1.0, 1.0, 0, "cpu", low)).message
    assert (f"XLA counts {low['flops']['xla'] / 1e9:.4g} GFLOP where the model counted "
            f"{counted / 10 / 1e9:.4g} (per device, each loop body once); the higher is used"
            in says), says


def test_a_bf16_split_into_float32_dots_models_no_faster_than_the_baseline():
    """bf16x3 written with float32 arrays (the op table admits the dots): three default-precision
    dots are three MXU passes against the baseline's one, and the ring models slower than the
    jit baseline (the reference ring itself models at about 0.6 of it)."""
    import numpy as np

    from autograder.core.loader import load
    from autograder.course import registry

    problem = registry.get("matmul_allgather")
    mesh = make_mesh(*problem.speed_layout)
    case = problem.case(np.random.default_rng(0), *problem.speed_layout, "speed")
    args = [jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(case.args,
                                                                     problem.in_specs)]
    fn = load(ROOT / "tests" / "fixtures" / "attacks" / "bf16_split_f32_dots.py",
              statement_timeout=5, total_timeout=20).function("matmul_allgather")
    d = tpumodel.grading_modeler(ModelRequest.of_function(problem, fn, mesh, args))
    assert d["ratio"] > 1.0 > d["threshold"], d
