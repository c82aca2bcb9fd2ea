"""Identical programs are graded once per run (autograder/judge/reuse.py), and only identical ones.

The canonical form must not see what a student may change without changing the program (names,
comments, helpers, the file), and must see everything else; a reused verdict must be exactly the
verdict grading would have given, and the report says it was reused.
"""
import json
import shutil
from pathlib import Path

import pytest

from autograder.classroom.batch import grade_all
from autograder.course import registry
from autograder.judge import grading
from autograder.judge.artifacts import load_artifact
from autograder.judge.reuse import (
    VerdictStore,
    artifact_digest,
    canonical,
    canonical_bare,
    function_key,
)
from autograder.supervisor.options import Limits, Options
from autograder.worker.local import LocalExporter

ROOT = Path(__file__).resolve().parent.parent

ROLL_A = '''
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P

def roll_diff(A, shift, mesh):
    def body(block):
        return jnp.roll(block, shift, axis=0) - block
    return jax.shard_map(body, mesh=mesh, in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)
'''

# the same program: other names, a comment, a helper of its own, imports spelled differently
ROLL_A_REWORDED = '''
import jax
from jax import numpy as np_
from jax.sharding import PartitionSpec

SPEC = PartitionSpec('X', 'Y')

def _shifted_minus(chunk, k):
    # roll my rows, then subtract what I had
    moved = np_.roll(chunk, k, axis=0)
    return moved - chunk

def roll_diff(A, shift, mesh):
    return jax.shard_map(lambda c: _shifted_minus(c, shift), mesh=mesh, in_specs=SPEC,
                         out_specs=SPEC)(A)
'''

# a different program with the same answer: slices and a concatenate, by hand
ROLL_B = '''
import jax, jax.numpy as jnp
from jax.sharding import PartitionSpec as P

def roll_diff(A, shift, mesh):
    def body(block):
        k = shift % block.shape[0]
        rolled = jnp.concatenate([block[block.shape[0] - k:], block[:block.shape[0] - k]])
        return rolled - block
    return jax.shard_map(body, mesh=mesh, in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)
'''


def _functions(src: str) -> dict:
    ns: dict = {}
    exec(compile(src, "<submission>", "exec"), ns)
    return ns


def _key(src: str, seed: int = 7, with_speed: bool = False) -> str:
    prob = registry.get("roll_diff")
    plan = grading.plan_for(prob, seed=seed, quick=True, with_speed=with_speed)
    reqs = plan.all_requests()
    replies = LocalExporter.of("roll_diff", _functions(src)["roll_diff"]).export(reqs, 60)
    digests = [(r, artifact_digest(load_artifact(replies[r.id], r))) for r in reqs]
    return function_key(plan, digests, options={"speed": with_speed})


def test_a_reworded_program_has_the_same_key():
    assert _key(ROLL_A) == _key(ROLL_A_REWORDED)


def test_a_different_program_has_another_key():
    assert _key(ROLL_A) != _key(ROLL_B)


def test_other_inputs_or_options_give_another_key():
    assert _key(ROLL_A, seed=7) != _key(ROLL_A, seed=8)
    assert _key(ROLL_A, with_speed=False) != _key(ROLL_A, with_speed=True)


def test_canonical_keeps_the_program_and_drops_names():
    text = '''module @jit_alpha {
  func.func public @main(%arg0: tensor<4xf32> loc("x")) -> tensor<4xf32> {
    %0 = call @helper_by_alice(%arg0) : (tensor<4xf32>) -> tensor<4xf32> loc("file.py":3:1)
    return %0 : tensor<4xf32>
  }
  func.func private @helper_by_alice(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}'''
    other = (text.replace("jit_alpha", "jit_beta").replace("helper_by_alice", "h")
             .replace('loc("file.py":3:1)', 'loc("elsewhere.py":9:4)'))
    changed = text.replace("stablehlo.add", "stablehlo.multiply")
    assert canonical(text) == canonical(other)
    assert canonical(text) != canonical(changed)
    assert "alice" not in canonical(text) and "file.py" not in canonical(text)


