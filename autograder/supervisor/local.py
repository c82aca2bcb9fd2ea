"""Grading trusted code in this very process: the package's own tests, the reference answers
(``pytest autograder``) and the instructor's kernel when a source notebook's hidden cells run
(``nbgrader validate``).

The same judge as for a student, fed by :class:`~autograder.worker.local.LocalExporter` instead
of the sandboxed worker; no isolation and no process limits beyond a per-call time limit. Never
use it on a student's code: that goes through :func:`autograder.supervisor.supervise.grade_submission`.
"""
from __future__ import annotations

from ..core.problem import Problem
from ..core.results import FunctionResult
from ..judge import grading, running
from ..worker.local import LocalExporter


def grade_function(problem: Problem, fn, **kw) -> FunctionResult:
    """Grade ``fn`` (trusted, defined in this process; None: not defined) as the judge grades a
    submission's program. ``kw`` as :func:`autograder.judge.grading.grade_function`."""
    source = None if not callable(fn) else LocalExporter.of(
        problem.name, fn, per_request_s=running.CALL_TIMEOUT)
    return grading.grade_function(problem, source, **kw)
