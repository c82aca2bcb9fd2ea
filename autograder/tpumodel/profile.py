"""``profile``: the student's function against the jit baseline on a modeled TPU.

Notebook use::

    from autograder.tpumodel import profile
    p = profile(matmul_allgather, "matmul_allgather", mesh)           # registry 'speed' case
    p = profile(fn, "matmul_allgather", (2, 4), shape=(1024, 2048, 2048), dtype="bfloat16")
    print(p.text()); p.png
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .api import Modeled, compare
from .plot import plot_timelines

#: how ``--shape`` letters map onto each argument's dims, per graded function (matmul problems)
SHAPE_DIMS = {
    "matmul_allgather": ("BD", "DF"),
    "matmul_allgather_bidirectional": ("BD", "DF"),
    "matmul_allreduce": ("BD", "DF"),
    "matmul_allreduce_bidirectional": ("BD", "DF"),
    "matmul_reducescatter": ("BF", "FD"),
    "matmul_reducescatter_bidirectional": ("BF", "FD"),
    "mlp_block": ("BD", "DF", "FD"),
}
SHAPE_LETTERS = "BDF"


@dataclass
class Profile:
    student: Modeled
    baseline: Modeled
    png: Optional[str] = None
    notes: list = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.student.time_us / max(self.baseline.time_us, 1e-9)

    def to_dict(self) -> dict:
        s, b = self.student.timeline.summary(), self.baseline.timeline.summary()
        return {"chip": self.student.chip, "mesh": "x".join(map(str, self.student.mesh_shape)),
                "student_us": s["time_us"], "baseline_us": b["time_us"], "ratio": self.ratio,
                "compute_us": s["compute_us"], "comm_us": s["comm_us"],
                "exposed_comm_us": s["exposed_comm_us"], "baseline_compute_us": b["compute_us"],
                "baseline_comm_us": b["comm_us"],
                "baseline_exposed_comm_us": b["exposed_comm_us"], "png": self.png,
                "notes": list(self.notes)}

    def text(self) -> str:
        d = self.to_dict()
        lines = [f"Modeled on TPU {d['chip']}, mesh {d['mesh']} (one device's program):",
                 f"  {'':14s}{'total':>10s}{'compute':>10s}{'comm':>10s}{'exposed':>10s}  (us)"]
        for name, m in (("your function", self.student), ("jit baseline", self.baseline)):
            s = m.timeline.summary()
            lines.append(f"  {name:14s}{s['time_us']:10.1f}{s['compute_us']:10.1f}"
                         f"{s['comm_us']:10.1f}{s['exposed_comm_us']:10.1f}")
        lines.append(f"  ratio (yours / baseline): {self.ratio:.2f}")
        if self.png:
            lines.append(f"  timeline: {self.png}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def _repr_html_(self):  # notebooks: the table and the picture
        import base64
        import html

        out = f"<pre>{html.escape(self.text())}</pre>"
        if self.png and os.path.exists(self.png):
            with open(self.png, "rb") as fh:
                out += f'<img src="data:image/png;base64,{base64.b64encode(fh.read()).decode()}"/>'
        return out


def _mesh(mesh):
    if isinstance(mesh, (tuple, list)):
        from ..meshes import make_mesh

        return make_mesh(*mesh)
    if isinstance(mesh, str):
        from ..meshes import make_mesh

        return make_mesh(*(int(v) for v in mesh.lower().split("x")))
    return mesh


def case_args(problem, mesh, *, shape=None, dtype=None, seed: int = 0) -> list:
    """Arguments for ``problem`` on ``mesh``: the registry's 'speed' case, or arrays of the given
    ``shape`` (B, D, F for the matmul problems), cast to ``dtype``; placed with the problem's
    shardings."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    x, y = (int(mesh.shape[a]) for a in ("X", "Y"))
    if shape is not None:
        dims = SHAPE_DIMS.get(problem.name)
        if dims is None:
            raise ValueError(f"--shape is defined for {sorted(SHAPE_DIMS)}; for "
                             f"{problem.name} the registry's 'speed' case is used")
        sizes = dict(zip(SHAPE_LETTERS, shape))
        raw = [np.zeros(tuple(sizes[c] for c in d), np.float32) for d in dims]
    else:
        raw = list(problem.case(np.random.default_rng(seed), x, y, "speed").args)
    out = []
    for a, spec in zip(raw, problem.in_specs):
        if spec is None or not isinstance(a, np.ndarray):
            out.append(a)
            continue
        arr = jnp.asarray(a)
        if dtype is not None and jnp.issubdtype(arr.dtype, jnp.floating):
            arr = arr.astype(dtype)
        if problem.uses_mesh:
            out.append(jax.device_put(arr, NamedSharding(mesh, spec)))
        else:
            out.append(jax.device_put(arr, mesh.devices.flat[0]))
    return out


def profile(fn, problem, mesh=(2, 4), args=None, *, chip=None, shape=None, dtype=None,
            png: Optional[str] = "", title: Optional[str] = None,
            program: bool = False) -> Profile:
    """Model ``fn`` and the problem's jit baseline; draw the timelines.

    ``problem``: a registry name or :class:`~autograder.registry.Problem`; ``mesh``: a Mesh or
    (x, y); ``args``: placed arguments (default: the registry's 'speed' case, or ``shape``);
    ``png``: where to write the picture ('' a temporary file, None no picture); ``program``:
    ``fn`` is an exported program's ``call`` (array arguments only), not the student's function.
    """
    from .api import _problem

    problem = _problem(problem)
    mesh = _mesh(mesh)
    if args is None:
        args = case_args(problem, mesh, shape=shape, dtype=dtype)
    st, base = compare(problem, fn, mesh, args, chip=chip, program=program)
    prof = Profile(st, base)
    if png is not None:
        if png == "":
            fd, png = tempfile.mkstemp(prefix=f"profile-{problem.name}-", suffix=".png")
            os.close(fd)
        name = title or getattr(fn, "__name__", problem.name)
        prof.png = plot_timelines([(f"{name} (yours)", st.timeline),
                                   ("jit baseline", base.timeline)], png)
    return prof
