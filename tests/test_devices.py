"""One set of devices, everywhere: course code reaches JAX's devices only through
``autograder.core.devices`` (export, jit, lower, place), never through JAX's defaults.

On a one-GPU host (Colab, a workstation) JAX's default backend is the GPU while the course's
devices are 8 emulated CPU devices; code that relied on JAX's defaults exported for 'cuda' and
compiled on the GPU, and every check failed there. No GPU is needed to catch that mistake: the
fixture ``tests/fixtures/foreign_default`` (a ``sitecustomize`` on ``PYTHONPATH``) makes JAX's
default device a 9th CPU device outside the course's 8 and ``jax.export``'s default platform
'cuda', in the test's process and in the judge it starts, so the same mistake fails here as it
did on that host."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import FIXTURES, ROOT

PACKAGE = ROOT / "autograder"
SEAM = PACKAGE / "core" / "devices.py"

#: calls that pick devices or a platform by JAX's defaults (only the seam may make them)
RAW = {("jax", "jit"): "devices.jit / devices.lower", ("jax", "device_put"): "devices.place",
       ("jax", "export", "export"): "devices.export",
       ("jax", "default_device"): "devices.on_course_devices"}


def _dotted(node) -> tuple:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return tuple(reversed(parts))
    return ()


def raw_device_calls(path, root=ROOT) -> list[str]:
    """``file:line: call (use instead)`` for each raw device call in ``path``, also through
    ``from jax import jit`` and the like."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jax"):
            for a in node.names:
                aliases[a.asname or a.name] = tuple(node.module.split(".")) + (a.name,)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name and name[0] in aliases:
            name = aliases[name[0]] + name[1:]
        if name in RAW:
            out.append(f"{path.relative_to(root)}:{node.lineno}: {'.'.join(name)} "
                       f"(use {RAW[name]})")
    return out


@pytest.mark.orchestration
def test_course_code_reaches_devices_only_through_the_seam():
    """No module of the package but the seam calls ``jax.jit``, ``jax.device_put``,
    ``jax.export.export`` or ``jax.default_device``: each would use JAX's default backend
    (a one-GPU host's GPU) instead of the course's devices."""
    found = [line for path in sorted(PACKAGE.rglob("*.py")) if path != SEAM
             for line in raw_device_calls(path)]
    assert not found, "\n".join(found)


@pytest.mark.orchestration
def test_the_static_check_sees_each_raw_call(tmp_path):
    """The check above finds each form of the mistake (so its silence means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""
        import jax
        from jax import device_put as put
        from jax.export import export
        jax.jit(f).lower(x)
        put(x, d)
        export(jax.numpy.sin)(x)
        with jax.default_device(d):
            pass
    """))
    got = [line.split(": ", 1)[1].split(" (")[0] for line in raw_device_calls(bad, tmp_path)]
    assert sorted(got) == ["jax.default_device", "jax.device_put", "jax.export.export",
                           "jax.jit"], got


CALLS = PACKAGE / "core" / "calls.py"


