"""Tests for ps3_collective_matmul and ps4_bidirectional: references, ring rules, fixtures.

Run: /work/main/.venv/bin/python -m pytest -q tests/test_ps3_ps4.py
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

import numpy as np
import pytest

from autograder.core.devices import setup_devices

setup_devices()

from autograder.core.loader import load  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.supervisor import local
from conftest import SEED, graded

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures"
PS3 = ("matmul_allgather", "matmul_allreduce", "matmul_reducescatter", "mlp_block")
PS4 = ("matmul_allgather_bidirectional", "matmul_allreduce_bidirectional",
       "matmul_reducescatter_bidirectional")


def _ns(path: Path) -> dict:
    return load(path).namespace


def _grade(name, fn, quick):
    return local.grade_function(registry.get(name), fn, quick=quick, with_speed=False,
                                seed=SEED)


def _check(res, name):
    return next(c for c in res.checks if c.name == name)


# -- registry and references -------------------------------------------------------------

def test_registry_entries():
    assert {p.name for p in registry.problems("ps3_collective_matmul")} == set(PS3)
    assert {p.name for p in registry.problems("ps4_bidirectional")} == set(PS4)
    for name in PS3 + PS4:
        p = registry.get(name)
        assert p.baseline is not None and p.rules and p.points > 0
        assert p.threshold("tpu") <= 1.3 and p.threshold("tpu_model") <= 1.3
    assert registry.get("matmul_allgather").threshold("tpu") < 1.0


@pytest.mark.parametrize("module", sorted(p.stem for p in (ROOT / "autograder" / "references")
                                           .glob("ps*.py")))
def test_references_import_only_numpy(module):
    """The public self-check bundles these modules alone: NumPy is all they may import."""
    tree = ast.parse((ROOT / "autograder" / "references" / f"{module}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    assert names == {"numpy"}


@pytest.mark.parametrize("layout", [(2, 4), (4, 2), (1, 8), (8, 1)])
def test_cases_divide_evenly_and_references_match_numpy(layout):
    x, y = layout
    rng = np.random.default_rng(1)
    for name in PS3 + PS4:
        p = registry.get(name)
        for size in ("small", "grade"):
            args = p.case(rng, x, y, size).args
            lhs = args[0]
            assert lhs.shape[0] % (2 * x) == 0 and lhs.shape[1] % (2 * y) == 0
            for w in args[1:]:
                assert w.shape[0] % y == 0 and w.shape[1] % (2 * y) == 0
            want = lhs @ args[1]
            if name == "mlp_block":
                want = np.maximum(want, 0) @ args[2]
            np.testing.assert_allclose(p.reference(args, x, y), want, rtol=1e-4, atol=1e-4)


# -- full marks for correct answers ------------------------------------------------------

@pytest.mark.parametrize("path,names", [("solutions/ps3_collective_matmul.py", PS3),
                                        ("solutions/ps4_bidirectional.py", PS4)])
def test_reference_solutions_full_marks_on_every_layout(path, names):
    for name in names:
        res = graded(path, name, quick=False, speed=False)  # 2x4, 4x2, 1x8, 8x1, edge cases
        assert res.score == res.max_score, res.report()
        assert "1x8" in _check(res, "numerics").message
        assert "8x1" in _check(res, "numerics").message


@pytest.mark.parametrize("fixture,names", [
    ("ps3/alt_correct_a.py", PS3),  # right-turning ring, fori/while loops, check_vma=False
    ("ps3/alt_correct_b.py", PS3),  # psum(1) axis size, ppermute all-reduce ring, while_loop
    ("ps4/alt_correct.py", PS4),  # whole blocks both ways, halves along rows, fori_loop
])
def test_alternative_correct_answers_full_marks(fixture, names):
    for name in names:
        res = graded(FIX / fixture, name, quick=False, speed=False)
        assert res.score == res.max_score, res.report()


# -- named failures ----------------------------------------------------------------------

WRONG = [
    ("ps3/monolithic_allgather.py", "matmul_allgather", "structure", "all_gather"),
    ("ps3/single_psum.py", "matmul_allreduce", "structure", "one psum"),
    ("ps3/psum_scatter.py", "matmul_reducescatter", "structure", "psum_scatter"),
    ("ps3/fullwidth_ring.py", "matmul_reducescatter", "structure", "[B/X, D/Y]"),
    # a wrong ring index: every block wrong, said in the output's blocks (issue 54)
    ("ps3/wrong_order.py", "matmul_allgather", "numerics", "wrong in every one of the 8 blocks"),
    # ... and the steps that pair a block with the wrong rows, quoted from the public twin
    ("ps3/wrong_order.py", "matmul_allgather", "numerics",
     "by ring step (A's blocks move j -> j-1, so device d holds A's block d+s at step s): "
     "steps 1 and 3 are wrong on every device, on Y=0: step 1 multiplies A's block 1 by W's "
     "rows of block 3 (not 1)"),
    ("ps3/hardcoded_axis.py", "matmul_allgather", "numerics", "4x2"),
    ("ps3/no_relu.py", "mlp_block", "numerics", "differ"),
    ("ps4/one_direction.py", "matmul_reducescatter_bidirectional", "structure",
     "both ring directions"),
    ("ps4/one_direction.py", "matmul_allgather_bidirectional", "structure",
     "both ring directions"),
    # right only on the devices at Y=0: the host reads one copy of a replicated output
    ("ps4/device0_placement.py", "matmul_allreduce_bidirectional", "numerics", "disagree"),
]


@pytest.mark.parametrize("fixture,name,check,words", WRONG,
                         ids=[f"{w[0]}::{w[1]}" for w in WRONG])
def test_wrong_answers_fail_the_named_check(fixture, name, check, words):
    """The verdict table's grading (two meshes, speed included), read for its words."""
    res = graded(FIX / fixture, name)
    failed = [c for c in res.checks if not c.passed]
    assert failed and failed[0].name == check, res.report()
    assert words in failed[0].message, failed[0].message
    assert res.score < res.max_score
    if check != "numerics":
        assert _check(res, "numerics").passed


