"""ps1_sharding: independent correct answers get full marks; each wrong one fails for its reason."""
import pytest
from conftest import check_of, grade, graded, hang_in_xla

FULL = [
    ("ps1/alt_correct.py", "shard_average_jit"),
    ("ps1/alt_correct.py", "shard_average_shard_map"),
    ("ps1/alt_correct.py", "roll_diff"),
    ("ps1/alt_correct_gather.py", "shard_average_shard_map"),
    ("ps1/alt_correct_gather.py", "roll_diff"),
]


@pytest.mark.parametrize("fixture,function", FULL)
def test_independent_correct_answers_get_full_marks(fixture, function):
    """On every mesh and edge case (the verdict table grades two meshes): every check passes
    but speed, whose verdict is the table's (alt_correct_gather's roll by lookup is slow)."""
    res = graded(f"tests/fixtures/{fixture}", function, quick=False, speed=False)
    assert all(c.passed for c in res.checks if c.name != "speed"), res.report()
    assert "8x1" in check_of(res, "numerics").message, res.report()


WRONG = [
    # fixture, function, the check that must fail, words its message must contain
    ("ps1/wrong_global_roll.py", "roll_diff", "numerics", "differ"),
    ("ps1/wrong_replicated.py", "shard_average_jit", "sharding", "expected the output sharded as"),
    ("ps1/wrong_reshard.py", "shard_average_jit", "structure", "XLA added"),
    ("ps1/wrong_hardcoded.py", "shard_average_jit", "numerics", "on mesh"),
    ("ps1/wrong_no_shard_map.py", "roll_diff", "structure", "shard_map"),
    ("ps1/wrong_slicing.py", "roll_diff", "numerics", "differ"),
    ("ps1/raises_and_nan.py", "shard_average_jit", "numerics", "ValueError: not done yet"),
    ("ps1/raises_and_nan.py", "shard_average_shard_map", "numerics", "NaN"),
    ("ps1/raises_and_nan.py", "roll_diff", "numerics", "expected shape"),
]


@pytest.mark.parametrize("fixture,function,check,words", WRONG)
def test_wrong_answers_fail_the_right_check(fixture, function, check, words):
    """The verdict table's grading (two meshes, speed included), read again for its words."""
    res = graded(f"tests/fixtures/{fixture}", function)
    c = check_of(res, check)
    assert not c.passed, res.report()
    assert words in c.message, c.message
    assert res.score < res.max_score


@pytest.mark.parametrize("fixture", ["ps1/wrong_replicated.py"])
def test_wrong_layout_keeps_points_for_right_numbers(fixture):
    res = graded(f"tests/fixtures/{fixture}", "shard_average_jit")
    assert check_of(res, "numerics").passed
    assert 0 < res.score < res.max_score


def test_a_hang_is_a_failed_check_and_gets_the_same_verdicts_as_when_the_worker_is_killed(
        monkeypatch):
    """A function that never returns fails numerics with "timed out", and every check fails,
    however the hang was stopped (here the in-process call's limit, 2 s)."""
    from autograder.judge import running

    monkeypatch.setattr(running, "CALL_TIMEOUT", 2.0)
    res = grade("ps1", "hang_in_function", "roll_diff", quick=True)
    assert res.score == 0
    assert "timed out" in check_of(res, "numerics").message
    assert not any(c.passed for c in res.checks), res.report()


def test_missing_function_scores_zero_with_not_found():
    res = grade("ps1", "wrong_global_roll", "shard_average_jit")
    assert res.score == 0
    assert "not found" in check_of(res, "numerics").message


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

# xla_loop: a while_loop in the compiled program that never ends
''' + hang_in_xla("xla_loop") + r'''

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
