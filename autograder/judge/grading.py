"""The trusted runner's public surface: gathers evidence about one graded function and hands it to
the checks.

``grade_function(problem, exporter)`` (:mod:`.judging`) plans the cases from a fresh secret seed
(:mod:`.planning`) and asks the untrusted side for the student's *programs* (``jax.export``
artifacts of ``jax.jit(functools.partial(fn, mesh=mesh))`` for each mesh layout and argument
signature; the request carries shapes, never values). Once the artifacts are here it makes the
inputs (:mod:`.placement`), compiles each program once per kind (:mod:`.programs`, ahead in a
pool: :mod:`.pool`), runs the numerics cases and reads their structure from the StableHLO they
hold (:mod:`.running`), measures memory (:mod:`.measured`) and speed against the jit baseline
(:mod:`.speed`, :mod:`.baseline`) and returns a :class:`FunctionResult`. Every failure (an
export error, a program that hangs, NaNs, a wrong shape) becomes a failed check with a message;
a failure of the grader's own work is a :class:`GraderFault`, whose owner the job's
:class:`Ownership` tells (:mod:`.ownership`).

The names below are the engine's surface: callers outside the judge import them from here.
"""
from __future__ import annotations

from ..core.devices import platform as current_platform
from ..core.meshes import make_mesh
from ..core.results import FunctionResult
from .baseline import baseline_text
from .judging import grade_function
from .ownership import GraderFault, Owner, Ownership, fault_text
from .placement import compile_for, dynamic_args, place_args, shaped_args
from .planning import Plan, fresh_seed, plan_for, request_for, signature_of
from .pool import CompilePool
from .programs import CompileKind, Programs
from .running import CALL_TIMEOUT, run_case
from .speed import measure, timed_here

__all__ = ["CALL_TIMEOUT", "CompileKind", "CompilePool", "FunctionResult", "GraderFault",
           "Owner", "Ownership", "Plan", "Programs", "baseline_text", "compile_for",
           "current_platform", "dynamic_args", "fault_text", "fresh_seed", "grade_function",
           "make_mesh", "measure", "place_args", "plan_for", "request_for", "run_case",
           "shaped_args", "signature_of", "timed_here"]
