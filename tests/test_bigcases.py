"""A class graded on one seed draws its memory and speed cases, and computes their NumPy
answers, once (autograder/judge/bigcases.py).

What must hold: a kept case is exactly the case the plan would draw, read back only for the same
grader, NumPy, problem, seed, size and layout, and only if its arrays are the shapes the plan
asked for; a case that cannot be read (a file damaged or missing) is a miss, never an error;
a reader never sees half a case, and two writers of one case leave one; the checks compare with
the kept answer; a fresh secret seed keeps nothing.
"""
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from autograder.core import identity
from autograder.course import registry
from autograder.judge import grading
from autograder.judge.bigcases import BigCaseStore
from autograder.supervisor.local import grade_function
from tools_helpers import reference_answer

ROOT = Path(__file__).resolve().parent.parent


def _plan(name: str, seed: int, store):
    plan = grading.plan_for(registry.get(name), seed=seed, big_cases=store)
    plan.all_requests()
    return plan


def _cases(root: Path) -> list[Path]:
    """The cases kept under ``root`` (one directory each), and nothing else there."""
    kept = sorted(root.iterdir())
    assert all(p.is_dir() and not p.name.startswith(".") for p in kept), kept
    return kept


def _same_case(one, two) -> bool:
    return len(one.args) == len(two.args) and all(
        (isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b))
        or (not isinstance(a, np.ndarray) and type(a) is type(b) and a == b)
        for a, b in zip(one.args, two.args))


@pytest.mark.parametrize("name", ["roll_diff", "moe_topk"])  # a static int; several arrays
def test_a_kept_case_is_the_drawn_case_with_its_answer(tmp_path, name):
    store = BigCaseStore(tmp_path)
    size = "speed"
    alone = _plan(name, 31, None).big_case(size)
    first = _plan(name, 31, store).big_case(size)
    assert not first.from_store and len(_cases(tmp_path)) == 1
    answer = first.expected
    again = _plan(name, 31, store).big_case(size)
    assert again.from_store
    assert _same_case(again.case, alone.case) and again.case.label == alone.case.label
    assert again.layout == alone.layout
    np.testing.assert_array_equal(again.expected, answer)
    np.testing.assert_array_equal(answer, alone.expected)


@pytest.mark.parametrize("name", ["roll_diff", "moe_topk"])
def test_the_speed_cases_public_twin_is_kept_for_the_class(tmp_path, monkeypatch, name):
    """The public twin a speed message quotes is the same for every submission of a class:
    drawn once, then read back (its static values the secret case's, whose request says)."""
    store = BigCaseStore(tmp_path)
    alone = _plan(name, 31, None).public_big("speed")
    first = _plan(name, 31, store).public_big("speed")
    assert _same_case(first, alone) and first.label == alone.label
    problem = registry.get(name)
    drawn = []
    real = type(problem).case
    monkeypatch.setattr(type(problem), "case", lambda self, *a: drawn.append(a) or real(self, *a))
    again = _plan(name, 31, store).public_big("speed")
    assert not drawn, "the twin was drawn again"
    assert _same_case(again, alone) and again.label == alone.label
    other = _plan(name, 32, store).public_big("speed")  # another class's statics may differ
    assert _same_case(other, _plan(name, 32, None).public_big("speed"))


@pytest.mark.parametrize("kept", [False, True], ids=["alone", "class store, a miss"])
def test_the_check_takes_the_case_planning_drew(tmp_path, monkeypatch, kept):
    """Planning draws a big case to read its shapes; the check's case is that draw, not a
    second one (a second draw of ps2's big cases cost about a second of a grading alone),
    and it is the case a fresh plan draws. A second check of the same size draws anew."""
    name, seed = "moe_topk", 11 + kept  # a seed of its own: no plan made before
    fresh = _plan(name, seed, None)
    want = {size: fresh.big(size)[1] for size in fresh.big_sizes()}
    problem = registry.get(name)
    drawn = []
    real = type(problem).case
    monkeypatch.setattr(type(problem), "case",
                        lambda self, *a: drawn.append(a[-1]) or real(self, *a))
    plan = grading.plan_for(problem, seed=seed, id_base=77,  # requests not made before
                            big_cases=BigCaseStore(tmp_path) if kept else None)
    plan.all_requests()
    planned = sorted(d for d in drawn if d in ("memory", "speed"))
    assert planned == ["memory", "speed"]
    for size in ("memory", "speed"):
        big = plan.big_case(size)
        assert _same_case(big.case, want[size]) and big.case.label == want[size].label
        np.testing.assert_array_equal(
            big.expected, np.asarray(problem.reference(want[size].args, *big.layout)))
    assert sorted(d for d in drawn if d in ("memory", "speed")) == planned, "drawn twice"
    again = plan.big_case("speed")  # drawn anew alone, read back from the class's store
    assert again.from_store == kept and _same_case(again.case, want["speed"])


