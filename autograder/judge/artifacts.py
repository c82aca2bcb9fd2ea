"""Where programs come from, and how the trusted side takes them in.

An :class:`Exporter` answers :class:`~autograder.core.records.ExportRequest`\\ s with
:class:`~autograder.core.records.ExportReply`\\ s. The grader uses :class:`SandboxExporter` (the
student's code runs in :mod:`autograder.worker` inside the sandbox); the package's own tests
and the instructor's in-process tools use :class:`LocalExporter` on code they trust.

:func:`load_artifact` is the trusted side's door: it deserializes a reply and checks that the
program is what was asked for (argument shapes and dtypes, one output, the device count, the
platform) and that it calls nothing outside XLA (no host callbacks, no unknown custom calls),
before anything compiles or runs it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Protocol

from ..core.errors import CALLBACK_HINT
from ..core.results import your_code_raised
from ..core.records import (
    ExportReply,
    ExportRequest,
)
from ..core.stablehlo import module_text

#: custom calls a graded program may contain: JAX's own stable targets (sharding annotations,
#: linear algebra kernels), never a host callback
_EXTRA_FORBIDDEN = {"tf.call_tf_function"}
_CALLBACKS = re.compile(r"callback", re.I)
_TARGET = re.compile(r'custom_call\s*@([\w.$-]+)|call_target_name\s*=\s*"([^"]+)"')


def allowed_custom_calls() -> frozenset:
    from jax._src.export import _export

    return frozenset(_export._CUSTOM_CALL_TARGETS_GUARANTEED_STABLE) - _EXTRA_FORBIDDEN


class ArtifactError(Exception):
    """A reply that cannot be graded; the message is for the student."""


@dataclass
class Artifact:
    exported: object  # jax.export.Exported
    text: str  # its StableHLO

    @property
    def call(self) -> Callable:
        return self.exported.call


def load_artifact(reply: Optional[ExportReply], request: ExportRequest) -> Artifact:
    """The checked program of ``reply``, or :class:`ArtifactError` saying what is wrong."""
    import jax
    import jax.numpy as jnp

    if reply is None:
        raise ArtifactError("no program came back for this case")
    if reply.error is not None:  # the worker's words, after it ran the hand-in's code
        raise ArtifactError(reply.error if reply.error == CALLBACK_HINT
                            else your_code_raised(reply.error))
    try:
        exp = jax.export.deserialize(bytearray(reply.payload()))
    except Exception as e:  # noqa: BLE001
        raise ArtifactError(f"the exported program could not be read ({type(e).__name__})")
    want = [(tuple(a.shape), jnp.dtype(a.dtype)) for a in request.args if not a.is_static]
    got = [(tuple(a.shape), jnp.dtype(a.dtype)) for a in exp.in_avals]
    if got != want:
        raise ArtifactError(f"the program takes {got}, expected {want}")
    if len(exp.out_avals) != 1:
        raise ArtifactError(f"expected one array as the result, the program returns "
                            f"{len(exp.out_avals)} values")
    devices = 1 if request.layout is None else request.layout[0] * request.layout[1]
    if exp.nr_devices != devices:
        raise ArtifactError(f"the program runs on {exp.nr_devices} devices, expected {devices}")
    if tuple(exp.platforms) != (request.platform,):  # the worker exports for it alone
        raise ArtifactError(f"the program was lowered for {tuple(exp.platforms)}, expected "
                            f"{(request.platform,)}")
    if exp.ordered_effects or exp.unordered_effects:
        raise ArtifactError(CALLBACK_HINT)
    text = module_text(exp)
    allowed = allowed_custom_calls()
    for m in _TARGET.finditer(text):
        target = m.group(1) or m.group(2)
        if _CALLBACKS.search(target):
            raise ArtifactError(CALLBACK_HINT)
        if target not in allowed:
            raise ArtifactError(f"the program calls the custom kernel {target!r}, which the "
                                "grader does not run; write it with jax.numpy / jax.lax")
    return Artifact(exp, text)


class Exporter(Protocol):
    def export(self, requests: list[ExportRequest], timeout: float,
               on_reply: Optional[Callable[[ExportReply], None]] = None
               ) -> dict[int, ExportReply]:
        """Replies by request id (missing ids: no answer in time); ``on_reply`` is called with
        each reply as it arrives, so that its program compiles while the others export."""


