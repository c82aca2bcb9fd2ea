"""collect-lms as docs/instructor.md runs it: a small fake LMS download (Canvas's flat files,
Moodle's zip of per-student folders) into submitted/<student>/<assignment>/, where nbgrader and
grade-all find each hand-in (discover only: nothing is graded)."""
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder.classroom.batch import discover, handed_in
from autograder.cli.main import main

pytestmark = pytest.mark.orchestration

ASG = "ps1_sharding"


def _notebook(tag: str) -> bytes:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"# {tag}\nx = 1")])
    return nbformat.writes(nb).encode()


def _course(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    course.mkdir()
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    return course


def _roster(tmp_path: Path, rows: str, header: str = "user_id,student") -> Path:
    p = tmp_path / "students.csv"
    p.write_text(header + "\n" + rows)
    return p


def _run(capsys, download, course, roster, *extra):
    rc = main(["collect-lms", str(download), "--assignment", ASG, "--roster", str(roster),
               "--course", str(course), *extra])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_a_canvas_download_lands_where_nbgrader_reads_it(tmp_path, capsys):
    course = _course(tmp_path)
    # nbgrader's own student CSV, as the README's nbgrader db student import reads it
    roster = _roster(tmp_path, "alice,111\nbob,222\ncleo,333\ndan,444\n", "id,lms_user_id")
    dl = tmp_path / "submissions"
    dl.mkdir()
    files = {
        "smithalice_111_9001_ps1_sharding.ipynb": _notebook("alice first"),
        "smithalice_111_9001_ps1_sharding-1.ipynb": _notebook("alice second"),
        "smithalice_111_9001_ps1_sharding-2.ipynb": _notebook("alice latest"),
        "smithalice_111_9001_helpers.py": b"def helper():\n    return 1\n",
        "smithalice_111_9001_timestamp.txt": b"2000-01-01 00:00:00 UTC\n",
        "jonesbob_LATE_222_9002_my_ps1.ipynb": _notebook("bob"),   # a renamed notebook, late
        # cleo's display name copies bob's ids: her name parses two ways, placed nowhere
        "cleo_222_9002_333_9003_ps1_sharding.ipynb": _notebook("cleo"),
    }
    for n, data in files.items():
        (dl / n).write_bytes(data)
    rc, said = _run(capsys, dl, course, roster)
    assert rc == 1, said  # cleo's file is refused
    sub = course / "submitted"
    alice = sub / "alice" / ASG
    assert sorted(p.name for p in alice.iterdir()) == ["helpers.py", f"{ASG}.ipynb"]
    assert "alice latest" in (alice / f"{ASG}.ipynb").read_text()
    assert "timestamp.txt" in said and "never taken from a hand-in" in said
    assert "bob" in (sub / "bob" / ASG / f"{ASG}.ipynb").read_text()
    assert not (sub / "cleo").exists()
    assert "parses two ways" in said and "id 222 (bob)" in said and "id 333 (cleo)" in said
    assert "Canvas marked late: bob" in said
    assert "handed in nothing (cleo, dan)" in said
    assert "no timestamp.txt written" in said
    # from here grade-all (and nbgrader) find each hand-in as its own, nothing refused
    items = {it.student: it for it in discover(course)}
    assert sorted(items) == ["alice", "bob"]
    for it in items.values():
        assert (it.assignment, it.refused, it.path.name) == (ASG, None, f"{ASG}.ipynb")
        assert handed_in(it)["timestamp_from"] == "file"  # no timestamp.txt: no time recorded


def test_a_moodle_zip_of_folders_and_the_display_name_attack(tmp_path, capsys):
    """Eve's display name 'Eve _5678' holds bob's participant id: her folder is hers (1234)."""
    course = _course(tmp_path)
    roster = _roster(tmp_path, "1234,eve\n5678,bob\n")
    z = tmp_path / "moodle.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("Eve _5678_1234_assignsubmission_file_/ps1_sharding.ipynb", _notebook("eve"))
        f.writestr("Bob Jones_5678_assignsubmission_file_/ps1_sharding.ipynb", _notebook("bob"))
        f.writestr("Bob Jones_5678_assignsubmission_file_/mlp.py", b"W = 1\n")
    rc, said = _run(capsys, z, course, roster)
    assert rc == 0, said
    sub = course / "submitted"
    assert "eve" in (sub / "eve" / ASG / f"{ASG}.ipynb").read_text()
    assert "bob" in (sub / "bob" / ASG / f"{ASG}.ipynb").read_text()
    assert (sub / "bob" / ASG / "mlp.py").read_text() == "W = 1\n"
    assert "read as moodle's layout" in said
    # a new download writes the folder afresh (what the LMS has now)
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("Bob Jones_5678_assignsubmission_file_/ps1_sharding.ipynb", _notebook("bob2"))
    rc, said = _run(capsys, z, course, roster, "--lms", "moodle")
    assert rc == 0, said
    assert sorted(p.name for p in (sub / "bob" / ASG).iterdir()) == [f"{ASG}.ipynb"]
    assert "bob2" in (sub / "bob" / ASG / f"{ASG}.ipynb").read_text()
    assert "handed in nothing (eve)" in said


def test_bad_input_is_said_before_anything_is_written(tmp_path, capsys):
    course = _course(tmp_path)
    roster = _roster(tmp_path, "111,alice\n")
    dl = tmp_path / "dl"
    dl.mkdir()
    (dl / "smithalice_111_9001_ps1_sharding.ipynb").write_bytes(_notebook("a"))
    (dl / "Bob_222_assignsubmission_file_ps1_sharding.ipynb").write_bytes(_notebook("b"))
    rc, said = _run(capsys, dl, course, roster)
    assert rc == 2 and "--lms" in said, said
    rc, said = _run(capsys, dl, tmp_path / "nowhere", roster)
    assert rc == 2 and "not an nbgrader course folder" in said
    rc = main(["collect-lms", str(dl), "--assignment", "ps9", "--roster", str(roster),
               "--course", str(course)])
    assert rc == 2 and "unknown assignment" in capsys.readouterr().err
    bad = _roster(tmp_path, "111,Smith/Alice\n")
    rc, said = _run(capsys, dl, course, bad, "--lms", "canvas")
    assert rc == 1 and "cannot be a folder of submitted/" in said
    assert not (course / "submitted").exists()
