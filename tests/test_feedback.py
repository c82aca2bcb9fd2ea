"""Feedback without noise: what a student reads after grading.

Notebook-only statements leave no notes; JAX's hint lines survive; nothing passes for a function
that raised; a failing check leads with what to change; multi-mesh findings say which mesh each
clause is about, and a single-device function hears nothing of meshes or collectives.
"""
import dataclasses
import types

import nbformat
import numpy as np
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.core.errors import cap_lines
from autograder.core.loader import load
from autograder.core.results import CheckResult, FunctionResult
from autograder.course import checks, registry
from autograder.course.reading import Paths
from autograder.supervisor import local as in_process

GRADED = frozenset(p.name for p in registry.problems())

SETUP = "from selfcheck import check, make_mesh, setup_devices\nsetup_devices()\n"
DEMOS = """import functools
import jax
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = make_mesh(2, 4)


def put(x, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


@functools.partial(jax.jit, out_shardings=NamedSharding(mesh, P("X", "Y")))
def matmul_jit(a, w):
    return a @ w
"""
ANSWER = """def shard_average_jit(A, mesh):
    return A.reshape(mesh.shape["X"], -1, A.shape[1]).mean(axis=1)
"""


def _notebook(tmp_path, *cells):
    path = tmp_path / "sub.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(c) for c in cells]), path)
    return path


# -- notes: only what can explain a grade -----------------------------------------------------

def test_setup_and_demo_cells_leave_no_notes(tmp_path):
    loaded = load(_notebook(tmp_path, SETUP, DEMOS, ANSWER, "put(1, None)"), keep_names=GRADED)
    assert loaded.notes == []
    assert loaded.function("shard_average_jit") is not None


def test_a_parameter_named_mesh_does_not_pull_in_the_demo_mesh(tmp_path):
    path = tmp_path / "s.py"
    path.write_text("mesh = make_mesh(2, 4)\n\n" + ANSWER)
    loaded = load(path, keep_names=GRADED)
    assert "mesh" not in loaded.namespace  # the assignment was not even run
    assert loaded.notes == []


def test_a_failed_import_a_graded_function_needs_is_information(tmp_path):
    path = _notebook(tmp_path, SETUP, "from helpers import block_rows\n",
                     "def shard_average_jit(A, mesh):\n    return block_rows(A, mesh)\n")
    notes = load(path, keep_names=GRADED).notes
    assert len(notes) == 1, notes
    assert notes[0].startswith(
        'cell 2 line 1: not loaded (your code raised "ModuleNotFoundError')
    assert "No module named 'helpers'" in notes[0]
    assert "so block_rows is undefined for shard_average_jit. If helpers is a module of your " \
        "own (helpers.py beside the notebook), hand it in beside the notebook: the grader has " \
        "only the files you hand in" in notes[0], notes[0]
    assert "selfcheck" not in notes[0] and "skipped" not in notes[0]


def test_a_graded_function_that_cannot_be_defined_is_noted(tmp_path):
    path = _notebook(tmp_path, SETUP, DEMOS,
                     "@functools.partial(jax.jit, static_argnums=NOPE)\n" + ANSWER)
    notes = load(path, keep_names=GRADED).notes
    assert len(notes) == 1, notes
    assert "NameError: name 'NOPE' is not defined" in notes[0]
    assert notes[0].endswith("so shard_average_jit could not be graded")


def test_without_graded_names_every_definition_counts(tmp_path):
    path = tmp_path / "s.py"
    path.write_text("x = 1 / 0\n\ndef g():\n    return x\n")
    assert any("ZeroDivisionError" in n and "x is undefined for g" in n
               for n in load(path).notes)


# -- error texts keep JAX's hint -----------------------------------------------------------------

