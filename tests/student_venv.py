"""A student's environment: a fresh virtual environment made from a release folder's
``requirements.txt`` alone, as its README tells a student to make one.

The suite's own environment has everything the course package needs (``rich``, ``tqdm``, the
cluster's packages ...), so a notebook run there cannot tell whether the folder's requirements
are enough: ps1's ``jax.debug.visualize_array_sharding`` needs ``rich``, which a folder once
left out (issue 54). The venv is made once per (requirements, Python, JAX) and kept in the
user's cache (``~/.cache/jax-scaling-course/student-venvs/<key>``: about 20 s of install and
10 s of bytecode the first time, nothing after), with JAX pinned to the version this run tests,
so that ``make test`` still runs the notebooks on the oldest JAX and ``make test-latest`` on the
newest. Workers that need it at once wait for the one that builds it (a file lock).
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: where the venvs are kept between runs
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
    / "jax-scaling-course" / "student-venvs"
#: the marker written last: a venv without it was cut short and is made again
READY = "made.json"
#: a venv for other requirements unused this long is removed
UNUSED_S = 7 * 24 * 3600


def requirement_specs(path: Path) -> list[str]:
    """The requirement lines of ``path`` without comments, in order."""
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def pins() -> list[str]:
    """The JAX of this run, which the venv gets too (inside the folder's range)."""
    return [f"{p}=={importlib.metadata.version(p)}" for p in ("jax", "jaxlib")]


def clean_env(venv: Path | None = None) -> dict:
    """This process's environment less what would reach the course package or the suite's
    venv (``PYTHONPATH``, ``VIRTUAL_ENV``) or choose the devices (``JAX_NUM_CPU_DEVICES``: the
    set-up cell does, as on a student's machine); ``venv``'s ``bin`` first on ``PATH``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JAX_NUM_CPU_DEVICES", "PYTHONHOME")}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    return env


def student_venv(requirements: Path) -> Path:
    """The venv made from ``requirements`` (and this run's JAX pinned): its folder. Made on
    first use; a failed install raises with pip's own last lines."""
    specs, pinned = requirement_specs(requirements), pins()
    made = {"requirements": sorted(specs), "pins": pinned,
            "python": platform.python_version(), "machine": platform.machine()}
    key = hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()[:16]
    home = CACHE / key
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / READY).is_file():
            os.utime(home / READY)  # last used: what pruning reads
            return home
        shutil.rmtree(home, ignore_errors=True)
        env = clean_env()
        _run([sys.executable, "-m", "venv", str(home)], env, "python -m venv")
        python = str(home / "bin" / "python")
        _run([python, "-m", "pip", "install", "--no-compile", "--quiet",
              "--disable-pip-version-check", "-r", str(requirements), *pinned], env,
             f"pip install -r {requirements.name} {' '.join(pinned)}")
        # the kernels import jax, numpy and matplotlib: compile them once, as the Makefile does
        _run([python, str(ROOT / "tools" / "compile_site.py")], env, "tools/compile_site.py")
        (home / READY).write_text(json.dumps(made, indent=1) + "\n")
    _prune(key, made)
    return home


def _run(cmd: list[str], env: dict, what: str) -> None:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise RuntimeError(f"making the student venv: {what} exited {p.returncode}:\n"
                           f"{(p.stdout + p.stderr)[-3000:]}")


def _prune(key: str, made: dict) -> None:
    """Remove the venvs made for other requirements on the same Python and JAX that no run has
    used for a week (each is about 0.8 GB); those of the other end of the JAX range stay."""
    import time

    for other in CACHE.iterdir():
        marker = other / READY
        if other.name == key or not marker.is_file() or \
                time.time() - marker.stat().st_mtime < UNUSED_S:
            continue
        try:
            was = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        if was.get("pins") == made["pins"] and was.get("python") == made["python"]:
            shutil.rmtree(other, ignore_errors=True)
