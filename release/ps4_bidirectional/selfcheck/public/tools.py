"""Small looking-glass helpers the notebooks use (copied into every selfcheck package).

They show what a function's program does: the collectives you wrote (the jaxpr), the ones XLA
runs (the compiled module), the memory it compiles to beside the grader's bound, a wall-clock
comparison with the jit baseline, and the course's TPU model's timeline.
"""
from __future__ import annotations

import collections
import os
import re
import time

from .measure import MemoryProfile, trips_text  # noqa: F401 - MemoryProfile: memory_profile's result


def compiled_collectives(f, *args, width: int = 140) -> list[str]:
    """The lines of f's compiled program that move data between devices (shortened): what the
    grader's "no communication added by the compiler" reads."""
    from ..core import devices
    from ..core.program import compiled_collective_lines

    lines = compiled_collective_lines(devices.lower(f, *args).compile().as_text())
    return [l if len(l) < width else l[:width] + " ..." for l in lines]


def written_collectives(f, *args) -> dict:
    """The collectives in the program as written (the jaxpr), before XLA rewrites anything.

    Counts places in the program: a collective inside a loop body counts once.
    """
    import jax

    text = str(jax.make_jaxpr(f)(*args))
    found = re.findall(r"\b(all_gather\w*|psum\w*|reduce_scatter|ppermute|all_to_all)\[", text)
    return dict(collections.Counter(found))


def time_vs_jit(f, baseline, *args, reps: int = 5) -> float:
    """Median wall-clock time of f and of the jitted baseline, interleaved; returns the ratio."""
    import jax
    import numpy as np

    from ..core import devices

    f, baseline = devices.jit(f), devices.jit(baseline)
    jax.block_until_ready(f(*args)), jax.block_until_ready(baseline(*args))
    ts, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        jax.block_until_ready(baseline(*args))
        tb.append(time.perf_counter() - t0)
    s, b = 1e6 * np.median(ts), 1e6 * np.median(tb)
    platform = devices.platform()
    if platform == "cpu":  # kept apart from the TPU limits: no limit applies to this figure
        print(f"wall-clock on this machine's emulated CPU devices: yours {s:.0f} us, jit "
              f"baseline {b:.0f} us (x{s / b:.2f}).\n  This is not a TPU figure and no limit "
              "applies to it: the devices share this machine's cores and have no links. The "
              "grade reads tpu_profile's modeled TPU ratio.")
    else:
        print(f"yours {s:9.0f} us   jit baseline {b:9.0f} us   ratio {s / b:.2f} "
              f"(wall-clock on {platform.upper()})")
    return s / b


