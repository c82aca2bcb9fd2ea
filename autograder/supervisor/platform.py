"""Where the course's devices are on this host, for the processes that never import JAX.

The supervisor starts every grading process (the judge, its warm-up); each must see JAX's
default backend *as* the course's devices (:mod:`autograder.core.devices`). On a host with
fewer accelerators than the course needs (a one-GPU machine, Colab), the course runs on
emulated CPU devices and a grading process must never open the accelerator: JAX would take
most of the GPU's memory there and, under the judge's address-space limit, abort. So the
course's platform is learned once here, without importing JAX in this process: at once where
no accelerator plugin is installed, else from a short-lived probe process.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.devices import N_DEVICES

#: the folder this package was imported from: a checkout's root, or site-packages
PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _site_dirs() -> set[str]:
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {str(Path(d).resolve()) for d in dirs if d}


def with_package(env: dict) -> dict:
    """``env`` with :data:`PACKAGE_PARENT` first on ``PYTHONPATH``: a Python this process
    starts (a judge, the probe) imports this very package, also from a checkout that was never
    installed (``python -m autograder`` from its root, whose folder no child starts in), and
    never another copy earlier on the path. Installed (the package in a site-packages folder,
    which every Python of this installation reads anyway) ``env`` is left as it is: that folder
    on ``PYTHONPATH`` would come before the standard library."""
    if PACKAGE_PARENT in _site_dirs():
        return dict(env)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != PACKAGE_PARENT]
    return {**env, "PYTHONPATH": os.pathsep.join([PACKAGE_PARENT, *rest])}


#: what a probe process prints: JAX's default backend (export naming) and its device count
_PROBE = ("import json, jax\n"
          "from autograder.core.devices import _export_name\n"
          "d = jax.devices()\n"
          "print(json.dumps({'platform': _export_name(d[0].platform), 'count': len(d)}))\n")
#: seconds a probe of the host's default backend may take (importing JAX, opening the devices)
PROBE_S = 180.0


@dataclass(frozen=True)
class GraderPlatform:
    """Where the course's devices are on this host, as a process that never imports JAX (the
    supervisor) learns it: the environment every grading process it starts gets, so that JAX's
    default backend there *is* the course's devices."""

    #: the course's devices: 'cpu' (8 emulated), or the accelerator's export name
    platform: str
    #: JAX's default backend on this host ('cpu' where no accelerator plugin is installed)
    default: str
    #: how many devices the default backend has
    count: int
    #: how it was found, in words
    how: str

    @property
    def env(self) -> dict:
        """What a grading process's environment adds: on emulated devices JAX never opens the
        accelerator (it would take the GPU's memory, and abort under the judge's address-space
        limit)."""
        return {"JAX_PLATFORMS": "cpu"} if self.platform == "cpu" else {}

    @property
    def accelerator(self) -> bool:
        return self.platform != "cpu"


def accelerator_plugins() -> list[str]:
    """The JAX accelerator plugins installed in this Python (found without importing JAX)."""
    import importlib.util
    import pkgutil
    from importlib import metadata

    found = {ep.name for ep in metadata.entry_points(group="jax_plugins")}
    try:
        import jax_plugins  # the namespace package JAX also scans

        found |= {m.name for m in pkgutil.iter_modules(jax_plugins.__path__)}
    except ImportError:
        pass
    if importlib.util.find_spec("libtpu") is not None:
        found.add("libtpu")
    return sorted(found)


@functools.lru_cache(maxsize=1)
def grader_platform(n: int = N_DEVICES) -> GraderPlatform:
    """The course's platform on this host, for processes that never import JAX: 'cpu' at once
    where ``JAX_PLATFORMS`` says only cpu or no accelerator plugin is installed; otherwise a
    short-lived probe process asks JAX (once per process). A probe that fails leaves the course
    on emulated CPU devices, which work on every host, and says why."""
    asked = [p.strip() for p in os.environ.get("JAX_PLATFORMS", "").split(",") if p.strip()]
    if asked and set(asked) <= {"cpu"}:
        return GraderPlatform("cpu", "cpu", n, "JAX_PLATFORMS=cpu")
    plugins = accelerator_plugins()
    if not plugins and not (asked and set(asked) - {"cpu"}):
        return GraderPlatform("cpu", "cpu", n, "no JAX accelerator plugin is installed")
    env = with_package({**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                           timeout=PROBE_S, env=env, stdin=subprocess.DEVNULL)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        default, count = str(got["platform"]), int(got["count"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError) as e:
        why = getattr(e, "stderr", None) or str(e)
        return GraderPlatform("cpu", "unknown", 0, f"the probe of JAX's default backend failed "
                              f"({str(why).strip()[-200:]}); the course uses emulated CPU devices")
    where = ", ".join(plugins) or "JAX_PLATFORMS"
    if default != "cpu" and count >= n:
        return GraderPlatform(default, default, count, f"{count} {default} devices ({where})")
    return GraderPlatform("cpu", default, count,
                          f"{count} {default} device(s) ({where}): fewer than {n}, so the course "
                          f"uses {n} emulated CPU devices")
