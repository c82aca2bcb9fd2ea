"""The JAX releases the course supports, and what to do outside them.

The range is tested at both ends: ``make test`` runs the whole suite on :data:`JAX_MIN`, and
``make test-latest`` on the newest release the range allows (:data:`JAX_TESTED` when it was last
bumped). ``pyproject.toml`` and every release folder's ``requirements.txt`` declare the same
bounds (``jax>=JAX_MIN,<JAX_BELOW``; tests keep them in step). Standard library only: this
module is copied into every release folder's ``selfcheck`` package, which checks with
:func:`require_installed` before anything imports JAX, so the set-up cell stops on a missing
JAX, or one older than the range, with the line to run.
"""
from __future__ import annotations

import re

#: the oldest JAX (and jaxlib) the course supports
JAX_MIN = "0.10.2"
#: the newest release the whole suite and the verdict table have passed on
JAX_TESTED = "0.12.0.1"
#: the first release outside the declared range
JAX_BELOW = "0.13"


class JaxTooOld(ImportError):
    """This JAX is older than the course supports (an ImportError: the set-up cell's import
    stops on it, saying what to run)."""


class JaxMissing(ImportError):
    """This Python has no JAX (or no NumPy) at all."""


def version_tuple(v: str) -> tuple[int, ...]:
    """``'0.12.0.1'`` -> ``(0, 12, 0, 1)``; a pre-release or local tail is dropped."""
    out = []
    for part in str(v).split("+")[0].split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        out.append(int(m.group()))
        if m.end() != len(part):  # 0.13.0rc1 -> (0, 13, 0)
            break
    return tuple(out)


def jax_version() -> str:
    import jax

    return jax.__version__


def support(version: str | None = None) -> str:
    """``'old'`` (below the range), ``'tested'`` (inside it) or ``'newer'`` (above it)."""
    v = version_tuple(version or jax_version())
    if v < version_tuple(JAX_MIN):
        return "old"
    if v >= version_tuple(JAX_BELOW):
        return "newer"
    return "tested"


def range_text() -> str:
    return f"JAX {JAX_MIN} up to (not including) {JAX_BELOW}; newest tested {JAX_TESTED}"


def upgrade_command(tpu: bool = False) -> str:
    extra = "[tpu]" if tpu else ""
    return f'pip install -U "jax{extra}>={JAX_MIN},<{JAX_BELOW}"'


def require_installed() -> None:
    """Raise :class:`JaxMissing` or :class:`JaxTooOld`, saying the one line to run, when this
    Python has no JAX (or NumPy), or a JAX older than the range; imports neither (the
    self-check package calls this before any module of its own needs them)."""
    import importlib.metadata
    import importlib.util

    after = ("then restart the kernel (Colab: Runtime > Restart session) and run the set-up "
             "cell again")
    if importlib.util.find_spec("jax") is None:
        raise JaxMissing(
            f"this Python has no JAX; the course needs {range_text()}. Install it with\n"
            f"    {upgrade_command()}\n(on a TPU runtime: {upgrade_command(tpu=True)}; or "
            f"everything this folder needs: pip install -r requirements.txt), {after}.")
    if importlib.util.find_spec("numpy") is None:
        raise JaxMissing(f"this Python has no NumPy. Install what this folder needs with\n"
                         f"    pip install -r requirements.txt\n{after}.")
    try:
        version = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:  # a source checkout: asked when imported
        return
    require_jax(version)


def require_jax(version: str | None = None) -> None:
    """Raise :class:`JaxTooOld`, saying what to run, if this JAX is older than the range."""
    version = version or jax_version()
    if support(version) == "old":
        raise JaxTooOld(
            f"this course needs JAX {JAX_MIN} or newer, and this Python has JAX {version}. "
            f"Upgrade it with\n    {upgrade_command()}\n(on a TPU runtime: "
            f"{upgrade_command(tpu=True)}), then restart the runtime (Colab: Runtime > Restart "
            "session; Kaggle: Run > Restart & clear cell outputs) and run the set-up cell again.")