def test_store_round_trip_and_absent_keys(tmp_path):
    store = VerdictStore(tmp_path)
    assert store.get("ab" * 32, "here") is None
    store.put("ab" * 32, [{"name": "numerics", "passed": True, "message": "ok"}], "here")
    assert store.get("ab" * 32, "here") == [{"name": "numerics", "passed": True, "message": "ok"}]
    # the programs a kept verdict was judged on are marked seen, and only they
    assert not store.seen("12" * 32)
    store.put("cd" * 32, [{"name": "numerics", "passed": True, "message": "ok"}], "here",
              ["12" * 32])
    assert store.seen("12" * 32) and not store.seen("34" * 32)
    assert not VerdictStore(None).seen("12" * 32)
    assert VerdictStore(None).get("ab" * 32, "here") is None


def test_a_failed_verdict_is_reused_only_for_the_program_as_handed_in(tmp_path):
    """Two programs with one key (the same canonical programs) but other source locations: a
    verdict with a failed check may quote them (the op table's source line), so each program
    gets its own; a verdict that passed every check quotes figures only, and is shared."""
    store = VerdictStore(tmp_path)
    failed = [{"name": "numerics", "passed": True, "message": "ok"},
              {"name": "structure", "passed": False,
               "message": "stablehlo.map is not part of this course's programs (at adam.py "
                          "line 12)"}]
    store.put("cd" * 32, failed, "adam's text")
    assert store.get("cd" * 32, "adam's text") == failed
    assert store.get("cd" * 32, "alice's text") is None
    passed = [{"name": "numerics", "passed": True, "message": "ok"}]
    store.put("ef" * 32, passed, "adam's text")
    assert store.get("ef" * 32, "alice's text") == passed


def test_the_key_holds_the_assignments_grader_and_course_files(monkeypatch):
    """A verdict kept from an earlier run is found again only while the grader's code and the
    problem's assignment's course files are the same (autograder/core/identity.py)."""
    from types import SimpleNamespace

    from autograder.core import identity

    plan = SimpleNamespace(problem=registry.get("roll_diff"), seed=1, quick=True,
                           with_big=False, platform="cpu")
    before = function_key(plan, [], {"speed": False})
    asked = []

    def changed(assignment, root=identity.PACKAGE):
        asked.append(assignment)
        return "another course"

    monkeypatch.setattr(identity, "assignment_hash", changed)
    assert function_key(plan, [], {"speed": False}) != before
    assert asked == ["ps1_sharding"]


