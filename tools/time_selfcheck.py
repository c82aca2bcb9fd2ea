"""Time ``pytest -q`` in each assignment's student folder, the reference answers in its notebook.

    python tools/time_selfcheck.py [ASSIGNMENT ...]

Each folder is a copy of ``source/<assignment>`` (build it first: ``python
tools/build_notebooks.py``), whose notebook holds the reference answers, run on its own: no
PYTHONPATH, no course package, JAX's devices set up by its ``selfcheck`` as a student's are. It
prints, per assignment, the tests passed, the wall-clock time and the CPU time (user + system) of
the pytest process and its children. The CPU time is what a machine of 2 cores with nothing else
running needs at most (XLA:CPU runs the 8 emulated devices on threads, so the wall-clock time
there is at most that); on a busy machine the wall-clock time says little. The figures go into
tools/build_notebooks.py's ``PYTEST_SECONDS``, which the notebook and the test file quote.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def time_folder(asg: str) -> dict:
    """``{'passed', 'failed', 'wall_s', 'cpu_s', 'tail'}`` of ``pytest -q`` in a copy of
    ``source/<asg>``."""
    src = ROOT / "source" / asg
    if not (src / "selfcheck").is_dir():
        raise SystemExit(f"{src} has no selfcheck/: run python tools/build_notebooks.py first")
    with tempfile.TemporaryDirectory(prefix="selfcheck-time-") as tmp:
        folder = Path(tmp) / asg
        shutil.copytree(src, folder, ignore=shutil.ignore_patterns("__pycache__",
                                                                   ".pytest_cache"))
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=folder, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed)", p.stdout))
    return {"passed": found.get("passed", 0), "failed": found.get("failed", 0),
            "wall_s": wall, "cpu_s": cpu, "tail": p.stdout[-3000:] + p.stderr[-2000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("assignments", nargs="*")
    a = ap.parse_args(argv)
    asgs = a.assignments or sorted(p.stem for p in (ROOT / "notebooks").glob("ps*.py"))
    bad = 0
    for asg in asgs:
        r = time_folder(asg)
        print(f"{asg}: {r['passed']} passed, {r['failed']} failed; wall {r['wall_s']:.1f} s, "
              f"cpu {r['cpu_s']:.1f} s (load average {os.getloadavg()[0]:.1f})", flush=True)
        if r["failed"] or not r["passed"]:
            bad += 1
            print(r["tail"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
