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


def test_nbgrader_s_own_student_csv_is_a_roster(tmp_path):
    """nbgrader db student import reads id (the student) and lms_user_id: one file for both."""
    r = rosters.read(_roster(tmp_path, "id,first_name,lms_user_id\nalice,Alice,111\n"
                                       "bob,Bob,222\n"))
    assert r.students == {"111": "alice", "222": "bob"}
    with pytest.raises(rosters.RosterError, match="not a number"):
        rosters.read(_roster(tmp_path, "id,lms_user_id\nalice,\n"))


def test_a_bad_roster_stops_grade_all_before_grading(tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    bad = _roster(tmp_path, "id,student\n111,alice\n111,bob\n")
    assert main(["grade-all", str(tmp_path / "flat"), "--roster", str(bad),
                 "--out", str(tmp_path / "g.csv")]) == 2
    assert "there twice" in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists()


def test_each_layout_is_read_at_the_lms_s_own_places():
    def one(name, lms):
        r = rosters.read_name(name, lms)
        return (r.lms_id, r.file_name, r.late, r.submission_id)

    # Canvas: <sortable name>[_LATE]_<user id>_<submission id>_<file name>
    assert one("smithalice_111_9876_ps1_sharding.ipynb", "canvas") == \
        ("111", "ps1_sharding.ipynb", False, "9876")
    assert one("smithalice_LATE_111_9876_ps1_sharding-1.ipynb", "canvas") == \
        ("111", "ps1_sharding-1.ipynb", True, "9876")
    assert one("smithalice_111_9876_my_ps1_v2.ipynb", "canvas")[:2] == ("111", "my_ps1_v2.ipynb")
    # Moodle: <display name>_<participant id>_assignsubmission_file_<file name>
    assert one("Alice Smith_1234_assignsubmission_file_ps1_sharding.ipynb", "moodle")[:2] == \
        ("1234", "ps1_sharding.ipynb")
    assert one("Alice Smith_1234_assignsubmission_file_helpers_2.py", "moodle")[:2] == \
        ("1234", "helpers_2.py")
    # a folder of Moodle's "download submissions in folders"
    assert one("Alice Smith_1234_assignsubmission_file_", "moodle")[:2] == ("1234", "")
    for name, lms in [("alice_ps1_sharding.ipynb", "canvas"), ("alice_111_ps1.ipynb", "canvas"),
                      ("smithalice_111_9876_ps1.ipynb", "moodle"),
                      ("Alice_1234_assignsubmission_onlinetext_x.html", "moodle")]:
        with pytest.raises(rosters.LmsNameError, match="is not named as"):
            rosters.read_name(name, lms)


def test_a_display_name_with_digits_takes_no_classmates_id(tmp_path):
    """Moodle: the participant id is the number just before _assignsubmission_file_, so eve's
    display name 'Eve _5678' (bob's id) is not read; her file is hers (1234), bob's his."""
    roster = rosters.read(_roster(tmp_path, "id,student\n1234,eve\n5678,bob\n"))
    eve = "Eve _5678_1234_assignsubmission_file_ps1_sharding.ipynb"
    bob = "Bob Jones_5678_assignsubmission_file_ps1_sharding.ipynb"
    assert rosters.read_name(eve, "moodle", roster).lms_id == "1234"
    # the folder is Moodle's (eve's name alone also fits Canvas, reading 5678: not chosen)
    assert rosters.readings(eve, "canvas")[0].lms_id == "5678"
    assert rosters.detect([eve, bob]) == "moodle"
    flat = _flat(tmp_path, [eve, bob])
    items = {it.path.name: it for it in discover(flat, roster=roster)}
    assert (items[eve].student, items[eve].refused) == ("eve", None)
    assert (items[bob].student, items[bob].refused) == ("bob", None)
    assert items[eve].assignment == "ps1_sharding"


@pytest.mark.parametrize("lms, name, ids", [
    # a Moodle display name carrying the whole LMS part of bob's names
    ("moodle", "Eve_5678_assignsubmission_file_x_1234_assignsubmission_file_ps1_sharding.ipynb",
     ("5678", "1234")),
    # a Canvas name (or the student's own file name) with two more numbers in a row
    ("canvas", "eve_1234_9001_5678_9002_ps1_sharding.ipynb", ("1234", "5678")),
])
def test_a_name_that_parses_two_ways_is_refused_naming_both(tmp_path, lms, name, ids):
    roster = rosters.read(_roster(tmp_path, "id,student\n1234,eve\n5678,bob\n"))
    with pytest.raises(rosters.LmsNameError, match="parses two ways") as e:
        rosters.read_name(name, lms, roster)
    for i in ids:
        assert f"id {i} ({roster.student(i)})" in str(e.value), str(e.value)
    student, why = rosters.place(name, roster, lms)
    assert student is None and "parses two ways" in why


def test_numbers_no_roster_lists_make_no_second_reading(tmp_path):
    """A file name's own digits (a date) are not a second reading when the roster lists no
    such id: an honest name is not refused for them."""
    roster = rosters.read(_roster(tmp_path))
    name = "smithalice_111_9876_2026_11_ps1_sharding.ipynb"
    assert len(rosters.readings(name, "canvas")) == 3
    assert rosters.read_name(name, "canvas", roster).file_name == "2026_11_ps1_sharding.ipynb"


def test_a_folder_of_two_layouts_asks_which(tmp_path):
    names = ["smithalice_111_9876_ps1_sharding.py",
             "Bob Jones_222_assignsubmission_file_ps1_sharding.py"]
    assert rosters.detect(names) is None
    flat = _flat(tmp_path, names)
    roster = rosters.read(_roster(tmp_path))
    for it in discover(flat, roster=roster):
        assert it.student != "alice" and it.student != "bob"
        assert "--lms" in it.refused, it.refused
    import dataclasses

    placed = {it.path.name: it for it in discover(flat, roster=dataclasses.replace(
        roster, lms="canvas"))}
    assert placed[names[0]].student == "alice" and placed[names[0]].refused is None
    assert "is not named as canvas" in placed[names[1]].refused


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
    assert "is not named as canvas" in items["mallory_ps1_sharding.py"].refused
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
