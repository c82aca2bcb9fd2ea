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
    if name in fns and selfcheck.PUBLIC[name]["limit"] is not None:
        p = selfcheck.tpu_profile(name, fns[name], mesh)
        print("PROFILE", json.dumps({{"name": name, "ratio": p.ratio, "limit": p.limit,
                                     "lines": len(repr(p).splitlines())}}))
'''


def _profiles(stdout: str) -> dict:
    import json

    return {r["name"]: r for r in (json.loads(line.split(" ", 1)[1])
                                   for line in stdout.splitlines()
                                   if line.startswith("PROFILE "))}


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_tpu_profile_runs_from_the_release_folder(asg, tmp_path):
    """The grader's TPU model travels in the self-check: a student sees the modeled ratio and
    the grader's limit without the course package, for every function with a speed check (a
    baseline kept with the grader, ps1's, travels as its modeled figures), and the reference
    answers are within it."""
    from autograder.course import registry

    solution = str(ROOT / "solutions" / f"{asg}.py")
    p = _run(tmp_path, asg, after=PROFILE_ALL.format(solution=solution))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = _profiles(p.stdout)
    want = {q.name: q.threshold("tpu_model") for q in registry.problems(asg)
            if q.baseline is not None}
    assert want and {n: r["limit"] for n, r in got.items()} == want
    for name, r in got.items():
        assert r["ratio"] <= r["limit"], r
        assert r["lines"] <= 12, r


def test_a_kept_baseline_previews_the_graders_ratio(tmp_path):
    """ps1's baselines stay with the grader, yet the release folder's tpu_profile gives the
    ratio the grader's model gives: here for a roll written as an index lookup, which the
    notebook's wall-clock comparison cannot tell from a slice-and-concatenate one."""
    from autograder.core.meshes import make_mesh
    from autograder.core.loader import load
    from autograder.course import registry
    from autograder.tpumodel.profile import profile

    fixture = str(ROOT / "tests" / "fixtures" / "ps1" / "alt_correct_gather.py")
    p = _run(tmp_path, "ps1_sharding", after=PROFILE_ALL.format(solution=fixture))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    got = _profiles(p.stdout)["roll_diff"]
    fn = load(fixture).namespace["roll_diff"]
    grader = profile(fn, registry.get("roll_diff"), make_mesh(2, 4), png=None)
    assert got["ratio"] == pytest.approx(grader.ratio, rel=0.01)
    assert got["ratio"] > got["limit"], got  # the lookup is slower than the limit allows
