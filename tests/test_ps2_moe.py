"""ps2_moe: references, rules, and the grader's verdicts on varied submissions.

Correct answers written differently from the reference must get full marks; each wrong one
must fail the named check for the right reason. No timing assertions (with_speed=False).
"""
from __future__ import annotations

import functools
from pathlib import Path

from autograder.core.devices import setup_devices

setup_devices()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P

from autograder.core import loader
from autograder.core.meshes import make_mesh  # noqa: E402
from autograder.core.program import trace  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.course.references import ps2_moe as ref  # noqa: E402
from autograder.course.rules import moe as rules_moe  # noqa: E402
from autograder.judge import grading
from conftest import graded

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures" / "ps2_moe"
NAMES = ("moe_local", "moe_jit", "moe_allgather", "moe_all_to_all", "moe_topk")


@functools.lru_cache(maxsize=None)
def _ns(path: str) -> dict:
    return loader.load(path).namespace


def grade(path: Path, name: str, *, quick: bool = True):
    """The shared grading of ``name`` (conftest's ``graded``): the verdict table's (two
    meshes, speed included), or with ``quick=False`` every mesh and edge case (no speed)."""
    return graded(path, name, quick=quick, speed=quick)


def check(res, name):
    return next(c for c in res.checks if c.name == name)


# -- registry and references -----------------------------------------------------------------

def test_registry_entries():
    probs = {p.name: p for p in registry.problems("ps2_moe")}
    assert set(probs) == set(NAMES)
    assert {n: probs[n].points for n in NAMES} == {
        "moe_local": 3, "moe_jit": 2, "moe_allgather": 3, "moe_all_to_all": 5, "moe_topk": 4}
    assert not probs["moe_local"].uses_mesh
    for n in ("moe_local", "moe_all_to_all", "moe_topk"):
        assert "memory" in probs[n].check_names
    for p in probs.values():
        assert "speed" in p.check_names  # every function is timed against a jit baseline


def test_reference_matches_brute_force():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((10, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6, 3)).astype(np.float32)
    b = rng.integers(0, 4, size=(10, 3)).astype(np.int32)
    brute = np.stack([np.mean([a[i] @ w[b[i, j]] for j in range(3)], axis=0) for i in range(10)])
    np.testing.assert_allclose(ref.moe_topk_reference((a, b, w), 1, 1), brute, rtol=1e-5)
    np.testing.assert_allclose(ref.moe_reference((a, b[:, 0], w), 1, 1),
                               np.einsum("sd,sdf->sf", a, w[b[:, 0]]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", [(2, 4), (4, 2), (1, 8), (8, 1)])
def test_cases_fit_the_mesh(layout):
    x, y = layout
    rng = np.random.default_rng(0)
    for _ in range(5):
        for maker in (ref.moe_case, ref.moe_topk_case):
            a, b, w = maker(rng, x, y, "grade")
            assert a.shape[0] % x == 0 and a.shape[1] % y == 0 and w.shape[2] % y == 0
            assert w.shape[0] % x == 0 and b.dtype == np.int32
            assert b.min() >= 0 and b.max() < w.shape[0] and b.shape[0] == a.shape[0]
    edges = ref.moe_edge_cases(np.random.default_rng(0), x, y)
    es = [w.shape[0] for _, _, w in edges]
    assert x in es and 3 * x in es  # E == X and several experts per X-group
    assert any(len(np.unique(b)) == 1 for _, b, _ in edges)  # all tokens to one expert
    assert sum(len(np.unique(b)) < w.shape[0] for _, b, w in edges) >= 2  # empty experts
    ks = {b.shape[1] for _, b, _ in ref.moe_topk_edge_cases(np.random.default_rng(0), x, y)}
    assert 1 in ks and max(ks) > 1


def test_big_cases_make_the_naive_buffers_dominate():
    rng = np.random.default_rng(0)
    a, b, w = ref.moe_local_case(rng, 2, 4, "memory")
    s, d = a.shape
    e, _, f = w.shape
    assert s * d * f >= 16 * e * s * (d + f)  # [S, D, F] far above sorted expert buffers
    a, b, w = ref.moe_case(rng, 8, 1, "memory")
    assert a.nbytes >= 32 * 2 ** 20  # an all-gathered A is the biggest thing around
    assert a.nbytes > 100 * w.nbytes / 8


# -- structure rules on hand-made programs ---------------------------------------------------

def _program(fn, layout, topk=False):
    x, y = layout
    mesh = make_mesh(x, y)
    maker = ref.moe_topk_case if topk else ref.moe_case
    args = maker(np.random.default_rng(0), x, y, "small")
    specs = registry.get("moe_topk" if topk else "moe_all_to_all").in_specs
    placed = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip(args, specs)]
    return trace(functools.partial(fn, mesh=mesh), placed), mesh, args


def test_input_shapes_read_from_jaxpr():
    fn = _ns(str(ROOT / "solutions" / "ps2_moe.py"))["moe_all_to_all"]
    prog, _, (a, b, w) = _program(fn, (2, 4))
    shapes = rules_moe.input_shapes(prog)
    assert [s for _, s in shapes] == [a.shape, b.shape, w.shape]


def test_chunked_gather_in_a_while_loop_is_flagged():
    """Gathering rows over X piece by piece inside a loop is still an all-gather of A."""
    def sneaky(A, B, W, mesh):
        def local(a, b, w):
            a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)
            n = jax.lax.pmax(b.shape[0] + jnp.max(b) * 0, "X")
            def body(c):
                i, acc = c
                rows = jax.lax.all_gather(jax.lax.dynamic_slice_in_dim(a, 0, 1), "X",
                                          tiled=True)
                _ = jax.lax.all_to_all(rows, "X", 0, 0, tiled=True)
                return i + 1, acc + rows.sum() * 0
            _, acc = jax.lax.while_loop(lambda c: c[0] < n, body, (jnp.int32(0), 0.0))
            return jnp.zeros((a.shape[0], w.shape[2])) + acc
        return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P("X"), P("X", None, "Y")),
                             out_specs=P("X", "Y"), check_vma=False)(A, B, W)

    prog, mesh, _ = _program(sneaky, (2, 4))
    res = rules_moe.no_activation_gather_over_x(prog, mesh, None)
    assert not res.passed and "all_gather over 'X'" in res.message
    prog1, mesh1, _ = _program(sneaky, (1, 8))
    assert rules_moe.no_activation_gather_over_x(prog1, mesh1, None) is None  # no X to cross


