"""How long one complete correct submission takes to grade, through the trusted pipeline.

    python benchmarks/bench_submission.py [--runs 1] [--no-speed] [--no-isolation] [--alone]
                                          [--phases ps2_moe]

Grades the reference answers of every assignment (``solutions/<assignment>.py``) exactly as
``python -m autograder grade`` does (a supervisor, the trusted grader, the sandboxed worker), one
assignment after the other, and prints the seconds per assignment and in all, with the CPU
seconds of each process (the trusted grader, the student's sandbox, the supervisor) and a table
of where the grader's wall-clock and CPU seconds went, phase by phase. The trusted grader stays
warm from one assignment to the next, as it does in a class run (``JudgePool``); alone, the first
assignment pays for starting it, and as a class member it was started before the clock (by the
class's earlier submissions: one function graded). Every check must pass; the script exits non-zero otherwise.

By default the submission is one of a class graded on one seed, as ``grade-all`` and nbgrader's
path grade: what is the same for every student (the jit baselines, the memory and speed cases
and their NumPy answers) is made once for the class before the clock starts, and no verdict is
reused (each grading is of a program never graded before). ``--alone`` grades as ``grade``
does, each assignment on a fresh secret seed, drawing its big cases anew.

Beside each time it prints the floor measured in the same run: the distinct programs grading
compiles for that assignment (one per signature and mesh: the numerics programs, the memory and
the speed case), compiled here with the grader's own options, one after the other, and the
ratio of the grading time to that floor; with ``--runs N`` it ends with each row's median over
the runs (a single run may fall on a busy moment of a shared machine). Each row says how many
cores its processes kept busy (CPU seconds over wall-clock seconds; the floor's compiles too),
and the complete submission's CPU seconds spread over every core of the machine give the least
time any schedule of the same work can take ("every core busy"): what overlapping alone could
reach, beside what the work itself costs. The targets (the grading-cost issue): a complete
submission at most 1.5x its floor, each assignment at most 2x, idle on a 2-core machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
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


def compile_floor(asg: str, seed: int = 0) -> tuple[int, float, float]:
    """(programs, seconds, CPU seconds): the reference answers' distinct programs for ``asg``,
    exported here (not timed) and compiled with the options grading uses (timed, with this
    process's CPU meanwhile: XLA's compile threads included), one after the other."""
    import importlib.util

    from autograder.judge import grading
    from autograder.worker.local import LocalExporter

    spec = importlib.util.spec_from_file_location(f"floor_{asg}", ROOT / "solutions" / f"{asg}.py")
    sol = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sol)
    n, secs, cpu = 0, 0.0, 0.0
    for p in registry.problems(asg):
        plan = grading.plan_for(p, seed=seed)
        replies = LocalExporter.of(p.name, getattr(sol, p.name)).export(plan.all_requests())
        programs = grading.Programs(plan, replies)
        kinds = {"memory": grading.CompileKind.MEMORY, "speed": grading.CompileKind.MODEL}
        todo = [(lay, c, grading.CompileKind.NUMERICS) for lay, cs in plan.cases() for c in cs]
        todo += [(*plan.big(size), kinds[size]) for size in plan.big_sizes()]
        seen = set()
        for layout, case, kind in todo:
            rid = plan.request(layout, case).id
            if rid in seen:
                continue
            seen.add(rid)
            mesh = grading.make_mesh(*layout)
            args = grading.place_args(p, case, mesh)
            t0, c0 = time.perf_counter(), _self_cpu()
            programs.compiled(layout, case, args, kind)
            secs += time.perf_counter() - t0
            cpu += _self_cpu() - c0
            n += 1
    return n, secs, cpu


#: the seed of the class the benchmark's submission belongs to (any fixed one will do)
CLASS_SEED = 20261128


def warm_big_cases(cache: Path, seed: int, *, with_speed: bool) -> int:
    """Draw every memory and speed case of ``seed`` and compute its NumPy answer into the
    class-wide cache's store (with the speed case's public twin), as the class's first grading
    does (:mod:`autograder.judge.bigcases`):
    what every later submission of the class reads instead of drawing. Returns how many."""
    from autograder.judge import grading
    from autograder.judge.bigcases import BigCaseStore

    store, n = BigCaseStore(cache / "bigcases"), 0
    for asg in registry.assignments():
        for p in registry.problems(asg):
            plan = grading.plan_for(p, seed=seed, with_speed=with_speed, big_cases=store)
            for size in plan.big_sizes():
                plan.big_case(size)
                n += 1
            if "speed" in plan.big_sizes():
                plan.public_big("speed")  # the twin a speed message quotes, the class's too
    return n


def _kept(cache: Path) -> int:
    """How many big cases the class-wide store holds (one directory each; a hidden one is
    being written)."""
    store = cache / "bigcases"
    return sum(1 for p in store.iterdir()
               if p.is_dir() and not p.name.startswith(".")) if store.is_dir() else 0


def _records(trace: Path, start: int) -> list[dict]:
    """The trusted graders' timing records appended to ``trace`` after its first ``start``
    lines (:mod:`autograder.judge.timing`)."""
    if not trace.exists():
        return []
    return [json.loads(line) for line in trace.read_text().splitlines()[start:]]


def _lines(trace: Path) -> int:
    return len(trace.read_text().splitlines()) if trace.exists() else 0


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def phase_table(records: list[dict], runs: int, title: str) -> None:
    """Wall-clock and CPU seconds per phase, summed over ``records`` and averaged over runs."""
    wall: dict = defaultdict(float)
    cpu: dict = defaultdict(float)
    own: dict = defaultdict(float)
    for rec in records:
        for k, v in rec["phases"].items():
            wall[k] += v / runs
        for k, v in rec.get("cpu", {}).items():
            cpu[k] += v / runs
        for k, v in rec.get("own cpu", {}).items():
            own[k] += v / runs
    print(f"\n{title}, summed over its trusted graders (phases nest; 'own': the CPU of the "
          "thread running the phase; 'all': the grader's, every thread, while it ran):")
    print(f"  {'phase':45s} {'wall':>7s} {'own':>7s} {'all':>7s}")
    for k, v in sorted(wall.items(), key=lambda kv: -kv[1]):
        print(f"  {k:45s} {v:6.1f}s {own.get(k, 0.0):6.1f}s {cpu.get(k, 0.0):6.1f}s")


#: the cores this process may run on: what the grading's processes share
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def busy_bound(cpu_s: float) -> float:
    """The seconds ``cpu_s`` CPU seconds take with every core busy: no schedule of the same
    work is faster on this machine."""
    return cpu_s / CORES


def print_medians(figures: dict) -> None:
    """The median over the runs of each row's grading time, floor and ratio (each run's ratio
    is of one run's two figures; the median ratio is the middle of those, not a ratio of
    medians), and of the ratio the same grading's CPU would give with every core busy
    (:func:`busy_bound`): what to quote where one run's figure may be a busy moment's."""
    print(f"\nmedian of {len(next(iter(figures.values())))} runs (each ratio within its run):")
    for name, rows in figures.items():
        secs, floors = [r[0] for r in rows], [r[1] for r in rows]
        ratios = [g / f for g, f, _ in rows]
        bounds = [busy_bound(c) / f for _, f, c in rows]
        each = ", ".join(f"{r:.2f}x" for r in ratios)
        print(f"  {name:24s} {statistics.median(secs):6.1f} s  floor "
              f"{statistics.median(floors):5.1f} s  {statistics.median(ratios):4.2f}x  "
              f"(runs: {each}; every core busy: {statistics.median(bounds):4.2f}x)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--no-isolation", action="store_true")
    ap.add_argument("--assignment", action="append", default=None,
                    help="grade only this assignment's reference answers (repeatable)")
    ap.add_argument("--phases", action="append", default=[], metavar="ASSIGNMENT",
                    help="also print where this assignment's seconds went (repeatable)")
    ap.add_argument("--alone", action="store_true",
                    help="grade as `grade` does, each assignment on a fresh secret seed (default: "
                         "as a member of a class graded on one seed, whose big cases were drawn "
                         "and answered once for the class)")
    ap.add_argument("--seed", type=int, default=CLASS_SEED, help="the class's seed")
    ap.add_argument("--breakdown", action="store_true",
                    help="(kept for old command lines: the phase table is always printed)")
    a = ap.parse_args(argv)
    unknown = sorted(set(a.assignment or []) - set(registry.assignments()))
    if unknown:
        ap.error(f"no assignment {', '.join(unknown)} (the course has "
                 f"{', '.join(registry.assignments())})")
    ok = True
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    trace = scratch / "timings.jsonl"
    os.environ["AUTOGRADER_TIMINGS"] = str(trace)
    os.environ["AUTOGRADER_CACHE_DIR"] = str(scratch / "cache")
    from autograder.supervisor.options import Options, cache_for
    from autograder.supervisor.supervise import warm_cache

    t0 = time.perf_counter()
    opts = Options(isolation=not a.no_isolation, with_speed=not a.no_speed)
    cache = cache_for(opts)  # the trusted side's class-wide cache, as grading finds it
    warm_cache(opts)
    print(f"warming the baselines into a fresh cache: {time.perf_counter() - t0:.1f} s "
          "(once per class, not counted)", flush=True)
    from autograder.core.devices import setup_devices
    from autograder.core.mlir_reuse import reuse_per_thread

    setup_devices()  # the floor compiles here; grading's processes are started with exec
    reuse_per_thread()  # and its programs are read and lowered as the grader's are
    seed = None if a.alone else a.seed
    if seed is not None:
        t0 = time.perf_counter()
        n = warm_big_cases(cache, seed, with_speed=not a.no_speed)
        print(f"drawing and answering the class's {n} big cases (seed {seed}): "
              f"{time.perf_counter() - t0:.1f} s (once per class, not counted)", flush=True)
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
    if seed is not None:
        # a class member's trusted grader is warm (JudgePool): the class's earlier submissions
        # started it and its JAX; one function of a classmate's hand-in grades before the clock
        t0 = time.perf_counter()
        first = registry.assignments()[0]
        grade_path(ROOT / "solutions" / f"{first}.py", first, with_speed=not a.no_speed,
                   seed=seed, isolation=not a.no_isolation,
                   only=[registry.problems(first)[0].name])
        shutil.rmtree(cache / "verdicts", ignore_errors=True)
        print(f"starting the class's trusted grader (one function graded): "
              f"{time.perf_counter() - t0:.1f} s (once per class, not counted)", flush=True)
    kept = _kept(cache)
    by_asg: dict = defaultdict(list)
    all_records: list = []
    #: (grading s, floor s) per run, by assignment and for the complete submission
    figures: dict = defaultdict(list)
    for run in range(a.runs):
        total = total_cpu = 0.0
        floor_n, floor_s, floor_cpu = 0, 0.0, 0.0
        counted = True  # every sandbox's CPU read from its control group
        for asg in a.assignment or registry.assignments():
            sol = ROOT / "solutions" / f"{asg}.py"
            start = _lines(trace)
            t0 = time.perf_counter()
            s0 = _self_cpu()
            # every grading is of a program not graded before: no verdict is reused
            shutil.rmtree(cache / "verdicts", ignore_errors=True)
            res = grade_path(sol, asg, with_speed=not a.no_speed, seed=seed,
                             isolation=not a.no_isolation)
            secs = time.perf_counter() - t0
            supervisor = _self_cpu() - s0
            records = _records(trace, start)
            if seed is not None and _kept(cache) != kept:
                print(f"warning: grading {asg} drew big cases the class had drawn (the class-wide "
                      "store missed): its figures are not a class member's", flush=True)
                kept = _kept(cache)
            by_asg[asg] += records
            all_records += records
            if not records:
                print(f"warning: no timing record from the grader of {asg}: its CPU split is "
                      "unknown (read as 0 below)", flush=True)
            used = [r.get("processes", {}) for r in records]
            judge = sum(u.get("self", 0.0) for u in used)
            # the sandbox's control group, else (no group) the judge's reaped children
            sandbox = sum(u.get("sandbox", u.get("children", 0.0)) for u in used)
            # without a group, a sandbox killed before its processes were reaped left no usage
            grouped = all("sandbox" in u for u in used)
            counted &= grouped
            cpu = judge + sandbox + supervisor
            total_cpu += cpu
            total += secs
            failed = [f"{f.name}/{c.name}" for f in res.functions.values() for c in f.checks
                      if not c.passed]
            # a function the grader could not judge has no checks: name it and say why
            failed += [f"{f.name} (a regrade: {f.regrade})" for f in res.functions.values()
                       if f.regrade]
            ok &= not failed
            n, fs, fc = compile_floor(asg, seed or 0)
            floor_n, floor_s, floor_cpu = floor_n + n, floor_s + fs, floor_cpu + fc
            figures[asg].append((secs, fs, cpu))
            print(f"run {run + 1}  {asg:24s} {secs:6.1f} s  ({cpu:5.1f} CPU s: judge "
                  f"{judge:4.1f}, sandbox {sandbox:4.1f}"
                  f"{'' if grouped else ' (no control group: a lower bound)'}, supervisor "
                  f"{supervisor:4.1f}; {cpu / secs:3.1f} cores busy)  "
                  f"{res.score:g}/{res.max_score:g}  floor: {n:3d} programs {fs:5.1f} s "
                  f"({fc / fs:3.1f} cores), {secs / fs:4.1f}x"
                  + (f"  FAILED: {', '.join(failed)}" if failed else ""), flush=True)
        print(f"run {run + 1}  complete submission      {total:6.1f} s  ({total_cpu:5.1f} CPU s, "
              "the grader's processes and the student's sandbox together: "
              f"{total_cpu / total:.2f} of {CORES} cores busy)", flush=True)
        print(f"run {run + 1}  compile floor           {floor_s:6.1f} s  ({floor_n} distinct "
              f"programs compiled here with grading's options, {floor_cpu:.1f} CPU s: "
              f"{floor_cpu / floor_s:.2f} cores busy; grading takes "
              f"{total / floor_s:.1f}x its floor)", flush=True)
        print(f"run {run + 1}  every core busy         {busy_bound(total_cpu):6.1f} s  (the "
              f"grading's CPU seconds over this machine's {CORES} cores, the least any "
              f"schedule of the same work takes: {busy_bound(total_cpu) / floor_s:.2f}x the "
              "floor" + ("" if counted else "; a sandbox's CPU was read without a control "
                         "group, so the least time is more than this") + ")", flush=True)
        figures["complete submission"].append((total, floor_s, total_cpu))
    if a.runs > 1:
        print_medians(figures)
    phase_table(all_records, a.runs, "per complete submission")
    for asg in a.phases:
        phase_table(by_asg.get(asg, []), a.runs, asg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
