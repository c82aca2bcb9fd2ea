"""The numerics cases: several value draws per random shape run through one compiled program,
so a function compiles one program per distinct signature, not one per case."""
import numpy as np
import pytest

from autograder.course import registry
from autograder.judge.grading import plan_for, signature_of

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration

PROBLEMS = [p.name for p in registry.problems()]


@pytest.mark.parametrize("name", PROBLEMS)
def test_draws_share_a_program_and_differ_in_values(name):
    p = registry.get(name)
    plan = plan_for(p, seed=11, with_speed=False)
    for layout, cases in plan.cases():
        draws = cases[:p.cases_per_mesh * p.draws_per_shape]
        edges = cases[len(draws):]
        assert len(edges) == len(p.edges(np.random.default_rng(0), *layout))
        for i in range(0, len(draws), p.draws_per_shape):
            group = draws[i:i + p.draws_per_shape]
            assert len({signature_of(p, c) for c in group}) == 1, layout
            for c in group[1:]:
                floats = [(a, b) for a, b in zip(group[0].args, c.args, strict=True)
                          if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.size > 1]
                assert floats and all(not np.array_equal(a, b) for a, b in floats), layout
    programs = {(tuple(lay), signature_of(p, c)) for lay, cs in plan.cases() for c in cs}
    requests = {plan.request(lay, c).id for lay, cs in plan.cases() for c in cs}
    assert len(requests) == len(programs)  # one request (one export, one compile) per program


def test_fewer_programs_than_cases():
    """Across the course the draws save programs (the count docs/grading.md states)."""
    cases = programs = 0
    for p in registry.problems():
        plan = plan_for(p, seed=3, with_speed=False)
        cases += sum(len(cs) for _, cs in plan.cases())
        programs += len(plan.all_requests())
    assert programs < 0.85 * cases, (programs, cases)


def test_a_redraw_keeps_integers_and_statics():
    p = registry.get("roll_diff")
    rng = np.random.default_rng(0)
    case = p.case(rng, 2, 4, "grade")
    again = p.redraw(rng, case)
    assert again.args[1] == case.args[1]  # the static shift: the same program
    assert again.args[0].shape == case.args[0].shape and again.args[0].dtype == np.float32
    b = registry.get("moe_jit").case(rng, 2, 4, "grade")
    assert np.array_equal(registry.get("moe_jit").redraw(rng, b).args[1], b.args[1])