def test_the_self_check_reads_every_copy_of_a_replicated_output(capsys):
    """The public check, like the grader, compares the copies each device holds, not only the
    one the host reads. Its report is printed once: the exception a notebook shows after it
    names the failed check, not the message again (this check's run is the cheapest failing
    one at hand, one mesh and no big cases)."""
    from autograder.public import check as public

    fn = _ns(FIX / "ps4/device0_placement.py")["matmul_allreduce_bidirectional"]
    with pytest.raises(AssertionError, match="disagree: the one at X=0, Y=1") as failure:
        public.check("matmul_allreduce_bidirectional", fn, layouts=((2, 4),), big=False)
    out = capsys.readouterr().out
    assert out.count("disagree: the one at X=0, Y=1") == 1, out
    shown = failure.value._render_traceback_()
    assert shown == ["check failed: numerics (the FAILED line above says what was found and "
                     "where)"], shown


def test_a_wrong_ring_index_in_ps4_names_the_wrong_blocks():
    """Issue 54: a two-way reduce-scatter whose turning-right sums start one block late ends
    every left half one device off: every value of those halves differs, and the self-check
    says which output block's half holds which block's (one mesh, one case, no big cases: the
    cheapest run that shows it)."""
    import importlib.util

    from autograder.public import check as public

    spec = importlib.util.spec_from_file_location("ps4_ref", ROOT / "solutions" /
                                                  "ps4_bidirectional.py")
    source = spec.loader.get_source("ps4_ref")
    wrong = source.replace("b_r = (me - 1 - step) % ny", "b_r = (me - step) % ny")
    assert wrong != source
    ns: dict = {}
    exec(compile(wrong, "wrong_index.py", "exec"), ns)
    results = public.run_checks("matmul_reducescatter_bidirectional",
                                ns["matmul_reducescatter_bidirectional"], layouts=((2, 4),),
                                cases=1, big=False, edges=False)
    numerics = next(r for r in results if r.name == "numerics")
    assert not numerics.passed
    assert "wrong in every one of the 8 blocks" in numerics.message, numerics.message
    assert "(X=0, Y=1) (its first half of columns holds that of" in numerics.message, \
        numerics.message
    assert "its second half of columns is right" in numerics.message, numerics.message
    assert ("every step is wrong on every device, on Y=0: step 0 adds device Y=1's share of "
            "block 1's left half (not of block 0)") in numerics.message, numerics.message
    assert numerics.message.count("\n") == 0


