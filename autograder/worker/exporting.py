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

from ..core.errors import describe_error
from ..core.records import ExportReply, ExportRequest


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
    from ..core import devices

    try:
        mesh = None if request.layout is None else mesh_for(*request.layout)
        dynamic, static = abstract_args(request, mesh)
        exported = devices.export(bind(fn, request, mesh, static), *dynamic,
                                  for_platform=request.platform, keep_unused=True)
        return ExportReply.of(request.id, exported.serialize())
    except Exception as e:  # noqa: BLE001 - any student failure becomes a message
        return ExportReply.of(request.id, error=describe_error(e))


__all__ = ["export_one", "quiet_debug_callbacks"]