def tpu_profile(name: str, fn, mesh=None, chip: str = "v5e", shape=None):
    """How ``fn`` (the graded function ``name``) would run on a TPU, against jit.

    In a notebook the profile is shown where it is called, anywhere in a cell (once: the
    cell's echo of it adds nothing). Returns a profile that shows itself as a few lines
    (modeled times, the ratio beside the grader's limit, the critical path: which task waits
    for which, each named with your source lines it came from, or the lines XLA made it from,
    the loop iterations it modeled) and the timeline picture (a lane for compute, one per ring link and direction;
    it needs matplotlib, the text does not). ``print(p)`` gives the lines alone. ``mesh``: the
    mesh to model on (default: the grader's speed mesh); a function without a mesh argument
    needs none. The program is priced as the grader's speed check prices it, with the grader's
    own code (a copy travels in the self-check package): on the speed case's shapes (the
    values of seed 0), its loops and branches as one instrumented run of it there measured
    them, and its compute scaled up where XLA counts more FLOPs than the model; the notes say
    when either changed the figure, and what a matmul at a higher precision costs (as the
    speed check's message does). ``shape``: (B, D, F) of a matmul problem, to model it at
    other sizes (arrays of zeros) than the grader's speed case; the grader's limit applies at
    its speed case only, so none is shown then. Nothing is modeled while nbgrader grades the
    notebook.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    import importlib.util

    from ..core.meshes import make_mesh
    from ..tpumodel.chips import get_chip
    from ..tpumodel.api import precision_clause
    from ..tpumodel.hlo import ModelError
    from ..tpumodel.profile import case_args, profile_of
    from .check import problem
    from .measure import (Unpriced, bounds_text, branches_text, floor_text, kept_baseline,
                          speed_models)

    entry = problem(name)
    if entry.baseline is None and entry.baseline_model is None:
        print(f"{name}: the grader does not compare its speed with a jit baseline")
        return None
    chip_name = get_chip(chip).name
    try:
        kept = kept_baseline(entry, chip_name)
    except ValueError as e:
        print(f"{name}: cannot model the jit baseline here: {e}")
        return None
    layout = tuple(entry.speed_layout)
    notes = []
    if shape is not None:
        if kept is not None:
            print(f"{name}: the jit baseline's code stays with the grader, which modeled it at "
                  "its speed case only: call tpu_profile without shape")
            return None
        shape = tuple(int(v) for v in shape)
        notes.append(f"at B, D, F = {', '.join(map(str, shape))} (zeros), not the grader's "
                     "speed case: no limit applies to this ratio (tpu_profile without shape "
                     "shows the one the grade reads)")
    if kept is not None:  # the baseline's code stays with the grader: its figures travel
        notes.append("the jit baseline's code stays with the grader (it would give an exercise "
                      "away): its figures were modeled there, at the grader's speed case"
                      f"{f' on mesh {layout[0]}x{layout[1]}' if entry.uses_mesh else ''}, and "
                      "yours at the same")
        mesh = None  # compared where the figures were taken
    if mesh is None or not entry.uses_mesh:  # a single-device function: any mesh places it
        mesh = make_mesh(*layout)
    try:
        args = case_args(entry, mesh, shape=shape)
    except ValueError as e:  # a shape for a problem that has none
        print(f"{name}: {e}")
        return None
    try:
        st, base, floor = speed_models(entry, fn, mesh, args, chip=chip_name, baseline=kept)
    except (Unpriced, ModelError) as e:
        print(f"{name}: the TPU model cannot price this program: {str(e)[:300]}. The grader's "
              "speed check fails it too; write the program with the shard_map, collectives "
              "and loops the exercise asks for")
        return None
    if st.trips:
        notes.append(trips_text(st.trips) + ", as the grader does")
    if st.branches:
        notes.append(branches_text(st.branches) + ", as the grader does")
    if floor is not None and floor.applies:
        notes.append(floor_text(floor.factor))
    if st.bounds:
        notes.append(bounds_text(st.bounds))
    clause = precision_clause(st.summary().get("mxu_passes", 1))
    if clause:  # a matmul at HIGH or HIGHEST: the speed check's message says the same
        notes.append(clause)
    drawn = importlib.util.find_spec("matplotlib") is not None
    prof = profile_of(st, base, entry, notes=notes, png="" if drawn else None,
                      title=getattr(fn, "__name__", name), graded=shape is None)
    if not drawn:
        prof.notes.append("the timeline picture needs matplotlib: pip install matplotlib "
                          "(then restart the kernel)")
    prof.show()  # in a notebook: shown wherever in the cell it is called, once
    return prof


def memory_profile(name: str, fn):
    """Compile ``fn`` (the graded function ``name``) at the shapes and mesh of the grader's
    memory check and set its temporary memory beside the grader's bound. Compile only: nothing
    runs (the grader also runs the program there, and it must give the right answer). Nothing is
    compiled while nbgrader grades the notebook."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    from .check import _table, problem
    from .measure import memory_profile as compiled_memory

    bar = _table()[name].get("memory")
    if bar is None:
        print(f"{name}: the grader does not check its memory")
        return None
    prof = compiled_memory(problem(name), bar, _table()[name]["args"], fn)
    if prof is None:
        print(f"{name}: this JAX does not report compiled memory figures")
    return prof


class SideBySide:
    """Programs modeled on a TPU, one row each: their total, compute, communication and the
    communication left exposed (not hidden behind compute). Shows itself as the table."""

    def __init__(self, rows: list, chip: str, mesh: str):
        self.rows, self.chip, self.mesh = rows, chip, mesh

    def __getitem__(self, name: str) -> dict:
        return next(r for r in self.rows if r["name"] == name)

    def __repr__(self) -> str:
        width = max(12, *(len(r["name"]) for r in self.rows))
        lines = [f"modeled on TPU {self.chip}, mesh {self.mesh} (one device's program):",
                 f"  {'':{width}s}{'total':>10s}{'compute':>10s}{'comm':>10s}{'exposed':>10s}  (us)"]
        lines += [f"  {r['name']:{width}s}{r['time_us']:10.1f}{r['compute_us']:10.1f}"
                  f"{r['comm_us']:10.1f}{r['exposed_comm_us']:10.1f}" for r in self.rows]
        return "\n".join(lines)


def model_side_by_side(versions: dict, *args, mesh, chip: str = "v5e") -> SideBySide:
    """Model each program of ``versions`` (name -> function of ``args``, jit-able: a
    ``shard_map`` of your own, say) on a TPU ``chip`` over ``mesh``, and set them side by side:
    how long each takes, and how much of its communication no computation hides. Compare two
    ways of writing one ring, and see which transfers can overlap the compute. Nothing is
    modeled while nbgrader grades the notebook."""
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    from ..tpumodel.api import model_function

    rows = []
    for name, fn in versions.items():
        s = model_function(fn, args, mesh, chip=chip, name=name).timeline.summary()
        rows.append({"name": name, **{k: s[k] for k in ("time_us", "compute_us", "comm_us",
                                                         "exposed_comm_us")}})
    shape = "x".join(str(mesh.shape[a]) for a in mesh.axis_names)
    return SideBySide(rows, chip, shape)