def test_a_wrong_ring_index_names_the_wrong_steps():
    """Issue 54: a ring whose W-row index is me - step where me + step is meant (the fixture
    wrong_order) is wrong in every value; the self-check names the steps that pair a block of
    A with the wrong rows of W, counted as the notebook's ring counts them."""
    from autograder.public import check as public

    fn = _ns(FIX / "ps3/wrong_order.py")["matmul_allgather"]
    results = public.run_checks("matmul_allgather", fn, layouts=((2, 4),), cases=1,
                                big=False, edges=False)
    numerics = next(r for r in results if r.name == "numerics")
    assert ("steps 1 and 3 are wrong on every device, on Y=0: step 1 multiplies A's block 1 "
            "by W's rows of block 3 (not 1), step 3 multiplies A's block 3 by W's rows of "
            "block 1 (not 3)") in numerics.message, numerics.message


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_steps_are_told_from_the_values(n):
    """The ring-step stories on NumPy alone: a left-out last step, a block index one ahead at
    every step, and nothing said of a right answer or of values no ring mistake explains."""
    from autograder.course.references import ps3_collective_matmul as ref

    rng = np.random.default_rng(n)
    a, w = ref.allgather_case(rng, 2, n, "small")
    d, f = a.shape[1] // n, w.shape[1] // n
    want = ref.matmul_reference((a, w), 2, n)
    got = np.zeros_like(want)
    for y in range(n):
        for s in range(n - 1):  # the last step forgotten
            h = (y + s) % n
            got[:, y * f:(y + 1) * f] += a[:, h * d:(h + 1) * d] @ w[h * d:(h + 1) * d,
                                                                    y * f:(y + 1) * f]
    said = ref.allgather_steps((a, w), got, want, 2, n, 1e-4, 1e-4)
    assert f"step {n - 1} is wrong on every device, on Y=0: step {n - 1} leaves out A's block " \
        f"{n - 1}" in said, said
    assert ref.allgather_steps((a, w), want, want, 2, n, 1e-4, 1e-4) == ""
    assert ref.allgather_steps((a, w), want + 1, want, 2, n, 1e-4, 1e-4) == ""
    t, w2 = ref.reducescatter_case(rng, 2, n, "small")
    f, d = t.shape[1] // n, w2.shape[1] // n
    want = ref.matmul_reference((t, w2), 2, n)
    got = np.zeros_like(want)
    for y in range(n):
        for s in range(n):
            k = (y + 1 + s) % n  # the device the sum ending on y visits at step s
            b = (k - s) % n  # my_block one ahead: k - s where k - 1 - s is meant
            got[:, y * d:(y + 1) * d] += t[:, k * f:(k + 1) * f] @ w2[k * f:(k + 1) * f,
                                                                      b * d:(b + 1) * d]
    said = ref.reducescatter_steps((t, w2), got, want, 2, n, 1e-4, 1e-4)
    assert ("every step is wrong on every device, on Y=0: step 0 adds device Y=1's share of "
            "block 1 (not of block 0)") in said, said


def test_big_inputs_get_the_same_work():
    """A ring that drops its communication once inputs reach the (public) speed shape passes
    numerics, sharding and structure, and fails speed for computing the wrong answer there."""
    res = local.grade_function(registry.get("matmul_allgather"),
                                 _ns(FIX / "ps3" / "wrong_big_inputs.py")["matmul_allgather"],
                                 quick=True, seed=SEED)
    assert [c.name for c in res.checks if not c.passed] == ["speed"], res.report()
    assert "does not compute the answer" in _check(res, "speed").message


def test_ps3_answer_is_not_bidirectional():
    """A unidirectional ps3 ring graded as its ps4 twin fails on structure."""
    ns = _ns(ROOT / "solutions" / "ps3_collective_matmul.py")
    res = _grade("matmul_reducescatter_bidirectional", ns["matmul_reducescatter"], quick=True)
    assert not _check(res, "structure").passed
    assert "both ring directions" in _check(res, "structure").message


# -- the rule itself on traced programs --------------------------------------------------