def test_another_seed_grader_or_size_is_a_miss(tmp_path, monkeypatch):
    store = BigCaseStore(tmp_path)
    _plan("moe_all_to_all", 5, store).big_case("speed")  # drawn, answered and kept
    assert _plan("moe_all_to_all", 5, store).big_case("speed").from_store
    assert not _plan("moe_all_to_all", 6, store).big_case("speed").from_store
    assert not _plan("moe_all_to_all", 5, store).big_case("memory").from_store
    assert not _plan("moe_topk", 5, store).big_case("speed").from_store
    monkeypatch.setattr(identity, "grader_hash", lambda: "another grader")
    assert not _plan("moe_all_to_all", 5, store).big_case("speed").from_store


def test_a_kept_case_of_other_shapes_is_not_used(tmp_path):
    store = BigCaseStore(tmp_path)
    plan = _plan("moe_local", 3, store)
    memory = plan.big_case("memory")
    speed_key = store.key("moe_local", 3, "speed", plan.problem.speed_layout)
    # the memory case's arrays under the speed case's key: not what the plan asks for
    store.put(speed_key, memory.case, memory.expected)
    assert store.get(speed_key, plan.big_request("speed")) is None
    assert not plan.big_case("speed").from_store


@pytest.mark.parametrize("name, damage", [
    ("arg0.npy", "truncated"), ("expected.npy", "truncated"), ("arg0.npy", "empty"),
    ("arg0.npy", "not an array"), ("arg0.npy", "missing"), ("meta.json", "truncated"),
    ("meta.json", "not json"), ("meta.json", "another shape"), ("meta.json", "missing")])
def test_an_unreadable_case_is_a_miss(tmp_path, name, damage):
    store = BigCaseStore(tmp_path)
    plan = _plan("roll_diff", 9, store)
    plan.big_case("speed")  # drawn, answered and kept
    (case,) = _cases(tmp_path)
    path = case / name
    data = path.read_bytes()
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                          "not an array": b"x" * 100, "not json": b"{not json",
                          "another shape": b'{"n_args": "1", "statics": [], "label": "x"}'}[damage])
    again = _plan("roll_diff", 9, store).big_case("speed")
    assert not again.from_store
    np.testing.assert_array_equal(again.expected, plan.big_case("speed").expected)
    # drawn again, the case is kept again over the damaged one: read back next time
    assert _plan("roll_diff", 9, store).big_case("speed").from_store
    assert len(_cases(tmp_path)) == 1


