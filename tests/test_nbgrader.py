"""nbgrader end to end: a real course directory with a sqlite gradebook (tools/demo.py)."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo"
    p = subprocess.run([sys.executable, "tools/demo.py", "--dir", str(out), "ps1_sharding"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out, p.stdout


def _scores(out):
    """Scores straight from each student's gradebook (not from the demo's printed table)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import demo

    return {s: demo.scores(out / "grading" / f"{s}-ps1_sharding", s, ["ps1_sharding"])["ps1_sharding"]
            for s in ("ada", "ben", "cleo")}


def test_reference_full_untouched_zero_partial_in_between(demo):
    course, out = demo
    scores = _scores(course)
    assert json.loads((course / "grades.json").read_text())["cleo"]["ps1_sharding"][0] == \
        scores["cleo"][0]
    assert scores["ada"] == (10, 10), out
    assert scores["ben"][0] == 0, out
    assert 0 < scores["cleo"][0] < 10, out
    assert "ada" in out and "ps1_sharding" in out  # the grade table is printed


def test_feedback_is_readable_and_reveals_no_hidden_inputs(demo):
    course, _ = demo
    html = (course / "course" / "feedback" / "cleo" / "ps1_sharding" / "ps1_sharding.html").read_text()
    assert "FAIL" in html and "numerics" in html
    assert "structure" in html  # cleo's all-gather is named in her feedback
    assert "make_case" not in html and "default_rng" not in html
