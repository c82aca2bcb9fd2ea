"""The course's devices, and the one door through which course code reaches them.

The course needs 8 devices for its 2-D meshes. On a TPU VM or a multi-GPU host the real devices
are used. Everywhere else (a laptop, CI, Colab's single-chip runtimes) XLA:CPU is asked for 8
emulated devices; this must happen before JAX creates its backends, so call
:func:`setup_devices` first thing.

On a one-chip GPU or TPU host JAX's *default* backend is the accelerator while the course's
devices are CPU devices. Course code therefore never relies on JAX's defaults: every export,
jit, lowering and placement goes through :func:`export`, :func:`jit` / :func:`lower` and
:func:`place` here, which name the course's devices and their platform
(``tests/test_devices.py`` fails on a raw ``jax.export.export``, ``jax.jit`` or
``jax.device_put`` anywhere else in the package). Processes that never import JAX (the
supervisor) learn the course's platform from
:func:`autograder.supervisor.platform.grader_platform`.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Optional

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


def _export_name(platform: str) -> str:
    """A device's platform in ``jax.export``'s naming ('gpu' is 'cuda' or 'rocm')."""
    if platform != "gpu":
        return platform
    try:
        from jax._src import xla_bridge

        return xla_bridge.canonicalize_platform(platform)
    except Exception:  # noqa: BLE001 - private API moved: CUDA is by far the likeliest
        return "cuda"


def platform() -> str:
    """Where the course meshes live, in ``jax.export``'s naming: 'cpu', 'cuda', 'rocm' or
    'tpu' (the platform every course export names)."""
    return _export_name(course_devices()[0].platform)


def is_accelerator() -> bool:
    """Whether the course's devices are real accelerators (else emulated CPU devices)."""
    return platform() != "cpu"


@contextlib.contextmanager
def on_course_devices():
    """Computations that name no device (uncommitted arguments, array creation) run on the
    course's first device inside this block, never on JAX's default backend."""
    import jax

    with jax.default_device(course_devices()[0]):
        yield


class Jitted:
    """``jax.jit(fn, **kw)`` whose calls and lowerings happen on the course's devices."""

    def __init__(self, fn, **kw):
        import jax

        self._jitted = jax.jit(fn, **kw)

    def __call__(self, *args, **kwargs):
        with on_course_devices():
            return self._jitted(*args, **kwargs)

    def lower(self, *args, **kwargs):
        with on_course_devices():
            return self._jitted.lower(*args, **kwargs)


def jit(fn, **kw) -> Jitted:
    """``jax.jit`` on the course's devices (see :class:`Jitted`)."""
    return Jitted(fn, **kw)


def lower(fn, *args, **kw):
    """``jax.jit(fn, **kw).lower(*args)`` on the course's devices."""
    return jit(fn, **kw).lower(*args)


def export(fn, *args, for_platform: Optional[str] = None, **kw):
    """``jax.export.export(jax.jit(fn, **kw))(*args)`` for the course's platform (or
    ``for_platform``: the sandboxed worker, which runs on CPU, exports for the grader's)."""
    import jax

    with on_course_devices():
        return jax.export.export(jax.jit(fn, **kw),
                                 platforms=(for_platform or platform(),))(*args)


def place(value, mesh=None, spec=None):
    """``value`` on the course's devices: sharded by ``spec`` over ``mesh``, or on the mesh's
    (or, without a mesh, the course's) first device when ``spec`` is None."""
    import jax
    from jax.sharding import NamedSharding

    if mesh is not None and spec is not None:
        return jax.device_put(value, NamedSharding(mesh, spec))
    if mesh is None and spec is not None:
        raise ValueError(f"a sharding spec ({spec}) needs a mesh to place {type(value).__name__}")
    device = mesh.devices.flat[0] if mesh is not None else course_devices()[0]
    return jax.device_put(value, device)


def place_like(value, sharding):
    """``value`` placed as an array of the course already is (its ``sharding``)."""
    import jax

    return jax.device_put(value, sharding)


def describe_devices() -> str:
    """What the set-up cell prints: the JAX version (and whether it is in the course's tested
    range), the default devices and the devices the course meshes use, emulated or real."""
    import jax

    setup_devices()  # before jax.devices() below starts JAX with one CPU device
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
    if default[0] not in course:
        lines.append(f"your own cells: arrays you make without a mesh go to JAX's default "
                     f"device ({default[0].platform.upper()} {default[0].id}); put them on a "
                     "course mesh (make_mesh, jax.device_put with a NamedSharding) to use the "
                     "course's devices, as every check does")
    return "\n".join(lines)

