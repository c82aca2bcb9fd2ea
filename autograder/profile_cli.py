"""``python -m autograder profile SUBMISSION FUNCTION``: a modeled TPU profile of one function.

Prints the modeled time, compute, communication and exposed-communication time of the student's
function and of the jit baseline, and writes a timeline PNG (student above baseline).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("profile", help="model a graded function on a TPU and draw its timeline")
    p.add_argument("submission", help="notebook or .py file defining the function")
    p.add_argument("function", help="graded function name, e.g. matmul_allgather")
    p.add_argument("--chip", default="v5e", help="TPU generation: v4, v5e, v5p, v6e")
    p.add_argument("--mesh", default="2x4", help="mesh layout XxY (default 2x4)")
    p.add_argument("--shape", help="array dims, e.g. B,D,F for the matmul problems "
                                   "(default: the registry's 'speed' case)")
    p.add_argument("--dtype", help="cast floating inputs, e.g. bfloat16")
    p.add_argument("--png", help="where to write the timeline (default: ./profile-FUNCTION.png)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(a) -> int:
    from .devices import setup_devices

    setup_devices()
    from . import registry
    from .loader import load
    from .tpumodel import ModelError, profile

    path = Path(a.submission)
    if not path.exists():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    try:
        problem = registry.get(a.function)
    except KeyError as e:
        print(str(e).strip('"'), file=sys.stderr)
        return 2
    stdout = sys.stdout
    sys.stdout = sys.stderr  # submission prints must not mix with our output
    try:
        loaded = load(path)
    finally:
        sys.stdout = stdout
    fn = loaded.function(a.function)
    if fn is None:
        print(f"{a.function!r} is not defined in {path}", file=sys.stderr)
        for n in loaded.notes:
            print(f"  note: {n}", file=sys.stderr)
        return 2
    try:
        mesh = tuple(int(v) for v in a.mesh.lower().split("x"))
        shape = tuple(int(v) for v in a.shape.split(",")) if a.shape else None
    except ValueError:
        print("--mesh is XxY (e.g. 2x4) and --shape a comma list of ints", file=sys.stderr)
        return 2
    png = a.png or f"profile-{a.function}.png"
    try:
        prof = profile(fn, problem, mesh, chip=a.chip, shape=shape, dtype=a.dtype,
                       png=str(Path(png).resolve()))
    except (ModelError, ValueError, KeyError) as e:
        print(f"cannot model {a.function}: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(prof.to_dict(), indent=2))
    else:
        print(prof.text())
    return 0
