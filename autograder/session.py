"""Grading one submission inside a worker process.

The parent (:mod:`autograder.cli`) starts ``python -m autograder.session`` in a fresh process for
each submission and reads its verdicts from a results file written line by line, so a submission
that hangs or kills the interpreter loses only the function being graded at that moment.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


def choose_problems(assignment: str | None, namespace: dict | None, path: Path):
    from . import registry

    if assignment:
        probs = registry.problems(assignment)
        if not probs:
            raise SystemExit(f"unknown assignment {assignment!r}; known: {registry.assignments()}")
        return assignment, probs
    for a in registry.assignments():
        if a in path.stem or a in str(path.parent):
            return a, registry.problems(a)
    defined = {n for n, v in (namespace or {}).items() if callable(v)}
    hit = [a for a in registry.assignments()
           if any(p.name in defined for p in registry.problems(a))]
    if len(hit) == 1:
        return hit[0], registry.problems(hit[0])
    chosen = hit or registry.assignments()
    return None, [p for a in chosen for p in registry.problems(a)]


def _emit(fh, record: dict) -> None:
    fh.write(json.dumps(record) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def run(submission: Path, assignment: str | None, results: Path, *, quick: bool,
        seed: int, with_speed: bool) -> None:
    from .devices import setup_devices

    setup_devices()
    from . import grading, registry  # noqa: F401  (bind clocks before student code runs)
    from .loader import load

    with open(results, "a", encoding="utf-8") as fh:
        try:
            loaded = load(submission)
            ns, notes = loaded.namespace, loaded.notes
        except Exception as e:  # unreadable file: still grade (everything "not found")
            ns, notes = {}, [f"could not read the submission: {e}"]
        chosen, probs = choose_problems(assignment, ns, submission)
        _emit(fh, {"type": "plan", "assignment": chosen, "functions": [p.name for p in probs],
                   "notes": notes})
        for p in probs:
            _emit(fh, {"type": "start", "function": p.name})
            fn = ns.get(p.name)
            r = grading.grade_function(p, fn if callable(fn) else None, seed=seed, quick=quick,
                                       with_speed=with_speed)
            _emit(fh, {"type": "result", "function": p.name, **r.to_dict(),
                       "weights": r.weights})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m autograder.session")
    ap.add_argument("submission", type=Path)
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--assignment")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    # Student prints go to stderr so they never mix with anything a caller parses.
    sys.stdout = sys.stderr
    run(a.submission, a.assignment, a.results, quick=a.quick, seed=a.seed,
        with_speed=not a.no_speed)


if __name__ == "__main__":
    main()
