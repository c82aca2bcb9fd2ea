"""How the judge binds the mesh, splits static from array arguments and places a case's inputs on
the course's devices (as arrays, or as shapes to compile from), and compiles trusted code: each
through the one call shape every side of the package uses (:mod:`autograder.core.calls`)."""
from __future__ import annotations

from typing import Optional

from ..core.calls import Call
from ..core.problem import Case, Problem
from ..core.records import ExportRequest


def place_args(problem: Problem, case: Case, mesh) -> list:
    """The case's arguments placed on ``mesh`` as the problem's specs say (static values as
    they are)."""
    return Call.of(problem, mesh=mesh).place(case.args)


def shaped_args(problem: Problem, req: ExportRequest, mesh) -> list:
    """What :func:`place_args` gives for the request's case, as shapes (each with the sharding
    ``place_args`` would give it): enough to lower and compile its program."""
    return Call.of(problem, mesh=mesh).abstract(req.args)


def dynamic_args(problem: Problem, args) -> list:
    """The array arguments of ``args`` (the static ones dropped), as a program takes them."""
    return Call.of(problem).dynamic(args)


def compile_for(problem: Problem, fn, mesh, args, *, baseline: bool = False,
                options: Optional[dict] = None):
    """jit + lower + compile trusted ``fn`` (the jit baseline: its output pinned to the
    problem's sharding) for these placed args."""
    return Call.of(problem, fn, mesh).lower(args, out_sharding=baseline).compile(options)
