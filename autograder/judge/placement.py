"""How the judge binds the mesh, splits static from array arguments and places a case's inputs on
the course's devices (as arrays, or as shapes to compile from), and compiles trusted code."""
from __future__ import annotations

import functools
from typing import Callable, Optional

import numpy as np

from ..core import devices
from ..core.problem import Case, Problem
from ..core.records import ExportRequest


def place_args(problem: Problem, case: Case, mesh) -> list:
    """The case's arguments placed on ``mesh`` as the problem's specs say (static values as
    they are)."""
    out = []
    for a, spec in zip(case.args, problem.in_specs):
        if spec is None:
            out.append(a)
        elif problem.uses_mesh:
            out.append(devices.place(a, mesh, spec))
        else:
            out.append(devices.place(a, mesh))
    return out


def shaped_args(problem: Problem, req: ExportRequest, mesh) -> list:
    """What :func:`place_args` gives for the request's case, as shapes (each with the sharding
    ``place_args`` would give it): enough to lower and compile its program."""
    import jax
    from jax.sharding import NamedSharding, SingleDeviceSharding

    out = []
    for a, spec in zip(req.args, problem.in_specs, strict=True):
        if spec is None:
            out.append(a.static)
            continue
        where = (NamedSharding(mesh, spec) if problem.uses_mesh
                 else SingleDeviceSharding(mesh.devices.flat[0]))
        out.append(jax.ShapeDtypeStruct(a.shape, np.dtype(a.dtype), sharding=where))
    return out


def dynamic_args(problem: Problem, args) -> list:
    """The array arguments of ``args`` (the static ones dropped), as a program takes them."""
    return [a for a, s in zip(args, problem.in_specs, strict=True) if s is not None]


def bind_mesh(problem: Problem, fn, mesh) -> Callable:
    """``fn`` with ``mesh`` bound where the problem takes one."""
    return functools.partial(fn, mesh=mesh) if problem.uses_mesh else fn


def compile_for(problem: Problem, fn, mesh, args, *, baseline: bool = False,
                options: Optional[dict] = None):
    """jit + lower + compile trusted ``fn`` (the jit baseline) for these placed args."""
    from jax.sharding import NamedSharding

    kw = {}
    if baseline and problem.uses_mesh:
        kw["out_shardings"] = NamedSharding(mesh, problem.out_spec)
    return devices.lower(bind_mesh(problem, fn, mesh), *args,
                         static_argnums=problem.static_argnums,
                         **kw).compile(options)