def test_a_long_error_loses_middle_lines_not_its_hint():
    lines = (["TypeError: what went wrong"] + [f"detail {i} " + "." * 60 for i in range(50)]
             + ["This might be fixed by applying `jax.lax.pcast(..., to='varying')`",
                "(at <cell 7> line 3)"])
    text = cap_lines(lines, 600)
    assert len(text) <= 600
    assert text.startswith("TypeError: what went wrong\n")
    assert text.endswith("`jax.lax.pcast(..., to='varying')`\n(at <cell 7> line 3)")
    assert "lines left out" in text
    assert cap_lines(["short", "text"], 600) == "short\ntext"


VMA = """import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def matmul_allgather(A, W, mesh):
    n = mesh.shape["Y"]

    def local(a, w):
        k = a.shape[1]
        me = jax.lax.axis_index("Y")

        def step(i, c):
            acc, a = c
            acc = acc + a @ jax.lax.dynamic_slice_in_dim(w, ((me + i) % n) * k, k, 0)
            return acc, jax.lax.ppermute(a, "Y", [(j, (j - 1) % n) for j in range(n)])

        acc = jnp.zeros((a.shape[0], w.shape[1]), a.dtype)  # not marked varying: JAX refuses
        return jax.lax.fori_loop(0, n, step, (acc, a))[0]

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)
"""


@pytest.fixture(scope="module")
def vma_result(tmp_path_factory):
    path = tmp_path_factory.mktemp("vma") / "vma.py"
    path.write_text(VMA)
    fn = load(path).function("matmul_allgather")
    return in_process.grade_function(registry.get("matmul_allgather"), fn, seed=1, quick=True,
                                  with_speed=True)


def test_the_grader_keeps_jax_hint_line(vma_result):
    num = vma_result.checks[0]
    assert num.name == "numerics" and not num.passed
    assert "to='varying'" in num.message, num.message
    assert "(at <vma.py> line 19)" in num.message


def test_nothing_passes_for_a_function_that_raised(vma_result):
    assert vma_result.score == 0
    others = vma_result.checks[1:]
    assert [c.name for c in others] == ["sharding", "structure", "speed"]
    assert all(c.skipped and not c.passed for c in others)
    report = vma_result.report()
    assert "[PASS]" not in report and report.count("[SKIP]") == 3


def test_raising_on_one_mesh_skips_the_layout_check(root):
    """The hard-coded ring runs on 2x4 and raises on 4x2: its sharding is not judged."""
    fn = load(root / "tests" / "fixtures" / "ps3" / "hardcoded_axis.py").function(
        "matmul_allgather")
    res = in_process.grade_function(registry.get("matmul_allgather"), fn, seed=1, quick=True,
                                 with_speed=False)
    assert "on mesh 4x2" in res.checks[0].message
    assert [c.mark for c in res.checks] == ["FAIL"] + ["SKIP"] * (len(res.checks) - 1)
    assert res.checks[1].name == "sharding"


def test_a_skipped_check_round_trips():
    c = CheckResult("speed", False, "not checked: why", skipped=True)
    assert CheckResult.from_dict(c.to_dict()) == c
    assert "skipped" not in CheckResult("speed", True, "ok").to_dict()
    with pytest.raises(ValueError):
        CheckResult("speed", True, "ok", skipped=True)


# -- messages: the fix first, the mesh named where it matters --------------------------------

def test_a_failing_ring_rule_leads_with_the_fix(root):
    fn = load(root / "tests" / "fixtures" / "ps3" / "monolithic_allgather.py").function(
        "matmul_allgather")
    res = in_process.grade_function(registry.get("matmul_allgather"), fn, seed=1, quick=True,
                                 with_speed=False)
    st = next(c for c in res.checks if c.name == "structure")
    assert st.message.startswith("on mesh 2x4: send the data in chunks with ppermute"), st.message


def _attempts(layouts):
    return [checks.Attempt(mesh=l, layout=l, case=None, paths=Paths([((), types.SimpleNamespace(
        uses_shard_map=False))])) for l in layouts]


