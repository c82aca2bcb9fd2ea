"""Grading throughput and verdict stability on a synthetic class.

    python benchmarks/bench_grading.py [--students 4] [--runs 2] [--workers 2] [--busy]
                                       [--no-speed] [--quick] [--extra FILE:ASSIGNMENT ...]

For every assignment that has reference answers (``solutions/<assignment>.py``; the registry says
which functions exist, so new assignments join automatically) it builds a class under a temporary
folder in the nbgrader layout: correct submissions (the reference answers), partly wrong ones (one
function returns a wrong value), hanging ones (one function never returns) and cheating ones
(the reference answers with clocks frozen at import: in the student's own sandbox, where it
changes nothing, so they must be graded exactly like the correct ones). It grades the class ``--runs`` times with ``grade-all``'s machinery,
optionally while a busy process keeps every core loaded (``--busy``), and prints the seconds per
submission and every verdict (function, check) that changed between runs. It also checks the
expected outcome: references pass every check in every run; broken functions fail.

The class-scale figures (one complete submission; a class of 30 complete submissions, some of them
the same programs written differently) are measured by ``bench_submission.py`` and
``bench_class.py`` beside this script; this one is about verdicts that must not change.

``--extra FILE:ASSIGNMENT`` adds a submission that must FAIL at least one check of some function in
every run (e.g. a blocking, non-overlapped ps3 answer once that assignment exists).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.classroom.batch import grade_all  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.supervisor.options import Limits, Options  # noqa: E402


def _spin(stop):
    x = 0
    while not stop.is_set():
        x += 1


def build_class(root: Path, students: int, extras: list[str]) -> dict:
    """Write the class; returns {student/assignment: expectation}."""
    expect = {}
    for a in registry.assignments():
        sol = ROOT / "solutions" / f"{a}.py"
        if not sol.exists():
            continue
        text = sol.read_text()
        names = [p.name for p in registry.problems(a)]
        first = names[0]
        kinds = ["correct", "wrong", "hang", "cheat"]
        for i in range(students):
            kind = kinds[i % len(kinds)]
            body = text
            if kind == "wrong":
                body += (f"\n\n_right_{first} = {first}\n\ndef {first}(*args, **kw):\n"
                         f"    return _right_{first}(*args, **kw) + 1.0\n")
            elif kind == "hang":
                body += f"\n\ndef {first}(*args, **kw):\n    while True:\n        pass\n"
            elif kind == "cheat":
                body = "import time\n\nclass _Freeze:\n    time.perf_counter = lambda: 0.0\n\n" + body
            d = root / "submitted" / f"{kind}{i:02d}" / a
            d.mkdir(parents=True)
            (d / f"{a}.py").write_text(body)
            expect[f"{kind}{i:02d}/{a}"] = (kind, first)
    for j, spec in enumerate(extras):
        path, a = spec.rsplit(":", 1)
        d = root / "submitted" / f"extra{j:02d}" / a
        d.mkdir(parents=True)
        shutil.copy(path, d / f"{a}.py")
        expect[f"extra{j:02d}/{a}"] = ("must_fail", None)
    return expect


def verdicts(report: dict) -> dict:
    return {(fn, c["name"]): c["passed"] for fn, f in report["functions"].items()
            for c in f["checks"]}


def judge(kind, first, report) -> list[str]:
    v = verdicts(report)
    bad = []
    if kind in ("correct", "cheat"):
        bad = [f"{fn}.{c} failed" for (fn, c), ok in v.items() if not ok]
    elif kind in ("wrong", "hang"):
        if v.get((first, "numerics")):
            bad.append(f"{first} should fail numerics")
        bad += [f"{fn}.{c} failed" for (fn, c), ok in v.items() if not ok and fn != first]
    elif kind == "must_fail":
        if all(v.values()):
            bad.append("expected at least one failed check")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--busy", action="store_true", help="keep every core busy meanwhile")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--function-timeout", type=float, default=60.0)
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--json", help="write the summary here")
    a = ap.parse_args(argv)
    stop = mp.Event()
    spinners = []
    if a.busy:
        spinners = [mp.Process(target=_spin, args=(stop,), daemon=True)
                    for _ in range(os.cpu_count() or 1)]
        for p in spinners:
            p.start()
    summary = {"runs": [], "changed": [], "unexpected": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
            root = Path(tmp) / "class"
            expect = build_class(root, a.students, a.extra)
            seen = defaultdict(list)
            cache = Path(tmp) / "cache"
            for r in range(a.runs):
                opts = Options(quick=a.quick, with_speed=not a.no_speed, cache_dir=cache,
                               limits=Limits(per_function_s=a.function_timeout))
                t0 = time.monotonic()
                outs = grade_all(root, workers=a.workers, out=Path(tmp) / f"run{r}" / "g.csv",
                                 opts=opts, force=True, progress=False)
                secs = time.monotonic() - t0
                per = [o.seconds for o in outs]
                summary["runs"].append({"seconds": round(secs, 1), "submissions": len(outs),
                                        "per_submission_max": round(max(per), 1),
                                        "per_submission_mean": round(sum(per) / len(per), 1)})
                print(f"run {r}: {len(outs)} submissions in {secs:.1f} s "
                      f"({secs / max(1, len(outs)):.1f} s each with {a.workers} workers; "
                      f"slowest {max(per):.1f} s)")
                for o in outs:
                    kind, first = expect[o.item.key]
                    for b in judge(kind, first, o.report):
                        summary["unexpected"].append(f"run {r} {o.item.key}: {b}")
                    seen[o.item.key].append(verdicts(o.report))
            for key, runs in seen.items():
                for k in runs[0]:
                    vals = [v.get(k) for v in runs]
                    if len(set(vals)) > 1:
                        summary["changed"].append(f"{key} {k[0]}.{k[1]}: {vals}")
    finally:
        stop.set()
        for p in spinners:
            p.join(timeout=5)
    print("verdicts that changed between runs:", summary["changed"] or "none")
    print("unexpected verdicts:", summary["unexpected"] or "none")
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2))
    return 1 if summary["changed"] or summary["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
