"""Exporting functions of this very process (trusted code only: the package's own tests, the
instructor's kernel in ``nbgrader validate``, the profiling tools).

The same :func:`~autograder.worker.exporting.export_one` as the sandboxed worker, without the
sandbox: never use it on a student's code.
"""
from __future__ import annotations

from ..core.errors import time_limit
from ..core.meshes import make_mesh
from ..core.records import ExportReply
from .exporting import export_one


class LocalExporter:
    """Exports functions of this process (the package's own tests; trusted code only).

    Each export runs under a per-request time limit (a Python loop that never ends at trace
    time); after one times out the function's other requests fail the same way."""

    #: this process imports what it needs, or it would not be running: never a fault here
    fault = None

    def __init__(self, functions: dict, per_request_s: float | None = None):
        self.functions = functions
        self.per_request_s = per_request_s

    @classmethod
    def of(cls, name: str, fn, per_request_s: float | None = None) -> "LocalExporter":
        return cls({name: fn} if callable(fn) else {}, per_request_s)

    def export(self, requests, timeout=None, on_reply=None):

        out, hung = {}, None
        for r in requests:
            fn = self.functions.get(r.function)
            if not callable(fn):
                out[r.id] = ExportReply.of(r.id, error=f"function {r.function!r} not found in "
                                           "the submission")
            elif hung is not None:
                out[r.id] = ExportReply.of(r.id, error=hung)
            else:
                with time_limit(self.per_request_s or timeout):
                    out[r.id] = export_one(fn, r, make_mesh)
                if out[r.id].error and "timed out after" in out[r.id].error:
                    hung = out[r.id].error
            if on_reply is not None:
                on_reply(out[r.id])
        return out
