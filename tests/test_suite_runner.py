"""tools/run_suite.py: its parallel phase keeps the tests that share one piece of work together,
and its phases share one class-wide cache, removed with them, and write bytecode once."""
import os

import pytest

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


@pytest.mark.parametrize("path", ["solutions/ps1_sharding.py"])
def test_tests_of_one_submission_share_one_worker(request, path):
    """Under ``--dist loadgroup`` a test parametrized with a submission carries that file's
    group in its node id (pytest-xdist schedules by it); a pytest whose node ids drop it would
    silently grade every fixture once per worker."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run by tools/run_suite.py's parallel phase (pytest-xdist, --dist loadgroup)")
    assert request.node.nodeid.endswith(f"@submission:{path}"), request.node.nodeid


@pytest.mark.parametrize("path", ["tests/fixtures/ps2_moe/wrong_a2a_gathers.py"])
def test_a_joined_submission_runs_on_the_worker_of_the_one_it_joins(request, path):
    """A submission of conftest.JOINED (its tests grade another submission too) is scheduled
    in that one's group, so neither is graded twice in a session."""
    from conftest import JOINED, ROOT

    assert path in JOINED and (ROOT / JOINED[path]).is_file()
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run by tools/run_suite.py's parallel phase (pytest-xdist, --dist loadgroup)")
    assert request.node.nodeid.endswith(f"@submission:{JOINED[path]}"), request.node.nodeid


def _runner():
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("run_suite", ROOT / "tools" / "run_suite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_busy_seconds_counts_the_tests_running_at_once():
    """Three tests on two workers: 0-10 s and 10-14 s on one, 2-8 s on the other."""
    run = _runner()
    cases = [run.Case(10.0, "a", "passed", 1.0, 100.0), run.Case(6.0, "b", "passed", 1.0, 102.0),
             run.Case(4.0, "c", "passed", 1.0, 110.0)]
    busy = run.busy_seconds(cases)
    assert busy == {1: 8.0, 2: 6.0}, busy


def test_unit_costs_sum_a_groups_tests_and_dispatch_the_dearest_first(tmp_path):
    """What --costs-file writes is what tests/conftest.py orders the dispatch by: a group's
    seconds summed under "@group", a test of no group under its own id."""
    import conftest

    run = _runner()
    cases = [run.Case(3.0, "t.py::a@g", "passed", 0.0, 0.0),
             run.Case(4.0, "t.py::b@g", "passed", 0.0, 0.0),
             run.Case(5.0, "t.py::c", "passed", 0.0, 0.0)]
    costs = run.unit_costs(cases)
    assert costs == [(7.0, "@g"), (5.0, "t.py::c")]
    table = tmp_path / "costs.tsv"
    table.write_text("# a comment\n" + "".join(f"{s}\t{u}\n" for s, u in costs))
    assert conftest.recorded_costs(table) == {"@g": 7.0, "t.py::c": 5.0}
    assert conftest.recorded_costs(tmp_path / "missing.tsv") == {}


def test_the_recorded_costs_name_units_this_suite_has():
    """tests/costs.tsv, as the last measured run wrote it, names groups the suite still makes
    (a renamed group would silently lose its place at the head of the dispatch)."""
    import conftest

    groups = [u for u in conftest.recorded_costs() if u.startswith("@")]
    assert "@test_nbgrader" in groups and any(u.startswith("@submission:") for u in groups)
    for unit in groups:
        if unit.startswith("@submission:"):
            assert (conftest.ROOT / unit.split(":", 1)[1]).is_file(), unit


def _top_level_names(tree) -> set[str]:
    import ast

    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_what_one_test_module_imports_from_another_is_there():
    """A test that imports a helper from another test module inside its body (the suite does,
    to share a fixture program or a process helper) finds the name there: a renamed helper
    fails here at once, not when that one test's turn comes after minutes of the suite."""
    import ast

    import conftest

    here = conftest.ROOT / "tests"
    trees = {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(here.glob("*.py"))}
    missing = []
    for stem, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in trees:
                have = _top_level_names(trees[node.module])
                missing += [f"tests/{stem}.py:{node.lineno} imports {a.name} from {node.module}"
                            for a in node.names if a.name != "*" and a.name not in have]
    assert len(trees) > 10 and not missing, missing


def test_a_session_removes_the_cache_it_made_and_keeps_the_one_it_was_given(tmp_path):
    """The session's class-wide cache (big cases alone are about 0.7 GB) goes with the session
    that made it; one named by $SUITE_CACHE_DIR (tools/run_suite.py's, for both its phases) is
    left to whoever named it."""
    import subprocess
    import sys

    from conftest import ROOT, SUITE_CACHE

    given = tmp_path / "given"
    given.mkdir()
    (given / "kept.npz").touch()
    for named in (None, given):
        env = {k: v for k, v in os.environ.items() if k != SUITE_CACHE}
        env["TMPDIR"] = str(tmp_path)
        if named is not None:
            env[SUITE_CACHE] = str(named)
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/test_suite_runner.py::test_busy_seconds_counts_the_tests_running_at_once"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
    assert not list(tmp_path.glob("autograder-cache-*")), "a session left its own cache behind"
    assert (given / "kept.npz").is_file(), "a session removed a cache it was given"


def test_the_phases_share_one_cache_and_write_bytecode(monkeypatch, tmp_path):
    """Both phases (and every process they start) read one class-wide cache and write the
    bytecode of what they import, even where the caller's environment says not to."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = _runner().phase_env(tmp_path)
    assert env["SUITE_CACHE_DIR"] == str(tmp_path)
    assert not env.get("PYTHONDONTWRITEBYTECODE")
    assert env["PATH"] == os.environ["PATH"]