def test_a_classmate_graded_after_a_renamed_ring_keeps_full_marks(tmp_path):
    """The poisoning sequence: adam hands in the reference ring with its ppermute called
    through a primitive named "shift" (the same programs once locations are stripped: the same
    key), alice the ring with jax.lax.ppermute, graded after him. adam's verdict is judged by
    what his program does, so alice's reused verdict is the one she would get alone: full
    marks. (One mesh, one case, no speed: the reuse is the point.)"""
    import dataclasses
    import importlib.util

    from autograder.supervisor import local

    path = ROOT / "tests" / "fixtures" / "attacks" / "named_shift_ring.py"
    spec = importlib.util.spec_from_file_location("adam_ring", path)
    adam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(adam)
    src = path.read_text()
    call = 'shift_p.bind(a_held, axis_name=("Y",), perm=to_left)'
    assert call in src
    alice = _functions(src.replace(call, 'jax.lax.ppermute(a_held, "Y", perm=to_left)'))
    problem = dataclasses.replace(registry.get("matmul_allgather"), layouts=((2, 4),))

    def plan():
        return grading.plan_for(problem, seed=5, quick=True, with_speed=False)

    def key(fn):
        reqs = plan().all_requests()
        replies = LocalExporter.of(problem.name, fn).export(reqs, 60)
        return function_key(plan(), [(r, artifact_digest(load_artifact(replies[r.id], r)))
                                     for r in reqs], options={"speed": False})

    assert key(adam.matmul_allgather) == key(alice["matmul_allgather"])  # the premise
    store = VerdictStore(tmp_path)
    first = local.grade_function(problem, adam.matmul_allgather, plan=plan(), with_speed=False,
                                 store=store)
    after = local.grade_function(problem, alice["matmul_allgather"], plan=plan(),
                                 with_speed=False, store=store)
    assert not first.reused and after.reused
    assert all(c.passed for c in after.checks), [c.message for c in after.checks]
    assert after.score == after.max_score


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """One class graded twice with the same seed: with the verdict store, and without it."""
    base = tmp_path_factory.mktemp("reuse")
    sol = (ROOT / "solutions" / "ps1_sharding.py").read_text()
    averages = sol.split("def roll_diff")[0]
    students = {"first": averages + ROLL_A, "reworded": averages + ROLL_A_REWORDED,
                "different": averages + ROLL_B, "again": averages + ROLL_A}
    for name, src in students.items():
        d = base / "course" / "submitted" / name / "ps1_sharding"
        d.mkdir(parents=True)
        (d / "ps1_sharding.py").write_text(src)
    lim = Limits(per_function_s=60, load_s=60, statement_s=10)
    runs = {}
    for label, cache in (("shared", base / "cache"), ("alone", None)):
        opts = Options(quick=True, with_speed=False, seed=1234, limits=lim, cache_dir=cache)
        outs = grade_all(base / "course", workers=1, out=base / label / "grades.csv",
                         opts=opts, progress=False, warm=False)
        runs[label] = {o.item.student: o.report for o in outs}
    return runs


def _verdicts(report) -> dict:
    return {(f, c["name"]): c["passed"] for f, fr in report["functions"].items()
            for c in fr["checks"]}


def test_reused_verdicts_equal_fresh_ones(two_runs):
    for student, report in two_runs["shared"].items():
        assert _verdicts(report) == _verdicts(two_runs["alone"][student]), student
        assert report["score"] == two_runs["alone"][student]["score"] == 10.0


def test_only_identical_programs_are_reused(two_runs):
    shared = two_runs["shared"]
    reused = {s: [f for f, fr in r["functions"].items() if fr.get("reused")]
              for s, r in shared.items()}
    # graded in name order: again, different, first, reworded
    assert reused["again"] == []
    assert reused["different"] == ["shard_average_jit", "shard_average_shard_map"]
    assert reused["first"] == ["shard_average_jit", "shard_average_shard_map", "roll_diff"]
    assert reused["reworded"] == ["shard_average_jit", "shard_average_shard_map", "roll_diff"]
    assert not any(fr.get("reused") for r in two_runs["alone"].values()
                   for fr in r["functions"].values())


def test_the_class_cache_works_from_any_folder_and_any_out(tmp_path):
    """Two grade-all runs from different working folders, each with a relative --out: the
    second finds the first's verdicts in the class-wide cache (not beside either CSV)."""
    import os
    import subprocess
    import sys

    course = tmp_path / "course" / "submitted" / "amy" / "ps1_sharding"
    course.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "ps1_sharding.py", course / "ps1_sharding.py")
    env = {**os.environ, "AUTOGRADER_CACHE_DIR": str(tmp_path / "class-cache"),
           "PYTHONPATH": str(ROOT)}
    for run in ("one", "two"):
        cwd = tmp_path / run
        cwd.mkdir()
        subprocess.run([sys.executable, "-m", "autograder", "grade-all",
                        str(tmp_path / "course"), "--out", "grades.csv", "--quick",
                        "--no-speed", "--seed", "99", "--no-progress"],
                       cwd=cwd, env=env, check=True, capture_output=True, timeout=600)
    first, second = (json.loads((tmp_path / run / "reports" / "amy" /
                                 "ps1_sharding.json").read_text()) for run in ("one", "two"))
    assert not any(f.get("reused") for f in first["functions"].values())
    assert all(f.get("reused") for f in second["functions"].values())
    assert second["score"] == first["score"] == 10.0
    assert (tmp_path / "class-cache" / "isolated" / "verdicts").is_dir()
    assert not list((tmp_path / "one").rglob("*verdicts*"))
    # on CPU no executable is cached (see autograder.judge.process.enable_cache)
    assert not list(tmp_path.rglob("xla"))


