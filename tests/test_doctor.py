"""python -m autograder doctor, the supported JAX range, and the set-up cell's version check."""
from __future__ import annotations

import re
from pathlib import Path
import subprocess
import sys

import pytest
from conftest import ROOT

from autograder.cli import doctor
from autograder.core import versions
from autograder.isolation import sandbox as isolation


@pytest.fixture
def sandbox_ok(monkeypatch):
    monkeypatch.setattr(isolation, "available",
                        lambda: isolation.Availability(True, "bubblewrap (faked), no network"))


def test_ready_machine_reports_everything(sandbox_ok):
    import jax

    out: list[str] = []
    assert doctor.run(out=out.append) == 0, "\n".join(out)
    text = "\n".join(out)
    assert f"JAX {jax.__version__}" in text.replace("JAX: ", "JAX ")
    assert "inside the tested range" in text
    assert "8 emulated CPU devices" in text
    assert "[ok  ] isolation" in text
    assert re.search(r"\[ok  \] TPU model: loads; a 3-step fori_loop ring", text), text
    assert "[ok  ] nbgrader: 0.9.6" in text
    assert "distributed" in text and text.rstrip().endswith("ready to grade")


def test_no_isolation_fails_with_the_fix(monkeypatch):
    monkeypatch.setattr(isolation, "available", lambda: isolation.Availability(
        False, "bubblewrap (bwrap) is not installed; " + isolation.INSTALL_HINT))
    out: list[str] = []
    assert doctor.run(out=out.append) == 1
    text = "\n".join(out)
    assert "[FAIL] isolation" in text and "fix: install bubblewrap" in text
    assert "apt-get install bubblewrap" in text
    assert "not ready to grade: isolation" in text


def test_missing_nbgrader_and_distributed_are_notes(monkeypatch, sandbox_ok):
    """A cluster-only install (the wheel's [cluster] extra) grades without nbgrader: its
    absence is a note with the fix, and the machine is ready to grade."""
    real = doctor._dist_version
    monkeypatch.setattr(doctor, "_dist_version",
                        lambda name: None if name in ("nbgrader", "distributed") else real(name))
    out: list[str] = []
    assert doctor.run(out=out.append) == 0, "\n".join(out)
    text = "\n".join(out)
    assert "[note] nbgrader" in text and "pip install" in text and "--gradebook" in text
    assert "[note] distributed" in text and "[cluster]" in text
    assert text.rstrip().endswith("ready to grade") and "not ready" not in text


def test_the_cpu_share_is_reported_and_its_absence_said_out_loud(monkeypatch):
    """Whether each sandbox gets its own share of the CPU: said either way; without the cgroup
    cpu controller, a note saying a hand-in's busy processes can slow a classmate's."""
    from autograder.isolation import cgroup

    monkeypatch.setattr(cgroup, "cpu_support", lambda: "cgroup v2 cpu.weight 100")
    f = doctor.check_cpu_share()
    assert f.ok and "its own equal share (cgroup v2 cpu.weight 100)" in f.detail
    monkeypatch.setattr(cgroup, "support", lambda: "v2")
    monkeypatch.setattr(cgroup, "cpu_support", lambda: None)
    f = doctor.check_cpu_share()
    assert not f.ok and not f.required and f.line().startswith("[note] CPU share: NOT shared")
    assert "cpu controller is not available" in f.detail and "subtree_control" in f.fix


def test_a_broken_tpu_model_fails(monkeypatch, sandbox_ok):
    from autograder import tpumodel

    def broken(*a, **k):
        raise tpumodel.ModelError("a while loop whose trip count depends on array data")

    monkeypatch.setattr(tpumodel, "model_function", broken)
    out: list[str] = []
    assert doctor.run(out=out.append) == 1
    assert "[FAIL] TPU model" in "\n".join(out) and "fix:" in "\n".join(out)


def test_jax_outside_the_range(monkeypatch, sandbox_ok):
    import jax

    monkeypatch.setattr(jax, "__version__", "0.4.30")
    f = doctor.check_jax()
    assert not f.ok and f.required and f'"jax>={versions.JAX_MIN}' in f.fix
    monkeypatch.setattr(jax, "__version__", "9.0.0")
    f = doctor.check_jax()
    assert f.ok and "NEWER than the tested range" in f.detail


