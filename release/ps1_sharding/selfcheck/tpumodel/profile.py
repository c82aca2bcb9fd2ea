"""``profile``: the student's function against the jit baseline on a modeled TPU.

Notebook use::

    from autograder.course import registry
    from autograder.tpumodel import profile
    prob = registry.get("matmul_allgather")
    p = profile(matmul_allgather, prob, mesh)            # the problem's 'speed' case
    p = profile(fn, prob, (2, 4), shape=(1024, 2048, 2048), dtype="bfloat16")
    p          # a few lines: times, the ratio against the grader's limit, the critical path
    p.png      # the timeline picture (a notebook shows it under the lines)
    p.show()   # show both now, from anywhere in a cell (``tpu_profile`` does)
"""
from __future__ import annotations

import collections
import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..core.calls import Call
from ..core.results import MEASURED_NEED_STRUCTURE
from .api import Modeled, compare
from .plot import plot_timelines
from .sources import has_sources, origin
from .schedule import Timeline

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


#: how many waits for a transfer a profile's text lists
CRITICAL_LINES = 6
#: how many kinds of task the critical-path line counts by name
KINDS_SHOWN = 5
#: two times closer than this (seconds) are the same instant in the schedule
_EPS = 1e-12


@dataclass(frozen=True)
class Wait:
    """One step of the critical path: ``task`` could not start earlier because of ``on``."""

    task: str
    kind: str  # 'compute' or 'comm'
    duration_us: float
    on: Optional[str] = None  # the task it waited for (None: it started the program)
    why: str = ""  # 'data' (it reads ``on``'s result), or the compute stream or link ``on`` held
    on_kind: Optional[str] = None  # 'compute' or 'comm'
    on_us: float = 0.0  # how long ``on`` runs
    #: the student's source lines each task was traced from (:func:`origin`), (file, line)
    lines: tuple = ()
    on_lines: tuple = ()
    #: whether XLA made the task: several of the program's ops in one kernel, or none written
    made: bool = False
    on_made: bool = False

    @property
    def exposed(self) -> bool:
        """A computation waiting for a transfer's data: communication not hidden."""
        return self.kind == "compute" and self.why == "data" and self.on_kind == "comm"

    def line(self) -> str:
        what = (f"{self.task} ({self.kind}, {self.duration_us:.1f} us"
                f"{origin_text(self.lines, self.made)})")
        if self.on is None:
            return what + " starts the program"
        if self.why == "data":
            return (f"{what} waits for the result of {self.on} ({self.on_kind}, "
                    f"{self.on_us:.1f} us{origin_text(self.on_lines, self.on_made)})")
        return f"{what} waits for {self.why} to be free after {self.on}"


def _lines_of(lines) -> str:
    nums = sorted({l for _, l in lines})
    files = {f for f, _ in lines}
    said = (f"line {nums[0]}" if len(nums) == 1 else
            "lines " + ", ".join(map(str, nums[:-1])) + f" and {nums[-1]}")
    return said if len(files) == 1 else said + f" of {len(files)} files"


def origin_text(lines, made: bool) -> str:
    """'; line 11', '; made by XLA from lines 9 and 11' or '; made by XLA' ('' without a word
    of where: a program the model read without its source)."""
    if not lines:
        return "; made by XLA" if made else ""
    return f"; made by XLA from {_lines_of(lines)}" if made else f"; {_lines_of(lines)}"


def _where_file(path: str) -> str:
    """How a message names a source file: a notebook cell as such, a file by its name."""
    name = os.path.basename(path)
    if "ipykernel_" in path or path.startswith("<ipython-input"):
        return "its cell"
    return name


def quoted_lines(waits, limit: int = 4) -> list[str]:
    """'line 11 (cell.py): acc = acc + ...' for the student's lines ``waits`` name whose text can
    be read (a line number alone is said in the path already), at most ``limit`` of them."""
    import linecache

    seen = sorted(set(s for w in waits for s in (*w.lines, *w.on_lines)))
    found = []
    for f, l in seen:
        text = linecache.getline(f, l).strip()
        if text:
            found.append(f"line {l} ({_where_file(f)}): "
                         + (text[:69] + "..." if len(text) > 72 else text))
    out = found[:limit]
    if len(found) > limit:
        out.append(f"... and {len(found) - limit} more lines")
    return out


def _lane(resource) -> str:
    return "the compute stream" if resource == "compute" else f"link ICI {resource[0]}{resource[1]}"


