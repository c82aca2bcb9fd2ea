"""A flat folder's files placed by the instructor's roster (the LMS's ids), not by name text a
student chose: the roster's checks, and who gets which file (discover only; nothing graded)."""
from pathlib import Path

import pytest

from autograder.classroom import roster as rosters
from autograder.classroom.batch import discover
from autograder.cli.main import main

pytestmark = pytest.mark.orchestration

ROSTER = "user_id,name\n111,alice\n222,bob\n"


def _roster(tmp_path: Path, text: str = ROSTER) -> Path:
    p = tmp_path / "roster.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize("text, said", [
    ("", "is empty"),
    ("id,student\n111,alice\n111,bob\n", "there twice"),
    ("id,student\n111,alice\n222,alice\n", "share one report"),
    ("id,student\nabc,alice\n", "not a number"),
    ("id,student\n111,\n", "no student name"),
    ("login_id,fullname\n111,alice\n", "one column of LMS ids"),
    ("id,user_id,student\n1,2,alice\n", "one column of LMS ids"),
])
def test_a_roster_that_cannot_place_anyone_is_refused(tmp_path, text, said):
    with pytest.raises(rosters.RosterError, match=said):
        rosters.read(_roster(tmp_path, text))


def test_a_bad_roster_stops_grade_all_before_grading(tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    bad = _roster(tmp_path, "id,student\n111,alice\n111,bob\n")
    assert main(["grade-all", str(tmp_path / "flat"), "--roster", str(bad),
                 "--out", str(tmp_path / "g.csv")]) == 2
    assert "there twice" in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists()


def test_lms_id_is_the_first_number_the_lms_wrote():
    assert rosters.lms_id("alicesmith_111_9876_ps1_sharding.ipynb") == "111"
    assert rosters.lms_id("alicesmith_LATE_111_9876_222_ps1.ipynb") == "111"
    assert rosters.lms_id("Alice Smith_111_assignsubmission_file_ps1.py") == "111"
    assert rosters.lms_id("alice_ps1_sharding.ipynb") is None


def _flat(tmp_path: Path, names) -> Path:
    flat = tmp_path / "flat"
    flat.mkdir(parents=True)
    for n in names:
        (flat / n).write_text("def roll_diff(A, shift, mesh):\n    return A\n")
    return flat


def test_without_a_roster_a_clash_refuses_both_and_says_how_to_settle_it(tmp_path):
    flat = _flat(tmp_path, ["alice_ps1_sharding.py", "alice_ps1_sharding_.py"])
    items = discover(flat)
    assert len(items) == 2
    for it in items:
        assert "two hand-ins" in it.refused and "--roster" in it.refused, it.refused


def test_the_roster_settles_a_clash_by_the_lms_id(tmp_path):
    """bob names his file like alice's: the LMS's ids say whose each is, both are graded."""
    flat = _flat(tmp_path, ["alice_111_9001_ps1_sharding.py",
                            "bob_222_9002_alice_ps1_sharding.py",
                            "mallory_ps1_sharding.py",            # no LMS id
                            "eve_333_9003_ps1_sharding.py"])      # not on the roster
    items = {it.path.name: it for it in discover(flat, roster=rosters.read(_roster(tmp_path)))}
    alice = items["alice_111_9001_ps1_sharding.py"]
    bob = items["bob_222_9002_alice_ps1_sharding.py"]
    assert (alice.student, alice.assignment, alice.refused) == ("alice", "ps1_sharding", None)
    assert (bob.student, bob.assignment, bob.refused) == ("bob", "ps1_sharding", None)
    assert "carries no LMS id" in items["mallory_ps1_sharding.py"].refused
    assert "does not list" in items["eve_333_9003_ps1_sharding.py"].refused
    # the name text says alice twice; the ids the LMS wrote say alice and bob
    clash = _flat(tmp_path / "c", ["alice_111_1_ps1_sharding.py", "alice_222_2_ps1_sharding.py"])
    by_id = {it.path.name: it for it in discover(clash, roster=rosters.read(_roster(tmp_path)))}
    assert by_id["alice_111_1_ps1_sharding.py"].student == "alice"
    assert by_id["alice_222_2_ps1_sharding.py"].student == "bob"
    assert all(it.refused is None for it in by_id.values())


def test_one_students_two_files_are_that_students_own(tmp_path):
    flat = _flat(tmp_path, ["alice_111_1_ps1_sharding.py", "alice_111_2_ps1_sharding.py",
                            "bob_222_3_ps1_sharding.py"])
    items = {it.path.name: it for it in discover(flat, roster=rosters.read(_roster(tmp_path)))}
    assert items["bob_222_3_ps1_sharding.py"].refused is None
    for n in ("alice_111_1_ps1_sharding.py", "alice_111_2_ps1_sharding.py"):
        assert "that student's own" in items[n].refused, items[n].refused
