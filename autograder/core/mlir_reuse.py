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
"""
from __future__ import annotations

import threading

#: how many times a thread's context is handed out again before a new one is made (JAX 0.12's
#: own bound)
REUSES = 10

#: what :func:`reuse_per_thread` found, once called: "jax" (JAX reuses contexts itself),
#: "installed" (this module's policy), or why neither (the private API moved)
state: str | None = None


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
        if held is not None and held[1] < REUSES:
            local.held = (held[0], held[1] + 1)
            return held[0]
        ctx = make()
        local.held = (ctx, 0)
        return ctx

    make_ir_context.__doc__ = make.__doc__
    make_ir_context.made_by = make  # the JAX function each new context comes from
    mlir.make_ir_context = make_ir_context
    state = "installed"
    return state


__all__ = ["REUSES", "reuse_per_thread", "state"]