def critical_path(tl: Timeline) -> list[Wait]:
    """The chain of tasks that sets the modeled time, first to last, each with what it waited
    for: a transfer or result it reads ('data'), or a compute stream or link another task held."""
    if not tl.tasks:
        return []
    by_id = {t.id: t for t in tl.tasks}
    known = has_sources(tl)
    cur = max(tl.tasks, key=lambda t: (tl.end[t.id], t.id))
    chain: list[Wait] = []
    while cur is not None:
        s = tl.start[cur.id]
        on, why = None, ""
        if s > _EPS:
            feeding = [d for d in cur.deps if abs(tl.end[d] - s) <= _EPS]
            if feeding:
                on, why = by_id[max(feeding)], "data"
            else:
                for r in cur.resources:
                    held = [t for t in tl.tasks if t.id != cur.id and r in t.resources
                            and abs(tl.end[t.id] - s) <= _EPS and t.duration > 0]
                    if held:
                        on, why = held[-1], _lane(r)
                        break
        lines, made = origin(cur, known)
        if on is None:
            chain.append(Wait(cur.label, cur.kind, cur.duration * 1e6, lines=lines, made=made))
        else:
            on_lines, on_made = origin(on, known)
            chain.append(Wait(cur.label, cur.kind, cur.duration * 1e6, on.label, why, on.kind,
                              on.duration * 1e6, lines, on_lines, made, on_made))
        cur = on
    return chain[::-1]


@dataclass
class Profile:
    """The student's function and the jit baseline, modeled; renders as a few lines and the
    timeline picture (``png``)."""

    student: Modeled
    baseline: Modeled
    png: Optional[str] = None
    notes: list = field(default_factory=list)
    #: the graded function's name and the grader's limit on the modeled ratio (None: unknown)
    problem: Optional[str] = None
    limit: Optional[float] = None

    @property
    def ratio(self) -> float:
        return self.student.time_us / max(self.baseline.time_us, 1e-9)

    @property
    def passes(self) -> Optional[bool]:
        """Whether the modeled ratio is within the grader's limit (None without a limit)."""
        return None if self.limit is None else self.ratio <= self.limit

    def waits(self) -> list[Wait]:
        """The student's critical path (see :func:`critical_path`)."""
        return critical_path(self.student.timeline)

    def to_dict(self) -> dict:
        s, b = self.student.timeline.summary(), self.baseline.timeline.summary()
        return {"problem": self.problem, "chip": self.student.chip,
                "mesh": "x".join(map(str, self.student.mesh_shape)),
                "student_us": s["time_us"], "baseline_us": b["time_us"], "ratio": self.ratio,
                "limit": self.limit, "passes": self.passes,
                "compute_us": s["compute_us"], "comm_us": s["comm_us"],
                "exposed_comm_us": s["exposed_comm_us"], "baseline_compute_us": b["compute_us"],
                "baseline_comm_us": b["comm_us"],
                "baseline_exposed_comm_us": b["exposed_comm_us"], "png": self.png,
                "critical_path": [w.line() for w in self.waits()], "notes": list(self.notes)}

    def verdict(self) -> str:
        text = f"ratio (yours / baseline) {self.ratio:.2f}"
        if self.limit is None:
            return text
        return text + (f", limit {self.limit:g}: "
                       + ("within the limit" if self.passes else "OVER the limit"))

    def text(self, critical_lines: int = CRITICAL_LINES) -> str:
        d = self.to_dict()
        name = f"{self.problem} " if self.problem else ""
        where = "one device" if d["mesh"] == "1" else f"mesh {d['mesh']} (one device's program)"
        lines = [f"{name}modeled on TPU {d['chip']}, {where}:",
                 f"  {'':14s}{'total':>10s}{'compute':>10s}{'comm':>10s}{'exposed':>10s}  (us)"]
        for label, m in (("your function", self.student), ("jit baseline", self.baseline)):
            s = m.timeline.summary()
            lines.append(f"  {label:14s}{s['time_us']:10.1f}{s['compute_us']:10.1f}"
                         f"{s['comm_us']:10.1f}{s['exposed_comm_us']:10.1f}")
        lines.append("  " + self.verdict())
        if self.limit is not None:  # a graded function: the rule the limit comes with
            lines.append(f"  {MEASURED_NEED_STRUCTURE} (check({self.problem!r}, fn) runs "
                         "them)")
        waits = self.waits()
        exposed = [w for w in waits if w.exposed]
        # an unrolled loop's tasks carry their iteration ("dot_general [3]"): count them as one kind
        kinds = collections.Counter(re.sub(r" \[\d+\]$", "", w.task) for w in waits)
        lines_of: dict = {}  # kind -> the student's lines its tasks came from
        for w in waits:
            lines_of.setdefault(re.sub(r" \[\d+\]$", "", w.task), []).extend(w.lines)
        shown = ", ".join(f"{n} {k}{f' ({_lines_of(lines_of[k])})' if lines_of[k] else ''}"
                          for k, n in kinds.most_common(KINDS_SHOWN))
        if len(kinds) > KINDS_SHOWN:
            shown += f", {len(kinds) - KINDS_SHOWN} more kinds"
        # a program that ends on a transfer waits for it with nothing left to compute
        last = waits[-1] if waits and waits[-1].kind == "comm" else None
        if exposed:
            after = f"{len(exposed)} computation(s) wait for a transfer:"
        elif last is not None:
            after = "it ends on a transfer:"
        elif self.student.timeline.summary()["comm_us"] > 0:
            after = "no computation waits for a transfer (the communication is hidden)"
        else:
            after = "nothing is sent between devices"
        lines.append(f"  critical path: {len(waits)} task{'s' * (len(waits) != 1)} ({shown}); "
                     + after)
        lines += [f"    {w.line()}" for w in exposed[:critical_lines]]
        if len(exposed) > critical_lines:
            lines.append(f"    ... and {len(exposed) - critical_lines} more (p.waits() lists "
                         "the whole path)")
        if last is not None:
            lines.append(f"    the program ends with {last.task} (comm, {last.duration_us:.1f} "
                         "us), with nothing left to compute while it travels")
        quoted = quoted_lines(exposed[:critical_lines] + ([last] if last else [])
                              + [w for w in waits if w.lines])
        if quoted:
            lines.append("  your lines named above:")
            lines += [f"    {q}" for q in quoted]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()

    def show(self) -> bool:
        """Show the lines and the picture in the running notebook (IPython's display), once per
        cell: ``tpu_profile`` calls this, so a call anywhere in a cell shows its profile, and
        the cell's echo of the returned value does not show it again. False outside IPython."""
        try:
            from IPython import get_ipython
            from IPython.display import Image, display
        except ImportError:
            return False
        ip = get_ipython()
        if ip is None:
            return False
        import html

        display({"text/plain": self.text(),
                 "text/html": f"<pre>{html.escape(self.text())}</pre>"}, raw=True)
        if self.png and os.path.exists(self.png):
            display(Image(filename=self.png))
        self._shown_in = getattr(ip, "execution_count", None)
        return True

    def _ipython_display_(self):  # the cell's echo, or display(p): shown unless shown already
        from IPython import get_ipython

        ip = get_ipython()
        count = getattr(ip, "execution_count", None) if ip is not None else None
        if count is not None and getattr(self, "_shown_in", None) == count:
            return
        self.show()

    def _repr_html_(self):  # other front ends: the few lines, then the picture once
        import base64
        import html

        out = f"<pre>{html.escape(self.text())}</pre>"
        if self.png and os.path.exists(self.png):
            with open(self.png, "rb") as fh:
                out += f'<img src="data:image/png;base64,{base64.b64encode(fh.read()).decode()}"/>'
        return out


