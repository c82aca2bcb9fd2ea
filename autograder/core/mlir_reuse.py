"""MLIR contexts reused within a thread, as JAX itself does from 0.12 on.

Every lowering, export and deserialization makes a new MLIR context, loading every dialect
into it (about 5 ms, and as much again to free it). A grading makes three or four per program
(the worker's export, the grader's deserialization and lowering, the readers' parses): about
4 CPU seconds of ps2's 27. JAX 0.12 keeps one context per thread and makes a new one after ten
uses, so that what a context interns (types, attributes, locations) stays bounded;
:func:`reuse_per_thread` gives an older JAX the same policy, in the processes that grade (the
trusted grader, the worker that exports a hand-in) and never in a student's kernel.

A context is never shared between threads, and a module made in one stays valid after its
thread moves on to the next context (a module holds its context). What a program compiles to
does not depend on the context it was lowered in: the verdict table reads the same either way.
Nor is one shared between submissions: a warm grader calls :func:`forget` after each job, so
that nothing one hand-in's programs left in a context (its constants, its resource blobs) is
there when the next one's are read.
"""
from __future__ import annotations

import threading

#: how many times a thread's context is handed out again before a new one is made (JAX 0.12's
#: own bound)
REUSES = 10

#: what :func:`reuse_per_thread` found, once called: "jax" (JAX reuses contexts itself),
#: "installed" (this module's policy), or why neither (the private API moved)
state: str | None = None

#: bumped by :func:`forget`: a context held from an earlier generation is never handed out
_generation = 0


def reuse_per_thread() -> str:
    """Make ``jax._src.interpreters.mlir.make_ir_context`` hand each thread its own context up
    to :data:`REUSES` more times, where this JAX does not already; idempotent. Returns
    :data:`state`. Where the private API is not as expected nothing is changed, and the reason
    is returned (grading is then as correct, and slower)."""
    global state
    if state is not None:
        return state
    try:
        from jax._src.interpreters import mlir
    except ImportError as e:  # pragma: no cover - private API moved
        state = f"not reused: {e}"
        return state
    if hasattr(mlir, "_thread_local_context"):
        state = "jax"
        return state
    make = getattr(mlir, "make_ir_context", None)
    if not callable(make):  # pragma: no cover - private API moved
        state = "not reused: jax._src.interpreters.mlir has no make_ir_context"
        return state
    local = threading.local()

    def make_ir_context():
        held = getattr(local, "held", None)
        if held is not None and held[1] < REUSES and held[2] == _generation:
            local.held = (held[0], held[1] + 1, held[2])
            return held[0]
        ctx = make()
        local.held = (ctx, 0, _generation)
        return ctx

    make_ir_context.__doc__ = make.__doc__
    make_ir_context.made_by = make  # the JAX function each new context comes from
    mlir.make_ir_context = make_ir_context
    state = "installed"
    return state


def forget() -> None:
    """Hand out no context made before this call (in any thread, under this module's policy;
    under JAX's own, in the calling thread, the only one a warm grader keeps between jobs)."""
    global _generation
    _generation += 1
    if state == "jax":
        from jax._src.interpreters import mlir

        try:
            mlir._thread_local_context.set_local(None)
        except Exception as e:  # noqa: BLE001 - private API moved: said, never silent
            import sys

            print(f"MLIR contexts: the last job's could not be dropped ({e})", file=sys.stderr)


__all__ = ["REUSES", "forget", "reuse_per_thread", "state"]
