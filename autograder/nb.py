"""The nbgrader hidden cells' entry point.

Each graded function's hidden cell holds only::

    from autograder.nb import grade
    grade("roll_diff", globals())

``grade`` runs the same checks as the CLI on the function the notebook defines, prints the
feedback and returns the points earned, which nbgrader records as partial credit. All output goes
to stdout: nbgrader gives zero to a cell that writes to stderr.

The student's cells ran in this kernel before the hidden cell, so nothing in this process can be
trusted (a cell may have frozen the clocks, patched JAX or NumPy, or replaced the grader's
functions). When the kernel's input history is available (IPython's ``In``, as under nbgrader),
the cells as they were executed are graded again in an isolated worker process with the same
protections as ``python -m autograder grade`` (:mod:`autograder.sandbox`); only outside IPython
does it fall back to grading the namespace in-process.
"""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def _stderr_to_stdout():
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fd = None
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


def _history(namespace: dict | None) -> list[str] | None:
    """The kernel's executed cells, in execution order (None outside IPython)."""
    for key in ("In", "_ih"):
        h = (namespace or {}).get(key)
        if isinstance(h, list) and all(isinstance(c, str) for c in h):
            return list(h)
    try:
        ip = get_ipython()  # type: ignore[name-defined]  # noqa: F821
        h = ip.user_ns.get("In")
        return list(h) if isinstance(h, list) else None
    except NameError:
        return None


def _grade_isolated(name: str, cells: list[str], quick: bool) -> Points:
    import tempfile
    from pathlib import Path

    from . import registry, sandbox

    problem = registry.get(name)
    with tempfile.TemporaryDirectory(prefix="autograder-nb-") as tmp:
        src = Path(tmp) / f"{problem.assignment}.py"
        src.write_text("\n\n".join(c for c in cells if c.strip()) + "\n")
        opts = sandbox.Options(assignment=problem.assignment, quick=quick, only=[name])
        res = sandbox.grade_submission(src, opts)
    result = res.functions[name]
    print(result.report())
    return Points(result.score)


def grade(name: str, namespace: dict | None = None, *, quick: bool = False) -> Points:
    """Grade ``namespace[name]`` and return the points (never raises for student errors)."""
    cells = _history(namespace)
    if cells is not None:
        with _stderr_to_stdout():
            try:
                return _grade_isolated(name, cells, quick)
            except Exception as e:  # the grader itself failed: say so, give nothing
                print(f"{name}: the grader could not run ({type(e).__name__}: {e})")
                return Points(0.0)
    with _stderr_to_stdout():
        from .devices import setup_devices

        setup_devices()
        from . import grading, registry

        problem = registry.get(name)
        fn = (namespace or {}).get(name)
        try:
            result = grading.grade_function(problem, fn if callable(fn) else None, quick=quick)
        except Exception as e:  # the grader itself failed: say so, give nothing
            print(f"{name}: the grader could not run ({type(e).__name__}: {e})")
            return Points(0.0)
        print(result.report())
    return Points(result.score)
