"""source/ is built from notebooks/ + solutions/ (and the selfcheck package from the course
package's modules), release/ from source/: both must be current."""
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

ASSIGNMENTS = sorted(p.stem for p in (ROOT / "notebooks").glob("ps*.py"))


def test_source_is_built_from_templates_and_solutions():
    p = subprocess.run([sys.executable, "tools/build_notebooks.py", "--check"], cwd=ROOT,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def _cells(path: Path):
    nb = json.loads(path.read_text())
    return [(c["cell_type"], "".join(c["source"]), c.get("metadata", {}).get("nbgrader"))
            for c in nb["cells"]]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """release/ made afresh: the committed source/ notebooks, the selfcheck packages built
    from today's course package (git-ignored in source/), then nbgrader."""
    sys.path.insert(0, str(ROOT / "tools"))
    from build_notebooks import PACKAGE, write_package

    course = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "source", course / "source",
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", PACKAGE))
    for asg in ASSIGNMENTS:
        write_package(asg, course / "source" / asg)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    nbgrader = Path(sys.executable).with_name("nbgrader")
    env = dict(os.environ, PATH=str(nbgrader.parent) + os.pathsep + os.environ["PATH"])
    for asg in ASSIGNMENTS:
        p = subprocess.run([str(nbgrader), "generate_assignment", asg, "--force", "--no-db"],
                           cwd=course, capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return course / "release"


def _files(folder: Path) -> list[str]:
    """Every file under ``folder`` (sub-folders included), relative, caches left out."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()
                  and not {"__pycache__", ".pytest_cache"} & set(p.relative_to(folder).parts))


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_release_matches_nbgrader_output(asg, regenerated):
    committed = ROOT / "release" / asg
    fresh = regenerated / asg
    names = _files(fresh)
    assert "selfcheck/__init__.py" in names and "selfcheck/public/check.py" in names, names
    assert _files(committed) == names, "run `make release`"
    for name in names:
        if name.endswith(".ipynb"):
            assert _cells(committed / name) == _cells(fresh / name), f"{name}: run `make release`"
        else:
            assert (committed / name).read_text() == (fresh / name).read_text(), \
                f"release/{asg}/{name}: run `make release`"


def test_selfcheck_package_is_generated_not_committed():
    """Only release/ holds a committed copy of the course modules."""
    p = subprocess.run(["git", "ls-files", "source"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert not [f for f in p.stdout.split() if "selfcheck" in f], p.stdout


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_release_reveals_no_solutions_or_hidden_tests(asg):
    from tools_helpers import solution_bodies

    release = ROOT / "release" / asg
    text = "\n".join((release / name).read_text() for name in _files(release))
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "autograder.classroom.cells"):
        assert marker not in text, f"{marker!r} leaked into release/{asg}"
    for body in solution_bodies(asg):
        assert body not in text, f"solution code leaked into release/{asg}:\n{body}"


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_release_stubs_raise_not_implemented(asg):
    from autograder.core.loader import load

    loaded = load(ROOT / "release" / asg / f"{asg}.ipynb")
    from autograder.course import registry

    for p in registry.problems(asg):
        fn = loaded.function(p.name)
        assert fn is not None, p.name
        with pytest.raises(NotImplementedError):
            fn(*([None] * len(p.arg_names)), **({"mesh": None} if p.uses_mesh else {}))


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_selfcheck_holds_the_students_part_only(asg):
    """A release folder's selfcheck/ carries the shared vocabulary, the course's public content,
    the self-check and the model; none of the trust boundary's machinery."""
    names = _files(ROOT / "release" / asg)
    parts = {n.split("/")[1] for n in names if n.startswith("selfcheck/") and n.count("/") > 1}
    assert parts <= {"core", "course", "public", "tpumodel"}, parts
    for machinery in ("core/records.py", "core/identity.py", "course/registry.py",
                      "course/problems/"):
        assert not any(n.startswith(f"selfcheck/{machinery}") for n in names), machinery