def _mesh(mesh):
    if isinstance(mesh, (tuple, list)):
        from ..core.meshes import make_mesh

        return make_mesh(*mesh)
    if isinstance(mesh, str):
        from ..core.meshes import make_mesh

        return make_mesh(*(int(v) for v in mesh.lower().split("x")))
    return mesh


def case_args(problem, mesh, *, shape=None, dtype=None, seed: int = 0,
              size: str = "speed") -> list:
    """Arguments for ``problem`` on ``mesh``: the registry's case of this ``size`` ('speed' or
    'memory'), or arrays of the given ``shape`` (B, D, F for the matmul problems), cast to
    ``dtype``; placed with the problem's shardings."""

    x, y = (int(mesh.shape[a]) for a in ("X", "Y"))
    if shape is not None:
        dims = SHAPE_DIMS.get(problem.name)
        if dims is None:
            raise ValueError(f"a shape (B, D, F) is defined for {', '.join(sorted(SHAPE_DIMS))}"
                             f"; {problem.name} is modeled at the registry's 'speed' case")
        if len(shape) != len(SHAPE_LETTERS):
            raise ValueError(f"a shape is (B, D, F), three sizes; got {tuple(shape)}")
        sizes = dict(zip(SHAPE_LETTERS, shape))
        raw = [np.zeros(tuple(sizes[c] for c in d), np.float32) for d in dims]
    else:
        raw = list(problem.case(np.random.default_rng(seed), x, y, size).args)
    if dtype is not None:  # cast here: jnp would compute on JAX's default device
        raw = [a.astype(dtype) if isinstance(a, np.ndarray)
               and np.issubdtype(a.dtype, np.floating) else a for a in raw]
    return Call.of(problem, mesh=mesh).place(raw)


