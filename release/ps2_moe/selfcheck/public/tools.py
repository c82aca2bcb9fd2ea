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
    import jax

    from ..core.program import compiled_collective_lines

    lines = compiled_collective_lines(jax.jit(f).lower(*args).compile().as_text())
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

    f, baseline = jax.jit(f), jax.jit(baseline)
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
    platform = jax.devices()[0].platform
    if platform == "cpu":  # kept apart from the TPU limits: no limit applies to this figure
        print(f"wall-clock on this machine's emulated CPU devices: yours {s:.0f} us, jit "
              f"baseline {b:.0f} us (x{s / b:.2f}).\n  This is not a TPU figure and no limit "
              "applies to it: the devices share this machine's cores and have no links. The "
              "grade reads tpu_profile's modeled TPU ratio.")
    else:
        print(f"yours {s:9.0f} us   jit baseline {b:9.0f} us   ratio {s / b:.2f} "
              f"(wall-clock on {platform.upper()})")
    return s / b


def tpu_profile(name: str, fn, mesh=None, chip: str = "v5e"):
    """How ``fn`` (the graded function ``name``) would run on a TPU, against jit.

    Returns a profile that shows itself as a few lines (modeled times, the ratio beside the
    grader's limit, the critical path: which task waits for which, the loop iterations it
    modeled) and the timeline picture (a lane for compute, one per ring link and direction;
    it needs matplotlib, the text does not). ``print(p)`` gives the lines alone. ``mesh``: the
    mesh to model on (default: the grader's speed mesh); a function without a mesh argument
    needs none. The model is the grader's own (a copy travels in the self-check package);
    nothing is modeled while nbgrader grades the notebook.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    import importlib.util

    from ..core.meshes import make_mesh
    from ..tpumodel import profile
    from .check import problem

    entry = problem(name)
    if entry.baseline is None and getattr(entry, "baseline_model", None) is None:
        print(f"{name}: the grader does not compare its speed with a jit baseline")
        return None
    if mesh is None or not entry.uses_mesh:  # a single-device function: any mesh places it
        mesh = make_mesh(*entry.speed_layout)
    drawn = importlib.util.find_spec("matplotlib") is not None
    prof = profile(fn, entry, mesh, chip=chip, png="" if drawn else None)
    if prof.student.trips:
        prof.notes.append(trips_text(prof.student.trips) + ", as the grader does")
    if not drawn:
        prof.notes.append("the timeline picture needs matplotlib: pip install matplotlib "
                          "(then restart the kernel)")
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