def _trace(fn, layout, name):
    import jax
    from jax.sharding import NamedSharding

    from autograder.core.meshes import make_mesh
    from autograder.core.program import trace

    p = registry.get(name)
    mesh = make_mesh(*layout)
    args = p.case(np.random.default_rng(0), *layout, "small").args
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, p.in_specs)]
    return trace(functools.partial(fn, mesh=mesh), placed), mesh, p


def _while_ring_allgather(A, W, mesh, *, dynamic_bound):
    """An all-gather ring in a while_loop; its bound may be a traced value (count unknown)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    n = mesh.shape["Y"]

    def local(a, w):
        me = jax.lax.axis_index("Y")
        k = a.shape[1]
        bound = (me * 0 + n) if dynamic_bound else n

        def body(c):
            i, acc, held = c
            acc = acc + held @ jax.lax.dynamic_slice_in_dim(w, ((me + i) % n) * k, k, 0)
            return i + 1, acc, jax.lax.ppermute(held, "Y", [(j, (j - 1) % n) for j in range(n)])

        acc = jnp.zeros((a.shape[0], w.shape[1]), a.dtype)
        return jax.lax.while_loop(lambda c: c[0] < bound, body, (0, acc, a))[1]

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"), check_vma=False)(A, W)


def test_while_loop_trip_counts_are_read_or_measured_never_guessed():
    known = functools.partial(_while_ring_allgather, dynamic_bound=False)
    prog, mesh, p = _trace(known, (2, 4), "matmul_allgather")
    assert {o.count for o in prog.ops if o.prim in ("ppermute", "dot_general")} == {4}
    assert p.rules[0](prog, mesh, p).passed

    # a bound the jaxpr cannot read: read symbolically, the rule refuses to pass on it ...
    unknown = functools.partial(_while_ring_allgather, dynamic_bound=True)
    prog, mesh, p = _trace(unknown, (2, 4), "matmul_allgather")
    assert any(o.count is None for o in prog.ops if o.prim == "ppermute")
    res = p.rules[0](prog, mesh, p)
    assert not res.passed and "a known number of steps" in res.message
    # ... and read as the grader and the self-check read it (counted on a run), it passes
    import jax
    from jax.sharding import NamedSharding

    from autograder.course.reading import export_for_reading, read_paths

    args = p.case(np.random.default_rng(0), 2, 4, "small").args
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, p.in_specs)]
    f = functools.partial(unknown, mesh=mesh)
    exported, dynamic = export_for_reading(f, placed)
    paths = read_paths(exported, mesh, "", dynamic, args)
    assert paths.error is None and len(paths.programs) == 1
    measured = paths.programs[0][1]
    assert {o.count for o in measured.ops if o.prim in ("ppermute", "dot_general")} == {4}
    assert p.rules[0](measured, mesh, p).passed


def test_while_trip_count_forms():
    """Counting down, <=, != and steps other than one are read from the jaxpr."""
    import jax
    import jax.numpy as jnp

    from autograder.core.program import flatten

    def counts(f):
        jaxpr = jax.make_jaxpr(f)(jnp.ones(3))
        return {o.count for o in flatten(jaxpr.jaxpr) if o.prim == "sin"}

    down = lambda x: jax.lax.while_loop(lambda c: c[0] > 0,
                                        lambda c: (c[0] - 1, jnp.sin(c[1])), (5, x))[1]
    le = lambda x: jax.lax.while_loop(lambda c: c[0] <= 6,
                                      lambda c: (c[0] + 2, jnp.sin(c[1])), (0, x))[1]
    ne = lambda x: jax.lax.while_loop(lambda c: 9 != c[0],
                                      lambda c: (c[0] + 3, jnp.sin(c[1])), (0, x))[1]
    fori = lambda x: jax.lax.fori_loop(2, 7, lambda i, v: jnp.sin(v), x)
    assert counts(down) == {5}
    assert counts(le) == {4}
    assert counts(ne) == {3}
    assert counts(fori) == {5}


def test_no_communication_with_one_device_on_y():
    ns = _ns(ROOT / "solutions" / "ps4_bidirectional.py")
    prog, mesh, p = _trace(ns["matmul_reducescatter_bidirectional"], (8, 1),
                           "matmul_reducescatter_bidirectional")
    assert not [o for o in prog.collectives() if o.count != 0]
    assert p.rules[0](prog, mesh, p).passed


# -- through the command line ------------------------------------------------------------

def test_cli_grades_a_fixture_to_json():
    from autograder.cli.main import grade_path

    res = grade_path(FIX / "ps3" / "single_psum.py", "ps3_collective_matmul", quick=True,
                     with_speed=False).to_dict()
    assert res["assignment"] == "ps3_collective_matmul"
    fn = res["functions"]["matmul_allreduce"]
    assert 0 < fn["score"] < fn["max_score"]
    assert [c["name"] for c in fn["checks"] if not c["passed"]] == ["structure"]
    assert res["functions"]["matmul_allgather"]["score"] == 0  # not defined in that file


def test_an_extra_send_fails_on_every_draw_and_at_home():
    """A ring that sends one block more than it needs fails structure whatever the block size:
    the byte slack is a fraction of a block, never an absolute number of bytes a small block
    could hide in. The self-check gives the grader's message."""
    from conftest import check_of, grade, load_fixture

    from autograder.public import check as public

    for seed in range(6):
        res = grade("ps3", "send_every_step", "matmul_reducescatter", seed=seed, quick=True)
        assert check_of(res, "numerics").passed, res.report()
        st = check_of(res, "structure")
        assert not st.passed and "Y-1 = " in st.message, (seed, st.message)
    fn = load_fixture("ps3", "send_every_step").function("matmul_reducescatter")
    for seed in range(3):
        with pytest.raises(AssertionError, match="structure: send only output-block"):
            public.check("matmul_reducescatter", fn, cases=1, verbose=False, seed=seed,
                         big=False)