def test_structure_names_the_mesh_of_each_clause():
    def shard_map_used(prog, mesh, problem):
        return checks.passed("structure", "uses shard_map")

    def ring(prog, mesh, problem):
        x, y = mesh
        if y == 1:
            return checks.passed("structure", "no communication needed")
        return checks.passed("structure", f"a ppermute ring; {y} partial matmuls")

    prob = dataclasses.replace(registry.get("matmul_allgather"), rules=(shard_map_used, ring))
    msg = checks.structure(prob, _attempts([(2, 4), (4, 2), (1, 8), (8, 1)])).message
    assert msg.count("uses shard_map") == 1
    assert msg.splitlines() == [
        "on meshes 2x4, 4x2, 1x8, 8x1: uses shard_map",
        "on meshes 2x4, 4x2, 1x8: a ppermute ring",
        "on mesh 2x4: 4 partial matmuls",
        "on mesh 4x2: 2 partial matmuls",
        "on mesh 1x8: 8 partial matmuls",
        "on mesh 8x1: no communication needed",
    ]


@pytest.fixture(scope="module")
def local():
    prob = registry.get("moe_local")
    assert not prob.uses_mesh
    case = prob.case(np.random.default_rng(0), 2, 4, "grade")
    return prob, case


def test_a_single_device_function_hears_nothing_of_meshes(local):
    prob, case = local
    atts = _attempts([(2, 4)])
    atts[0].paths.programs[0][1].uses_shard_map = True
    atts[0].case = case
    texts = [checks.structure(prob, atts).message, atts[0].where(prob),
             checks.memory(prob, 9 << 20, 1 << 20, "two copies of x",
                           checks.where(prob, (2, 4), case)).message]
    t = checks.Timing(float("nan"), float("nan"), float("nan"), 0, "cpu",
                      {"chip": "v5e", "student_us": 3000.0, "baseline_us": 10.0, "ratio": 300.0})
    speed = checks.speed(prob, t)
    texts.append(speed.message)
    assert speed.message.startswith("make it faster: a modeled TPU ratio of at most")
    for text in texts:
        assert "mesh" not in text and "collective" not in text and "per device" not in text, text
    assert texts[0].startswith("write plain jax.numpy code for one device")
    assert texts[2].startswith("keep the temporary buffers within 1.00 MiB")


def test_the_report_marks_skipped_checks():
    r = FunctionResult("f", 2.0, [CheckResult("numerics", False, "boom"),
                                  CheckResult("sharding", False, "not checked: x", skipped=True)],
                       weights={"numerics": 1, "sharding": 1})
    assert r.report().splitlines()[1:] == ["  [FAIL] numerics: boom",
                                           "  [SKIP] sharding: not checked: x"]


def test_feedback_lines_wrap_and_keep_every_word():
    from autograder.classroom.nbgrader_plugin import FEEDBACK_WIDTH, wrap_report

    line = "  structure  FAIL  " + " ".join(f"word{i}" for i in range(60))
    text = wrap_report("short line\n" + line)
    lines = text.splitlines()
    assert lines[0] == "short line" and len(lines) > 2
    assert all(len(l) <= FEEDBACK_WIDTH for l in lines)
    assert " ".join(text.split()) == " ".join(("short line\n" + line).split())
    assert lines[2].startswith("      ")  # continuation indented under its line


def test_a_failed_check_shows_its_message_without_a_traceback_in_a_notebook():
    from autograder.public.check import CheckFailed

    e = CheckFailed("roll_diff on mesh 2x4: 3 of 8 values differ")
    assert isinstance(e, AssertionError)  # pytest's self-check reports it as a failure
    assert e._render_traceback_() == ["check failed: roll_diff on mesh 2x4: 3 of 8 values differ"]
    # check() printed its report already: the notebook shows the names alone, once
    e = CheckFailed("numerics: roll_diff on mesh 2x4: 3 of 8 values differ", shown=("numerics",))
    assert e._render_traceback_() == [
        "check failed: numerics (the FAILED line above says what was found and where)"]
    assert "3 of 8 values differ" in str(e)  # pytest and code that catches it read it whole
