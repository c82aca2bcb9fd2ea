"""Time the reference collective matmuls against the jit baseline (not a test).

    python benchmarks/bench_collective_matmul.py [--sizes B,D,F] [--layout 2x4] [--dtype bfloat16]
                                                 [--reps 20] [--only NAME,...]

Uses whatever devices are present (8 emulated CPU devices when there is no accelerator), the
registry's jit baselines (global-view jnp code with the output sharding), and the reference
answers in solutions/. Prints one line per function: median time of each, interleaved, and the
ratio against the per-platform threshold the speed check uses. Defaults to the source chapter's
TPU layer (B, D, F = 1024, 2048, 8192) on accelerators and a smaller one on CPU.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.core.devices import platform, setup_devices  # noqa: E402

setup_devices()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from autograder.core.meshes import make_mesh  # noqa: E402
from autograder.course import registry  # noqa: E402

FUNCS = {
    "ps3_collective_matmul": ("matmul_allgather", "matmul_allreduce", "matmul_reducescatter",
                              "mlp_block"),
    "ps4_bidirectional": ("matmul_allgather_bidirectional", "matmul_allreduce_bidirectional",
                          "matmul_reducescatter_bidirectional"),
}


def make_args(name, b, d, f, dtype, rng):
    """Global arrays for one function at sizes B, D, F."""
    def n(*shape, scale=1.0):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    if name.startswith("matmul_reducescatter"):
        return n(b, f), n(f, d, scale=f ** -0.5)
    if name == "mlp_block":
        return n(b, d), n(d, f, scale=d ** -0.5), n(f, d, scale=f ** -0.5)
    return n(b, d), n(d, f, scale=d ** -0.5)


def timed(fn, args, reps):
    out = fn(*args)
    jax.block_until_ready(out)
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def bench(name, fn, mesh, sizes, dtype, reps):
    p = registry.get(name)
    rng = np.random.default_rng(0)
    host = make_args(name, *sizes, dtype, rng)
    args = [jax.device_put(jnp.asarray(a, dtype), NamedSharding(mesh, s))
            for a, s in zip(host, p.in_specs)]
    mine = jax.jit(functools.partial(fn, mesh=mesh))
    base = jax.jit(functools.partial(p.baseline, mesh=mesh),
                   out_shardings=NamedSharding(mesh, p.out_spec))
    ref = np.asarray(base(*args), np.float32)
    got = np.asarray(mine(*args), np.float32)
    err = float(np.max(np.abs(got - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    timed(mine, args, 1), timed(base, args, 1)
    ts, tb, ratios = [], [], []
    for r in range(reps):
        pair = (mine, base) if r % 2 == 0 else (base, mine)
        t = {id(f): timed(f, args, 1) for f in pair}
        ts.append(t[id(mine)])
        tb.append(t[id(base)])
        ratios.append(ts[-1] / tb[-1])
    return (statistics.median(ts), statistics.median(tb), statistics.median(ratios), err,
            p.threshold(platform()))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", help="B,D,F (global)")
    ap.add_argument("--layout", default="2x4")
    ap.add_argument("--dtype", default=None, help="float32 (CPU default) or bfloat16")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--only", help="comma-separated function names")
    a = ap.parse_args(argv)
    plat = platform()
    x, y = (int(v) for v in a.layout.split("x"))
    mesh = make_mesh(x, y)
    if a.sizes:
        sizes = tuple(int(v) for v in a.sizes.split(","))
    else:
        sizes = (1024, 2048, 8192) if plat != "cpu" else (512, 1024, 2048)
    dtype = a.dtype or ("bfloat16" if plat == "tpu" else "float32")
    reps = a.reps or (20 if plat != "cpu" else 5)
    only = set(a.only.split(",")) if a.only else None
    print(f"{len(jax.devices())} x {jax.devices()[0].device_kind} ({plat}), mesh {x}x{y}, "
          f"B,D,F = {sizes}, {dtype}, {reps} interleaved reps")
    print(f"{'function':38s} {'yours us':>10s} {'jit us':>10s} {'ratio':>6s} {'limit':>6s} "
          f"{'rel.err':>8s}")
    for asg, names in FUNCS.items():
        sols = importlib.import_module(f"solutions.{asg}")
        for name in names:
            if only and name not in only:
                continue
            s, b, ratio, err, limit = bench(name, getattr(sols, name), mesh, sizes, dtype, reps)
            print(f"{name:38s} {1e6 * s:10.0f} {1e6 * b:10.0f} {ratio:6.2f} {limit:6.2f} "
                  f"{err:8.1e}")


if __name__ == "__main__":
    main()