def test_a_two_way_ring_with_an_extra_hop_fails_on_every_draw_and_at_home():
    """ps4's newcomer ring: both directions add and send on every step, the last included.
    Right values, one output block too many sent: the grader fails its structure on every
    seed, and the self-check fails it with the grader's message."""
    from conftest import check_of, grade, load_fixture

    from autograder.public import check as public

    name = "matmul_reducescatter_bidirectional"
    for seed in range(4):
        res = grade("ps4", "send_every_step", name, seed=seed, quick=True)
        assert check_of(res, "numerics").passed, res.report()
        st = check_of(res, "structure")
        assert not st.passed and "Y-1 = " in st.message, (seed, st.message)
    fn = load_fixture("ps4", "send_every_step").function(name)
    for seed in range(2):
        with pytest.raises(AssertionError, match="structure: send only output-block"):
            public.check(name, fn, cases=1, verbose=False, seed=seed, big=False)


def test_the_extra_hop_message_says_what_it_leaves_out():
    """The same newcomer's ring written with a Python for (8 ppermutes in the program on a
    ring of 4): the structure message names 4 of them and says how many more it left out
    (issue 54: it listed 4 of 8 sends against a total of all 8). One mesh, one case, no big
    cases: the cheapest run whose program has more sends than the message names."""
    from autograder.course.rules.ring import SENDS_NAMED
    from autograder.public import check as public

    source = (FIX / "ps4" / "send_every_step.py").read_text()
    unrolled = source.replace(
        "s_r, s_l = jax.lax.fori_loop(0, n, step, (zeros, zeros))",
        "s_r, s_l = zeros, zeros\n        for s in range(n):\n            s_r, s_l = step(s, (s_r, s_l))")
    assert unrolled != source
    ns: dict = {}
    exec(compile(unrolled, "unrolled.py", "exec"), ns)
    results = public.run_checks("matmul_reducescatter_bidirectional",
                                ns["matmul_reducescatter_bidirectional"], layouts=((2, 4),),
                                cases=1, big=False, edges=False)
    structure = next(r for r in results if r.name == "structure")
    assert not structure.passed and "Y-1 = 3" in structure.message, structure.message
    assert structure.message.count("ppermute over Y of [") == SENDS_NAMED, structure.message
    assert f"; and {8 - SENDS_NAMED} more ppermutes)" in structure.message, structure.message


def test_shifts_are_printed_signed():
    from autograder.core.program import signed_shift

    assert [signed_shift(s, 4) for s in (1, 3, 2)] == ["+1", "-1", "+2"]
    assert [signed_shift(s, 8) for s in (7, 6, 4)] == ["-1", "-2", "+4"]
