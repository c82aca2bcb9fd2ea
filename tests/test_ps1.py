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


ENDLESS = r'''
import os, sys
from autograder.core.devices import setup_devices
setup_devices()
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P
from autograder.public import check as public

def python_loop(A, mesh):  # never stops tracing
    while True:
        pass

def xla_loop(A, mesh):  # a while_loop in the compiled program that never ends
    def body(b):
        n = jax.lax.while_loop(lambda c: c[1] >= 0, lambda c: (c[0] + 1.0, c[1]),
                               (jnp.float32(0), jnp.int32(1)))[0]
        return b.mean(axis=0, keepdims=True) + 0 * n
    return jax.shard_map(body, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", "Y"))(A)

for fn in (python_loop, xla_loop):
    try:
        public.check("shard_average_shard_map", fn, layouts=((2, 4),), cases=1,
                     time_limit=3)
        print("PASSED")
    except AssertionError as e:
        print("STOPPED", str(e).replace("\n", " "))
sys.stdout.flush()
os._exit(0)  # the endless compiled loop still runs in the background
'''


def test_the_self_check_ends_an_endless_loop():
    """A student's endless loop, at trace time or inside the compiled program, ends check()
    with a message within its time limit instead of hanging the notebook or pytest."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", ENDLESS], capture_output=True, text=True,
                       timeout=300)
    lines = [l for l in p.stdout.splitlines() if l.startswith(("STOPPED", "PASSED"))]
    assert len(lines) == 2, p.stdout[-2000:] + p.stderr[-2000:]
    trace, run = lines
    assert trace.startswith("STOPPED") and "still running after 3 s" in trace, trace
    assert run.startswith("STOPPED") and "its program still runs after 3 s" in run, run
    assert "restart the kernel" in run
