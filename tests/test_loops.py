"""Trip counts of loops that depend on the data (autograder/tpumodel/loops.py).

Each program here has loops whose counts are known from its inputs; the counting program must
report exactly those, the pinned program must compute what the original computes, and the TPU
model must then cost it (it refuses the original). Loops are placed where JAX puts them in real
answers: inside shard_map, inside a helper jit (a func.call), nested in another loop, inside a
branch, stopped by a carried flag rather than a counter, and a static fori_loop beside them.
"""
from __future__ import annotations

from pathlib import Path

from autograder.core.devices import setup_devices

setup_devices()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P

from autograder.core.meshes import make_mesh  # noqa: E402
from conftest import grade, graded
from autograder.tpumodel import loops  # noqa: E402
from autograder.tpumodel.api import model_function  # noqa: E402
from autograder.tpumodel.hlo import DataDependentLoop  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "ps2_moe"


def _export(fn, *args):
    return jax.export.export(jax.jit(fn))(*args)


def _halvings(v):
    """Iterations of ``while v > 1: v //= 2`` (a loop with no counter at all)."""
    return jax.lax.while_loop(lambda s: s[0] > 1, lambda s: (s[0] // 2, s[1] + 1.0),
                              (v, jnp.float32(0)))[1]


@jax.jit
def _helper(n, x):  # a nested jit: a func.call in the module
    return jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 1.5),
                              (0, x))[1]


def program(x, n):
    """Loop 0: n[0] rounds, each running a loop of n[1] + r rounds (nested, varying); then a
    helper's loop of n[2] rounds; a branch holding a loop of n[3] halvings; a static fori."""
    def outer(s):
        r, acc = s
        inner = jax.lax.while_loop(lambda t: t[0] < n[1] + r,
                                   lambda t: (t[0] + 1, t[1] + 1.0), (0, acc))[1]
        return r + 1, inner

    y = jax.lax.while_loop(lambda s: s[0] < n[0], outer, (0, x))[1]
    y = _helper(n[2], y)
    y = jax.lax.cond(n[3] > 0, lambda: y + _halvings(n[3]), lambda: y)
    return jax.lax.fori_loop(0, 3, lambda i, v: v * 2.0, y)


def expected(x, n):
    v = x
    for r in range(n[0]):
        v = v + (n[1] + r)
    v = v * 1.5 ** n[2]
    if n[3] > 0:
        v = v + int(np.floor(np.log2(n[3]))) if n[3] > 1 else v
    return v * 8.0


@pytest.mark.parametrize("n", [(3, 2, 4, 37), (0, 5, 1, 0), (2, 0, 0, 1)])
def test_counts_pinning_and_model_on_nested_loops(n):
    x, nn = jnp.ones((4, 4), jnp.float32), jnp.asarray(n, jnp.int32)
    exp = _export(program, x, nn)
    np.testing.assert_allclose(np.asarray(exp.call(x, nn)), expected(np.ones((4, 4)), n),
                               rtol=1e-5)
    trips = loops.trip_counts(exp, [x, nn])
    # loops numbered in program order: outer, inner (its longest entry: the last), helper,
    # halvings, the static fori_loop
    inner = n[1] + n[0] - 1 if n[0] else 0
    halvings = int(np.floor(np.log2(n[3]))) if n[3] > 1 else 0
    assert sorted(trips) == sorted((n[0], inner, n[2], halvings if n[3] > 0 else 0, 3)), trips
    fixed = loops.pinned(exp, trips)
    if n[0] <= 1:  # the inner loop's count is the same on every entry
        np.testing.assert_allclose(np.asarray(fixed.call(x, nn)), np.asarray(exp.call(x, nn)))
    with pytest.raises(DataDependentLoop):
        model_function(exp.call, [x, nn])
    # pinned, no loop stops the model; the branch chosen by the data is costed both ways
    modeled = model_function(fixed.call, [x, nn])
    assert modeled.bounds and "branch chosen by array data" in modeled.bounds[0]


