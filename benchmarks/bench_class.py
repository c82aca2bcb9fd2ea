"""A class graded end to end: how long, and whether identical programs really cost one grading.

    python benchmarks/bench_class.py [--students 30] [--clones 10] [--workers 2] [--seed 0]
                                     [--local-cluster N]
                                     [--scheduler ADDRESS] [--json FILE]

Builds a class of complete submissions (every assignment) in the nbgrader layout and grades it
with ``grade-all``'s machinery, from a fresh class-wide cache (the jit baselines warmed first,
timed separately), and prints the wall-clock time, the time per submission and how many
functions were graded and how many reused.

* Distinct students: each assignment from one of the correct answers this repository has (the
  reference in ``solutions/``, and the full-marks alternatives among the test fixtures), made a
  program of its own: every graded function's result goes through a chain of exact ``* 1.0``
  of a length unique to the student, so nothing of it matches another student's program and
  every one of its programs is compiled and graded afresh (the worst case for reuse).
* Clones: another student's files rewritten (local names renamed, comments and the layout
  gone, a helper added): the same programs, written differently. Each must be graded exactly
  like its original, and should cost a fraction of it.

The target (class-scale issue): 30 complete submissions in at most 10 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder.classroom.batch import grade_all  # noqa: E402
from autograder.course import registry  # noqa: E402
from autograder.supervisor.options import Limits, Options
from autograder.supervisor.supervise import warm_cache  # noqa: E402

#: correct answers other than the reference (full marks), by assignment
ALTERNATIVES = {
    "ps1_sharding": ["tests/fixtures/ps1/alt_correct.py"],
    "ps3_collective_matmul": ["tests/fixtures/ps3/alt_correct_a.py",
                              "tests/fixtures/ps3/alt_correct_b.py"],
    "ps4_bidirectional": ["tests/fixtures/ps4/alt_correct.py"],
}


def distinct(src: str, names: list[str], k: int) -> str:
    """``src`` with every graded function's result multiplied by 1.0, ``k`` times."""
    return src + f'''

def _own_program(f, k={k}):
    import functools

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        out = f(*args, **kwargs)
        for _ in range(k):
            out = out * 1.0
        return out
    return wrapped


''' + "".join(f"{n} = _own_program({n})\n" for n in names)


class _Rename(ast.NodeTransformer):
    def __init__(self, names: set, tag: str):
        self.names, self.tag = names, tag

    def visit_Name(self, node):
        if node.id in self.names:
            node.id = f"{node.id}_{self.tag}"
        return node

    def visit_arg(self, node):
        if node.arg in self.names:
            node.arg = f"{node.arg}_{self.tag}"
        return node

    def visit_FunctionDef(self, node):
        if node.name in self.names:
            node.name = f"{node.name}_{self.tag}"
        self.generic_visit(node)
        return node


def reworded(src: str, tag: str) -> str:
    """The same programs written differently: inside every top-level function, local names
    (variables, nested functions and their parameters) renamed; comments gone; a helper
    added. The top-level parameters stay (the grader passes ``mesh=`` by name)."""
    tree = ast.parse(src)
    for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        local = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
                if isinstance(node, ast.FunctionDef):
                    local.add(node.name)
                local |= {a.arg for a in node.args.args + node.args.kwonlyargs}
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                local -= set(node.names)
        _Rename(local - params, tag).visit(fn)
    return (f'"""My answers ({tag})."""\n\n\ndef _unused_helper_{tag}(x):\n    return x\n\n\n'
            + ast.unparse(tree) + "\n")


def build_class(root: Path, students: int, clones: int, seed: int) -> dict:
    """Writes the class; returns {student: original student (None for a distinct one)}."""
    rng = random.Random(seed)
    made: dict[str, dict[str, str]] = {}
    origin: dict[str, str | None] = {}
    n_distinct = max(1, students - clones)
    for i in range(students):
        name = f"s{i:03d}"
        if i < n_distinct:
            origin[name] = None
            files = {}
            for a in registry.assignments():
                pool = ["solutions/" + a + ".py"] + ALTERNATIVES.get(a, [])
                src = (ROOT / rng.choice(pool)).read_text()
                files[a] = distinct(src, [p.name for p in registry.problems(a)], i + 1)
        else:
            first = rng.choice(sorted(o for o in made if origin[o] is None))
            origin[name] = first
            files = {a: reworded(src, f"v{i}") for a, src in made[first].items()}
        made[name] = files
        for a, src in files.items():
            d = root / "submitted" / name / a
            d.mkdir(parents=True)
            (d / f"{a}.py").write_text(src)
    return origin


def verdicts(report: dict) -> dict:
    return {(fn, c["name"]): c["passed"] for fn, f in report["functions"].items()
            for c in f["checks"]}