def mesh_bindings(path, root=ROOT) -> list[str]:
    """``file:line`` of each ``functools.partial(..., mesh=...)`` in ``path`` (also through
    ``from functools import partial``): a second copy of the call shape's binding rule."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Call) and _dotted(node.func)[-1:] == ("partial",)
                and any(k.arg == "mesh" for k in node.keywords)):
            out.append(f"{path.relative_to(root)}:{node.lineno}: partial(..., mesh=...) "
                       "(use autograder.core.calls.Call(...).bound)")
    return out


@pytest.mark.orchestration
def test_the_mesh_is_bound_only_by_the_call_shape(tmp_path):
    """No module of the package but :mod:`autograder.core.calls` binds ``mesh=`` with
    ``functools.partial``: whether ``mesh=`` is passed is the problem's declaration, read in
    one place (two rules once made an export name the wrong platform). The check sees both
    spellings."""
    found = [line for path in sorted(PACKAGE.rglob("*.py"))
             if path != CALLS for line in mesh_bindings(path)]
    assert not found, "\n".join(found)
    bad = tmp_path / "bad.py"
    bad.write_text("import functools\nfrom functools import partial\n"
                   "functools.partial(f, mesh=m)\npartial(f, 1, mesh=m)\npartial(f, m)\n")
    assert sorted(int(line.split(":")[1]) for line in mesh_bindings(bad, tmp_path)) == [3, 4]


#: run with the trap on PYTHONPATH: the self-check of a ring, an MoE exchange and a
#: shard_map answer with the notebooks' tools, then a grading in a judge process
ON_A_FOREIGN_DEFAULT = r'''
import functools, importlib.util, json, os, subprocess, sys
from pathlib import Path

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

ROOT = Path(sys.argv[1])
# the trap is armed: an export that names no platform is for 'cuda', as on a one-GPU host
raw = jax.export.export(jax.jit(lambda v: v + 1))(np.float32(1))
assert raw.platforms == ("cuda",), raw.platforms

from autograder.core import devices
from autograder.core.meshes import make_mesh
from autograder.public import tools
from autograder.public.check import check


def load(asg):
    spec = importlib.util.spec_from_file_location(asg, ROOT / "solutions" / f"{asg}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ps1, ps2, ps3 = load("ps1_sharding"), load("ps2_moe"), load("ps3_collective_matmul")
for name, fn in [("roll_diff", ps1.roll_diff), ("moe_all_to_all", ps2.moe_all_to_all),
                 ("matmul_allgather", ps3.matmul_allgather)]:
    check(name, fn, layouts=((2, 4),), cases=1, verbose=False)  # raises on any failed check
assert tools.tpu_profile("matmul_allgather", ps3.matmul_allgather) is not None
assert tools.memory_profile("moe_all_to_all", ps2.moe_all_to_all) is not None
mesh = make_mesh(2, 4)
a = devices.place(np.ones((16, 32), np.float32), mesh, P("X", "Y"))
f = functools.partial(ps1.shard_average_jit, mesh=mesh)
assert tools.compiled_collectives(f, a) == []
tools.time_vs_jit(f, f, a, reps=1)
print("SELF-CHECK OK", flush=True)
p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--quick", "--seed", "1",
                    "--json", str(ROOT / "solutions" / "ps3_collective_matmul.py")],
                   capture_output=True, text=True, timeout=600)
print(p.stdout)
'''


def test_a_default_device_outside_the_course_is_never_used(tmp_path):
    """On a host whose JAX default is not the course's devices (emulated: see the module's
    docstring), the self-check passes right answers with every notebook tool, and the grader
    gives full marks, its judge process armed as well. Before the seam, every one of these
    failed here as on the GPU host ("exported for platforms ('cuda',) but it is used on
    ('cpu',)"). One process for the self-check and one grading (ps3, quick): nothing smaller
    shows a judge process on such a host."""
    log = tmp_path / "armed.log"
    env = {**os.environ, "PYTHONPATH": str(FIXTURES / "foreign_default"),
           "FOREIGN_DEFAULT_LOG": str(log)}
    p = subprocess.run([sys.executable, "-c", ON_A_FOREIGN_DEFAULT, str(ROOT)], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=900)
    assert "SELF-CHECK OK" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(p.stdout.split("SELF-CHECK OK", 1)[1])
    assert report["score"] == report["max_score"] > 0, json.dumps(report, indent=1)[:3000]
    armed = log.read_text()
    assert "--serve" in armed, armed  # the judge ran on the emulated host too


@pytest.mark.orchestration
def test_a_module_the_sandbox_cannot_import_is_the_graders_fault(tmp_path):
    """A module the grader imports and its sandbox cannot (IPython installed with ``pip
    --target`` beside the image's Python, emulated by ``tests/fixtures/sandbox_lacks_ipython``):
    ``grade`` gives every function a regrade naming the module and the fix, never "not found"
    or a zero, and ``doctor`` exits 1 naming it. Two commands: nothing smaller shows what an
    instructor sees."""
    env = {**os.environ, "PYTHONPATH": str(FIXTURES / "sandbox_lacks_ipython")}
    handin = tmp_path / "ps1_sharding.py"
    handin.write_text((ROOT / "solutions" / "ps1_sharding.py").read_text())
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", "--json", "--seed", "2",
                        str(handin)], env=env, capture_output=True, text=True, timeout=300)
    report = json.loads(p.stdout)
    assert p.returncode == 0 and report["functions"], p.stderr[-2000:]
    for name, fn in report["functions"].items():
        why = fn.get("needs_regrade") or ""
        assert "cannot import IPython" in why and "pip install IPython" in why, (name, fn)
        assert "not found" not in json.dumps(fn)
    d = subprocess.run([sys.executable, "-m", "autograder", "doctor"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert d.returncode == 1, d.stdout
    assert "[FAIL] grading" in d.stdout and "cannot import IPython" in d.stdout, d.stdout


def test_the_timed_speed_path_runs_on_emulated_devices():
    """Real accelerators time the speed case against the jit baseline, the wall-clock ratio
    deciding and the model's figure beside it; ``--timed-speed`` takes that path on the
    emulated CPU devices, so CI runs it (a test of the path, not a grade: the message says
    so). One function's grading, of the smallest speed case (roll_diff, quick)."""
    from conftest import SEED
    from tools_helpers import reference_answer

    from autograder.supervisor import local

    problem, roll_diff = reference_answer("roll_diff")
    res = local.grade_function(problem, roll_diff, with_speed=True, timed=True, quick=True,
                               seed=SEED)
    speed = next(c for c in res.checks if c.name == "speed")
    assert speed.passed, speed.message
    assert "interleaved rounds on cpu" in speed.message, speed.message
    assert "modeled on TPU" in speed.message and "not a grade" in speed.message, speed.message
    assert "wall-clock ratio on cpu" in speed.message