def _scaled_n_times(x, n):
    """``x * 1.5 + 1`` n times, n read from the data (a loop the model cannot count alone)."""
    return jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 1.5 + 1.0),
                              (0, x))[1]


def test_a_loop_is_priced_per_iteration():
    """A TPU runs each iteration of a while loop's body as kernels of its own: each reads the
    device's block from HBM and writes it back, with a launch of its own. A loop counted on the
    data, and a fori_loop, of n iterations model at n times one iteration (the model once fused
    the unrolled iterations into one kernel: 8 iterations priced as 1)."""
    from autograder.tpumodel import chips

    x = jnp.ones((512, 1024), jnp.float32)  # 2 MiB
    block = 2 * x.size * 4 / chips.CHIPS["v5e"].hbm_bw + chips.KERNEL_OVERHEAD_S
    for n in (0, 1, 8):
        nn = jnp.asarray(n, jnp.int32)
        exp = _export(_scaled_n_times, x, nn)
        fixed = loops.pinned(exp, loops.trip_counts(exp, [x, nn]))
        counted = model_function(fixed.call, [x, nn])
        static = model_function(lambda v: jax.lax.fori_loop(  # noqa: B023
            0, n, lambda i, u: u * 1.5 + 1.0, v), [x])
        for m in (counted, static):
            assert m.timeline.makespan == pytest.approx(n * block, rel=0.02, abs=1e-8), n
            assert m.timeline.summary()["n_compute"] == n


def test_no_loops_no_counts():
    x = jnp.ones((8,), jnp.float32)
    exp = _export(lambda v: jnp.sin(v) * 2, x)
    assert loops.trip_counts(exp, [x]) == ()
    assert loops.count_run(exp, [x]).out is None  # nothing to count: nothing ran


def test_one_counting_run_gives_the_result_the_counts_and_the_trips():
    """The grader checks a big case's result, reads its structure and pins its loops from one
    run: the counting program's result is the program's own, and its two readings agree with
    the separate functions."""
    _, fn, exp, a, k = _ring_case()
    run = loops.count_run(exp, [a, k])
    np.testing.assert_array_equal(np.asarray(run.out), np.asarray(fn(a, k)))
    assert run.out.sharding.is_equivalent_to(fn(a, k).sharding, 1)
    assert run.trips() == loops.trip_counts(exp, [a, k]) == (5,)
    per = run.per_device((4, 2), ("X", "Y"))
    assert [c.key() for c in per] == [c.key() for c in
                                      loops.device_counts(exp, [a, k], (4, 2), ("X", "Y"))]


def _ring_program(mesh):
    """shard_map whose loop runs as many rounds as the largest count along X (a pmax)."""
    def local(a, k):
        rounds = jax.lax.pmax(jnp.max(k), "X")
        out = jnp.zeros_like(a)  # zeros_like keeps a's type: varying over X
        return jax.lax.while_loop(
            lambda s: s[0] < rounds,
            lambda s: (s[0] + 1, s[1] + jax.lax.ppermute(a, "X", [(i, (i + 1) % 4)
                                                                  for i in range(4)])),
            (0, out))[1]

    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("X"), P("X")),
                                 out_specs=P("X")))


def _ring_case():
    """(the 4x2 mesh, the jitted ring, its export, its two inputs): the busiest X device runs
    5 rounds."""
    mesh = make_mesh(4, 2)
    a = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("X")))
    k = jax.device_put(jnp.asarray([1, 2, 5, 0, 3, 1, 2, 2], jnp.int32),
                       NamedSharding(mesh, P("X")))
    fn = _ring_program(mesh)
    return mesh, fn, _export(fn, a, k), a, k