def table(cost: dict, warm_s: float) -> str:
    """Expected wall-clock time for a class, from the measured cost per complete submission on
    one machine like this one (N submissions spread over W such machines, each warming its
    own cache once; Dask's own overhead is small next to tasks of seconds)."""
    d, c = cost.get("distinct", 0.0), cost.get("clone", cost.get("distinct", 0.0))
    rows = ["| complete submissions | machines | all distinct | two thirds distinct |",
            "|---:|---:|---:|---:|"]
    for n in (30, 300, 3000):
        for w in (1, 8, 64):
            def t(share):
                # at least one submission's own time, however many machines there are
                secs = warm_s + max(d, n * (share * d + (1 - share) * c) / w)
                return f"{secs / 60:.1f} min" if secs < 5400 else f"{secs / 3600:.1f} h"
            rows.append(f"| {n} | {w} | {t(1.0)} | {t(2 / 3)} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--clones", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="how the class is drawn")
    ap.add_argument("--scheduler", help="grade on this Dask scheduler (tls://...) instead of "
                    "locally, with the client credentials of $AUTOGRADER_CLUSTER_CREDENTIALS")
    ap.add_argument("--local-cluster", type=int, default=0, metavar="N",
                    help="grade on a Dask LocalCluster of N one-thread workers on this machine "
                         "(run it with 1 and with 2 to measure the scale-out)")
    ap.add_argument("--json", help="write the summary here")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        tmp = Path(tmp)
        os.environ["AUTOGRADER_CACHE_DIR"] = str(tmp / "cache")
        origin = build_class(tmp / "class", a.students, a.clones, a.seed)
        opts = Options(limits=Limits())
        t0 = time.monotonic()
        warm_cache(opts)
        warm_s = time.monotonic() - t0
        kw = {}
        if a.scheduler:
            from autograder.classroom import credentials

            kw = {"scheduler": a.scheduler, "security": credentials.load().security()}
        with contextlib.ExitStack() as stack:
            if a.local_cluster:
                from distributed import LocalCluster
                from distributed.security import Security

                # locked as a course's cluster is (TLS), with Dask's in-memory credentials
                sec = Security.temporary()
                cluster = stack.enter_context(LocalCluster(
                    n_workers=a.local_cluster, threads_per_worker=1, processes=True,
                    dashboard_address=None, protocol="tls://", security=sec))
                kw = {"scheduler": cluster.scheduler_address, "security": sec}
            t0 = time.monotonic()
            outs = grade_all(tmp / "class", workers=a.workers, out=tmp / "out" / "grades.csv",
                             opts=opts, progress=True, warm=False, **kw)
            secs = time.monotonic() - t0
        reports: dict = {}
        for o in outs:
            reports.setdefault(o.item.student, {})[o.item.assignment] = o.report
        fns = [f for r in (x for s in reports.values() for x in s.values())
               for f in r["functions"].values()]
        reused = sum(1 for f in fns if f.get("reused"))
        reused_distinct = sum(1 for s, first in origin.items() if first is None
                              for r in reports[s].values() for f in r["functions"].values()
                              if f.get("reused"))
        problems = [] if not reused_distinct else [
            f"{reused_distinct} functions of distinct students were reused: the class is not "
            "what it claims"]
        for s, first in origin.items():
            for asg, rep in reports[s].items():
                if first is not None and verdicts(rep) != verdicts(reports[first][asg]):
                    problems.append(f"{s}/{asg} (a clone of {first}) graded differently")
        # every hand-in is a correct answer: a check it fails is a finding, said in full
        lost = [f"{s}/{asg} {fn} {c['name']}: {c['message'][:400]}"
                for s, per in reports.items() for asg, rep in per.items()
                for fn, f in rep["functions"].items() for c in f["checks"]
                if not c["passed"]]
        regrades = [f"{s}/{asg} {fn}: {f['needs_regrade']}"
                    for s, per in reports.items() for asg, rep in per.items()
                    for fn, f in rep["functions"].items() if f.get("needs_regrade")]
        complete = len(reports)
        # machine-seconds per complete submission, by kind (task seconds overlap `workers` ways)
        per_kind = {"distinct": [], "clone": []}
        ways = max(1, a.local_cluster or a.workers)
        for st, first in origin.items():
            per_kind["clone" if first else "distinct"].append(
                sum(r.get("seconds", 0.0) for r in reports[st].values()) / ways)
        cost = {k: round(sum(v) / len(v), 1) for k, v in per_kind.items() if v}
        summary = {"students": complete, "clones": a.clones,
                   "workers": (f"dask LocalCluster x{a.local_cluster}" if a.local_cluster
                               else "dask" if a.scheduler else a.workers),
                   "submissions": len(outs), "seconds": round(secs, 1),
                   "warm_seconds": round(warm_s, 1),
                   "seconds_per_complete_submission": round(secs / max(1, complete), 1),
                   "functions": len(fns), "functions_reused": reused,
                   "functions_reused_of_distinct_students": reused_distinct,
                   "mean_score": round(sum(r["score"] for s in reports.values()
                                           for r in s.values()) / max(1, complete), 2),
                   "machine_seconds_per_complete_submission": cost,
                   "failed_checks": lost, "needs_regrade": regrades,
                   "problems": problems}
    print(json.dumps(summary, indent=2))
    print(table(summary["machine_seconds_per_complete_submission"], warm_s))
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