def test_doctor_command_line():
    p = subprocess.run([sys.executable, "-m", "autograder", "doctor"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert "JAX" in p.stdout and "TPU model" in p.stdout and "nbgrader" in p.stdout, p.stderr
    # here everything but isolation is installed: the exit code follows the sandbox
    assert p.returncode == (0 if isolation.available().ok else 1), p.stdout + p.stderr


# ------------------------------------------------------------------------ the range itself
def test_versions_order_and_parse():
    vt = versions.version_tuple
    assert vt("0.12.0.1") == (0, 12, 0, 1) and vt("0.13.0rc1") == (0, 13, 0)
    assert vt("0.10.2+cuda") == (0, 10, 2)
    assert vt(versions.JAX_MIN) <= vt(versions.JAX_TESTED) < vt(versions.JAX_BELOW)
    assert versions.support("0.10.1") == "old" and versions.support("0.10.2") == "tested"
    assert versions.support("0.12.9") == "tested" and versions.support("0.13.0") == "newer"


def test_pyproject_declares_the_same_range():
    text = (ROOT / "pyproject.toml").read_text()
    want = f">={versions.JAX_MIN},<{versions.JAX_BELOW}"
    for req in ("jax", "jaxlib", "jax[tpu]", "jax[cuda12]"):
        assert f'"{req}{want}"' in text, (req, want)
    assert "==0.10" not in text  # no pin left behind


def test_setup_stops_on_a_jax_older_than_the_range():
    from autograder.core.devices import setup_devices

    with pytest.raises(versions.JaxTooOld) as e:
        versions.require_jax("0.4.33")
    msg = str(e.value)
    assert "0.4.33" in msg and f"JAX {versions.JAX_MIN} or newer" in msg
    assert versions.upgrade_command() in msg and "restart" in msg.lower()
    setup_devices()  # this JAX is inside the range: nothing happens


def test_setup_cell_describes_jax_and_devices():
    import jax

    from autograder.core.devices import describe_devices

    text = describe_devices()
    assert text.startswith(f"JAX {jax.__version__}")
    assert "emulated CPU devices" in text and "default backend" in text


def test_describe_devices_first_in_a_fresh_process_finds_the_course_devices():
    """On a new host nobody sets JAX_NUM_CPU_DEVICES: describe_devices called before anything
    else (the accelerator check's first part does) still asks for the course's 8 devices
    before JAX starts, instead of starting it with one and failing."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    code = ("from autograder.core.devices import describe_devices\n"
            "print(describe_devices())\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "course meshes: 8 emulated CPU devices" in p.stdout, p.stdout


def test_the_installed_modules_this_process_imported_were_compiled_once():
    """Every module this test process imported from the environment's site-packages (jax,
    numpy, nbformat...) has its bytecode beside it: the installs compile them
    (tools/compile_site.py). Where $PYTHONDONTWRITEBYTECODE is set nothing else writes it, and
    each process of the suite would compile them again (about 2 s of CPU each)."""
    import importlib.util
    import sys
    import sysconfig
    from pathlib import Path

    site = {Path(sysconfig.get_path(k)).resolve() for k in ("purelib", "platlib")}
    imported = [Path(m.__file__).resolve() for m in list(sys.modules.values())
                if getattr(m, "__file__", None) and str(m.__file__).endswith(".py")]
    installed = [p for p in imported if any(p.is_relative_to(s) for s in site)]
    assert len(installed) > 100, "jax alone is more modules than this"
    # pytest's plugins (pytest-xdist's modules) are read from pytest's own rewritten bytecode
    rewritten = f".{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"

    def compiled(p: Path) -> bool:
        pyc = Path(importlib.util.cache_from_source(p))
        return pyc.is_file() or pyc.with_name(p.stem + rewritten).is_file()

    missing = [p for p in installed if not compiled(p)]
    assert not missing, (f"{len(missing)} of {len(installed)} imported modules have no "
                         f"bytecode, e.g. {missing[:3]}: run tools/compile_site.py")