def baseline_figures(problem, chips=None) -> dict:
    """The problem's jit baseline modeled at its 'speed' case (the grader's speed shapes and
    mesh, the values of seed 0) on each chip: ``{'layout': [x, y], 'chips': {chip: figures}}``,
    rounded to 0.01 us. The figures let ``tpu_profile`` compare a student's function with a
    baseline whose code stays with the grader."""
    from ..core.meshes import make_mesh
    from . import chips as chipmod
    from .api import FIGURES, _mesh_geometry, baseline_hlo, model_hlo

    x, y = problem.speed_layout
    mesh = make_mesh(x, y)
    text = baseline_hlo(problem, mesh, case_args(problem, mesh))
    shape, names = _mesh_geometry(mesh if problem.uses_mesh else None)
    out = {}
    for chip in sorted(chips or chipmod.CHIPS):
        s = model_hlo(text, shape, names, chip=chip, name="jit baseline").timeline.summary()
        out[chip] = {k: (round(float(s[k]), 2) if k.endswith("_us") else int(s[k]))
                     for k in FIGURES}
    return {"layout": [int(x), int(y)], "chips": out}


def profile(fn, problem, mesh=(2, 4), args=None, *, chip=None, shape=None, dtype=None,
            png: Optional[str] = "", title: Optional[str] = None,
            program: bool = False) -> Profile:
    """Model ``fn`` and the problem's jit baseline; draw the timelines.

    ``problem``: a :class:`~autograder.core.problem.Problem` (or the self-check's public one); ``mesh``: a Mesh or
    (x, y); ``args``: placed arguments (default: the registry's 'speed' case, or ``shape``);
    ``png``: where to write the picture ('' a temporary file, None no picture); ``program``:
    ``fn`` is an exported program's ``call`` (array arguments only), not the student's function.
    """
    from .api import _problem

    problem = _problem(problem)
    mesh = _mesh(mesh)
    kept = problem.baseline_model if problem.baseline is None else None
    notes = []
    if kept is not None:  # the baseline's code stays with the grader: its figures travel
        st, base, mesh, note = _against_figures(problem, fn, mesh, kept, args, chip=chip,
                                                shape=shape, dtype=dtype, program=program)
        notes.append(note)
    else:
        if args is None:
            args = case_args(problem, mesh, shape=shape, dtype=dtype)
        st, base = compare(problem, fn, mesh, args, chip=chip, program=program)
    return profile_of(st, base, problem, notes=notes, png=png,
                      title=title or getattr(fn, "__name__", problem.name))


def profile_of(st: Modeled, base: Modeled, problem, *, notes=(), png: Optional[str] = "",
               title: Optional[str] = None, graded: bool = True) -> Profile:
    """The :class:`Profile` of two models already made (``png`` and ``title`` as in
    :func:`profile`): how ``tpu_profile`` shows the models the grader's speed check judges.
    ``graded``: the models are of the grader's speed case, so its limit is shown beside the
    ratio (else no limit: it applies at that case only)."""
    prof = Profile(st, base, problem=problem.name,
                   limit=problem.threshold("tpu_model") if graded else None, notes=list(notes))
    if png is not None:
        if png == "":
            fd, png = tempfile.mkstemp(prefix=f"profile-{problem.name}-", suffix=".png")
            os.close(fd)
        panels = [(f"{title or problem.name} (yours)", st.timeline)]  # tagged with its lines
        if base.timeline.tasks:  # recorded figures have no timeline to draw
            panels.append(("jit baseline", base.timeline))
        prof.png = plot_timelines(panels, png)
    return prof


def _against_figures(problem, fn, mesh, kept: dict, args, *, chip, shape, dtype, program):
    """(student, recorded baseline, mesh, note): the student's function modeled at the speed
    case on which the baseline's recorded figures were taken (its mesh and shapes)."""
    from ..core.meshes import make_mesh
    from .api import model_student, recorded
    from .chips import get_chip

    if args is not None or shape is not None or dtype is not None:
        raise ValueError(f"{problem.name}'s jit baseline is known by its figures at the "
                         "grader's speed case only: call without args, shape or dtype")
    chip_name = get_chip(chip).name
    figures = kept["chips"].get(chip_name)
    if figures is None:
        raise ValueError(f"no recorded baseline figures for TPU {chip_name}; "
                         f"known: {sorted(kept['chips'])}")
    x, y = kept["layout"]
    if problem.uses_mesh and (int(mesh.shape["X"]), int(mesh.shape["Y"])) != (x, y):
        mesh = make_mesh(x, y)
    st = model_student(problem, fn, mesh, case_args(problem, mesh), chip=chip,
                       program=program)
    note = (f"the jit baseline's code stays with the grader (it would give an exercise "
            f"away): its figures were modeled there, at the grader's speed case"
            f"{f' on mesh {x}x{y}' if problem.uses_mesh else ''}, and yours at the same")
    return st, recorded(figures, chip_name, st.mesh_shape), mesh, note
