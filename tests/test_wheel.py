"""The grader installed from its wheel (``make wheel``), not from this checkout: it grades, and
the sandbox still hides the course package, which now lies inside the runtime it mounts."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration

#: a hand-in that is right only where the course's baselines cannot be read from the sandbox
PEEK = '''\
import glob, sys
import jax
from jax.sharding import NamedSharding, PartitionSpec as P

SEEN = glob.glob(sys.prefix + "/lib/python*/site-packages/autograder/course/baselines/*.py")


def shard_average_jit(A, mesh):
    x = mesh.shape["X"]
    blocks = A.reshape(x, A.shape[0] // x, A.shape[1])
    blocks = jax.lax.with_sharding_constraint(blocks, NamedSharding(mesh, P("X", None, "Y")))
    return blocks.mean(axis=1) + (1.0 if SEEN else 0.0)
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A virtual environment with this checkout's dependencies (hard links to .venv's files,
    so nothing is downloaded) and the grader from its wheel instead of the editable checkout."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        pytest.skip("needs the test suite's virtual environment (make test)")
    dist = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
                        str(ROOT)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    (wheel,) = dist.glob("jax_scaling_course-*.whl")
    copy = ROOT / "build" / f"wheel-venv-{os.getpid()}"  # beside .venv: hard links work there
    shutil.rmtree(copy, ignore_errors=True)
    copy.parent.mkdir(exist_ok=True)
    subprocess.run(["cp", "-al", str(venv), str(copy)], check=True, timeout=600)
    py = str(copy / "bin" / "python")
    for args in (["uninstall", "-y", "-q", "jax-scaling-course"],
                 ["install", "--no-deps", "--no-index", "-q", str(wheel)]):
        p = subprocess.run([py, "-m", "pip", *args], capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    yield copy, wheel
    shutil.rmtree(copy, ignore_errors=True)


def _grade(copy: Path, submission: Path, cwd: Path) -> dict:
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3",
               AUTOGRADER_CACHE_DIR=str(cwd / "cache"))
    env.pop("PYTHONPATH", None)
    p = subprocess.run([str(copy / "bin" / "course-autograder"), "grade", str(submission),
                        "--assignment", "ps1_sharding", "--quick", "--no-speed", "--json"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
    return json.loads(p.stdout)


def test_the_wheel_holds_the_whole_grader(installed):
    import zipfile

    _, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for part in ("autograder/__main__.py", "autograder/course/problems/ps4_bidirectional.py",
                 "autograder/course/references/ps2_moe.py", "autograder/tpumodel/cost.py",
                 "autograder/worker/__main__.py", "autograder/isolation/sandbox.py"):
        assert part in names, part


def test_the_installed_grader_grades_from_anywhere(installed, tmp_path):
    copy, _ = installed
    where = subprocess.run([str(copy / "bin" / "python"), "-c",
                            "import autograder; print(autograder.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert str(copy) in where and str(ROOT / "autograder") not in where
    shutil.copy(ROOT / "solutions" / "ps1_sharding.py", tmp_path / "ps1_sharding.py")
    res = _grade(copy, tmp_path / "ps1_sharding.py", tmp_path)
    assert res["score"] == res["max_score"] == 10, res


def test_the_sandbox_hides_the_installed_course_package(installed, tmp_path):
    """Installed from the wheel, references and baselines sit in the runtime's site-packages,
    which the sandbox mounts: an empty folder covers the package there, so a hand-in that
    would change its answer on seeing them gets full marks on this function."""
    copy, _ = installed
    (tmp_path / "peek.py").write_text(PEEK)
    res = _grade(copy, tmp_path / "peek.py", tmp_path)
    fn = res["functions"]["shard_average_jit"]
    assert fn["score"] == fn["max_score"], fn


def test_the_worker_image_installs_this_wheel(installed):
    """docker/worker.Dockerfile copies the wheel `make wheel` builds (no Docker here: its
    build is not run, but the file it copies must be the one this repository makes)."""
    import fnmatch
    import re

    _, wheel = installed
    text = (ROOT / "docker" / "worker.Dockerfile").read_text()
    (pattern,) = re.findall(r"^COPY dist/(\S+) ", text, re.M)
    assert fnmatch.fnmatch(wheel.name, pattern), (wheel.name, pattern)
    assert "bubblewrap" in text and "autograder doctor" in text
    assert "wheel:" in (ROOT / "Makefile").read_text()