def test_moe_local_runs_on_one_device():
    p = registry.get("moe_local")
    case = p.case(np.random.default_rng(0), 2, 4, "grade")
    placed = grading.place_args(p, case, make_mesh(2, 4))
    assert all(len(v.sharding.device_set) == 1 for v in placed)


# -- grading submissions ---------------------------------------------------------------------

@pytest.mark.parametrize("path", [ROOT / "solutions" / "ps2_moe.py"])
def test_reference_solutions_full_marks(path):
    for name in NAMES:
        res = grade(path, name)
        assert res.score == res.max_score, (name, [c.message for c in res.checks])


@pytest.mark.parametrize("path,quick", [(FIX / "alt_loops.py", True),
                                        (FIX / "alt_ragged.py", False),
                                        (FIX / "alt_flag_loop.py", False)])
def test_alternative_correct_answers_full_marks(path, quick):
    """Right answers pass every check but speed (alt_ragged and alt_flag_loop on every layout
    and edge case; alt_loops, slow to compile, on two layouts): their speed verdicts, each the
    program's own, are the verdict table's."""
    defined = [n for n in NAMES if _ns(str(path)).get(n) is not None]
    assert defined
    for name in defined:
        res = grade(path, name, quick=quick)
        assert all(c.passed for c in res.checks if c.name != "speed"), \
            (name, [c.message for c in res.checks])


@pytest.mark.parametrize("path", [FIX / "wrong_local_gather.py"])
def test_local_gather_of_weights_fails_memory(path):
    res = grade(path, "moe_local")
    assert check(res, "numerics").passed
    mem = check(res, "memory")
    assert not mem.passed and "[S, D, F]" in mem.message


@pytest.mark.parametrize("path", [FIX / "wrong_ignore_owner.py"])
def test_ignoring_the_expert_owner_fails_numerics(path):
    res = grade(path, "moe_all_to_all")
    num = check(res, "numerics")
    assert not num.passed and "values differ" in num.message


@pytest.mark.parametrize("path", [FIX / "wrong_a2a_gathers.py"])
def test_all_to_all_that_all_gathers_fails_structure(path):
    for name in ("moe_all_to_all", "moe_topk"):
        res = grade(path, name)
        assert check(res, "numerics").passed
        st = check(res, "structure")
        assert not st.passed and "all_gather over 'X'" in st.message
        assert not check(res, "memory").passed


