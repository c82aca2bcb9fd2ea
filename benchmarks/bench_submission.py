"""How long one complete correct submission takes to grade, through the trusted pipeline.

    python benchmarks/bench_submission.py [--runs 1] [--no-speed] [--no-isolation] [--breakdown]

Grades the reference answers of every assignment (``solutions/<assignment>.py``) exactly as
``python -m autograder grade`` does (a supervisor, the trusted grader, the sandboxed worker), one
assignment after the other, and prints the seconds per assignment and in all. The trusted grader
stays warm from one assignment to the next, as it does in a class run (``JudgePool``); the
first assignment pays for starting it. Every check must
pass; the script exits non-zero otherwise. The target (class-scale issue): a complete
submission in at most 15 s on an idle 2-core machine.

Beside each time it prints the floor measured in the same run: the distinct programs grading
compiles for that assignment (one per signature and mesh: the numerics programs, the memory and
the speed case), compiled here with the grader's own options, one after the other, and the
ratio of the grading time to that floor.

The grading starts from what a class run starts from: a fresh class-wide cache holding only
the jit baselines (warmed first, not counted), so no program of the submission is compiled
before it is timed.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.cli.main import grade_path  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.supervisor.supervise import JUDGES  # noqa: E402


def tree_cpu() -> float:
    """CPU seconds of every process grading started: those that ended (reaped children) and
    the warm trusted graders still alive, with the sandboxes they reaped."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = r.ru_utime + r.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in JUDGES.pids():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def compile_floor(asg: str, seed: int = 0) -> tuple[int, float]:
    """(programs, seconds): the reference answers' distinct programs for ``asg``, exported here
    (not timed) and compiled with the options grading uses (timed), one after the other."""
    import importlib.util

    from autograder.judge import grading
    from autograder.worker.local import LocalExporter

    spec = importlib.util.spec_from_file_location(f"floor_{asg}", ROOT / "solutions" / f"{asg}.py")
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    n, secs = 0, 0.0
    for p in registry.problems(asg):
        plan = grading.plan_for(p, seed=seed)
        replies = LocalExporter.of(p.name, getattr(sol, p.name)).export(plan.all_requests())
        programs = grading.Programs(plan, replies)
        todo = [(lay, c, True) for lay, cs in plan.cases() for c in cs]
        todo += [(*plan.big(size), size) for size in plan.big_sizes()]
        seen = set()
        for layout, case, how in todo:
            rid = plan.request(layout, case).id
            if rid in seen:
                continue
            seen.add(rid)
            mesh = grading.make_mesh(*layout)
            args = grading._place(p, case, mesh)
            t0 = time.perf_counter()
            if how == "speed":
                programs.speed_program(layout, case, mesh, args)
            else:
                programs.compiled(layout, case, mesh, args, fast=how)
            secs += time.perf_counter() - t0
            n += 1
    return n, secs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-isolation", action="store_true")
    ap.add_argument("--breakdown", action="store_true",
                    help="also print where the trusted graders' seconds went (summed)")
    a = ap.parse_args(argv)
    ok = True
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    trace = scratch / "timings.jsonl"
    os.environ["AUTOGRADER_TIMINGS"] = str(trace)
    os.environ["AUTOGRADER_CACHE_DIR"] = str(scratch / "cache")
    from autograder.supervisor.options import Options
    from autograder.supervisor.supervise import warm_cache

    t0 = time.perf_counter()
    warm_cache(Options(isolation=not a.no_isolation, with_speed=not a.no_speed))
    print(f"warming the baselines into a fresh cache: {time.perf_counter() - t0:.1f} s "
          "(once per class, not counted)", flush=True)
    from autograder.core.devices import setup_devices

    setup_devices()  # the floor compiles here; grading's processes are started with exec
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
    for run in range(a.runs):
        total = total_cpu = 0.0
        floor_n, floor_s = 0, 0.0
        for asg in registry.assignments():
            sol = ROOT / "solutions" / f"{asg}.py"
            t0 = time.perf_counter()
            c0 = tree_cpu()
            res = grade_path(sol, asg, with_speed=not a.no_speed,
                             isolation=not a.no_isolation)
            secs = time.perf_counter() - t0
            cpu = tree_cpu() - c0
            total_cpu += cpu
            total += secs
            failed = [f"{f.name}/{c.name}" for f in res.functions.values() for c in f.checks
                      if not c.passed]
            # a function the grader could not judge has no checks: name it and say why
            failed += [f"{f.name} (a regrade: {f.regrade})" for f in res.functions.values()
                       if f.regrade]
            ok &= not failed
            n, fs = compile_floor(asg)
            floor_n, floor_s = floor_n + n, floor_s + fs
            print(f"run {run + 1}  {asg:24s} {secs:6.1f} s  ({cpu:5.1f} CPU s)  "
                  f"{res.score:g}/{res.max_score:g}  floor: {n:3d} programs {fs:5.1f} s, "
                  f"{secs / fs:4.1f}x" + (f"  FAILED: {', '.join(failed)}" if failed else ""),
                  flush=True)
        print(f"run {run + 1}  complete submission      {total:6.1f} s  ({total_cpu:5.1f} CPU s, "
              "the grader's processes and the student's sandbox together)", flush=True)
        print(f"run {run + 1}  compile floor           {floor_s:6.1f} s  ({floor_n} distinct "
              f"programs compiled here with grading's options; grading takes "
              f"{total / floor_s:.1f}x its floor)", flush=True)
    if a.breakdown and trace.exists():
        sums: dict = defaultdict(float)
        for line in trace.read_text().splitlines():
            for k, v in json.loads(line)["phases"].items():
                sums[k] += v / a.runs
        print("\nper complete submission, summed over its trusted graders (phases nest):")
        for k, v in sorted(sums.items(), key=lambda kv: -kv[1]):
            print(f"  {k:45s} {v:6.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