def test_counts_inside_shard_map_are_the_busiest_devices():
    mesh, fn, exp, a, k = _ring_case()
    assert loops.trip_counts(exp, [a, k]) == (5,)
    fixed = loops.pinned(exp, (5,))
    np.testing.assert_allclose(np.asarray(fixed.call(a, k)), np.asarray(fn(a, k)))
    with pytest.raises(DataDependentLoop):
        model_function(exp.call, [a, k], mesh)
    one = model_function(loops.pinned(exp, (1,)).call, [a, k], mesh)
    five = model_function(fixed.call, [a, k], mesh)
    assert five.time_us > 3 * one.time_us  # five rounds of a transfer cost more than one


def test_counting_never_trusts_the_program_text():
    """The count comes from running the program: a loop that claims a bound in a name or an
    attribute still runs as often as its data says."""
    x, nn = jnp.ones((4, 4), jnp.float32), jnp.asarray((7, 1, 2, 0), jnp.int32)
    exp = _export(program, x, nn)
    text = exp.mlir_module()
    assert loops.MARK not in text
    module, tags = loops.counting_module(text)
    assert loops.MARK not in str(module)
    assert {t.kind for t in tags} == {"trips", "entries", "most"}
    assert loops.trip_counts(exp, [x, nn])[0] == 7


# -- in grading ------------------------------------------------------------------------------

def _speed(path: Path, name: str):
    """The speed check of the verdict table's grading (conftest's ``graded``: two meshes,
    speed included), shared with every other test of that file."""
    return next(c for c in graded(path, name).checks if c.name == "speed")


def _ratio(check) -> float:
    import re

    return float(re.search(r"ratio (\d+\.\d+)\)", check.message.split("modeled on TPU")[1])
                 .group(1))


@pytest.mark.parametrize("name", ["moe_all_to_all", "moe_topk"])
@pytest.mark.parametrize("path", [ROOT / "solutions" / "ps2_moe.py",
                                  FIX / "alt_flag_loop.py"])  # a loop stopped by a flag
def test_all_to_all_speed_is_modeled_with_counted_rounds(path, name):
    speed = _speed(path, name)
    assert speed.passed and "modeled on TPU" in speed.message, speed.message
    assert "most iterations one entry of it ran on these inputs" in speed.message, \
        speed.message


@pytest.mark.parametrize("name", ["moe_all_to_all", "moe_topk"])
@pytest.mark.parametrize("path", [FIX / "wrong_a2a_gathers.py"])
def test_gathering_every_token_models_slower_than_the_exchange(path, name):
    """Gathering every token to every device instead of exchanging them models slower than
    the reference (graded without the structure rules, which it fails: the judge measures no
    speed of a program that breaks them)."""
    ref = _speed(ROOT / "solutions" / "ps2_moe.py", name)
    gathers = next(c for c in grade("ps2_moe", path.stem, name, rules=False,
                                    with_speed=True).checks if c.name == "speed")
    assert "modeled on TPU" in gathers.message
    assert _ratio(gathers) > 1.5 * _ratio(ref), (gathers.message, ref.message)
    assert not gathers.passed


@jax.jit
def _flagged(x, flag):  # one func.func in StableHLO, however many places call it
    return jax.lax.cond(flag > 0, lambda v: jnp.sin(v), lambda v: v * 2.0, x)


def test_each_call_site_of_a_helper_is_counted_apart():
    """A helper with a branch called from three places, taking the sine once: counted per call
    site, each site's branch counts are its own (summed over the sites they were (2, 1), which
    no sharing out per site can tell from (2/3, 1/3) at each)."""
    x, flags = jnp.ones((4,), jnp.float32), jnp.asarray([1, 0, 0], jnp.int32)
    exp = _export(lambda v, f: _flagged(v, f[0]) + _flagged(v, f[1]) + _flagged(v, f[2]),
                  x, flags)
    assert exp.mlir_module().count("stablehlo.case") == 1
    (counts,) = loops.device_counts(exp, [x, flags], (1,), ("X",))
    assert sorted(counts.branches.values()) == [(0, 1), (1, 0), (1, 0)], counts.branches


