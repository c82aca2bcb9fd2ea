"""ps4's speed grade tests what ps4 teaches: a one-way ring handed in for a bidirectional problem
loses its speed share, at ps4's own speed shape, where each ring step is bound by its transfer."""
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
    res = local.grade_function(problem, one_way.function(f"matmul_{kind}"), seed=SEED)
    assert check_of(res, "numerics").passed, res.report()
    speed = check_of(res, "speed")
    assert not speed.passed and "modeled" in speed.message, speed.message
    assert res.score <= problem.points * (1 - problem.weights["speed"]) + 1e-9

