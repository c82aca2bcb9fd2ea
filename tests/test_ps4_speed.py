"""ps4's speed grade tests what ps4 teaches: a one-way ring handed in for a bidirectional problem
loses its speed share, at ps4's own speed shape, where each ring step is bound by its transfer."""
from dataclasses import replace

import pytest
from conftest import ROOT, SEED, check_of

from autograder.core.loader import load
from autograder.course import registry
from autograder.supervisor import local

KINDS = ("allgather", "allreduce", "reducescatter")


@pytest.fixture(scope="module")
def one_way():
    return load(ROOT / "solutions" / "ps3_collective_matmul.py")


@pytest.mark.parametrize("kind", KINDS)
def test_one_way_ring_loses_the_speed_share(kind, one_way):
    problem = registry.get(f"matmul_{kind}_bidirectional")
    fn = one_way.function(f"matmul_{kind}")
    res = local.grade_function(problem, fn, seed=SEED)
    assert check_of(res, "numerics").passed, res.report()
    assert not check_of(res, "speed").passed, res.report()
    assert res.score <= problem.points * (1 - problem.weights["speed"]) + 1e-9
    # it fails structure too (one link direction), so the judge does not measure its speed:
    # the speed check alone, without the rules, finds it slow on the model's figures
    alone = local.grade_function(replace(problem, rules=()), fn, seed=SEED)
    speed = check_of(alone, "speed")
    assert not speed.passed and "modeled" in speed.message, speed.message

