"""One test per graded function: it passes only if every check passes."""
import pytest

from ..judge import grading

#: the instructor's entry point, the same on every JAX: make test runs it, make test-latest
#: leaves it out (the reference answers are graded there by tests/test_verdicts.py, on two
#: meshes with the speed check, and their notebooks' self-checks by test_notebooks_executed)
pytestmark = pytest.mark.orchestration


def test_function(problem, submissions, request):
    source = submissions(problem.assignment)(problem.name)
    res = grading.grade_function(problem, source,
                                 with_speed=not request.config.getoption("--no-speed"))
    print(res.report())
    failed = [c for c in res.checks if not c.passed]
    assert not failed, "\n".join(f"{c.name}: {c.message}" for c in failed)
