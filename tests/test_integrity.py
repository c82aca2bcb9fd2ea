"""Integrity pieces in isolation: the signed channel, the import guard, the tamper detector, the
worker's import path."""
import subprocess
import sys
import time

import pytest

from autograder import sandbox, session


def test_signed_records_reject_forgeries():
    key = b"k" * 32
    line = sandbox.sign(key, 0, {"type": "done"})
    assert sandbox.verify(key, line, 0) == {"type": "done"}
    assert sandbox.verify(key, line, 1) is None  # replayed out of order
    assert sandbox.verify(b"x" * 32, line, 0) is None  # another key
    forged = line.replace("done", "plan")
    assert sandbox.verify(key, forged, 0) is None
    assert sandbox.verify(key, '{"type": "result", "function": "roll_diff"}', 0) is None


def test_student_imports_are_guarded():
    b = session.student_builtins()
    ns = {"__builtins__": b}
    for stmt in ("import autograder", "from autograder import registry",
                 "import solutions.ps1_sharding", "from source import x", "import tests"):
        with pytest.raises(ImportError, match="not allowed"):
            exec(stmt, ns)
    exec("import math, json", ns)
    assert ns["math"].pi > 3


def test_integrity_detects_and_restores():
    import numpy as np

    from autograder import compare

    g = session.Integrity()
    real_clock, real_all, real_cmp = time.perf_counter, np.all, compare.compare_values
    assert g.check() == []
    try:
        time.perf_counter = lambda: 0.0
        np.all = lambda *a, **k: True
        compare.compare_values = lambda *a, **k: None
        changed = g.check()
    finally:
        restored = (time.perf_counter, np.all, compare.compare_values)
        time.perf_counter, np.all, compare.compare_values = real_clock, real_all, real_cmp
    assert "time.perf_counter was replaced" in changed
    assert "numpy.all was replaced" in changed
    assert "autograder.compare.compare_values was replaced" in changed
    assert restored == (real_clock, real_all, real_cmp)  # check() put them back
    assert g.check() == []


def test_integrity_watches_registry_entries():
    from autograder import registry

    g = session.Integrity()
    p = registry.get("roll_diff")
    g.watch_object("roll_diff", p)
    g.watch_dict("the registry", registry.REGISTRY)
    rules = p.rules
    object.__setattr__(p, "rules", ())
    registry.REGISTRY["fake"] = p
    changed = g.check()
    assert "roll_diff.rules was changed" in changed and "the registry was changed" in changed
    assert p.rules is rules and "fake" not in registry.REGISTRY


def test_worker_cannot_import_course_files(tmp_path):
    """The worker's import path holds a copy of the package and nothing else of the course."""
    sandbox.copy_package(tmp_path / "pkg")
    home = tmp_path / "home"
    home.mkdir()
    code = ("import importlib.util as u, autograder, sys; "
            "print(u.find_spec('solutions') is None, autograder.__file__)")
    out = subprocess.run([sys.executable, "-s", "-P", "-c", code], cwd=home,
                         env=sandbox.worker_env(home, tmp_path / "pkg"), capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[0] == "True"
    assert out[1].startswith(str(tmp_path / "pkg"))


def test_grade_path_single_function_hang_keeps_the_rest(tmp_path):
    """A function that hangs inside XLA loses only itself (per-function granularity)."""
    from autograder.cli import grade_path

    src = tmp_path / "sub.py"
    src.write_text(
        "import jax, jax.numpy as jnp\nfrom jax.sharding import PartitionSpec as P\n"
        "def shard_average_shard_map(A, mesh):\n"
        "    def body(b):\n"
        "        n = jax.lax.while_loop(lambda c: c[1] >= 0, lambda c: (c[0] + 1.0, c[1]),\n"
        "                               (jnp.float32(0), jnp.int32(1)))[0]\n"
        "        return b.mean(axis=0, keepdims=True) + 0 * n\n"
        "    return jax.shard_map(body, mesh=mesh, in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)\n"
        "def roll_diff(A, shift, mesh):\n"
        "    return jax.shard_map(lambda b: jnp.roll(b, shift, axis=0) - b, mesh=mesh,\n"
        "                         in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)\n")
    lim = sandbox.Limits(per_function_s=15, load_s=45)
    res = grade_path(src, "ps1_sharding", quick=True, with_speed=False, limits=lim)
    f = res.functions
    assert f["shard_average_jit"].score == 0 and "not found" in f["shard_average_jit"].checks[0].message
    assert f["shard_average_shard_map"].score == 0
    assert "time limit" in f["shard_average_shard_map"].checks[0].message
    assert f["roll_diff"].score == 4.0


def test_nbgrader_hidden_cell_grades_in_isolation(capsys):
    """nb.grade re-runs the kernel's cells in a worker: a cell that patched the grader in the
    kernel changes nothing, and patching at trace time is caught there too."""
    from pathlib import Path

    from autograder import nb

    src = (Path(__file__).parent / "fixtures" / "class" / "submitted" / "ivan" / "ps1_sharding"
           / "ps1_sharding.py").read_text()
    cells = ["", src, 'from autograder.nb import grade\ngrade("roll_diff", globals())']
    assert nb.grade("roll_diff", {"In": cells}, quick=True) == 0
    assert "compare_values was replaced" in capsys.readouterr().out
