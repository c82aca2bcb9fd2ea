"""The student path: a release folder on its own, with whatever JAX the runtime has (Colab and
Kaggle have the newest). The set-up cell prints the JAX version and the devices, real or
emulated, and stops with what to run on a JAX older than the course supports; the public
self-check passes the reference answers. Nothing here may need the course package."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from autograder.core import versions

ASSIGNMENTS = sorted(p.stem for p in (ROOT / "notebooks").glob("ps*.py"))

RUN = r'''
import json, sys
sys.modules["autograder"] = None  # the release folder must work without the course package
{patch}
nb = json.load(open("{asg}.ipynb"))
setup = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {{}}).get("grade_id") == "setup")
exec("".join(setup["source"]))
{after}
'''

CHECK_ALL = r'''
import selfcheck
fns = selfcheck.load_functions({solution!r})
for name in sorted(selfcheck.PUBLIC):
    selfcheck.check(name, fns[name], layouts=((2, 4), (8, 1)), cases=1)
'''


def _run(tmp_path, asg: str, patch: str = "", after: str = ""):
    folder = tmp_path / asg
    shutil.copytree(ROOT / "release" / asg, folder)
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}  # as on Colab
    code = RUN.format(asg=asg, patch=patch, after=after)
    return subprocess.run([sys.executable, "-c", code], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_release_folder_runs_on_this_jax(asg, tmp_path):
    import jax

    solution = str(ROOT / "solutions" / f"{asg}.py")
    p = _run(tmp_path, asg, after=CHECK_ALL.format(solution=solution))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert out.startswith(f"JAX {jax.__version__}"), out
    assert "tested range" in out and "default backend:" in out
    assert "course meshes: 8 emulated CPU devices" in out
    assert out.count("OK ") == len(_public_names(asg)), out


def _public_names(asg: str) -> list[str]:
    from autograder.course import registry

    return [p.name for p in registry.problems(asg)]


def test_setup_cell_stops_on_an_old_jax(tmp_path):
    patch = "import jax; jax.__version__ = '0.4.33'"
    p = _run(tmp_path, ASSIGNMENTS[0], patch=patch)
    assert p.returncode != 0
    err = p.stderr.strip().splitlines()
    assert "JaxTooOld" in p.stderr and f"needs JAX {versions.JAX_MIN} or newer" in p.stderr
    assert versions.upgrade_command() in p.stderr and "restart the runtime" in p.stderr
    assert "0.4.33" in "\n".join(err[-6:])


PROFILE_ALL = r'''
import json, selfcheck
fns = selfcheck.load_functions({solution!r})
mesh = selfcheck.make_mesh(2, 4)
for name in sorted(selfcheck.PUBLIC):
    if selfcheck.PUBLIC[name]["baseline"] is not None:
        p = selfcheck.tpu_profile(name, fns[name], mesh)
        print("PROFILE", json.dumps({{"name": name, "ratio": p.ratio, "limit": p.limit,
                                     "lines": len(repr(p).splitlines())}}))
    elif selfcheck.PUBLIC[name]["limit"] is not None:  # a baseline kept with the grader
        assert selfcheck.tpu_profile(name, fns[name], mesh) is None
'''


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_tpu_profile_runs_from_the_release_folder(asg, tmp_path):
    """The grader's TPU model travels in the self-check: a student sees the modeled ratio and
    the grader's limit without the course package, and the reference answers are within it."""
    import json

    from autograder.course import registry

    solution = str(ROOT / "solutions" / f"{asg}.py")
    p = _run(tmp_path, asg, after=PROFILE_ALL.format(solution=solution))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = {r["name"]: r for r in (json.loads(line.split(" ", 1)[1])
                                   for line in p.stdout.splitlines()
                                   if line.startswith("PROFILE "))}
    want = {q.name: q.threshold("tpu_model") for q in registry.problems(asg)
            if q.baseline is not None and q.baseline_public}
    assert {n: r["limit"] for n, r in got.items()} == want
    assert bool(want) == (asg != "ps1_sharding")  # ps1's baselines are 1a's answer: kept back
    if asg == "ps1_sharding":
        assert "its jit baseline stays with the grader" in p.stdout, p.stdout[-2000:]
    for name, r in got.items():
        assert r["ratio"] <= r["limit"], r
        assert r["lines"] <= 12, r
