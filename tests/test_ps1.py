"""ps1_sharding: independent correct answers get full marks; each wrong one fails for its reason."""
import pytest
from conftest import check_of, grade

FULL = [
    ("alt_correct", "shard_average_jit"),
    ("alt_correct", "shard_average_shard_map"),
    ("alt_correct", "roll_diff"),
    ("alt_correct_gather", "shard_average_shard_map"),
    ("alt_correct_gather", "roll_diff"),
]


@pytest.mark.parametrize("fixture,function", FULL)
def test_independent_correct_answers_get_full_marks(fixture, function):
    res = grade("ps1", fixture, function)
    assert res.score == res.max_score, res.report()


WRONG = [
    # fixture, function, the check that must fail, words its message must contain
    ("wrong_global_roll", "roll_diff", "numerics", "differ"),
    ("wrong_replicated", "shard_average_jit", "sharding", "expected the output sharded as"),
    ("wrong_reshard", "shard_average_jit", "structure", "XLA added"),
    ("wrong_hardcoded", "shard_average_jit", "numerics", "on mesh"),
    ("wrong_no_shard_map", "roll_diff", "structure", "shard_map"),
    ("wrong_slicing", "roll_diff", "numerics", "differ"),
    ("raises_and_nan", "shard_average_jit", "numerics", "ValueError: not done yet"),
    ("raises_and_nan", "shard_average_shard_map", "numerics", "NaN"),
    ("raises_and_nan", "roll_diff", "numerics", "expected shape"),
]


@pytest.mark.parametrize("fixture,function,check,words", WRONG)
def test_wrong_answers_fail_the_right_check(fixture, function, check, words):
    res = grade("ps1", fixture, function)
    c = check_of(res, check)
    assert not c.passed, res.report()
    assert words in c.message, c.message
    assert res.score < res.max_score


def test_wrong_layout_keeps_points_for_right_numbers():
    res = grade("ps1", "wrong_replicated", "shard_average_jit")
    assert check_of(res, "numerics").passed
    assert 0 < res.score < res.max_score


def test_hang_in_function_is_a_failed_check(monkeypatch):
    from autograder.judge import grading

    monkeypatch.setattr(grading, "CALL_TIMEOUT", 2.0)
    res = grade("ps1", "hang_in_function", "roll_diff")
    assert res.score == 0
    assert "timed out" in check_of(res, "numerics").message


def test_missing_function_scores_zero_with_not_found():
    res = grade("ps1", "wrong_global_roll", "shard_average_jit")
    assert res.score == 0
    assert "not found" in check_of(res, "numerics").message


def test_a_hang_gets_the_same_verdicts_in_process_as_when_the_worker_is_killed(monkeypatch):
    """Every check fails for a function that never returns, however the hang was stopped."""
    from autograder.judge import grading

    monkeypatch.setattr(grading, "CALL_TIMEOUT", 2.0)
    res = grade("ps1", "hang_in_function", "roll_diff")
    assert not any(c.passed for c in res.checks), res.report()