def test_nested_shard_maps_are_counted_per_device():
    """An outer shard_map over X and an inner one over Y: the inner loop's count and branch
    are each device's own, read in the mesh's device order (issue 41: "a loop inside nested
    shard_maps cannot be counted" once failed an honest ring on structure)."""
    mesh = make_mesh(4, 2)
    k = jnp.asarray([[1, 4], [0, 2], [5, 3], [2, 6]], jnp.int32)  # device (x, y) runs k[x, y]

    def inner(a, kk):
        n = kk[0, 0]
        a = jax.lax.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] * 2.0),
                               (0, a))[1]
        return jax.lax.cond(n > 2, lambda v: v + 1.0, lambda v: v - 1.0, a)

    def outer(a, kk):
        return jax.shard_map(inner, in_specs=(P(None, "Y"), P(None, "Y")),
                             out_specs=P(None, "Y"), axis_names={"Y"})(a, kk)

    fn = jax.jit(jax.shard_map(outer, mesh=mesh, in_specs=(P("X", None), P("X", None)),
                               out_specs=P("X", None), axis_names={"X"}))
    a = jax.device_put(jnp.ones((4, 2)), NamedSharding(mesh, P("X", "Y")))
    kk = jax.device_put(k, NamedSharding(mesh, P("X", "Y")))
    run = loops.count_run(_export(fn, a, kk), [a, kk])
    np.testing.assert_array_equal(np.asarray(run.out), np.asarray(fn(a, kk)))
    per = run.per_device((4, 2), ("X", "Y"))
    flat = np.asarray(k).reshape(-1)
    assert [c.trips[0] for c in per] == flat.tolist()
    assert [c.branches[0] for c in per] == [(0, 1) if n > 2 else (1, 0) for n in flat]
    assert run.trips() == (6,)


def _shift_branch_program(mesh, per_device: bool):
    """A shard_map whose branch hangs on an arithmetic shift of an unsigned value:
    ``0x80000000 >> 31`` copies the top bit on the device (0xFFFFFFFF), so ``== 1`` is false and
    every device runs the blocking all-gather. With ``per_device``, the odd devices along Y
    shift 0x80000000 and the even ones 0, and ``> 1`` sends only the odd ones to the zeros (the
    other branch then multiplies the local blocks: a collective that only some devices of its
    group run would never finish)."""
    def local(a, w):
        y = jax.lax.axis_index("Y").astype(jnp.uint32)
        top = jnp.uint32(0x80000000) * (y % 2 if per_device else jnp.uint32(1))
        ones = jax.lax.shift_right_arithmetic(top, jnp.uint32(31))
        cheap = (ones > 1) if per_device else (ones == 1)
        return jax.lax.cond(cheap, lambda a, w: jnp.zeros_like(a @ w[:a.shape[1]]),
                            (lambda a, w: a @ w[:a.shape[1]]) if per_device else
                            (lambda a, w: jax.lax.all_gather(a, "Y", axis=1, tiled=True) @ w),
                            a, w)

    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                                 out_specs=P("X", "Y")))


def _logical_shift_evaluator(monkeypatch):
    """The scalar evaluator as it was before issue 41: an arithmetic shift of an unsigned value
    evaluated as a logical one (``0x80000000 >> 31`` is 1), a wrong reading of the device."""
    from autograder.tpumodel import scalars

    right = scalars.evaluate

    def wrong(op, out_type, attrs, values):
        if op == "shift-right-arithmetic" and out_type.startswith("u"):
            op = "shift-right-logical"
        return right(op, out_type, attrs, values)

    monkeypatch.setattr(scalars, "evaluate", wrong)


