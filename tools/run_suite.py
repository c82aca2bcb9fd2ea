"""Run the test suite as `make test` and `make test-latest` do, and say what it cost.

Two phases, one pytest run each:

1. the ``serial`` tests (they measure processes, memory or time, so nothing runs beside them),
   one at a time;
2. every other test, spread over ``--workers`` processes (pytest-xdist, ``--dist loadgroup``:
   tests that share one expensive grading or fixture carry the same ``xdist_group`` and run on
   one worker, which does that work once).

Then the 25 slowest tests of both phases, each phase's wall time, the suite's total and one
closing line for both ("suite: N passed, N failed, N skipped"). Exit status: 0 when both
phases passed (a phase that selects no test passes), else the first failing phase's.

    python tools/run_suite.py                       # the whole suite (make test)
    python tools/run_suite.py --select "not orchestration"   # what make test-latest runs
    python tools/run_suite.py -- -k verdicts -x     # anything after -- goes to pytest
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["tests", "autograder/tests"]
#: pytest's "no tests were collected": a phase with nothing to run has nothing to fail
NO_TESTS = 5


def _cpu_s() -> float:
    """CPU seconds (user and system) of the finished child processes and theirs, so far."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _phase(select: str, parallel: bool, workers: int, extra: list[str], xml: Path,
           env: dict) -> tuple[int, float]:
    argv = [sys.executable, "-m", "pytest", "-q", *PATHS, "-m", select,
            f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    # --no-loadscope-reorder: the units go out in tests/conftest.py's order (the dearest
    # first, by tests/costs.tsv), not sorted by their number of tests. --max-worker-restart 0:
    # a worker that dies ends the phase at once, naming the test it ran (under --dist
    # loadgroup a replaced worker was never given the dead one's tests: the run waited forever)
    argv += (["-n", str(workers), "--dist", "loadgroup", "--no-loadscope-reorder",
              "--max-worker-restart", "0"]
             if parallel and workers > 1 else ["-n", "0"])
    t0 = time.monotonic()
    rc = subprocess.call(argv + extra, cwd=ROOT, env=env)
    return (0 if rc == NO_TESTS else rc), time.monotonic() - t0


def phase_env(cache: Path) -> dict:
    """The environment of both phases' pytest runs (and of every process they start):

    - ``SUITE_CACHE_DIR``: one class-wide cache for both phases (the big cases drawn once),
      removed with the runner's folder (tests/conftest.py's ``SUITE_CACHE``);
    - no ``PYTHONDONTWRITEBYTECODE``: the suite's processes write the bytecode of what they
      import (the course package, pytest's rewritten test modules; git-ignored ``__pycache__``
      folders), whatever the caller's environment says. Where it is set (this machine, CI),
      every process compiled them again as it imported them: 4.3 s of CPU to collect the suite
      against 2.8, and 12 % of test_cli's CPU, its graders' processes included.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["SUITE_CACHE_DIR"] = str(cache)
    return env


class Case(NamedTuple):
    """One test a phase ran, from its junit record."""
    secs: float
    test: str       # file::name, with "@group" where it has an xdist group
    outcome: str    # passed, failed or skipped
    cpu: float      # the ``cpu`` property tests/conftest.py records (0 where missing)
    start: float    # the ``start`` property (seconds since the epoch; 0 where missing)

    @property
    def unit(self) -> str:
        """What pytest-xdist scheduled as one: its group ("@group"), or the test alone."""
        return "@" + self.test.split("@", 1)[1] if "@" in self.test else self.test


def _cases(xml: Path) -> list[Case]:
    """Every test a phase ran; outcome: passed, failed, skipped; CPU: the worker's and the
    processes it waited for."""
    if not xml.exists():
        return []
    out = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('file') or case.get('classname', '')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcome = ("failed" if tags & {"failure", "error"} else
                   "skipped" if "skipped" in tags else "passed")
        props = {p.get("name"): float(p.get("value") or 0.0) for p in case.iter("property")
                 if p.get("name") in ("cpu", "start")}
        out.append(Case(float(case.get("time") or 0.0), name, outcome, props.get("cpu", 0.0),
                        props.get("start", 0.0)))
    return out


def busy_seconds(cases: list[Case]) -> dict[int, float]:
    """``k -> seconds during which k tests were running`` (k >= 1), from the tests' start
    times and durations: how long a parallel phase kept fewer workers than it had busy (its
    tail, where one dear unit runs alone)."""
    events = sorted([(c.start, 1) for c in cases if c.start] +
                    [(c.start + c.secs, -1) for c in cases if c.start])
    out: dict[int, float] = {}
    running, last = 0, None
    for t, step in events:
        if running and last is not None:
            out[running] = out.get(running, 0.0) + t - last
        running, last = running + step, t
    return out


def unit_costs(cases: list[Case]) -> list[tuple[float, str]]:
    """(a worker's seconds, unit) of every unit, the dearest first: what tests/costs.tsv
    keeps for tests/conftest.py to dispatch by."""
    units: dict[str, float] = {}
    for c in cases:
        units[c.unit] = units.get(c.unit, 0.0) + c.secs
    return sorted(((secs, unit) for unit, secs in units.items()), reverse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--select", default="",
                    help='a pytest -m expression every test must also match (default: all)')
    ap.add_argument("--workers", type=int, default=int(os.environ.get("TEST_WORKERS", "4")),
                    help="pytest-xdist processes for the parallel phase (default $TEST_WORKERS "
                         "or 4: most tests wait on a grader's processes, so twice the machine's "
                         "2 cores keeps both busy)")
    ap.add_argument("--slowest", type=int, default=25)
    ap.add_argument("--durations-file", type=Path, default=None,
                    help="also write every test's seconds, outcome, phase, name and CPU "
                         "seconds there (TSV)")
    ap.add_argument("--costs-file", type=Path, default=None,
                    help="also write each unit's seconds in the parallel phase there (the "
                         "format of tests/costs.tsv, which orders the dispatch)")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    a = ap.parse_args(argv)
    base = f"({a.select}) and " if a.select else ""
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="suite-") as tmp:
        (Path(tmp) / "cache").mkdir()
        env = phase_env(Path(tmp) / "cache")
        for name, select, parallel in (("serial", f"{base}serial", False),
                                       ("parallel", f"{base}not serial", True)):
            print(f"\n== {name} phase: -m \"{select}\"" +
                  (f", {a.workers} workers" if parallel else ", one test at a time"), flush=True)
            xml = Path(tmp) / f"{name}.xml"
            cpu = _cpu_s()
            rc, took = _phase(select, parallel, a.workers, a.pytest_args, xml, env)
            results.append((name, rc, took, _cpu_s() - cpu, _cases(xml)))
    total = time.monotonic() - t0
    every = sorted((c for *_, cs in results for c in cs), reverse=True)
    if a.durations_file is not None:
        a.durations_file.write_text("".join(
            f"{c.secs:.2f}\t{c.outcome}\t{name}\t{c.test}\t{c.cpu:.2f}\n"
            for name, *_, cs in results for c in sorted(cs, reverse=True)))
    if a.costs_file is not None:
        parallel = next(cs for name, *_, cs in results if name == "parallel")
        a.costs_file.write_text(
            "# seconds<TAB>unit: a worker's seconds for each unit (an xdist group, or a test) of\n"
            "# the parallel phase, as measured by tools/run_suite.py --costs-file; the dispatch\n"
            "# order of tests/conftest.py (the dearest first). Units under 2 s are left out.\n" +
            "".join(f"{secs:.1f}\t{unit}\n" for secs, unit in unit_costs(parallel) if secs >= 2))
    print(f"\n== the {a.slowest} slowest tests (seconds, both phases)")
    for c in every[:a.slowest]:
        print(f"{c.secs:8.1f}  {c.test}")
    files: dict = {}
    for c in every:
        was = files.get(c.test.split("::")[0], (0.0, 0.0))
        files[c.test.split("::")[0]] = (was[0] + c.secs, was[1] + c.cpu)
    print(f"== the files that cost most (seconds of test time and of CPU, both phases; "
          f"{sum(t for t, _ in files.values()) / 60:.1f} and "
          f"{sum(c for _, c in files.values()) / 60:.1f} min in all)")
    for path, (secs, cpu) in sorted(files.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"{secs:8.1f} {cpu:8.1f}  {path}")
    for name, rc, took, cpu, cs in results:
        # CPU over wall: how many cores the phase kept busy (the machine's processes that
        # ended, the graders' sandboxes included)
        print(f"== {name} phase: {len(cs)} tests in {took / 60:.1f} min, {cpu / 60:.1f} min "
              f"of CPU ({cpu / max(took, 1e-9):.1f} cores busy) "
              f"({'passed' if rc == 0 else f'FAILED, exit {rc}'})")
        if name == "parallel" and cs:
            busy = busy_seconds(cs)
            # (start times are kept to the hundredth: a count that lasted under a second is
            # rounding, not a state the phase was in)
            print("   tests running at once: " + ", ".join(
                f"{k}: {busy[k] / 60:.1f} min" for k in sorted(busy, reverse=True)
                if k >= 1 and busy[k] >= 1.0))
    print(f"== the suite took {total / 60:.1f} min")
    count = {k: sum(1 for c in every if c.outcome == k) for k in ("passed", "failed", "skipped")}
    print(f"suite: {count['passed']} passed, {count['failed']} failed, {count['skipped']} skipped")
    return next((rc for _, rc, *_ in results if rc != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
