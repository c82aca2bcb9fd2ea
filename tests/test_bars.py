"""What the grader checks, as the notebooks state it: read from the registry, never typed twice."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autograder.course import bars, registry
from autograder.course.rules.ring import ring_budget

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration

NAMES = [p.name for p in registry.problems()]


@pytest.mark.parametrize("name", NAMES)
def test_points_split_over_the_checks_the_grader_runs(name):
    p = registry.get(name)
    b = bars.bar(p)
    assert [l.check for l in b.lines] == list(p.check_names)
    assert sum(l.points for l in b.lines) == pytest.approx(p.points)
    assert f"`{name}`" in b.markdown() and f"{p.points:g} points" in b.markdown()


def test_speed_limit_and_basis_come_from_the_problem():
    p = dataclasses.replace(registry.get("matmul_allgather"),
                            speed_threshold={"tpu_model": 0.61, "tpu": 0.83})
    speed = dict((l.check, l.passes) for l in bars.bar(p).lines)["speed"]
    assert "at most 0.61**, modeled on TPU" in speed
    assert "measured on a TPU, at most 0.83" in speed and "on CPU" not in speed
    assert "a program it cannot price fails" in speed
    assert "mesh 2x4" in speed and "A: float32[" in speed


def test_ring_budget_is_the_rule_s_own():
    p = registry.get("matmul_reducescatter")
    case = p.case(np.random.default_rng(0), *p.speed_layout, "speed")
    t, w2 = case.args
    out = np.asarray(p.reference(case.args, *p.speed_layout))
    budget, per_send, need = ring_budget("reducescatter", *p.speed_layout,
                                         (t.shape, t.itemsize), (out.shape, out.itemsize))
    structure = dict((l.check, l.passes) for l in bars.bar(p).lines)["structure"]
    assert need in structure and bars._mib(budget) in structure
    assert bars._mib(per_send) in structure


def test_no_budget_where_there_is_no_ring():
    structure = dict((l.check, l.passes) for l in bars.bar(registry.get("roll_diff")).lines)
    assert "byte budget" not in structure["structure"]


def test_memory_bound_at_the_grading_shape():
    p = registry.get("moe_local")
    case = p.case(np.random.default_rng(0), *p.speed_layout, "memory")
    bound, what = p.memory_bound(case, *p.speed_layout)
    memory = dict((l.check, l.passes) for l in bars.bar(p).lines)["memory"]
    assert what in memory and bars._mib(bound) in memory
    assert "device" not in memory  # one device: no talk of devices


def test_the_bar_says_measured_checks_need_the_right_answer():
    """Memory and speed run the function at their own shapes and check its answer there, and
    the program's structure."""
    from autograder.course import registry
    from autograder.course.bars import bar

    for p in registry.problems():
        measured = [n for n in p.check_names if n in ("memory", "speed")]
        said = bar(p).markdown()
        assert ("need the right answer there too" in said
                or "needs the right answer there too" in said) == bool(measured), p.name
        assert ("keeps the structure rules" in said) == bool(measured), p.name


# -- one rule, said once: speed and memory count only for a program that keeps structure ------

def test_credited_fails_a_measured_check_of_a_program_that_fails_structure():
    """The one place the rule is applied (the judge calls it on each measured check): a
    program that fails structure loses memory and speed whatever they measured, the figures
    kept for information; one that keeps the rules, and every other check, as it is."""
    from autograder.core.results import MEASURED_NEED_STRUCTURE, failed, passed, skipped
    from autograder.course.checks import credited

    broke, kept = failed("structure", "one psum of the whole output"), passed("structure")
    fast = passed("speed", "modeled on TPU v5e: ratio 1.00; modeled TPU ratio within 1.1")
    got = credited(fast, broke)
    assert not got.passed and not got.skipped and got.name == "speed"
    assert got.message.startswith("not credited: the program fails the structure rules (see "
                                  f"structure); {MEASURED_NEED_STRUCTURE}."), got.message
    assert "the speed check alone would pass: modeled on TPU v5e: ratio 1.00" in got.message
    big = failed("memory", "keep the temporary buffers within 22 MiB")
    assert "the memory check alone fails too: keep the temporary" in credited(big, broke).message
    assert credited(fast, kept) is fast and credited(big, kept) is big
    not_run = skipped("speed", "the numerics check must pass first")
    assert credited(not_run, broke) is not_run
    sharding = passed("sharding", "output laid out as P('X', 'Y')")
    assert credited(sharding, broke) is sharding


def test_grader_contract_notebooks_and_self_check_say_the_rule_in_the_same_words(root):
    """The grader's message, CONTRACT.md, every notebook's "What the grader checks" block of a
    function with memory or speed, and the self-check's memory and speed figures all carry the
    one sentence of :data:`MEASURED_NEED_STRUCTURE`."""
    import json

    from autograder.core.results import MEASURED_NEED_STRUCTURE as RULE
    from autograder.core.results import failed, passed
    from autograder.course.checks import credited
    from autograder.public.tools import MemoryProfile

    assert RULE in credited(passed("speed", "ok"), failed("structure", "x")).message
    assert RULE in " ".join((root / "CONTRACT.md").read_text().split())
    measured = {p.name for p in registry.problems()
                if set(p.check_names) & {"memory", "speed"}}
    said = set()
    for nb in sorted((root / "source").glob("ps*/ps*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and text.startswith("**What the grader checks"):
                name = text.split("`")[1]
                assert (RULE in text) == (name in measured), (nb.name, name)
                said.add(name)
    assert measured <= said, measured - said  # every measured function has its block
    # the same block as `python -m autograder list` prints it (memory and speed alike)
    one = bars.Bar("f", 1.0, (bars.Line("memory", 0.5, "x"), bars.Line("speed", 0.5, "y")))
    assert RULE in " ".join(one.text().split())
    assert RULE in MemoryProfile("moe_local", "", 1, 2, "why").text()