def test_the_grader_hash_covers_every_part_of_the_grader():
    """Reports and verdicts are keyed by the grader's own files: all of them, whichever folder."""
    from autograder.core.identity import PACKAGE, grader_files

    names = {str(p.relative_to(PACKAGE)) for p in grader_files()}
    for part in ("judge/grading.py", "course/checks.py", "course/rules/ring.py",
                 "tpumodel/cost.py", "supervisor/supervise.py", "worker/exporting.py"):
        assert part in names, part
    assert not any(n.startswith("tests/") for n in names)


def _artifacts(src: str, seed: int = 7):
    """The loaded artifacts of ``src``'s roll_diff for a quick plan, with their requests."""
    prob = registry.get("roll_diff")
    plan = grading.plan_for(prob, seed=seed, quick=True, with_speed=False)
    reqs = plan.all_requests()
    replies = LocalExporter.of("roll_diff", _functions(src)["roll_diff"]).export(reqs, 60)
    return plan, [(r, load_artifact(replies[r.id], r)) for r in reqs]


class _Changed:
    """A value no artifact has: stands in for a field this test has no realistic change of
    (one a later JAX adds)."""

    def __repr__(self):
        return "<changed>"


def test_every_field_of_an_artifact_is_in_its_key():
    """The key is read off the artifact as loaded, field by field (reuse.NOT_KEYED names the
    fields left out and why): changing any other field, or the module, or the request, changes
    the key; the student's function name does not."""
    import dataclasses

    from jax.export import DisabledSafetyCheck
    from jax.sharding import PartitionSpec as P
    from jax.tree_util import tree_structure

    from autograder.judge.artifacts import Artifact
    from autograder.judge.reuse import NOT_KEYED

    plan, arts = _artifacts(ROLL_A)
    req, art = arts[0]
    exp = art.exported
    other = _artifacts(ROLL_B)[1][0][1]
    sharded = next(s for s in exp._in_named_shardings if s is not None)
    realistic = {
        "platforms": ("cpu", "cuda"),
        "calling_convention_version": exp.calling_convention_version - 1,
        "in_shardings_hlo": (None,) * len(exp.in_shardings_hlo),
        "out_shardings_hlo": exp.in_shardings_hlo,
        "_in_named_shardings": (sharded.update(spec=P("Y", "X")),),
        "_out_named_shardings": (sharded,),
        "_has_named_shardings": not getattr(exp, "_has_named_shardings", True),  # JAX 0.10
        "module_kept_var_idx": (),
        "in_avals": tuple(a.update(shape=(a.shape[0] * 2, *a.shape[1:])) for a in exp.in_avals),
        "out_avals": tuple(a.update(shape=(a.shape[0] * 2, *a.shape[1:]))
                           for a in exp.out_avals),
        "in_tree": tree_structure(((0, 0), {})),
        "out_tree": tree_structure((0,)),
        "nr_devices": exp.nr_devices // 2,
        "uses_global_constants": not exp.uses_global_constants,
        "disabled_safety_checks": (DisabledSafetyCheck.platform(),),
    }
    base = artifact_digest(art)
    changed = []
    for f in dataclasses.fields(exp):
        if f.name in NOT_KEYED:
            continue
        value = realistic.get(f.name, _Changed())
        if repr(value) == repr(getattr(exp, f.name)):  # this JAX holds that value already
            value = _Changed()
        new = dataclasses.replace(exp, **{f.name: value})
        assert artifact_digest(Artifact(new, art.text)) != base, f.name
        changed.append(f.name)
    assert {"platforms", "calling_convention_version", "module_kept_var_idx",
            "in_avals"} <= set(changed), changed
    # the module, as load_artifact reads it: another program
    swapped = dataclasses.replace(
        exp, mlir_module_serialized=other.exported.mlir_module_serialized)
    assert artifact_digest(Artifact(swapped, other.text)) != base
    # left out by design: the student's function's name
    renamed = dataclasses.replace(exp, fun_name="my_own_roll")
    assert artifact_digest(Artifact(renamed, art.text)) == base
    # and the request each artifact answers
    digests = [(r, artifact_digest(a)) for r, a in arts]
    moved = [(dataclasses.replace(r, platform="cuda"), d) for r, d in digests]
    assert function_key(plan, moved, {"speed": False}) != function_key(plan, digests,
                                                                       {"speed": False})