def test_the_model_follows_the_branch_the_device_ran(monkeypatch):
    """Where the model's own reading of a branch index is wrong (an evaluator that shifts the
    wrong way), the run of the same program decides: the model prices the branch the devices
    ran, as it does with the right evaluator, and never the cheap branch no device takes."""
    from autograder.tpumodel.api import compile_partitioned, model_hlo, model_measured
    from autograder.tpumodel.hlo import RunDisagrees

    mesh = make_mesh(4, 2)
    a = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("X", "Y")))
    w = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P(None, "Y")))
    geometry = ((4, 2), ("X", "Y"))
    fn = _shift_branch_program(mesh, per_device=False)
    exp = _export(fn, a, w)
    text = compile_partitioned(jax.jit(exp.call).lower(a, w))[1]
    run = loops.count_run(exp, [a, w])
    counts = run.per_device(*geometry)
    # cond's branch 0 is its false branch: the all-gather, on every device
    assert run.taken(*geometry) == {0: (0,) * 8}
    right = model_hlo(text, *geometry, measured=counts)  # the right reading agrees with the run

    def pinned():
        fixed = loops.pinned(exp, run.trips(), run.taken(*geometry))
        np.testing.assert_array_equal(np.asarray(fixed.call(a, w)), np.asarray(fn(a, w)))
        return compile_partitioned(jax.jit(fixed.call).lower(a, w))[1], run.trips(), 1

    _logical_shift_evaluator(monkeypatch)
    alone = model_hlo(text, *geometry)  # the wrong reading alone: the zeros branch
    assert alone.time_us < right.time_us / 2
    with pytest.raises(RunDisagrees, match="branches ran otherwise"):
        model_hlo(text, *geometry, measured=counts)
    followed = model_measured(text, *geometry, measured=lambda: counts, pinned=pinned)
    assert followed.time_us == pytest.approx(right.time_us, rel=1e-6)
    assert followed.branches == 1


def test_branches_pinned_per_device():
    """Devices that ran different branches each keep theirs in the pinned program (chosen by
    the device's id): the same values, and the model prices every device as it ran."""
    from autograder.tpumodel.api import compile_partitioned, model_hlo

    mesh = make_mesh(4, 2)
    a = jax.device_put(jnp.ones((64, 256)), NamedSharding(mesh, P("X", "Y")))
    w = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P(None, "Y")))
    fn = _shift_branch_program(mesh, per_device=True)
    exp = _export(fn, a, w)
    run = loops.count_run(exp, [a, w])
    taken = run.taken((4, 2), ("X", "Y"))
    assert taken == {0: (0, 1) * 4}  # even Y: the all-gather (branch 0); odd Y: the zeros
    fixed = loops.pinned(exp, run.trips(), taken)
    np.testing.assert_array_equal(np.asarray(fixed.call(a, w)), np.asarray(fn(a, w)))
    text = compile_partitioned(jax.jit(fixed.call).lower(a, w))[1]
    got = model_hlo(text, (4, 2), ("X", "Y"), measured=run.per_device((4, 2), ("X", "Y")))
    assert got.devices == 8


def _exchange_rounds(x):
    """Per device of a 4x2 mesh: two rounds of an all_to_all over X (inside a fori_loop) of its
    [4, 3] rows, row j to X-group j: group g receives row g of every group's block."""
    def local(v):
        return jax.lax.fori_loop(
            0, 2, lambda r, acc: acc + jax.lax.all_to_all(v * (r + 1.0), "X", 0, 0, tiled=True),
            jnp.zeros_like(v))

    mesh = make_mesh(4, 2)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("X"), out_specs=P("X"),
                                 check_vma=False))(x)


def test_received_checksums_change_only_where_the_changed_row_arrives():
    """``loops.received``: a checksum per device of what its all_to_alls delivered (summed over
    a loop's rounds); changing row 2 of X-group 1's block changes it on group 2's devices
    (ids 4, 5) and nowhere else; the same input, or a 0.0 made -0.0, changes nothing."""
    mesh = make_mesh(4, 2)
    x = np.arange(48, dtype=np.float32).reshape(16, 3)  # x[0, 0] == 0.0
    place = lambda v: jax.device_put(v, NamedSharding(mesh, P("X")))  # noqa: E731
    row = x.copy()
    row[1 * 4 + 2, 1] += 0.5
    negzero = x.copy()
    negzero[0, 0] = -0.0
    exp = _export(_exchange_rounds, place(x))
    sums = loops.received(exp, [[place(v)] for v in (x, x, row, negzero)], (4, 2), ("X", "Y"))
    assert sums[0].shape == (8, 1)
    np.testing.assert_array_equal(sums[0], sums[1])
    np.testing.assert_array_equal(sums[0], sums[3])
    changed = np.flatnonzero(sums[0][:, 0] != sums[2][:, 0])
    assert changed.tolist() == [4, 5], changed


