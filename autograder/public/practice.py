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


class Problems(list):
    """What a checker returns: every problem it found, as a list (empty when the answer
    works). The checker has printed its summary already, so Jupyter shows nothing more for it
    when it ends a cell: the cell ends on the summary, not on the whole list echoed after it
    (146 lines for ps4's starter guess, a stray ``[]`` on success)."""

    def _ipython_display_(self):  # IPython's hook: the summary above is the display
        return None


def _report(wrong: list[str], ok: str) -> Problems:
    left = len(wrong) - SHOWN
    print(f"{len(wrong)} problem{'s' * (len(wrong) != 1)}"
          f"{', the first ones:' if left > 0 else ':'}" if wrong else ok)
    for line in wrong[:SHOWN]:
        print("  " + line)
    if left > 0:
        print(f"  and {left} more: fix these first and run the cell again")
    return Problems(wrong)


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
                    why = (f"Y={ny}, step {step}: device {d} receives block {came} from its "
                           f"right neighbour {right} (what that one held at step {step - 1}), "
                           f"but your table says it holds block {got}")
                    left = (d - 1) % ny
                    if got == held(left, step - 1, ny) % ny:
                        why += (f": that is what its left neighbour {left} held, so your blocks "
                                "move right")
                    wrong.append(why)
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
                left, right = (i - 1) % ny, (i + 1) % ny
                got, arrived = block(i, s, ny) % ny, block(left, s - 1, ny) % ny
                if got != arrived:
                    why = (f"Y={ny}, step {s}: device {i} receives the sum for block {arrived} "
                           f"from device {left} (which added to it at step {s - 1}), but your "
                           f"table adds to block {got}")
                    if got == block(right, s - 1, ny) % ny:
                        why += f": that is the sum device {right} held, so your sums move left"
                    wrong.append(why)
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


#: the two rings of problem set 4: (name, shift, which neighbour a device receives from)
TWO_WAY = (("left", -1, "right"), ("right", +1, "left"))


def _pair_table(fn, ny: int, what: str):
    """``fn(d, s, ny)`` for every device and step of a ring of ``ny``, as ``{(d, s): (a, b)}``
    taken mod ``ny``, or a message saying why the student's function gave no such table."""
    table = {}
    for d in range(ny):
        for s in range(ny):
            try:
                got = fn(d, s, ny)
            except Exception as e:  # noqa: BLE001 - the student's code: say what it raised
                return (f"Y={ny}, device {d}, step {s}: your function raised "
                        f"{type(e).__name__}: {e}")
            try:
                a, b = got
                table[d, s] = (int(a) % ny, int(b) % ny)
            except (TypeError, ValueError):
                return (f"Y={ny}, device {d}, step {s}: expected a pair {what} of block "
                        f"numbers, found {got!r}")
    return table


def two_way_ring_problems(held) -> list[str]:
    """What is wrong with ``held(d, step, ny) -> (left, right)``: the blocks of ``A`` whose left
    half and right half device ``d`` holds after ``step`` steps of the two-way all-gather ring,
    in which every device starts with both halves of its own block, left halves move to the
    left neighbour (``j -> j - 1``) and right halves to the right one (``j -> j + 1``)."""
    wrong = []
    for ny in RING_SIZES:
        table = _pair_table(held, ny, "(left, right)")
        if isinstance(table, str):
            wrong.append(table)
            continue
        for k, (half, shift, side) in enumerate(TWO_WAY):
            arrow = f"j -> j {'-' if shift < 0 else '+'} 1"
            for d in range(ny):
                start = table[d, 0][k]
                if start != d:
                    wrong.append(f"Y={ny}, step 0: device {d} starts with both halves of its "
                                 f"own block {d}, but your table gives it the {half} half of "
                                 f"block {start}")
                for s in range(1, ny):
                    src, other = (d - shift) % ny, (d + shift) % ny
                    got, came = table[d, s][k], table[src, s - 1][k]
                    if got == came:
                        continue
                    why = (f"Y={ny}, step {s}: device {d} receives the {half} half of block "
                           f"{came} from its {side} neighbour {src} ({half} halves move "
                           f"{arrow}; device {src} held it at step {s - 1}), but your table "
                           f"says it holds the {half} half of block {got}")
                    if got == table[other, s - 1][k]:
                        why += (f": that is what device {other} held, so your {half} halves "
                                "move the wrong way")
                    wrong.append(why)
            seen = {table[0, s][k] for s in range(ny)}
            if len(seen) != ny:
                wrong.append(f"Y={ny}: device 0 holds the {half} halves of blocks "
                             f"{sorted(seen)} over the {ny} steps; it must see the {half} half "
                             f"of every block 0..{ny - 1} once")
    return wrong


def check_two_way_ring(held) -> list[str]:
    """Print whether ``held(d, step, ny) -> (left, right)`` follows the two-way all-gather ring
    (left halves move left, right halves right) for Y = 2, 4 and 8, and the first entries that
    do not; returns every problem found."""
    return _report(two_way_ring_problems(held),
                   "your table follows both rings for Y = 2, 4 and 8")


def two_way_schedule_problems(block) -> list[str]:
    """What is wrong with ``block(i, s, ny) -> (left, right)``: the output blocks whose running
    sums device ``i`` adds to at step ``s`` of the two-way reduce-scatter, on the ring whose
    sums move left (``j -> j - 1``) and on the one whose sums move right (``j -> j + 1``); on
    both, the sum for block ``k`` must end, complete, on device ``k`` after step ``Y - 1``."""
    wrong = []
    for ny in RING_SIZES:
        table = _pair_table(block, ny, "(left, right)")
        if isinstance(table, str):
            wrong.append(table)
            continue
        for k, (way, shift, _side) in enumerate(TWO_WAY):
            for i in range(ny):
                last = table[i, ny - 1][k]
                if last != i:
                    wrong.append(f"Y={ny}, step {ny - 1}: on the ring moving {way}, device {i} "
                                 f"adds last to the sum for block {last}; nothing is sent after "
                                 f"that step, so it must be its own block {i}")
                for s in range(1, ny):
                    src, other = (i - shift) % ny, (i + shift) % ny
                    got, arrived = table[i, s][k], table[src, s - 1][k]
                    if got == arrived:
                        continue
                    why = (f"Y={ny}, step {s}: on the ring moving {way}, device {i} receives "
                           f"the sum for block {arrived} from device {src} (which added to it "
                           f"at step {s - 1}), but your table adds to block {got}")
                    if got == table[other, s - 1][k]:
                        why += (f": that is the sum device {other} held, so your sums move "
                                f"{'right' if way == 'left' else 'left'}")
                    wrong.append(why)
    return wrong


def check_two_way_schedule(block) -> list[str]:
    """Print whether ``block(i, s, ny) -> (left, right)`` is a two-way reduce-scatter schedule
    (one ring's sums move left, the other's right) for Y = 2, 4 and 8, and the first entries
    that break it; returns every problem found."""
    return _report(two_way_schedule_problems(block),
                   "your schedule works on both rings for Y = 2, 4 and 8")