class _Tampered:
    """The worker's replies with each artifact's ``Exported`` changed by ``change`` after
    tracing (as a patch at trace time in the sandbox could): the program text stays the
    classmate's."""

    def __init__(self, fn, **change):
        self.inner, self.change = LocalExporter.of("roll_diff", fn), change

    def export(self, requests, timeout=None, on_reply=None):
        import dataclasses

        import jax

        from autograder.core.records import ExportReply

        out = {}
        for rid, rep in self.inner.export(requests, timeout).items():
            exp = jax.export.deserialize(bytearray(rep.payload()))
            out[rid] = ExportReply.of(rid, dataclasses.replace(exp, **self.change).serialize())
            if on_reply is not None:
                on_reply(out[rid])
        return out


def test_a_classmates_grade_is_not_taken_through_a_failed_lowering(tmp_path):
    """The poisoning sequence: eve hands in alice's exact program text with its artifacts
    marked for another platform too (refused when loaded), or with their kept arguments
    emptied (loads, then fails to lower in the judge); neither verdict is kept, and alice,
    graded after her, gets her own full marks."""
    from autograder.core.results import FunctionResult
    from autograder.judge.grading import grade_function

    problem = registry.get("roll_diff")
    alice = _functions(ROLL_A)["roll_diff"]
    store = VerdictStore(tmp_path)

    def graded(source) -> FunctionResult:
        plan = grading.plan_for(problem, seed=3, quick=True, with_speed=False)
        return grade_function(problem, source, plan=plan, with_speed=False, store=store)

    refused = graded(_Tampered(alice, platforms=("cpu", "cuda")))
    assert not refused.checks[0].passed and "lowered for ('cpu', 'cuda')" in \
        refused.checks[0].message, refused.checks[0].message
    unlowered = graded(_Tampered(alice, module_kept_var_idx=()))
    assert not unlowered.checks[0].passed, unlowered.checks[0].message
    assert not unlowered.reused and not list(tmp_path.rglob("*.json"))  # nothing kept
    mine = graded(LocalExporter.of("roll_diff", alice))
    assert not mine.reused and mine.score == mine.max_score, mine.report()
    again = graded(LocalExporter.of("roll_diff", alice))  # the store works here: a control
    assert again.reused and again.score == again.max_score


def test_the_key_reads_the_artifacts_program_as_canonical_reads_its_text():
    """An artifact's digest reads its program printed without locations from its own
    deserialization (core.stablehlo.bare_text): the same canonical form as ``canonical`` of
    its text, so names and locations still do not count and the program still does."""
    from autograder.core.stablehlo import bare_text

    prob = registry.get("roll_diff")
    plan = grading.plan_for(prob, seed=7, quick=True, with_speed=False)
    reqs = plan.all_requests()[:2]
    for src in (ROLL_A, ROLL_A_REWORDED, ROLL_B):
        replies = LocalExporter.of("roll_diff", _functions(src)["roll_diff"]).export(reqs, 60)
        for r in reqs:
            art = load_artifact(replies[r.id], r)
            assert canonical_bare(bare_text(art.exported)) == canonical(art.text)