@pytest.mark.parametrize("path", [FIX / "wrong_padded_exchange.py"])
def test_exchange_padded_to_s_fails_memory(path):
    res = grade(path, "moe_all_to_all")
    assert check(res, "numerics").passed and check(res, "structure").passed
    mem = check(res, "memory")
    assert not mem.passed and "all-gathered copy of A" in mem.message


@pytest.mark.parametrize("path", [FIX / "wrong_compensated_gather.py"])
def test_words_cancelling_a_linear_checksum_leave_the_exchange_rule_seeing(path):
    """The all-gather in all_to_all's clothing that appends, to each slot, the word cancelling
    the slot's share of a checksum linear in the received bits (public odd weights per
    position): its slots do add 0 to that checksum (the attack's premise), and the perturbed
    rerun, comparing keyed non-linear digests, still sees what the groups receive: structure
    fails with the rule's message (the attack had 4.32/5 and 3.45/4 against the linear one)."""
    compensated, golden = _ns(str(path))["_compensated"], _ns(str(path))["GOLDEN"]
    rows = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    rows[1, 1] = -0.0
    for nx, gx in ((2, 1), (4, 3)):
        slot = np.asarray(compensated(jnp.asarray(rows), nx, jnp.int32(gx)))[0]
        bits = slot.view(np.uint32).reshape(-1).astype(np.uint64)
        bits[bits == 0x80000000] = 0
        pos = gx * slot.size + np.arange(slot.size, dtype=np.uint64)
        weights = ((2 * pos + 1) * golden) % 2**32
        assert int(np.sum((bits * weights) % 2**32)) % 2**32 == 0
        np.testing.assert_array_equal(slot[:5], rows)
    for name in ("moe_all_to_all", "moe_topk"):
        res = grade(path, name)
        assert check(res, "numerics").passed, res.report()
        st = check(res, "structure")
        assert not st.passed and "only the tokens routed to its experts" in st.message, \
            st.message


@pytest.mark.parametrize("path", [FIX / "wrong_one_round.py"])
def test_one_round_without_a_loop_fails_the_many_rounds_edge_case(path):
    """Every small random case fits in one round of 128; the edge case with 320 tokens per
    X-group does not, in the hidden grade and in the public self-check alike."""
    from autograder.public import check as public

    assert check(grade(path, "moe_all_to_all", quick=True), "numerics").passed
    num = check(grade(path, "moe_all_to_all", quick=False), "numerics")
    assert not num.passed and "edge case" in num.message, num.message
    with pytest.raises(AssertionError, match="edge case"):
        public.check("moe_all_to_all", _ns(str(path))["moe_all_to_all"], verbose=False,
                     big=False)


def test_topk_sum_fails_numerics_through_cli():
    from autograder.cli.main import grade_path

    res = grade_path(FIX / "wrong_topk_sum.py", "ps2_moe", quick=True, with_speed=False)
    d = res.to_dict()
    topk = d["functions"]["moe_topk"]
    num = next(c for c in topk["checks"] if c["name"] == "numerics")
    assert not num["passed"] and "values differ" in num["message"]
    assert topk["score"] == 0
    assert d["functions"]["moe_local"]["score"] == 0  # not in the file: "not found"


@pytest.mark.parametrize("path", [FIX / "wrong_big_inputs.py"])
def test_big_inputs_get_the_same_work(path):
    """The memory and speed cases have public shapes: a function that returns zeros for big
    inputs fails both for computing the wrong answer there, after passing the numerics."""
    res = grade(path, "moe_local")
    assert check(res, "numerics").passed
    for name in ("memory", "speed"):
        c = check(res, name)
        assert not c.passed and "does not compute the answer" in c.message, c.message


