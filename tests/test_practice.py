"""The notebooks' practice checkers (ungraded): a right answer passes, and a wrong one hears
which device, step or token is wrong and why."""
from autograder.public import practice
import pytest

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


def test_ring_table():
    assert practice.check_ring(lambda d, s, ny: (d + s) % ny) == []
    wrong = practice.ring_problems(lambda d, s, ny: (d - s) % ny)  # the other direction
    assert any("Y=4, step 1: device 0 receives block 1 from its right neighbour 1" in w and
               "your table says it holds block 3" in w for w in wrong), wrong
    wrong = practice.ring_problems(lambda d, s, ny: s)  # everyone holds the same block
    assert any("device 1 starts with its own block 1, not block 0" in w for w in wrong), wrong


def test_reduce_scatter_schedule():
    assert practice.check_schedule(lambda i, s, ny: (i - s - 1) % ny) == []
    wrong = practice.schedule_problems(lambda i, s, ny: (i + s) % ny)  # the all-gather's table
    assert any("device 0 ends with the sum for block 1, not its own block 0" in w
               for w in wrong), wrong
    assert any("step 1: device 1 receives the sum for block 0 from device 0 but adds to block 2"
               in w for w in wrong), wrong


def _plan(dest, nx, chunk):
    seen = {}
    rounds, rows = [], []
    for g in dest:
        p = seen.get(g, 0)
        seen[g] = p + 1
        rounds.append(p // chunk)
        rows.append(p % chunk)
    return rounds, rows


def test_exchange_slots(capsys):
    assert practice.check_slots(_plan) == []
    assert "your plan sends every token once" in capsys.readouterr().out
    # every token in row 0 of round 0: they overwrite each other
    wrong = practice.slot_problems(lambda dest, nx, c: ([0] * len(dest), [0] * len(dest)))
    assert "tokens 0 and 2 both go to group 1 in round 0, row 0: the second overwrites" \
        in wrong[0], wrong
    # the position among all tokens, not among those to the same group: rounds wasted
    wrong = practice.slot_problems(lambda dest, nx, c: ([t // c for t in range(len(dest))],
                                                        [t % c for t in range(len(dest))]))
    assert any("token 6 is sent in round 3, but the 5 tokens for group 1 fit in 3 rounds of 2"
               in w for w in wrong), wrong
    wrong = practice.slot_problems(lambda dest, nx, c: (_plan(dest, nx, c)[0], [c] * len(dest)))
    assert "row 2 of a chunk of 2 rows" in wrong[0], wrong
    wrong = practice.slot_problems(lambda dest, nx, c: 1 / 0)
    assert "your plan raised ZeroDivisionError" in wrong[0], wrong
    practice.check_slots(lambda dest, nx, c: ([0] * len(dest), [0] * len(dest)))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("problems, the first ones:") and len(out) == 1 + practice.SHOWN
