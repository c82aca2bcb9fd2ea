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
               "your table says it holds block 3: that is what its left neighbour 3 held, so "
               "your blocks move right" in w for w in wrong), wrong
    wrong = practice.ring_problems(lambda d, s, ny: s)  # everyone holds the same block
    assert any("device 1 starts with its own block 1, not block 0" in w for w in wrong), wrong


def test_reduce_scatter_schedule():
    assert practice.check_schedule(lambda i, s, ny: (i - s - 1) % ny) == []
    wrong = practice.schedule_problems(lambda i, s, ny: (i + s) % ny)  # the all-gather's table
    assert any("device 0 ends with the sum for block 1, not its own block 0" in w
               for w in wrong), wrong
    wrong = practice.schedule_problems(lambda i, s, ny: (i + s + 1) % ny)  # sums moving left
    assert ("Y=4, step 1: device 1 receives the sum for block 1 from device 0 (which added to it "
            "at step 0), but your table adds to block 3: that is the sum device 2 held, so your "
            "sums move left") in wrong, wrong
    wrong = practice.schedule_problems(lambda i, s, ny: i)  # the notebook's first guess
    assert ("Y=4, step 1: device 1 receives the sum for block 0 from device 0 (which added to it "
            "at step 0), but your table adds to block 1") in wrong, wrong


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
    found = practice.check_slots(lambda dest, nx, c: ([0] * len(dest), [0] * len(dest)))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("problems, the first ones:") and len(out) == 2 + practice.SHOWN
    # a cut list says how many it left out
    assert out[-1] == f"  and {len(found) - practice.SHOWN} more: fix these first and run the " \
                      "cell again", out


def test_a_practice_cell_ends_on_its_summary(capsys):
    """A checker that ends its cell: Jupyter shows the summary it printed and nothing more (not
    the returned list, 146 lines on ps4's starter guess, nor a stray [] on success); the list
    is still there for code that reads it."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    for table, n in ((lambda d, s, ny: (d, d), 146), (lambda d, s, ny: ((d + s) % ny,
                                                                         (d - s) % ny), 0)):
        got = practice.check_two_way_ring(table)
        assert isinstance(got, list) and len(got) == n
        assert shell.display_formatter.format(got) == ({}, {})  # the displayhook shows nothing
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "146 problems, the first ones:" and out[-1] == "your table follows both " \
        "rings for Y = 2, 4 and 8", out
    assert len(out) == 1 + practice.SHOWN + 1 + 1, out


def test_two_way_ring(capsys):
    assert practice.check_two_way_ring(lambda d, s, ny: ((d + s) % ny, (d - s) % ny)) == []
    assert "your table follows both rings" in capsys.readouterr().out
    # the two directions swapped: named as such, by device, step and the neighbour it sends
    wrong = practice.two_way_ring_problems(lambda d, s, ny: ((d - s) % ny, (d + s) % ny))
    assert ("Y=4, step 1: device 0 receives the left half of block 1 from its right neighbour 1"
            " (left halves move j -> j - 1; device 1 held it at step 0), but your table says it"
            " holds the left half of block 3: that is what device 3 held, so your left halves"
            " move the wrong way") in wrong[0], wrong
    assert any("device 0 receives the right half of block 3 from its left neighbour 3" in w and
               "so your right halves move the wrong way" in w for w in wrong), wrong
    # halves that never move, and a wrong start
    wrong = practice.two_way_ring_problems(lambda d, s, ny: (d, d))
    assert "Y=2: device 0 holds the left halves of blocks [0] over the 2 steps" in "\n".join(
        wrong), wrong
    wrong = practice.two_way_ring_problems(lambda d, s, ny: ((d + s + 1) % ny, (d - s) % ny))
    assert ("Y=2, step 0: device 0 starts with both halves of its own block 0, but your table "
            "gives it the left half of block 1") in wrong[0], wrong
    # not a pair, or an exception: said, not raised
    assert "expected a pair (left, right) of block numbers, found 0" in \
        practice.two_way_ring_problems(lambda d, s, ny: d)[0]
    assert "your function raised ZeroDivisionError" in \
        practice.two_way_ring_problems(lambda d, s, ny: 1 / 0)[0]


def test_two_way_schedule():
    assert practice.check_two_way_schedule(
        lambda i, s, ny: ((i + s + 1) % ny, (i - s - 1) % ny)) == []
    # the all-gather's table follows the rings but ends one block off
    wrong = practice.two_way_schedule_problems(lambda i, s, ny: ((i + s) % ny, (i - s) % ny))
    assert ("Y=4, step 3: on the ring moving left, device 0 adds last to the sum for block 3; "
            "nothing is sent after that step, so it must be its own block 0") in wrong, wrong
    assert not any("receives" in w for w in wrong), wrong
    # the two rings swapped
    wrong = practice.two_way_schedule_problems(
        lambda i, s, ny: ((i - s - 1) % ny, (i + s + 1) % ny))
    assert ("Y=4, step 1: on the ring moving left, device 0 receives the sum for block 0 from "
            "device 1 (which added to it at step 0), but your table adds to block 2: that is "
            "the sum device 3 held, so your sums move right") in wrong[0], wrong
    assert ("Y=4, step 1: on the ring moving right, device 1 receives the sum for block 1 from "
            "device 0 (which added to it at step 0), but your table adds to block 3: that is "
            "the sum device 2 held, so your sums move left") in wrong, wrong
