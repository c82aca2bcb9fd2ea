"""One test per graded function: it passes only if every check passes."""
from ..judge import grading


def test_function(problem, submissions, request):
    source = submissions(problem.assignment)(problem.name)
    res = grading.grade_function(problem, source,
                                 with_speed=not request.config.getoption("--no-speed"))
    print(res.report())
    failed = [c for c in res.checks if not c.passed]
    assert not failed, "\n".join(f"{c.name}: {c.message}" for c in failed)
