"""Practice checkers for the notebooks' derivation exercises (ungraded; copied into every
selfcheck package).

Each takes the student's answer as a small function, follows the ring or the exchange it
describes on small cases, and prints either that it works or the first entries that break it,
each saying which device (or token) and step is wrong and why. Nothing here is graded: the
graded functions are checked by :func:`autograder.public.check.check`.
"""
from __future__ import annotations

#: the ring lengths the ring checkers try
RING_SIZES = (2, 4, 8)
#: how many problems a checker prints
SHOWN = 5


def _report(wrong: list[str], ok: str) -> list[str]:
    print(f"{len(wrong)} problem{'s' * (len(wrong) != 1)}, the first ones:" if wrong else ok)
    for line in wrong[:SHOWN]:
        print("  " + line)
    return wrong


def ring_problems(held) -> list[str]:
    """What is wrong with ``held(d, step, ny)``, the block of ``A`` device ``d`` holds at
    ``step`` of the all-gather ring in which every device starts with its own block and
    passes what it holds to its left neighbour (``j -> j - 1``) after each step."""
    wrong = []
    for ny in RING_SIZES:
        for d in range(ny):
            start = held(d, 0, ny) % ny
            if start != d:
                wrong.append(f"Y={ny}, step 0: device {d} starts with its own block {d}, "
                             f"not block {start}")
            for step in range(1, ny):
                right = (d + 1) % ny
                got, came = held(d, step, ny) % ny, held(right, step - 1, ny) % ny
                if got != came:
                    wrong.append(f"Y={ny}, step {step}: device {d} receives block {came} from "
                                 f"its right neighbour {right} (what that one held at step "
                                 f"{step - 1}), but your table says it holds block {got}")
        seen = {held(0, s, ny) % ny for s in range(ny)}
        if len(seen) != ny:
            wrong.append(f"Y={ny}: device 0 holds blocks {sorted(seen)} over the {ny} steps; "
                         f"it must see every block 0..{ny - 1} once")
    return wrong


def check_ring(held) -> list[str]:
    """Print whether ``held(d, step, ny)`` follows the all-gather ring (blocks move left) for
    Y = 2, 4 and 8, and the first entries that do not; returns every problem found."""
    return _report(ring_problems(held), "your table follows the ring for Y = 2, 4 and 8")


def schedule_problems(block) -> list[str]:
    """What is wrong with ``block(i, s, ny)``, the output block whose running sum device ``i``
    adds to at step ``s`` of the reduce-scatter ring in which sums move right (``j -> j + 1``)
    and block ``k`` must end, complete, on device ``k``."""
    wrong = []
    for ny in RING_SIZES:
        for i in range(ny):
            last = block(i, ny - 1, ny) % ny
            if last != i:
                wrong.append(f"Y={ny}: device {i} ends with the sum for block {last}, not its "
                             f"own block {i}")
            for s in range(1, ny):
                left = (i - 1) % ny
                got, arrived = block(i, s, ny) % ny, block(left, s - 1, ny) % ny
                if got != arrived:
                    wrong.append(f"Y={ny}, step {s}: device {i} receives the sum for block "
                                 f"{arrived} from device {left} but adds to block {got}")
    return wrong


def check_schedule(block) -> list[str]:
    """Print whether ``block(i, s, ny)`` is a reduce-scatter schedule (sums move right) for
    Y = 2, 4 and 8, and the first entries that break it; returns every problem found."""
    return _report(schedule_problems(block), "your schedule works for Y = 2, 4 and 8")


#: (destination X-group of each of one device's tokens, X, chunk size C): the routings
#: check_slots tries, balanced, skewed, with a destination nobody is sent to, and C = 1
SLOT_CASES = (
    ([1, 0, 1, 1, 0, 1, 1], 2, 2),
    ([3, 3, 3, 3, 3, 0, 3, 3], 4, 3),
    ([0, 2, 2, 0, 2], 4, 2),
    ([1, 0, 1], 2, 1),
)


def slot_problems(plan) -> list[str]:
    """What is wrong with ``plan(dest, nx, chunk)``, which says for each of one device's tokens
    (``dest[t]``: the X-group it must reach) the round ``r[t]`` in which it is sent and its row
    ``c[t]`` in that destination's chunk of the ``[X, C, D]`` send buffer."""
    wrong = []
    for dest, nx, chunk in SLOT_CASES:
        case = f"dest={dest}, X={nx}, C={chunk}"
        try:
            rounds, rows = plan(list(dest), nx, chunk)
            rounds, rows = [int(v) for v in rounds], [int(v) for v in rows]
        except Exception as e:  # noqa: BLE001 - the student's code: say what it raised
            wrong.append(f"{case}: your plan raised {type(e).__name__}: {e}")
            continue
        if len(rounds) != len(dest) or len(rows) != len(dest):
            wrong.append(f"{case}: expected a round and a row for each of the {len(dest)} "
                         f"tokens, found {len(rounds)} rounds and {len(rows)} rows")
            continue
        taken: dict = {}
        for t, (g, r, c) in enumerate(zip(dest, rounds, rows)):
            count = dest.count(g)
            need = -(-count // chunk)
            if not 0 <= c < chunk:
                wrong.append(f"{case}: token {t} is put in row {c} of a chunk of {chunk} rows "
                             f"(rows 0..{chunk - 1})")
            elif not 0 <= r < need:
                wrong.append(f"{case}: token {t} is sent in round {r}, but the {count} "
                             f"token{'s' * (count != 1)} for group {g} fit in {need} "
                             f"round{'s' * (need != 1)} of {chunk} (rounds 0..{need - 1}): "
                             "a later round costs another all_to_all for nothing")
            elif (g, r, c) in taken:
                wrong.append(f"{case}: tokens {taken[(g, r, c)]} and {t} both go to group {g} "
                             f"in round {r}, row {c}: the second overwrites the first in the "
                             "send buffer")
            else:
                taken[(g, r, c)] = t
    return wrong


def check_slots(plan) -> list[str]:
    """Print whether ``plan(dest, nx, chunk) -> (rounds, rows)`` sends every token exactly once,
    in no more rounds than its destination needs, on a few routings; returns every problem
    found."""
    return _report(slot_problems(plan), "your plan sends every token once, in as few rounds "
                   "as its destination needs, on every routing tried")
