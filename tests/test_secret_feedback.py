"""Feedback says where, not what: a message about a case drawn from the grading run's secret
seed quotes no value that seed produced, whatever the student's program computes; values (the
worst index, the reference's and the program's) come from the same program run on public
inputs of the same shapes."""
import re

import jax
import jax.numpy as jnp
import numpy as np
from conftest import check_of
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from autograder.core.compare import copies_disagree, secret_difference
from autograder.course import registry
from autograder.supervisor import local


def leaky_shard_average_jit(A, mesh):
    """Right everywhere but at [0, 0], where it hands back A[0, 0] scaled: a secret input,
    if the message quoted the program's value there."""
    out = A.reshape(mesh.shape["X"], A.shape[0] // mesh.shape["X"], A.shape[1]).mean(axis=1)
    out = jax.lax.with_sharding_constraint(out, NamedSharding(mesh, P("X", "Y")))
    return out.at[0, 0].set(A[0, 0] * 1e6 + 12345)


PROBLEM = registry.get("shard_average_jit")


def _numerics(fn, seed):
    res = local.grade_function(PROBLEM, fn, seed=seed, quick=True, with_speed=False)
    return check_of(res, "numerics")


def _first_case(seed):
    from autograder.judge.grading import plan_for

    (layout, (case, *_)), *_ = plan_for(PROBLEM, seed=seed, quick=True).cases()
    return layout, case


def _seeds_with_the_same_first_shape():
    """Two secret seeds whose first case (the one a message is about) has the same shape:
    the message may name the shape, so only then must it be the same text."""
    seen = {}
    for seed in range(1, 200):
        shape = _first_case(seed)[1].args[0].shape
        if shape in seen:
            return seen[shape], seed
        seen[shape] = seed
    raise AssertionError("no two seeds draw the same shape")


def test_a_numerics_message_is_the_same_under_any_secret_seed():
    a, b = _seeds_with_the_same_first_shape()
    assert _first_case(a)[1].args[0][0, 0] != _first_case(b)[1].args[0][0, 0]
    one, two = _numerics(leaky_shard_average_jit, a), _numerics(leaky_shard_average_jit, b)
    assert not one.passed and not two.passed
    assert one.message == two.message, (one.message, two.message)
    msg = one.message
    # where: the mesh, the shapes, and from the public run the index and both values
    assert re.search(r"on mesh \dx\d with A: float32\[\d+, \d+\]", msg), msg
    assert "values differ" in msg and "worst at index (0, 0)" in msg, msg
    assert "on public inputs of these shapes" in msg and "secret seed" in msg, msg
    for seed in (a, b):  # neither secret A[0, 0], scaled as the program scales it
        secret = float(_first_case(seed)[1].args[0][0, 0]) * 1e6 + 12345
        assert f"{secret:.6g}" not in msg, msg


def test_a_fault_only_the_secret_values_show_is_told_without_a_value():
    """A program right on the public twin and wrong on the secret cases (it compares an input
    with the twin's) is told where, and that the public inputs of these shapes pass."""
    from autograder.judge.grading import plan_for

    layout, case = _first_case(11)
    twin = plan_for(PROBLEM, seed=11, quick=True).public_twin(layout, case)
    mark = float(twin.args[0][0, 0])

    def right_on_the_twin_only(A, mesh):
        out = A.reshape(mesh.shape["X"], A.shape[0] // mesh.shape["X"], A.shape[1]).mean(axis=1)
        out = jax.lax.with_sharding_constraint(out, NamedSharding(mesh, P("X", "Y")))
        return jnp.where(A[0, 0] == mark, out, out + A[0, 0])

    msg = _numerics(right_on_the_twin_only, 11).message
    assert "values differ" in msg and "right answer on public inputs" in msg, msg
    assert not re.search(r"\d\.\d|at index", msg), msg  # no value, no index


def test_secret_forms_name_the_fault_only():
    want = np.ones((4, 8), np.float32)
    got = want.copy()
    got[1, 2] = 7.5
    assert secret_difference(got, want, 1e-5, 1e-5) == (
        "values differ from the NumPy reference beyond the tolerance")
    got[1, 2] = np.nan
    assert secret_difference(got, want, 1e-5, 1e-5) == "the output holds NaN or inf values"
    assert secret_difference(want, want, 1e-5, 1e-5) is None
    assert "expected shape (4, 8), found (8, 4)" in secret_difference(want.T, want, 1e-5, 1e-5)


def test_copies_that_disagree_on_a_secret_case_name_no_device_or_value():
    from autograder.core.meshes import make_mesh

    mesh = make_mesh(2, 4)
    sharding = NamedSharding(mesh, P("X", None))
    shards = [np.full((2, 8), 1.0 + (d.id == 3) * 41.5, np.float32)
              for d in sharding.addressable_devices_indices_map((4, 8))]
    devices = list(sharding.addressable_devices_indices_map((4, 8)))
    out = jax.make_array_from_single_device_arrays(
        (4, 8), sharding, [jax.device_put(s, d) for s, d in zip(shards, devices)])
    full = copies_disagree(out, mesh, 1e-5, 1e-5)
    secret = copies_disagree(out, mesh, 1e-5, 1e-5, secret=True)
    assert "42.5" in full and "disagree" in full
    assert "disagree" in secret and not re.search(r"\d", secret), secret


def test_the_speed_message_quotes_no_loop_count_of_the_secret_case():
    """Trip counts are counted on the speed case, whose values are secret: a loop that runs
    as often as an input says would read that input back through the counts, the modeled time
    or the ratio. The message says pass or fail there, and quotes figures from the same program
    on public inputs of the same shapes, or none."""
    from autograder.course import checks

    modeled = {"chip": "v5e", "student_us": 10.0, "baseline_us": 9.0, "ratio": 1.11,
               "trips": [7771, 4242], "threshold": 1.5}
    secret = checks.Timing(0, 0, float("nan"), 0, "cpu", modeled, counted=True)
    msg = checks.speed(registry.get("moe_all_to_all"), secret).message
    assert checks.speed(registry.get("moe_all_to_all"), secret).passed
    assert "not quoted" in msg and "within 1.5 on the speed case" in msg, msg
    for figure in ("7771", "4242", "10.0", "9.0", "1.11", "1.1"):
        assert figure not in msg, (figure, msg)
    public = checks.Timing(0, 0, float("nan"), 0, "cpu",
                           {"chip": "v5e", "student_us": 12.0, "baseline_us": 9.0,
                            "ratio": 1.3333, "trips": [3, 2], "threshold": 1.5})
    msg = checks.speed(registry.get("moe_all_to_all"), secret, public=public).message
    assert "on public inputs of the same shapes" in msg, msg
    assert "yours 12.0 us vs jit baseline 9.0 us (ratio 1.33)" in msg, msg
    assert "most iterations one entry of it ran on these inputs (2 loops" in msg, msg
    for figure in ("7771", "4242", "10.0", "1.11"):
        assert figure not in msg, (figure, msg)


def test_a_modeled_speed_without_counted_loops_keeps_its_figures():
    from autograder.course import checks

    modeled = {"chip": "v5e", "student_us": 10.0, "baseline_us": 9.0, "ratio": 1.11,
               "threshold": 1.05, "student": {"devices": 8, "device": 3}}
    msg = checks.speed(registry.get("moe_all_to_all"),
                       checks.Timing(0, 0, float("nan"), 0, "cpu", modeled)).message
    assert "yours 10.0 us vs jit baseline 9.0 us (ratio 1.11)" in msg and "yours is 1.11" in msg, msg
    assert "slowest (device 3)" in msg, msg
    # counts the secret case's run took decide the time (the model's trips and branches say
    # so, whatever the judge's flag): nothing of it is quoted
    for extra in ({"trips": [3]}, {"branches": 2}):
        counted = checks.speed(registry.get("moe_all_to_all"), checks.Timing(
            0, 0, float("nan"), 0, "cpu", {**modeled, **extra})).message
        assert "device 3" not in counted and "1.1" not in counted, counted
        assert "10.0" not in counted and "on the speed case yours is above it" in counted, counted


def test_a_ratio_near_the_limit_has_the_digits_to_tell_them_apart():
    """A failing 0.7514 against a limit of 0.75 never reads "yours is 0.75"."""
    from autograder.course import checks

    modeled = {"chip": "v5e", "student_us": 7.514, "baseline_us": 10.0, "ratio": 0.7514,
               "threshold": 0.75}
    res = checks.speed(registry.get("matmul_allgather"),
                       checks.Timing(0, 0, float("nan"), 0, "cpu", modeled))
    assert not res.passed and "at most 0.75 is needed, yours is 0.751 (" in res.message, \
        res.message
    assert "(ratio 0.751)" in res.message, res.message
    assert checks.ratio_text(0.75, 0.75) == "0.75" and checks.ratio_text(1.2, 0.75) == "1.20"
    assert checks.ratio_text(0.7500004, 0.75) == "0.7500004"
    ok = checks.speed(registry.get("matmul_allgather"), checks.Timing(
        0, 0, float("nan"), 0, "cpu", {**modeled, "ratio": 0.7496}))
    assert ok.passed and "(ratio 0.75)" in ok.message and "within 0.75" in ok.message, \
        ok.message


def counted_gather(A, B, W, mesh):
    """The reference all_to_all exchange, and before it a while_loop that all-gathers A over
    'X' as often as the routing's first token says (agreed along 'X' with a pmax, as the
    reference agrees its rounds): the gather's count is the data's, and a message that quoted it
    (x5, 1.5 KiB delivered) would read a secret input back."""
    from solutions.ps2_moe import exchange_in_chunks

    def local(a, b, w):
        trips = jax.lax.pmax(2 + b[0] % 5, "X")

        def spin(c):
            i, x = c
            return i + 1, x + jnp.sum(jax.lax.all_gather(a, "X", tiled=True))

        _, spun = jax.lax.while_loop(lambda c: c[0] < trips, spin, (jnp.int32(0), 0.0 * a[0, 0]))
        a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)
        chunk = max(1, min(128, a.shape[0] // jax.lax.axis_size("X")))
        out = exchange_in_chunks(a, jnp.arange(a.shape[0]), b, w, chunk)
        return out + 0.0 * spun

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P("X"), P("X", None, "Y")),
                         out_specs=P("X", "Y"))(A, B, W)


MOE = registry.get("moe_all_to_all")


def test_a_structure_message_quotes_no_count_the_secret_data_decided():
    from autograder.judge.grading import plan_for

    def first(seed):
        (layout, (case, *_)), *_ = plan_for(MOE, seed=seed, quick=True).cases()
        return (layout, tuple(np.shape(a) for a in case.args[:3])), case.args[1]

    seen, pair = {}, None
    for seed in range(1, 200):  # two secret seeds drawing the same first mesh and shapes
        key, routing = first(seed)
        if key in seen and 2 + routing[0] % 5 != 2 + first(seen[key])[1][0] % 5:
            pair = seen[key], seed
            break
        seen.setdefault(key, seed)
    assert pair is not None
    one, two = (check_of(local.grade_function(MOE, counted_gather, seed=s, quick=True,
                                              with_speed=False), "structure") for s in pair)
    assert not one.passed and not two.passed
    assert one.message == two.message, (one.message, two.message)
    msg = one.message
    # where and why: the collective, its axis, what it delivers, what to do instead
    assert "all_gather over 'X'" in msg and "all_to_all" in msg, msg
    assert "in a loop or branch whose count the data decides" in msg, msg
    assert not re.search(r"\bx[0-9]|KiB", msg), msg


def dotted_ring(A, W, mesh):
    """The reference all-gather ring, and beside it a while_loop of [1, 1] dots run as often as
    the device's first value of A says (no collective inside: the devices need not agree): the
    structure passes, and its message must not count those dots."""
    ny = mesh.shape["Y"]

    def per_device(a, w):
        me = jax.lax.axis_index("Y")
        width = a.shape[1]
        to_left = [(k, (k - 1) % ny) for k in range(ny)]

        def partial(a_held, step):
            rows = jax.lax.dynamic_slice_in_dim(w, ((me + step) % ny) * width, width, axis=0)
            return a_held @ rows

        def body(step, carry):
            acc, a_held = carry
            return acc + partial(a_held, step), jax.lax.ppermute(a_held, "Y", perm=to_left)

        acc = jax.lax.pcast(jnp.zeros((a.shape[0], w.shape[1]), a.dtype), ("X", "Y"),
                            to="varying")
        acc, a_last = jax.lax.fori_loop(0, ny - 1, body, (acc, a), unroll=True)
        trips = 1 + (jnp.abs(a[0, 0]) * 1000).astype(jnp.int32) % 7
        _, s = jax.lax.while_loop(lambda c: c[0] < trips,
                                  lambda c: (c[0] + 1, c[1] + a[:1, :1] @ a[:1, :1].T),
                                  (jnp.int32(0), jnp.zeros_like(a[:1, :1])))
        return acc + partial(a_last, ny - 1) + 0.0 * s

    return jax.shard_map(per_device, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)


def test_a_structure_pass_counts_no_dot_the_secret_data_decided():
    from autograder.judge.grading import plan_for

    problem = registry.get("matmul_allgather")

    def shapes(seed):  # the message covers every mesh: all cases' shapes must match
        return tuple((layout, tuple(np.shape(a) for a in case.args[:2]))
                     for layout, cases in plan_for(problem, seed=seed, quick=True).cases()
                     for case in cases)

    seen, pair = {}, None
    for seed in range(1, 400):  # two secret seeds drawing the same meshes and shapes
        if shapes(seed) in seen:
            pair = seen[shapes(seed)], seed
            break
        seen[shapes(seed)] = seed
    assert pair is not None
    one, two = (check_of(local.grade_function(problem, dotted_ring, seed=s, quick=True,
                                              with_speed=False), "structure") for s in pair)
    assert one.passed and two.passed, (one.message, two.message)
    assert one.message == two.message, (one.message, two.message)
    assert "enough partial matmuls" in one.message, one.message
    # the ring's own ppermutes run a count the program fixes: their bytes are still quoted
    assert re.search(r"on mesh 2x4: \d+ B sent per device \(budget", one.message), one.message


def counted_roll(A, shift, mesh):
    """roll_diff, and beside it a while_loop of small matmuls run as often as the device's first
    value of A says: the speed case's modeled time follows a secret input, and a message that
    quoted it (or its ratio) would read that input back."""
    def body(block):
        trips = (jnp.abs(block[0, 0]) * 1000).astype(jnp.int32) % 13
        _, s = jax.lax.while_loop(lambda c: c[0] < trips,
                                  lambda c: (c[0] + 1, c[1] + block @ block.T),
                                  (jnp.int32(0), 0.0 * (block @ block.T)))
        return jnp.roll(block, shift, axis=0) - block + 0.0 * jnp.sum(s)

    return jax.shard_map(body, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))(A)


def test_a_speed_message_is_the_same_under_any_secret_seed():
    """The speed case is drawn from the secret seed: the message of a program whose loop count
    follows its values says pass or fail there, and quotes figures only from public inputs of
    the same shapes (the same in every grading run)."""
    problem = registry.get("roll_diff")
    one, two = (check_of(local.grade_function(problem, counted_roll, seed=s, quick=True),
                         "speed") for s in (1, 2))
    assert one.message == two.message, (one.message, two.message)
    assert "not quoted" in one.message and "on public inputs of the same shapes" in one.message
    assert re.search(r"modeled on TPU \w+: yours [\d.]+ us vs jit baseline [\d.]+ us "
                     r"\(ratio [\d.]+\)", one.message), one.message
