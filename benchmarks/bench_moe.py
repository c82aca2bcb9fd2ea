"""Side-by-side time and per-device memory of the ps2_moe reference answers (not a test).

    python benchmarks/bench_moe.py [--tokens 8192] [--dim 256] [--ffw 256] [--experts 8]
                                   [--mesh 8x1] [--k 2] [--rounds 5]

For every version (the jit baseline the grader times against, moe_jit, moe_allgather,
moe_all_to_all, moe_topk) it prints the median wall time of one call and the compiled
temporary bytes per device (what the memory check reads). On CPU the emulated devices share
the host's cores: read the memory column as the point, the times only as a rough guide.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.core.devices import setup_devices  # noqa: E402

setup_devices()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

from autograder.core.meshes import make_mesh  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.course.references import ps2_moe as ref  # noqa: E402
from solutions import ps2_moe as sol  # noqa: E402


def timed(fn, args, rounds):
    out = fn(*args)
    jax.block_until_ready(out)
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--ffw", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--mesh", default="8x1")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    x, y = (int(v) for v in a.mesh.split("x"))
    mesh = make_mesh(x, y)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((a.tokens, a.dim)).astype(np.float32)
    W = (rng.standard_normal((a.experts, a.dim, a.ffw)) / np.sqrt(a.dim)).astype(np.float32)
    B1 = ref.routing(rng, "uniform", (a.tokens,), a.experts, x)
    Bk = ref.routing(rng, "uniform", (a.tokens, a.k), a.experts, x)
    print(f"{jax.devices()[0].platform} mesh {x}x{y}: A f32[{a.tokens}, {a.dim}], "
          f"W f32[{a.experts}, {a.dim}, {a.ffw}], k={a.k}; one all-gathered A = "
          f"{A.nbytes / 2**20:.1f} MiB, this device's share = {A.nbytes / x / 2**20:.1f} MiB")
    print(f"{'version':26s} {'time (ms)':>10s} {'temp MiB/device':>16s} {'max err':>9s}")
    for name, fn, B in (("jit baseline (dense)", None, B1), ("moe_jit", sol.moe_jit, B1),
                        ("moe_allgather", sol.moe_allgather, B1),
                        ("moe_all_to_all", sol.moe_all_to_all, B1),
                        (f"jit baseline top-{a.k}", None, Bk), ("moe_topk", sol.moe_topk, Bk)):
        prob = registry.get("moe_topk" if B is Bk else "moe_all_to_all")
        args = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip((A, B, W), prob.in_specs)]
        if fn is None:
            jitted = jax.jit(functools.partial(prob.baseline, mesh=mesh),
                             out_shardings=NamedSharding(mesh, prob.out_spec))
        else:
            jitted = jax.jit(functools.partial(fn, mesh=mesh))
        compiled = jitted.lower(*args).compile()
        temp = compiled.memory_analysis().temp_size_in_bytes
        t, out = timed(compiled, args, a.rounds)
        err = float(np.abs(np.asarray(out) - prob.reference((A, B, W), x, y)).max())
        print(f"{name:26s} {t * 1e3:10.1f} {temp / 2**20:16.2f} {err:9.1e}")


if __name__ == "__main__":
    main()
