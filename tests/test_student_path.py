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

#: every module of the folder's selfcheck package imports without the course package
IMPORT_ALL = r'''
import importlib, pkgutil, selfcheck
mods = [m.name for m in pkgutil.walk_packages(selfcheck.__path__, "selfcheck.")]
for m in mods:
    importlib.import_module(m)
print("IMPORTED", len(mods))
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
    """The release folder alone, on the JAX of this run, as a student runs it: the set-up cell
    names the JAX and the devices; every module of its self-check imports without the course
    package; and the grader's TPU model travels in it (tpu_profile): a student sees the modeled
    ratio and the grader's limit, for every function with a speed check (a baseline kept with
    the grader, ps1's and ps2's, travels as its modeled figures), and the reference answers are
    within it. One process does all, as one student session would. (The self-check passing
    every reference answer, memory and speed included, is test_notebooks_executed's: the same
    folder, its notebook's own check cells, the course package out of reach there too.)"""
    import jax

    from autograder.course import registry

    solution = str(ROOT / "solutions" / f"{asg}.py")
    p = _run(tmp_path, asg, after=IMPORT_ALL + PROFILE_ALL.format(solution=solution))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert out.startswith(f"JAX {jax.__version__}"), out
    assert "tested range" in out and "default backend:" in out
    assert "course meshes: 8 emulated CPU devices" in out
    shipped = len(list((ROOT / "release" / asg / "selfcheck").rglob("*.py")))
    assert f"IMPORTED {shipped - 1}\n" in out, out  # every file but the package's own

    got = _profiles(out)
    want = {q.name: q.threshold("tpu_model") for q in registry.problems(asg)
            if q.baseline is not None}
    assert want and {n: r["limit"] for n, r in got.items()} == want
    for name, r in got.items():
        assert r["ratio"] <= r["limit"], r
        # the summary, then at most 4 of the student's lines quoted and "... and N more"
        assert r["lines"] <= 12 and r["quoted"] <= 5, r


#: a folder that stands for a release folder: source/'s files, with the selfcheck package built
#: from today's course package (release/ is regenerated from these by nbgrader)
FOLDER = "ps3_collective_matmul"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "tools"))
    from build_notebooks import PACKAGE, write_package

    folder = tmp_path_factory.mktemp("built") / FOLDER
    shutil.copytree(ROOT / "source" / FOLDER, folder,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", PACKAGE))
    write_package(FOLDER, folder)
    return folder


def _setup(folder, patch: str):
    code = RUN.format(asg=FOLDER, patch=patch, after="")
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "PYTHONPATH")}
    return subprocess.run([sys.executable, "-c", code], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def test_setup_cell_stops_on_an_old_jax(built):
    p = _setup(built, "import jax; jax.__version__ = '0.4.33'")
    assert p.returncode != 0
    assert f"needs JAX {versions.JAX_MIN} or newer" in p.stderr and "0.4.33" in p.stderr
    assert versions.upgrade_command() in p.stderr and "restart the runtime" in p.stderr
    assert "Traceback" not in p.stderr, p.stderr  # the message, not selfcheck's frames


def test_setup_cell_without_jax_says_the_one_line_to_run(built):
    """No JAX in this Python: not a ModuleNotFoundError from inside selfcheck, but what to
    install, before any module of the package imports it."""
    p = _setup(built, 'sys.modules["jax"] = None')
    assert p.returncode != 0
    assert "this Python has no JAX" in p.stderr, p.stderr
    assert versions.upgrade_command() in p.stderr and "requirements.txt" in p.stderr
    assert "Traceback" not in p.stderr and "ModuleNotFoundError" not in p.stderr, p.stderr


def test_too_few_devices_names_what_the_students_folder_has(built, tmp_path):
    """JAX started with too few devices: the error names the set-up cell and the import that
    exists where it is read (selfcheck in a release folder), never the course package."""
    code = ("import jax\nfrom selfcheck.core import devices\n"
            "jax.devices = lambda *a: []\n"
            "try:\n    devices.course_devices()\nexcept RuntimeError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-c", code], cwd=built, env=env, capture_output=True,
                       text=True, timeout=120)
    assert "run the notebook's set-up cell first" in p.stdout, p.stdout + p.stderr[-2000:]
    assert "(from selfcheck import setup_devices; setup_devices())" in p.stdout, p.stdout
    assert "autograder" not in p.stdout, p.stdout


def test_a_notebook_without_its_selfcheck_folder_says_what_to_do(built, tmp_path):
    """The notebook, or the folder's pytest file, copied out of its folder: not "No module
    named 'selfcheck'" and a traceback, but what is missing and what to do."""
    folder = tmp_path / FOLDER
    shutil.copytree(built, folder, ignore=shutil.ignore_patterns("selfcheck"))
    p = _setup(folder, "")
    assert p.returncode != 0
    assert "No selfcheck/ folder beside this notebook" in p.stderr, p.stderr
    assert "open the notebook from inside the whole folder" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"test_{FOLDER}.py"], cwd=folder, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode != 0
    assert "no selfcheck/ folder beside this file" in p.stdout, p.stdout[-3000:]


@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_a_folder_carries_its_requirements_and_readme(asg):
    """Each folder says what to install (the course's JAX range, the picture's matplotlib,
    visualize_array_sharding's rich, pytest, a notebook runner) and how to set up, work and
    check. (That the list is enough is test_notebooks_executed's: it runs the solved notebook in
    a venv made from it alone.)"""
    req = (ROOT / "source" / asg / "requirements.txt").read_text()
    names = {l.split("#")[0].strip().split(">")[0].split("=")[0].split("<")[0]: l.split("#")[0].strip()
             for l in req.splitlines() if l.split("#")[0].strip()}
    assert names["jax"] == f"jax>={versions.JAX_MIN},<{versions.JAX_BELOW}"
    assert {"numpy", "matplotlib", "rich", "pytest", "jupyterlab", "nbclient",
            "ipykernel"} <= set(names)
    readme = (ROOT / "source" / asg / "README.md").read_text()
    for said in ("python3 -m venv .venv", "pip install -r requirements.txt",
                 f"jupyter lab {asg}.ipynb", "pytest -q", "set-up cell",
                 versions.upgrade_command(tpu=True),
                 "must be handed in beside the\nnotebook"):
        assert said in readme, said
    # and the notebook says where helper modules go
    notebook = (ROOT / "source" / asg / f"{asg}.ipynb").read_text()
    assert "must be handed in beside the notebook" in " ".join(
        notebook.replace("\\n", " ").split()), asg


def test_a_failing_check_under_pytest_shows_its_message_first(built, tmp_path):
    """The folder's pytest file on a wrong answer: the check's message, not the self-check's
    source."""
    import json

    folder = tmp_path / FOLDER
    shutil.copytree(built, folder)
    nb = json.loads((folder / f"{FOLDER}.ipynb").read_text())
    for c in nb["cells"]:
        if c["metadata"].get("nbgrader", {}).get("grade_id") == "solution_matmul_allgather":
            c["source"] = "def matmul_allgather(A, W, mesh):\n    return A[:, :1] * 0\n"
    (folder / f"{FOLDER}.ipynb").write_text(json.dumps(nb))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-k", "matmul_allgather", f"test_{FOLDER}.py"], cwd=folder, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout[-3000:]
    failure = p.stdout.split("test_public[matmul_allgather-numerics]", 1)[1]
    assert failure.lstrip("_ \n").startswith("numerics: matmul_allgather on mesh"), failure[:800]
    assert "def check(" not in p.stdout and "selfcheck/public" not in p.stdout, p.stdout[-3000:]
    assert "another exception occurred" not in p.stdout, p.stdout[-3000:]


def test_check_names_set_up_the_grader_will_not_run(tmp_path, monkeypatch):
    """At home the notebook ran its ``jax.config.update``; check() says, from the saved
    notebook, that the grader will not."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.public.check import notebook_notes

    cells = ["import jax", "jax.config.update('jax_enable_x64', True)",
             "def roll_diff(x, shift, mesh):\n    return x"]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), tmp_path / "mine.ipynb")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    ns = {"__name__": "__main__"}
    exec(cells[2], ns)  # typed in a notebook kernel
    notes = notebook_notes(ns["roll_diff"])
    assert len(notes) == 1 and notes[0].startswith(
        'mine.ipynb, cell 2 line 1: your statement "jax.config'), notes
    from autograder.core.loader import load

    assert notebook_notes(load(tmp_path / "mine.ipynb").function("roll_diff")) == []  # a file's


def test_check_and_pytest_warn_of_a_helper_module_beside_the_notebook(tmp_path, monkeypatch):
    """A notebook that imports a module from its own folder works at home; the grader has it
    only if it is handed in beside the notebook. check() says so for a function typed in the
    notebook, and the folder's pytest (load_functions) warns of it (issue 54: a class lost 3
    points that way with pytest green)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from autograder.public.check import LoadNote, load_functions, notebook_notes, own_module_notes

    (tmp_path / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    cells = ["import numpy as np\nimport jax\nfrom helpers import twice",
             "def roll_diff(x, shift, mesh):\n    return twice(x)"]
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), tmp_path / "mine.ipynb")
    said = ("mine.ipynb, cell 1 line 3: your notebook imports helpers from helpers.py in its own "
            "folder. Hand in helpers.py beside mine.ipynb: the grader has only the files you hand "
            "in, and without it every function that uses helpers scores nothing there, though it "
            "passes here")
    assert own_module_notes(tmp_path / "mine.ipynb") == [said]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    ns = {"__name__": "__main__"}
    exec(cells[1], ns)  # typed in a notebook kernel
    assert said in notebook_notes(ns["roll_diff"])
    with pytest.warns(LoadNote) as warned:
        load_functions(tmp_path / "mine.ipynb")
    assert any(said in str(w.message) for w in warned), [str(w.message) for w in warned]
    # numpy and jax are not the student's: nothing said of them
    (tmp_path / "other.ipynb").write_text((tmp_path / "mine.ipynb").read_text().replace(
        "from helpers import twice", ""))
    assert own_module_notes(tmp_path / "other.ipynb") == []


PROFILE_ALL = r'''
import json, selfcheck
fns = selfcheck.load_functions({solution!r})
mesh = selfcheck.make_mesh(2, 4)
for name in sorted(selfcheck.PUBLIC):
    if name in fns and selfcheck.PUBLIC[name]["limit"] is not None:
        p = selfcheck.tpu_profile(name, fns[name], mesh)
        text = repr(p).splitlines()
        at = text.index("  your lines named above:") if "  your lines named above:" in text \
            else len(text)
        quoted = [t for t in text[at + 1:] if t.startswith("    ")]
        print("PROFILE", json.dumps({{"name": name, "ratio": p.ratio, "limit": p.limit,
                                     "lines": len(text) - len(quoted) - (at < len(text)),
                                     "quoted": len(quoted)}}))
'''


def _profiles(stdout: str) -> dict:
    import json

    return {r["name"]: r for r in (json.loads(line.split(" ", 1)[1])
                                   for line in stdout.splitlines()
                                   if line.startswith("PROFILE "))}


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
