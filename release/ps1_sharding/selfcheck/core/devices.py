"""Device set-up shared by the grader, the notebooks and the self-check bundle.

The course needs 8 devices for its 2-D meshes. On a TPU VM or a multi-GPU host the real devices
are used. Everywhere else (a laptop, CI, Colab's single-chip runtimes) XLA:CPU is asked for 8
emulated devices; this must happen before JAX creates its backends, so call
:func:`setup_devices` first thing.
"""
from __future__ import annotations

import os
import warnings

from .versions import range_text, require_jax, support

N_DEVICES = 8


def _backends_initialized() -> bool:
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # pragma: no cover - private API moved
        return False


def setup_devices(n: int = N_DEVICES) -> None:
    """Make sure at least ``n`` CPU devices exist as a fallback for the course meshes.

    Asking XLA:CPU for ``n`` devices is harmless on TPU/GPU hosts: the accelerator stays the
    default backend and is used when it has enough devices (see :func:`course_devices`).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import jax

    require_jax(jax.__version__)  # stops here, saying what to run, on a JAX below the range
    if _backends_initialized():
        if len(jax.devices("cpu")) < n and len(jax.devices()) < n:
            warnings.warn(
                f"JAX was already initialised with {len(jax.devices())} device(s); the course "
                f"needs {n}. Restart the kernel and run the set-up cell first.",
                stacklevel=2,
            )
        return
    jax.config.update("jax_num_cpu_devices", n)


def course_devices(n: int = N_DEVICES):
    """The ``n`` devices the course meshes are built on: accelerators if there are enough."""
    import jax

    setup_devices(n)
    devs = jax.devices()
    if len(devs) >= n:
        return devs[:n]
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise RuntimeError(
            f"only {len(cpus)} CPU devices are available, and the course needs {n}: JAX "
            "started before the set-up asked for them. Restart the kernel (or Python) and run "
            "the notebook's set-up cell first, before anything uses JAX (from "
            f"{'autograder.core.devices' if __name__.startswith('autograder.') else 'selfcheck'}"
            " import setup_devices; setup_devices())"
        )
    return cpus[:n]


def platform() -> str:
    """'tpu', 'gpu' or 'cpu': where the course meshes live."""
    return course_devices()[0].platform


def describe_devices() -> str:
    """What the set-up cell prints: the JAX version (and whether it is in the course's tested
    range), the default devices and the devices the course meshes use, emulated or real."""
    import jax

    lines = [f"JAX {jax.__version__}"]
    where = support(jax.__version__)
    if where == "newer":
        lines[0] += (f": newer than the course's tested range ({range_text()}); if a cell fails "
                     "in a way the notebook does not explain, tell your instructor")
    else:
        lines[0] += f" (the course's tested range: {range_text()})"
    default = jax.devices()
    lines.append(f"default backend: {len(default)} {default[0].platform.upper()} device(s) "
                 f"({default[0].device_kind})")
    course = course_devices()
    kind = course[0].platform
    if kind == "cpu":
        lines.append(f"course meshes: {len(course)} emulated CPU devices (XLA:CPU splits this "
                     "machine's CPU; the hidden speed check uses a modeled TPU)")
    else:
        lines.append(f"course meshes: {len(course)} real {kind.upper()} devices "
                     f"({course[0].device_kind})")
    return "\n".join(lines)
