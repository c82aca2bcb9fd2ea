"""Small looking-glass helpers the notebooks use (copied into every selfcheck package).

They show what a function's program does: the collectives you wrote (the jaxpr), the ones XLA
runs (the compiled module), a wall-clock comparison with the jit baseline, and the course's TPU
model's timeline.
"""
from __future__ import annotations

import collections
import os
import re
import time

COLLECTIVE_OPS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                  "collective-permute")


def compiled_collectives(f, *args, width: int = 140) -> list[str]:
    """The lines of f's compiled program that move data between devices (shortened)."""
    import jax

    text = jax.jit(f).lower(*args).compile().as_text()
    lines = [l.strip() for l in text.splitlines()
             if any(f" {c}(" in l or f" {c}-start(" in l for c in COLLECTIVE_OPS)]
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
    print(f"yours {s:9.0f} us   jit baseline {b:9.0f} us   ratio {s / b:.2f}")
    if jax.devices()[0].platform == "cpu":
        print("  (emulated CPU devices share this machine's cores and have no links: this ratio "
              "says little about a TPU; the grade uses tpu_profile's modeled ratio)")
    return s / b


def tpu_profile(name: str, fn, mesh, chip: str = "v5e"):
    """How ``fn`` (the graded function ``name``) would run on a TPU, against jit.

    Returns a profile that shows itself as a few lines (modeled times, the ratio beside the
    grader's limit, the critical path: which task waits for which) and the timeline picture (a
    lane for compute, one per ring link and direction). ``print(p)`` gives the lines alone. The
    model is the grader's own (a copy travels in the self-check package); nothing is modeled
    while nbgrader grades the notebook.
    """
    if os.environ.get("NBGRADER_EXECUTION"):
        return None
    from .public import problem
    from .tpumodel import profile

    entry = problem(name)
    if entry.baseline is None:
        print(f"{name}: its jit baseline stays with the grader (its code would give an "
              "exercise's answer away), so it cannot be modeled here; the grader models it "
              "and holds the ratio to the limit in the notes above the exercise")
        return None

    return profile(fn, name, mesh, chip=chip)
