"""Turning a graded function into a ``jax.export`` artifact for one :class:`ExportRequest`.

This runs where student code runs (the untrusted worker, or in-process in the package's own
tests): by the package's one call shape (:mod:`autograder.core.calls`) it binds the mesh and
the static values as the request declares them, traces the function on abstract arguments
(shapes, dtypes, shardings; no array values exist here) and serializes the program. What comes
out is data: the trusted grader deserializes, checks and runs it without ever calling the
student's Python.

``jax.debug.print`` and ``jax.debug.visualize_array_sharding`` left in an answer are host
callbacks, which cannot be exported; :func:`quiet_debug_callbacks` turns them into no-ops so a
leftover print costs nothing. A program that needs Python at run time for its *result*
(``jax.pure_callback``, ``io_callback``) fails with a message saying so.
"""
from __future__ import annotations

from ..core.calls import Call, CallShape
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


def export_one(fn, request: ExportRequest, mesh_for) -> ExportReply:
    """The artifact for ``request`` (or an error text); never raises for student errors.

    ``mesh_for(layout)`` gives the ('X', 'Y') mesh of a layout on this process's devices.
    """
    try:
        mesh = None if request.layout is None else mesh_for(*request.layout)
        call = Call(CallShape.of_request(request), fn, mesh)
        exported, _ = call.export(call.abstract(request.args), for_platform=request.platform,
                                  keep_unused=True)
        return ExportReply.of(request.id, exported.serialize())
    except Exception as e:  # noqa: BLE001 - any student failure becomes a message
        return ExportReply.of(request.id, error=describe_error(e))


__all__ = ["export_one", "quiet_debug_callbacks"]