def _exchange_once(x):
    """Per device of a 4x2 mesh: one all_to_all over X of its [4, 3] rows, nothing computed
    on them (a NaN's bits arrive as they were sent)."""
    mesh = make_mesh(4, 2)
    return jax.jit(jax.shard_map(lambda v: jax.lax.all_to_all(v, "X", 0, 0, tiled=True),
                                 mesh=mesh, in_specs=P("X"), out_specs=P("X"),
                                 check_vma=False))(x)


def test_received_digests_are_keyed_and_read_bits():
    """``loops.received``'s digest: the same under one key (in two instrumented copies), other
    under another; it reads a float's bits (two NaNs differ; two bfloat16s one bit apart, as
    XLA's CPU exchanges bfloat16 NaNs made canonical), -0.0 as 0.0, and the change shows only
    where the changed row arrives."""
    mesh = make_mesh(4, 2)
    place = lambda v: jax.device_put(v, NamedSharding(mesh, P("X")))  # noqa: E731
    for dtype, one, other in ((np.float32, 0x7FC00000, 0x7FC00001),
                              (jnp.bfloat16, 0x3F80, 0x3F81)):
        ints = np.uint32 if dtype == np.float32 else np.uint16
        x = np.arange(48, dtype=np.float32).reshape(16, 3).astype(dtype)
        x[1 * 4 + 2, 1] = np.array(one, ints).view(dtype)
        y = x.copy()
        y[1 * 4 + 2, 1] = np.array(other, ints).view(dtype)
        negzero = x.copy()
        negzero[0, 0] = -0.0
        exp = _export(_exchange_once, place(x))
        key = loops.new_key()
        sets = [[place(v)] for v in (x, y, negzero)]
        sums = loops.received(exp, sets, (4, 2), ("X", "Y"), key=key)
        again = loops.received(exp, sets[:1], (4, 2), ("X", "Y"), key=key)[0]
        np.testing.assert_array_equal(sums[0], again)
        np.testing.assert_array_equal(sums[0], sums[2])
        assert np.flatnonzero(sums[0][:, 0] != sums[1][:, 0]).tolist() == [4, 5], dtype
        fresh = loops.received(exp, sets[:1], (4, 2), ("X", "Y"))[0]
        assert not np.array_equal(sums[0], fresh)  # another key: other digests
    assert loops.new_key() != loops.new_key() and len(loops.new_key()) == loops.KEY_WORDS


def _exchange_while(a, k):
    """Per device of a 4x2 mesh: as many rounds as the largest count along X (a data-dependent
    while loop), each an all_to_all over X of a's rows, summed."""
    def local(a, k):
        rounds = jax.lax.pmax(jnp.max(k), "X")
        return jax.lax.while_loop(
            lambda s: s[0] < rounds,
            lambda s: (s[0] + 1, s[1] + jax.lax.all_to_all(a, "X", 0, 0, tiled=True)),
            (0, jnp.zeros_like(a)))[1]

    mesh = make_mesh(4, 2)
    return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P("X"), P("X")),
                                 out_specs=P("X"), check_vma=False))(a, k)


