"""What a report or a verdict was judged from (autograder/core/identity.py): the grader's code
and its assignment's own course files, so a change to one assignment's limits regrades that
assignment's hand-ins and no other's."""
import shutil
from pathlib import Path

import pytest

from autograder.classroom import batch
from autograder.core.identity import PACKAGE, assignment_files, assignment_hash, grader_files

pytestmark = pytest.mark.orchestration

ASSIGNMENTS = ("ps1_sharding", "ps2_moe", "ps3_collective_matmul", "ps4_bidirectional")


@pytest.fixture
def course(tmp_path) -> Path:
    """A copy of the grader's source files to change."""
    root = tmp_path / "autograder"
    for p in grader_files():
        dest = root / p.relative_to(PACKAGE)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest)
    return root


def _hashes(root: Path) -> dict:
    return {a: assignment_hash(a, root) for a in ASSIGNMENTS}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _changed(before: dict, after: dict) -> set:
    return {a for a in ASSIGNMENTS if before[a] != after[a]}


def test_each_assignment_has_its_own_course_files():
    files = {a: {str(p.relative_to(PACKAGE)) for p in assignment_files(a)} for a in ASSIGNMENTS}
    assert "course/problems/ps3_collective_matmul.py" in files["ps3_collective_matmul"]
    assert "course/rules/ring.py" in files["ps4_bidirectional"]  # imported, so followed
    assert "course/references/ps3_collective_matmul.py" in files["ps4_bidirectional"]
    assert not any("ps3" in f or "ring" in f for f in files["ps1_sharding"] | files["ps2_moe"])
    assert assignment_files("no_such_assignment") is None


@pytest.mark.parametrize("edit, regraded", [
    # one speed limit of ps3 (the README's "changing the course"): ps3 only
    (("course/problems/ps3_collective_matmul.py", '"mlp": {"tpu": 1.2, "tpu_model": 1.15}',
      '"mlp": {"tpu": 1.2, "tpu_model": 1.1}'), {"ps3_collective_matmul"}),
    # the rules ps3 and ps4 share: both
    (("course/rules/ring.py", "BLOCK_SLACK = 0.25", "BLOCK_SLACK = 0.2"),
     {"ps3_collective_matmul", "ps4_bidirectional"}),
    # ps2's references: ps2 only
    (("course/references/ps2_moe.py", "import numpy as np", "import numpy as np  # edited"),
     {"ps2_moe"}),
    # the grader's code: every assignment
    (("judge/planning.py", "PUBLIC_DRAWS = 4000", "PUBLIC_DRAWS = 4001"), set(ASSIGNMENTS)),
])
def test_a_change_changes_only_the_fingerprints_of_the_assignments_it_is_part_of(course, edit,
                                                                                 regraded):
    before = _hashes(course)
    assert len(set(before.values())) == len(ASSIGNMENTS)
    path, old, new = edit
    _edit(course / path, old, new)
    assert _changed(before, _hashes(course)) == regraded


def test_an_unknown_assignment_is_judged_from_every_file(course):
    before = assignment_hash(None, course)
    _edit(course / "course/problems/ps3_collective_matmul.py", "speed_threshold=",
          "speed_threshold = ")
    assert assignment_hash(None, course) != before


def test_a_reports_fingerprint_follows_its_assignment_only(tmp_path, monkeypatch):
    """grade-all reuses a report while its fingerprint holds: a ps3 change leaves a ps1
    hand-in's fingerprint as it was, and changes a ps3 hand-in's."""
    from autograder.supervisor.options import Options

    hand_in = tmp_path / "amy.py"
    hand_in.write_text("def roll_diff(A, shift, mesh):\n    return A\n")
    items = {a: batch.Item("amy", a, hand_in) for a in ("ps1_sharding", "ps3_collective_matmul")}
    opts = Options(quick=True, with_speed=False, seed=3)
    course = {"ps1_sharding": "one", "ps3_collective_matmul": "three"}
    monkeypatch.setattr(batch, "assignment_hash", lambda a: course[a])
    before = {a: batch.fingerprint(it, opts) for a, it in items.items()}
    course["ps3_collective_matmul"] = "three, with a new speed limit"
    after = {a: batch.fingerprint(it, opts) for a, it in items.items()}
    assert after["ps1_sharding"] == before["ps1_sharding"]
    assert after["ps3_collective_matmul"] != before["ps3_collective_matmul"]
