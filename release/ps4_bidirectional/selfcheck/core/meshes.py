"""The 2-D ('X', 'Y') meshes every problem runs on, with Auto axis types (the GSPMD world)."""
from __future__ import annotations

import functools

from .devices import N_DEVICES, course_devices

AXES = ("X", "Y")
#: The layouts the hidden tests use for 8 devices.
LAYOUTS = ((2, 4), (4, 2), (1, 8), (8, 1))


def layouts(n: int = N_DEVICES) -> tuple[tuple[int, int], ...]:
    """Every (X, Y) with X * Y == n, the course's four first."""
    extra = tuple((x, n // x) for x in range(1, n + 1) if n % x == 0)
    base = tuple(l for l in LAYOUTS if l[0] * l[1] == n)
    return base + tuple(l for l in extra if l not in base)


@functools.lru_cache(maxsize=None)
def make_mesh(x: int, y: int):
    """An ('X', 'Y') mesh of shape (x, y) with Auto axes on the course devices."""
    import jax
    from jax.sharding import AxisType

    devs = course_devices(x * y)
    return jax.make_mesh((x, y), AXES, axis_types=(AxisType.Auto,) * 2, devices=devs)


def mesh_label(mesh) -> str:
    return "x".join(str(mesh.shape[a]) for a in AXES)
