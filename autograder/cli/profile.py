"""``python -m autograder profile SUBMISSION FUNCTION``: a modeled TPU profile of one function.

Prints the modeled time, compute, communication and exposed-communication time of the student's
function and of the jit baseline, and writes a timeline PNG (student above baseline). Like
``grade``, it never runs the submission here: the function is exported in the sandbox and the
program that comes back is modeled.
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
    p.add_argument("--no-isolation", action="store_true",
                   help="export the function without the sandbox")
    p.set_defaults(func=run)


def run(a) -> int:
    from ..core.devices import setup_devices

    setup_devices()
    from ..core.meshes import make_mesh
    from ..core.problem import Case
    from ..course import registry
    from ..isolation.sandbox import available
    from ..judge.artifacts import ArtifactError, load_artifact
    from ..judge.channel import SandboxExporter
    from ..judge.grading import current_platform, request_for
    from ..tpumodel import ModelError, profile
    from ..tpumodel.profile import case_args

    path = Path(a.submission)
    if not path.exists():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    try:
        problem = registry.get(a.function)
    except KeyError as e:
        print(str(e).strip('"'), file=sys.stderr)
        return 2
    if not a.no_isolation and not available().ok:
        print(f"refusing to run student code without isolation: {available().how}",
              file=sys.stderr)
        return 2
    try:
        layout = tuple(int(v) for v in a.mesh.lower().split("x"))
        shape = tuple(int(v) for v in a.shape.split(",")) if a.shape else None
    except ValueError:
        print("--mesh is XxY (e.g. 2x4) and --shape a comma list of ints", file=sys.stderr)
        return 2
    mesh = make_mesh(*layout)
    try:
        args = case_args(problem, mesh, shape=shape, dtype=a.dtype)
    except ValueError as e:
        print(f"cannot model {a.function}: {e}", file=sys.stderr)
        return 2
    request = request_for(problem, Case(tuple(args)), layout, 0, current_platform())
    exporter = SandboxExporter(path.resolve(), isolated=not a.no_isolation)
    try:
        exporter.start()
        if a.function not in exporter.defined:
            print(f"{a.function!r} is not defined in {path}", file=sys.stderr)
            for n in exporter.notes:
                print(f"  note: {n}", file=sys.stderr)
            return 2
        reply = exporter.export([request]).get(request.id)
    finally:
        exporter.close()
    png = a.png or f"profile-{a.function}.png"
    try:
        art = load_artifact(reply, request)
        prof = profile(art.call, problem, mesh, args, chip=a.chip, program=True,
                       png=str(Path(png).resolve()), title=a.function)
    except (ArtifactError, ModelError, ValueError, KeyError) as e:
        print(f"cannot model {a.function}: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(prof.to_dict(), indent=2))
    else:
        print(prof.text())
    return 0