@pytest.mark.parametrize("path,name", [
    (ROOT / "solutions" / "ps2_moe.py", "moe_local"),
    (ROOT / "solutions" / "ps2_moe.py", "moe_topk"),
    (FIX / "wrong_padded_exchange.py", "moe_all_to_all"),
])
def test_memory_profile_shows_the_graders_figure_and_bound(path, name):
    """The notebook's memory_profile compiles at the grader's memory case and states the
    grader's bound: the same MiB figure and the same verdict as the hidden memory check."""
    import re

    from autograder.public.tools import memory_profile

    prof = memory_profile(name, _ns(str(path))[name])
    mem = check(grade(path, name), "memory")
    mib = [float(v) for v in re.findall(r"([0-9.]+) MiB", mem.message)]
    assert f"{prof.temp_bytes / 2**20:.2f}" in {f"{v:.2f}" for v in mib}, (prof, mem.message)
    assert f"{prof.bound / 2**20:.2f}" in {f"{v:.2f}" for v in mib}, (prof, mem.message)
    assert prof.passes == mem.passed
    assert ("within" if mem.passed else "OVER") in prof.text()


def test_unrouted_perturbations_redraw_only_tokens_a_group_must_not_receive():
    """For each X-group g: A with exactly the rows of tokens living outside g and routed to
    none of g's experts drawn afresh (their devices are g's row of the mesh)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 4)).astype(np.float32)
    b = np.array([[0, 1], [2, 3], [0, 0], [1, 1], [2, 2], [3, 3], [0, 3], [1, 2]], np.int32)
    w = np.zeros((4, 4, 2), np.float32)  # 2 X-groups: experts {0, 1} and {2, 3}
    got = rules_moe.unrouted_perturbations((a, b, w), (2, 3))
    assert [devices for devices, _ in got] == [(0, 1, 2), (3, 4, 5)]
    for (devices, changes), redrawn in zip(got, ([4, 5], [0, 2, 3])):
        new = changes[0]
        changed = np.flatnonzero(np.any(new != a, axis=1)).tolist()
        assert changed == redrawn, (devices, changed)
    assert rules_moe.unrouted_perturbations((a, b, w), (1, 6)) == []


@pytest.mark.orchestration
def test_received_changed_rule_reads_the_readers_measure():
    """all_to_all_carries_only_routed_tokens: not applicable unmeasured (or on one X-group),
    passes when nothing changed, fails saying what to do when something did."""
    from types import SimpleNamespace

    from autograder.core.program import Program

    rule = rules_moe.all_to_all_carries_only_routed_tokens
    prog = Program(ops=[], jaxpr_text="")
    mesh = SimpleNamespace(shape={"X": 2, "Y": 4})
    assert rule(prog, mesh, None) is None
    prog.received_changed = False
    assert rule(prog, mesh, None).passed
    assert rule(prog, SimpleNamespace(shape={"X": 1, "Y": 8}), None) is None
    prog.received_changed = True
    res = rule(prog, mesh, None)
    assert not res.passed and "only the tokens routed to its experts" in res.message



def _received_changed(path, name, layout=(2, 4)):
    """The reader's perturbed rerun (:func:`autograder.course.reading.read_paths` given
    :func:`rules_moe.unrouted_perturbations`) of ``name`` in ``path`` on a 'grade' case."""
    from autograder.core.compiling import FAST_CPU_COMPILE, runner
    from autograder.course.reading import export_for_reading, perturbations_of, read_paths

    prob = registry.get(name)
    mesh = make_mesh(*layout)
    args = prob.case(np.random.default_rng(1), *layout, "grade").args
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, prob.in_specs)]
    fn = functools.partial(_ns(str(path))[name], mesh=mesh)
    exported, dynamic = export_for_reading(fn, placed)
    rules = (rules_moe.all_to_all_carries_only_routed_tokens,)
    paths = read_paths(exported, mesh, "", dynamic, args, run=runner(FAST_CPU_COMPILE),
                       perturbations=perturbations_of(rules))
    assert paths.error is None, paths.error
    return {prog.received_changed for _, prog in paths.programs}


def test_perturbed_rerun_tells_the_exchange_from_an_all_gather_in_its_clothing():
    """An honest exchange delivers a group the same bits when only tokens it must not receive
    change; the all-gather written as all_to_all rounds (tests/fixtures/attacks) does not.
    (The rule is not among the registry's: an exchange leaving copies of other rows in its
    padding slots fails it too; see all_to_all_carries_only_routed_tokens.)"""
    attack = ROOT / "tests" / "fixtures" / "attacks" / "moe_a2a_gather.py"
    assert _received_changed(ROOT / "solutions" / "ps2_moe.py", "moe_all_to_all") == {False}
    assert _received_changed(attack, "moe_all_to_all", (4, 2)) == {True}