def test_two_writers_of_one_case_at_once_leave_one_readable_case(tmp_path):
    store = BigCaseStore(tmp_path)
    plan = _plan("moe_topk", 4, store)
    big = plan.big("speed")[1]
    expected = np.asarray(plan.problem.reference(big.args, *plan.problem.speed_layout))
    key = store.key("moe_topk", 4, "speed", plan.problem.speed_layout)
    start = threading.Barrier(4)

    def write():
        start.wait(timeout=30)
        for _ in range(3):
            store.put(key, big, expected)

    writers = [threading.Thread(target=write) for _ in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    (case,) = _cases(tmp_path)  # and no temporary directory left beside it
    assert case.name == key
    kept = store.get(key, plan.big_request("speed"))
    assert kept is not None and _same_case(kept[0], big)
    np.testing.assert_array_equal(kept[1], expected)


def test_a_case_being_written_is_neither_read_nor_pruned(tmp_path):
    """A writer's temporary directory is skipped by the store until its writer is long gone
    (a dead writer's is pruned); an earlier grader's ``.npz`` files are counted and pruned,
    never read."""
    store = BigCaseStore(tmp_path, cap_bytes=0)
    plan = _plan("roll_diff", 9, store)
    key = store.key("roll_diff", 9, "speed", plan.problem.speed_layout)
    writing = tmp_path / f".{key}.1.2.tmp"
    writing.mkdir()
    (writing / "arg0.npy").write_bytes(b"x" * 100)
    dead = tmp_path / f".{key}.3.4.tmp"
    dead.mkdir()
    os.utime(dead, (1000, 1000))
    earlier = tmp_path / f"{key}.npz"
    earlier.write_bytes(b"x" * 100)
    assert store.get(key, plan.big_request("speed")) is None
    store.prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == [writing.name]


def test_the_store_keeps_within_its_cap_dropping_the_least_recently_read(tmp_path):
    store = BigCaseStore(tmp_path)
    plans = [_plan("roll_diff", seed, store) for seed in (1, 2, 3)]
    for i, plan in enumerate(plans):
        plan.big_case("speed")  # drawn, answered and kept
        newest = tmp_path / store.key("roll_diff", plan.seed, "speed",
                                      plan.problem.speed_layout)
        os.utime(newest, (1000 + i, 1000 + i))
    # an earlier grader's case (one .npz file), never read by this one: it goes first
    earlier = tmp_path / f"{'0' * 32}.npz"
    earlier.write_bytes(b"x" * 1000)
    os.utime(earlier, (500, 500))
    assert _plan("roll_diff", 1, store).big_case("speed").from_store  # read now: newest
    size = max(sum(f.stat().st_size for f in p.iterdir()) for p in tmp_path.iterdir()
               if p.is_dir())
    store.cap_bytes = 2 * size
    store.prune()
    layout = plans[0].problem.speed_layout
    assert {p.name for p in tmp_path.iterdir()} == {
        store.key("roll_diff", s, "speed", layout) for s in (1, 3)}


def test_a_fresh_seed_keeps_nothing(tmp_path):
    with pytest.raises(ValueError, match="seed"):
        grading.plan_for(registry.get("roll_diff"), seed=None, big_cases=BigCaseStore(tmp_path))


def test_grading_reads_the_kept_cases_and_compares_with_the_kept_answers(tmp_path, monkeypatch):
    """Graded twice on one seed: the second grading draws no big case and passes as the first
    did; with a kept answer that is wrong, the big-case values checks fail: they compare with
    what the store holds."""
    problem, fn = reference_answer("moe_local")
    store = BigCaseStore(tmp_path)
    first = grade_function(problem, fn, plan=_plan("moe_local", 17, store))
    assert all(c.passed for c in first.checks), [c.message for c in first.checks]
    assert len(_cases(tmp_path)) == 2  # memory and speed

    def no_draw(self, size):
        raise AssertionError("a kept big case was drawn again")

    with monkeypatch.context() as m:
        m.setattr(grading.Plan, "big", no_draw)
        again = grade_function(problem, fn, plan=_plan("moe_local", 17, store))
    assert [c.to_dict() for c in again.checks] == [c.to_dict() for c in first.checks]

    plan = _plan("moe_local", 17, store)
    for size in ("memory", "speed"):
        big = plan.big_case(size)
        store.put(store.key("moe_local", 17, size, big.layout), big.case, big.expected + 1.0)
    wrong = grade_function(problem, fn, plan=_plan("moe_local", 17, store))
    failed = {c.name for c in wrong.checks if not c.passed}
    assert failed == {"memory", "speed"}, [c.message for c in wrong.checks]


@pytest.mark.parametrize("seed", [1234, None])
def test_a_shared_seed_keeps_its_big_cases_and_a_fresh_seed_none(tmp_path, seed):
    """Through the judge process: with a seed given (a class graded on one seed), the big cases
    land in the class-wide cache beside the verdicts; with a fresh secret seed (``grade`` with
    no --seed), nothing is kept. The student's files are capped at 1 MiB here; the grader's
    own (several MiB) are not."""
    from autograder.cli.main import grade_path
    from autograder.supervisor.options import Limits

    sub = tmp_path / "ps2_moe.py"
    sub.write_text((ROOT / "solutions" / "ps2_moe.py").read_text())
    cache = tmp_path / "cache"
    res = grade_path(sub, "ps2_moe", quick=True, seed=seed, cache_dir=cache, only=["moe_local"],
                     limits=Limits(per_function_s=120, load_s=60, statement_s=10,
                                   output_mb=1))
    checks = res.functions["moe_local"].checks
    assert [c.name for c in checks if c.passed] == [c.name for c in checks], checks
    assert {"memory", "speed"} <= {c.name for c in checks}
    kept = [case for store in cache.rglob("bigcases") for case in _cases(store)]
    assert len(kept) == (2 if seed is not None else 0)
    assert all(sum(f.stat().st_size for f in p.iterdir()) > 1 << 20 for p in kept)


def test_the_answer_is_computed_outside_the_submissions_time_limit(monkeypatch):
    """The NumPy answer is the grader's work: computed before the time limit of the student's
    program starts, so a slow reference (a busy machine) never becomes the student's timeout."""
    import contextlib
    import dataclasses

    inside: list = []
    from autograder.judge import measured, running, speed

    real_limit = running.time_limit

    @contextlib.contextmanager
    def watched(seconds):
        inside.append(seconds)
        try:
            with real_limit(seconds):
                yield
        finally:
            inside.pop()

    problem, fn = reference_answer("moe_local")
    big_shapes = {grading.plan_for(problem, seed=21).big(size)[1].args[0].shape
                  for size in ("memory", "speed")}
    computed: list = []

    def reference(args, *layout):
        if args[0].shape in big_shapes:
            computed.append(bool(inside))
        return problem.reference(args, *layout)

    for module in (running, measured, speed):  # every limit on the submission's program
        monkeypatch.setattr(module, "time_limit", watched)
    res = grade_function(dataclasses.replace(problem, reference=reference), fn, seed=21)
    assert all(c.passed for c in res.checks), [c.message for c in res.checks]
    assert computed == [False, False]  # memory, speed: neither inside a time limit


def test_an_error_in_a_big_cases_reference_is_a_regrade():
    """The big case's answer is the grader's work: an error in it is the grader's fault (a
    regrade), never the student's failed memory or speed check."""
    import dataclasses

    problem, fn = reference_answer("moe_local")
    big_shape = grading.plan_for(problem, seed=22).big("memory")[1].args[0].shape

    def reference(args, *layout):
        if args[0].shape == big_shape:
            raise ValueError("the reference broke")
        return problem.reference(args, *layout)

    with pytest.raises(grading.GraderFault, match="NumPy reference.*the reference broke"):
        grade_function(dataclasses.replace(problem, reference=reference), fn, seed=22)
