"""The CLI contract: python -m autograder grade SUBMISSION [--assignment] [--json], exit 0."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, ROOT

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration


def run_cli(*args, timeout=400, env_extra=None):
    env = dict(os.environ, **(env_extra or {}))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True,
                       text=True, cwd=ROOT, env=env, timeout=timeout)
    return p, time.time() - t0


def test_reference_answers_full_marks_json():
    p, _ = run_cli("grade", str(ROOT / "solutions" / "ps1_sharding.py"), "--json", "--no-speed")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["assignment"] == "ps1_sharding"
    assert d["score"] == d["max_score"] == 10
    assert set(d["functions"]) == {"shard_average_jit", "shard_average_shard_map", "roll_diff"}
    for f in d["functions"].values():
        for c in f["checks"]:
            assert set(c) == {"name", "passed", "message"}
            assert c["name"] in {"numerics", "sharding", "structure", "memory", "speed"}


def test_syntax_error_is_graded_not_crashed():
    p, _ = run_cli("grade", str(FIXTURES / "ps1" / "syntax_error.py"), "--assignment",
                   "ps1_sharding", "--json", "--no-speed")
    assert p.returncode == 0
    d = json.loads(p.stdout)
    assert d["score"] == 0
    assert any("SyntaxError" in n for n in d["notes"])


def test_hang_on_import_is_bounded_and_keeps_other_definitions():
    p, took = run_cli("grade", str(FIXTURES / "ps1" / "hang_on_import.py"), "--assignment",
                      "ps1_sharding", "--json", "--no-speed", "--statement-timeout", "3")
    assert p.returncode == 0
    d = json.loads(p.stdout)
    assert any("ran for over" in n for n in d["notes"]), d["notes"]
    # the definition after the hanging statement still counts
    assert d["functions"]["shard_average_jit"]["score"] == 3
    assert took < 200


def test_worker_killed_by_time_limit_reports_every_function(tmp_path):
    from autograder.cli.main import grade_path

    sub = tmp_path / "ps1_sharding_sleepy.py"
    sub.write_text("import time\n\ndef roll_diff(A, shift, mesh):\n    time.sleep(600)\n")
    res = grade_path(sub, "ps1_sharding", quick=True, with_speed=False, timeout=12)
    assert res.score == 0
    msg = res.functions["roll_diff"].checks[0].message
    assert "stopped" in msg or "timed out" in msg, msg
    assert set(res.functions) == {"shard_average_jit", "shard_average_shard_map", "roll_diff"}


def test_notebook_submission(tmp_path):
    p, _ = run_cli("grade", str(ROOT / "source" / "ps1_sharding" / "ps1_sharding.ipynb"),
                   "--json", "--no-speed")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["score"] == 10


def test_missing_file_is_an_error_exit():
    p, _ = run_cli("grade", "/nonexistent/x.py")
    assert p.returncode != 0


def test_list_prints_the_bar_of_named_functions():
    from autograder.course import registry
    from autograder.course.bars import bar

    r, _ = run_cli("list", "moe_topk", "roll_diff")
    assert r.returncode == 0, r.stderr
    assert bar(registry.get("moe_topk")).text() in r.stdout
    assert bar(registry.get("roll_diff")).text() in r.stdout
    bad, _ = run_cli("list", "not_a_function")
    assert bad.returncode == 2 and "not_a_function" in bad.stderr


def test_grade_takes_a_students_own_folder_as_grade_all_does(tmp_path):
    """A hand-in importing a helper module beside it: in nbgrader's submitted/<student>/
    <assignment>/ layout (or with --with-folder) ``grade`` gives it the files of its folder, as
    grade-all does, so one student graded alone gets the class run's grade; a file in any other
    folder is graded alone (its neighbours may be other students')."""
    helper = (ROOT / "solutions" / "ps1_sharding.py").read_text()
    handin = "from my_helpers import roll_diff, shard_average_jit, shard_average_shard_map\n"
    own = tmp_path / "submitted" / "zoe" / "ps1_sharding"
    flat = tmp_path / "flat"
    for d in (own, flat):
        d.mkdir(parents=True)
        (d / "my_helpers.py").write_text(helper)
        (d / "ps1_sharding.py").write_text(handin)

    def score(path, *extra):
        p, _ = run_cli("grade", str(path), "--json", "--no-speed", "--quick", *extra)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)["score"]

    assert score(own / "ps1_sharding.py") == 10
    assert score(flat / "ps1_sharding.py") == 0
    assert score(flat / "ps1_sharding.py", "--with-folder") == 10


def test_seed_help_says_where_each_command_draws_its_inputs():
    """grade draws a fresh seed per run; grade-all in a course folder uses the folder's own
    (.autograder/seed, shared with nbgrader autograde), and its help says so."""
    from autograder.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "cmd")
    seed_help = {name: next(a.help for a in p._actions if a.dest == "seed")
                 for name, p in sub.choices.items() if name in ("grade", "grade-all")}
    assert ".autograder/seed" in seed_help["grade-all"]
    assert "flat folder" in seed_help["grade-all"]
    assert ".autograder/seed" not in seed_help["grade"]
    assert "fresh secret seed" in seed_help["grade"]
