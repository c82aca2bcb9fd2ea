"""Turning a graded function into a ``jax.export`` artifact for one :class:`ExportRequest`.

This runs where student code runs (the untrusted worker, or in-process in the package's own
tests): it binds the mesh and the static values, traces the function with
``jax.jit(functools.partial(fn, mesh=mesh))`` on abstract arguments (shapes, dtypes, shardings;
no array values exist here) and serializes the program. What comes out is data: the trusted
grader deserializes, checks and runs it without ever calling the student's Python.

``jax.debug.print`` and ``jax.debug.visualize_array_sharding`` left in an answer are host
callbacks, which cannot be exported; :func:`quiet_debug_callbacks` turns them into no-ops so a
leftover print costs nothing. A program that needs Python at run time for its *result*
(``jax.pure_callback``, ``io_callback``) fails with a message saying so.
"""
from __future__ import annotations

import functools
import traceback

from .records import ArgSpec, ExportReply, ExportRequest

CALLBACK_HINT = ("your function calls back into Python at run time (jax.pure_callback, "
                 "io_callback or jax.debug.callback); graded programs must be pure JAX that "
                 "compiles to one XLA program. Compute the value with jax.numpy / jax.lax instead")


def quiet_debug_callbacks() -> None:
    """Make the debugging helpers that only print into no-ops (call before loading code)."""
    import jax

    def _nothing(*args, **kwargs):
        return None

    for name in ("print", "visualize_array_sharding", "inspect_array_sharding",
                 "visualize_sharding"):
        if hasattr(jax.debug, name):
            setattr(jax.debug, name, _nothing)


def abstract_args(request: ExportRequest, mesh):
    """(dynamic ShapeDtypeStructs, {position: static value}) for a request."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    dynamic, static = [], {}
    for i, a in enumerate(request.args):
        if a.is_static:
            static[i] = a.static
            continue
        sharding = None
        if mesh is not None and a.spec is not None:
            sharding = NamedSharding(mesh, PartitionSpec(*a.spec))
        dynamic.append(jax.ShapeDtypeStruct(a.shape, jnp.dtype(a.dtype), sharding=sharding))
    return dynamic, static


def bind(fn, request: ExportRequest, mesh, static: dict):
    """A callable of the dynamic arguments only: mesh and static values bound."""
    n = len(request.args)

    def bound(*dyn):
        it = iter(dyn)
        args = [static[i] if i in static else next(it) for i in range(n)]
        if mesh is None:
            return fn(*args)
        return fn(*args, mesh=mesh)

    return functools.wraps(fn)(bound) if callable(fn) else bound


def export_one(fn, request: ExportRequest, mesh_for) -> ExportReply:
    """The artifact for ``request`` (or an error text); never raises for student errors.

    ``mesh_for(layout)`` gives the ('X', 'Y') mesh of a layout on this process's devices.
    """
    import jax

    try:
        mesh = None if request.layout is None else mesh_for(*request.layout)
        dynamic, static = abstract_args(request, mesh)
        jitted = jax.jit(bind(fn, request, mesh, static), keep_unused=True)
        exported = jax.export.export(jitted, platforms=[request.platform])(*dynamic)
        return ExportReply.of(request.id, exported.serialize())
    except Exception as e:  # noqa: BLE001 - any student failure becomes a message
        return ExportReply.of(request.id, error=describe_error(e))


def describe_error(e: BaseException, limit: int = 1500) -> str:
    """The error as a student should see it: its type, JAX's whole message (hint lines kept),
    and where in the submission it happened."""
    text = f"{type(e).__name__}: {e}".strip()
    low = text.lower()
    if "callback" in low and any(w in low for w in ("custom call", "serializ", "export")):
        return CALLBACK_HINT
    lines = [l for l in text.splitlines() if l.strip() and not set(l.strip()) <= {"-"}]
    lines = [l for l in lines if "JAX_TRACEBACK_FILTERING" not in l
             and "removed its internal frames" not in l]
    tb = traceback.extract_tb(e.__traceback__)
    student = [f for f in tb if f.filename.startswith("<")]
    if student:
        lines.append(f"(at {student[-1].filename} line {student[-1].lineno})")
    return cap_lines(lines, limit)


def cap_lines(lines: list[str], limit: int) -> str:
    """``lines`` joined, within ``limit`` characters: the first lines (what went wrong) and the
    last ones (where JAX says how to fix it, and where it happened) are kept, lines from the
    middle are left out first, and a line is cut short only when it alone is too long."""
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head, tail = [], []
    room = limit - 40  # the marker line
    for i in range(len(lines)):  # alternately from the start and from the end
        line = lines[i // 2] if i % 2 == 0 else lines[-1 - i // 2]
        if i == 0 and len(line) + 1 > room // 2:  # what went wrong, cut to leave room
            line = line[:room // 2 - 5] + " ..."
        elif len(line) + 1 > room:
            break
        (head if i % 2 == 0 else tail).append(line)
        room -= len(line) + 1
    left_out = len(lines) - len(head) - len(tail)
    marker = [f"[... {left_out} line{'s' * (left_out != 1)} left out ...]"] if left_out else []
    return "\n".join(head + marker + tail[::-1])[:limit]


def spec_of(problem_spec) -> tuple | None:
    """A PartitionSpec as the tuple an :class:`ArgSpec` carries."""
    if problem_spec is None:
        return None
    return tuple(tuple(s) if isinstance(s, (list, tuple)) else s for s in tuple(problem_spec))


__all__ = ["ArgSpec", "export_one", "quiet_debug_callbacks", "describe_error", "spec_of",
           "CALLBACK_HINT"]
