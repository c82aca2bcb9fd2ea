"""The hidden nbgrader cells' entry point.

Each graded function's hidden cell holds only::

    from autograder.classroom.cells import grade
    grade("roll_diff", globals())

Under ``nbgrader autograde`` these cells never run in the student's kernel: the course's
preprocessor (:mod:`autograder.classroom.nbgrader_plugin`) runs the student's cells in the sandbox and
writes each hidden cell's report and points from the trusted grader. This function is what the
cell does when the *instructor* runs the source notebook (``nbgrader validate``, or by hand): it
grades the function defined in that kernel, in-process, and returns the points as partial
credit. All output goes to stdout: nbgrader gives zero to a cell that writes to stderr.
"""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def _stderr_to_stdout():
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        saved_fd = os.dup(2)
        os.dup2(1, 2)
    except OSError:
        saved_fd = None
    old = sys.stderr
    sys.stderr = sys.stdout
    try:
        yield
    finally:
        sys.stderr = old
        if saved_fd is not None:
            sys.stdout.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)


class Points(float):
    """The points a hidden cell returns; shows as a bare number so nbgrader reads it."""

    def __repr__(self) -> str:
        return f"{float(self):g}"


def grade(name: str, namespace: dict | None = None, *, quick: bool = False) -> Points:
    """Grade ``namespace[name]`` of this (trusted) kernel and return the points."""
    with _stderr_to_stdout():
        from ..core.devices import setup_devices

        setup_devices()
        from ..course import registry
        from ..judge import grading

        problem = registry.get(name)
        fn = (namespace or {}).get(name)
        try:
            result = grading.grade_function(problem, fn if callable(fn) else None, quick=quick)
        except Exception as e:  # the grader itself failed: say so, give nothing
            print(f"{name}: the grader could not run ({type(e).__name__}: {e})")
            return Points(0.0)
        print(result.report())
    return Points(result.score)