def test_one_instrumented_copy_counts_and_weighs_the_exchanges():
    """``loops.count_and_receive``: one program, compiled once and run on each argument set,
    gives each set's counts (as ``count_run``'s) and checksums (as ``received``'s): a changed
    row changes what its X-group receives and nothing else, and a set that runs more rounds
    counts them."""
    mesh = make_mesh(4, 2)
    place = lambda v: jax.device_put(v, NamedSharding(mesh, P("X")))  # noqa: E731
    a = np.arange(48, dtype=np.float32).reshape(16, 3)
    k = np.array([1, 2, 3, 1], np.int32)
    row = a.copy()
    row[1 * 4 + 2, 1] += 0.5
    more = np.array([1, 2, 5, 1], np.int32)
    sets = [[place(a), place(k)], [place(row), place(k)], [place(a), place(more)]]
    exp = _export(_exchange_while, *sets[0])
    compiles = []

    def run_all(f, arg_sets):
        compiles.append(1)
        compiled = jax.jit(f).lower(*arg_sets[0]).compile()
        return [compiled(*s) for s in arg_sets]

    key = loops.new_key()
    runs = loops.count_and_receive(exp, sets, run_all=run_all, key=key)
    assert len(compiles) == 1 and len(runs) == 3
    for got, args in zip(runs, sets, strict=True):
        alone = loops.count_run(exp, args)
        assert got.trips() == alone.trips()
        assert [c.key() for c in got.per_device((4, 2), ("X", "Y"))] == \
            [c.key() for c in alone.per_device((4, 2), ("X", "Y"))]
        np.testing.assert_array_equal(np.asarray(got.out), np.asarray(alone.out))
    assert runs[0].trips() == (3,) and runs[2].trips() == (5,)
    sums = [r.received((4, 2), ("X", "Y")) for r in runs]
    np.testing.assert_array_equal(
        sums[0], loops.received(exp, sets[:1], (4, 2), ("X", "Y"), key=key)[0])
    assert np.flatnonzero(sums[0][:, 0] != sums[1][:, 0]).tolist() == [4, 5]


def test_the_reader_counts_and_weighs_a_looping_exchange_with_one_compile(monkeypatch):
    """``read_paths`` on a program with a loop and a rule that measures its exchanges: the
    instrumented copy that weighs them also counts the loop (no second counting program), and
    the paths and the measure are those of the two measured apart."""
    from autograder.course import reading

    mesh = make_mesh(4, 2)
    place = lambda v: jax.device_put(v, NamedSharding(mesh, P("X")))  # noqa: E731
    a = np.arange(48, dtype=np.float32).reshape(16, 3)
    k = np.array([1, 2, 3, 1], np.int32)
    dynamic = [place(a), place(k)]
    exp = _export(_exchange_while, *dynamic)

    def perturbations(inputs, shape):
        changed = np.array(inputs[0])
        changed[1 * 4 + 2, 1] += 0.5
        return [((0, 1), {0: changed})]  # X-group 0 must not see row 2 of group 1's block

    compiles = []

    class Once:  # a Run (autograder.core.compiling) that only compiles once for all sets
        def __call__(self, f, args):
            raise AssertionError("the program was counted by a second instrumented copy")

        def all(self, f, arg_sets):
            compiles.append(1)
            compiled = jax.jit(f).lower(*arg_sets[0]).compile()
            return [compiled(*s) for s in arg_sets]

    run = Once()
    inputs = (a, k)
    paths = reading.read_paths(exp, mesh, "", dynamic, inputs, run=run,
                               perturbations=perturbations)
    assert paths.error is None, paths.error
    assert len(compiles) == 1
    assert {prog.received_changed for _, prog in paths.programs} == {False}
    apart = reading.read_paths(exp, mesh, "", dynamic, inputs)
    assert [(d, [(o.index, o.count) for o in p.ops]) for d, p in paths.programs] == \
        [(d, [(o.index, o.count) for o in p.ops]) for d, p in apart.programs]
    assert reading.received_changed(exp, mesh, dynamic, inputs, perturbations) is False

    def reaching(inputs, shape):  # X-group 2 receives that row: the change is seen
        return [((4, 5), perturbations(inputs, shape)[0][1])]

    compiles.clear()
    paths = reading.read_paths(exp, mesh, "", dynamic, inputs, run=run, perturbations=reaching)
    assert len(compiles) == 1 and {p.received_changed for _, p in paths.programs} == {True}
