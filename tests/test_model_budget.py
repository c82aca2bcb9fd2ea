"""The model works inside its own budget: a program it would need too long to walk is one it
cannot price, said at once (the speed check fails it as the student's), and the costing and the
schedule take time in proportion to the program, whatever its shape."""
import random

import jax
import jax.numpy as jnp
import pytest

from autograder.tpumodel import hlo
from autograder.tpumodel.api import ModelRequest, grading_modeler, model_hlo, partitioned_hlo
from autograder.tpumodel.cost import Task, fuse
from autograder.tpumodel.hlo import Node, Shape
from autograder.tpumodel.schedule import schedule


def _scalar_loop(n: int, step: int = 1) -> str:
    def f(x):
        def body(c):
            i, a, b = c
            return i + step, (a * 3 + i) % 1000003, b ^ (a >> 3)

        _, a, b = jax.lax.while_loop(lambda c: c[0] < n, body,
                                     (jnp.int32(0), jnp.int32(1), jnp.int32(2)))
        return x + (a + b).astype(x.dtype)

    return partitioned_hlo(f, [jnp.ones((8,), jnp.float32)])


def test_a_long_counted_loop_is_refused_before_it_is_walked():
    comps, entry = hlo.parse_module(_scalar_loop(999_000))
    budget = hlo.Budget()
    with pytest.raises(hlo.Unpriceable, match="its loops run 999,000 iterations") as e:
        hlo.run_device(comps, entry, budget=budget)
    assert f"budget of {hlo.MAX_EVALUATED:,}" in str(e.value)
    assert budget.iterations == 0 and budget.used < 100  # read off the loop, not walked


def test_a_loop_the_model_cannot_count_ahead_stops_at_the_budget():
    """A step of 2 is not a counted loop: it is walked, and stopped where the budget ends."""
    comps, entry = hlo.parse_module(_scalar_loop(2_000_000, step=2))
    budget = hlo.Budget(evaluated=20_000)
    with pytest.raises(hlo.Unpriceable, match="its loops run more than") as e:
        hlo.run_device(comps, entry, budget=budget)
    assert budget.used <= 20_000 + 100 and 0 < budget.iterations < 20_000, e.value


def test_a_short_loop_is_priced():
    assert model_hlo(_scalar_loop(100)).time_us > 0


def test_the_speed_check_is_told_it_cannot_price_the_program():
    """The modeler's answer the speed check turns into its "cannot price this program"."""
    from autograder.core.meshes import make_mesh
    from autograder.course import registry

    problem = registry.get("matmul_allgather")
    text = _scalar_loop(999_000)
    got = grading_modeler(ModelRequest.of_modules(problem, make_mesh(2, 4),
                                                  (text, _scalar_loop(10))))
    assert set(got) == {"unreadable"} and "999,000 iterations" in got["unreadable"], got


def test_the_long_loop_fails_speed_as_a_program_the_model_cannot_price():
    from conftest import check_of, grade

    # it fails structure too (so the grader does not measure it): its speed check on its own
    res = grade("attacks", "long_scalar_loop", "matmul_allgather", with_speed=True, quick=True,
                rules=False)
    speed = check_of(res, "speed")
    assert not speed.passed and not res.regrade, speed.message
    assert "cannot price this program: its loops run 999,000 iterations" in speed.message
    assert "timed out" not in speed.message


# -- the costing and the schedule: the same answers as the plain quadratic rules -------------

def _reference_schedule(tasks):
    """The scheduler's rule, stated plainly: of the ready tasks, start the one with the least
    (earliest start, longest chain behind it as a negative, id)."""
    from autograder.tpumodel.schedule import _bottom_levels

    users = {t.id: [] for t in tasks}
    for t in tasks:
        for d in t.deps:
            users[d].append(t.id)
    level = _bottom_levels(tasks, users)
    left = {t.id: len(t.deps) for t in tasks}
    ready_at = {t.id: 0.0 for t in tasks if not t.deps}
    ready, free, start, by_id = list(ready_at), {}, {}, {t.id: t for t in tasks}
    while ready:
        key = min((max([ready_at[i]] + [free.get(r, 0.0) for r in by_id[i].resources]),
                   -level[i], i) for i in ready)
        ready.remove(key[2])
        start[key[2]] = key[0]
        end = key[0] + by_id[key[2]].duration
        for r in by_id[key[2]].resources:
            free[r] = end
        for u in users[key[2]]:
            left[u] -= 1
            ready_at[u] = max(ready_at.get(u, 0.0), end)
            if not left[u]:
                ready.append(u)
    return start


def _reference_fuse(nodes, live_out):
    """:func:`fuse`'s rule, recomputed from every kernel's members at every step."""
    from autograder.tpumodel.cost import COLLECTIVES, HEAVY, STANDALONE, transfers

    cons = {n.id: {m.id for m in nodes if n.id in m.deps} for n in nodes}
    waits, reads = transfers(nodes)
    kernel_of, members, heavy, created, kw = {}, {}, {}, {}, {}
    for count, n in enumerate(nodes):
        kid = n.id
        if n.opcode in COLLECTIVES:
            kernel_of[kid], members[kid], heavy[kid], created[kid] = kid, [kid], False, count
            kw[kid] = waits[kid]
            continue
        cands = []
        for d in ([] if n.opcode in STANDALONE else sorted(n.deps)):
            k = kernel_of[d]
            first = nodes[members[k][0]].opcode
            if k in cands or first in COLLECTIVES or first in STANDALONE:
                continue
            ms = set(members[k])
            if all(m not in live_out and cons[m] <= ms | {n.id} for m in ms):
                cands.append(k)
        own = 0
        for d in n.deps:
            own |= reads[d]
        chosen = [k for k in cands if not heavy[k]]
        heavies = [k for k in cands if heavy[k] and own & ~kw[k] == 0]
        if n.opcode not in HEAVY and heavies:
            chosen.append(max(heavies, key=lambda k: created[k]))
        members[kid], created[kid], kw[kid] = [kid], count, waits[kid]
        heavy[kid] = n.opcode in HEAVY or any(heavy[k] for k in chosen)
        for k in chosen:
            members[kid] = members.pop(k) + members[kid]
            heavy.pop(k)
            kw[kid] |= kw.pop(k)
        for m in members[kid]:
            kernel_of[m] = kid
    return [sorted(ms) for _, ms in sorted(members.items(), key=lambda kv: min(kv[1]))]


LANES = [("compute",), (("X", "+"),), (("X", "-"),), (("X", "+"), ("Y", "+")), ()]


@pytest.mark.parametrize("seed", range(200))
def test_the_schedule_follows_its_rule(seed):
    rnd = random.Random(seed)
    tasks = [Task(i, "compute", f"t{i}", rnd.choice([0.0, 1e-6, 2e-6, 3e-6]), rnd.choice(LANES),
                  {j for j in range(i) if rnd.random() < 0.15}) for i in range(rnd.randint(1, 40))]
    assert schedule(tasks).start == _reference_schedule(tasks)


@pytest.mark.parametrize("seed", range(200))
def test_fusion_follows_its_rule(seed):
    rnd = random.Random(seed)
    ops = ["add", "multiply", "dot", "all-gather", "gather", "slice", "collective-permute"]
    n = rnd.randint(1, 30)
    nodes = [Node(i, rnd.choice(ops), f"n{i}", [Shape("f32", (4,))], [], {},
                  frozenset(j for j in range(i) if rnd.random() < 0.2)) for i in range(n)]
    live = frozenset(j for j in range(n) if rnd.random() < 0.2)
    assert fuse(nodes, live) == _reference_fuse(nodes, live)
