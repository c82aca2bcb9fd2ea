"""Warm trusted graders (``JudgePool``): one judge takes submission after submission, and its
verdicts are a fresh judge's; a judge that was stopped, or has had its share, is never given
another; a change of options or environment gets a judge of its own."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import HANGS_IN_XLA

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration

ROOT = Path(__file__).resolve().parent.parent


def _opts(**kw):
    from autograder.supervisor.options import Limits, Options

    limits = kw.pop("limits", {})
    return Options(assignment="ps1_sharding", quick=True, with_speed=False, seed=11,
                   cache_dir=None, limits=Limits(**limits), **kw)


def _verdicts(res) -> dict:
    return {(n, c.name): (c.passed, c.message) for n, f in res.functions.items()
            for c in f.checks}


def _hand_in(tmp_path: Path, name: str, src: Path) -> Path:
    d = tmp_path / name
    d.mkdir()
    sub = d / "ps1_sharding.py"
    sub.write_text(src.read_text())
    return sub


@pytest.fixture
def pool():
    from autograder.supervisor.supervise import JUDGES

    JUDGES.close()  # no judge warmed by another test
    yield JUDGES
    JUDGES.close()


def test_a_warm_judge_grades_the_next_submission_as_a_fresh_one_would(pool, tmp_path):
    from autograder.supervisor.supervise import grade_submission

    right = _hand_in(tmp_path, "a", ROOT / "solutions" / "ps1_sharding.py")
    wrong = _hand_in(tmp_path, "b", ROOT / "tests" / "fixtures" / "ps1" / "wrong_slicing.py")
    before = pool.started
    warm = [grade_submission(s, _opts()) for s in (right, wrong, right)]
    assert pool.started == before + 1, "each submission started a judge of its own"
    kept = pool.pids()
    assert len(kept) == 1
    fresh = [grade_submission(s, _opts(limits={"judge_jobs": 1})) for s in (right, wrong)]
    assert pool.started == before + 3 and pool.pids() == kept, "judge_jobs=1 kept a judge"
    assert warm[0].score == warm[0].max_score and warm[1].score < warm[1].max_score
    assert _verdicts(warm[0]) == _verdicts(fresh[0]) == _verdicts(warm[2])
    assert _verdicts(warm[1]) == _verdicts(fresh[1])


def test_a_judge_stopped_on_a_hang_is_never_given_another_submission(pool, tmp_path):
    from autograder.supervisor.supervise import grade_submission

    hangs = tmp_path / "h" / "ps1_sharding.py"
    hangs.parent.mkdir()
    hangs.write_text(HANGS_IN_XLA)
    right = _hand_in(tmp_path, "a", ROOT / "solutions" / "ps1_sharding.py")
    before = pool.started
    lim = {"per_function_s": 5.0}  # short, as a course may set it: the hang costs that
    res = grade_submission(hangs, _opts(only=["shard_average_jit"], limits=lim))
    f = res.functions["shard_average_jit"]
    assert f.score == 0 and not f.regrade, f.report()
    assert not pool.pids(), "the judge that ran the endless program was kept"
    res = grade_submission(right, _opts(only=["shard_average_jit"], limits=lim))
    assert res.score == res.max_score, res.report()
    assert pool.started == before + 2


def test_other_options_or_environment_get_a_judge_of_their_own(pool, tmp_path, monkeypatch):
    from autograder.supervisor.supervise import grade_submission

    right = _hand_in(tmp_path, "a", ROOT / "solutions" / "ps1_sharding.py")
    only = {"only": ["shard_average_shard_map"]}
    before = pool.started
    grade_submission(right, _opts(**only))
    grade_submission(right, _opts(**only))
    assert pool.started == before + 1
    grade_submission(right, _opts(**only, limits={"statement_s": 30.0}))
    assert pool.started == before + 2
    monkeypatch.setenv("AUTOGRADER_POOL_TEST", "1")  # a judge sees the environment it began in
    grade_submission(right, _opts(**only))
    assert pool.started == before + 3
    assert len(pool.pids()) <= pool.most_idle


def test_a_judge_is_given_again_only_to_the_thread_that_started_it(pool, tmp_path):
    """A judge dies with the thread that started it (the parent-death signal is a thread's):
    another thread's submission never gets it, so it cannot die under that submission."""
    import threading

    from autograder.supervisor.supervise import grade_submission

    right = _hand_in(tmp_path, "a", ROOT / "solutions" / "ps1_sharding.py")
    opts = _opts(only=["shard_average_shard_map"])
    t = threading.Thread(target=grade_submission, args=(right, opts))
    t.start()
    t.join()
    before = pool.started
    res = grade_submission(right, opts)
    assert pool.started == before + 1 and res.score == res.max_score, res.report()


def test_the_judge_grades_with_the_options_the_supervisor_sent(pool, tmp_path):
    """The judge's limits come from the options record on its stdin, not from defaults of its
    own: a hand-in that sleeps while loading is stopped at the course's 4 s, not at the default
    120 s (nor skipped at the default statement limit, 20 s)."""
    import time

    from autograder.supervisor.supervise import grade_submission

    sleeps = tmp_path / "s" / "ps1_sharding.py"
    sleeps.parent.mkdir()
    sleeps.write_text("import time\n_x = time.sleep(600)\n"
                      "def shard_average_jit(x, mesh):\n    return _x\n")
    t0 = time.monotonic()
    res = grade_submission(sleeps, _opts(only=["shard_average_jit"], limits={"load_s": 4.0}))
    assert any("ran past the 4 s limit for loading" in n for n in res.notes), res.report()
    assert time.monotonic() - t0 < 60


def test_a_serving_judge_takes_its_options_from_its_stdin_alone():
    """``--serve`` refuses a flag, and an options record with a field missing or unknown,
    naming it, before it imports JAX or grades anything."""
    import json
    import subprocess
    import sys

    from autograder.core.records import Job

    def judge(*flags, stdin=""):
        return subprocess.run([sys.executable, "-m", "autograder.judge", "--serve", *flags],
                              input=stdin, capture_output=True, text=True, timeout=60)

    p = judge("--load-timeout", "4")  # a flag of the old command line: none of the judge's
    assert p.returncode == 2 and "unrecognized arguments: --load-timeout" in p.stderr
    p = judge("--seed", "3")
    assert p.returncode == 2 and "--serve takes its options from its stdin" in p.stderr
    told = _opts().judge_options().to_dict()
    del told["limits"]["load_s"]
    p = judge(stdin=json.dumps(told) + "\n")
    assert p.returncode == 2 and "Limits: missing field(s) ['load_s']" in p.stderr, p.stderr
    job = Job(submission="x.py", cwd=".", grader_log="g.log", log="s.log")
    p = judge(stdin=job.to_line())  # a job before its options
    assert p.returncode == 2 and "unexpected record type 'job'" in p.stderr, p.stderr


def test_a_judge_imports_this_very_package(tmp_path, monkeypatch):
    """A judge is ``python -m autograder.judge``, started in a work folder: it must import the
    package its supervisor runs. From a checkout that was never installed (``python -m
    autograder grade`` in its root, as on a lent GPU host) it found none, and every function
    was "could not start grading"; with another copy earlier on ``PYTHONPATH`` it would grade
    with that copy. Here a stand-in ``autograder`` on ``PYTHONPATH`` plays the other copy."""
    import os
    import subprocess
    import sys

    import autograder
    from autograder.supervisor import supervise

    other = tmp_path / "other" / "autograder"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(other.parent))
    env = supervise.judge_env()
    p = subprocess.run([sys.executable, "-c", "import autograder; print(autograder.__file__)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert Path(p.stdout.strip()) == Path(autograder.__file__), (p.stdout, env["PYTHONPATH"])
    assert str(other.parent) in env["PYTHONPATH"].split(os.pathsep)  # kept, after ours


def test_an_installed_package_leaves_the_path_alone(monkeypatch):
    """Installed, the package's folder is a site-packages folder every Python of the
    installation reads: it is not put on PYTHONPATH, where it would precede the standard
    library (a site-packages module named like a standard one would shadow it in the judge)."""
    import site

    from autograder.supervisor import platform

    sites = site.getsitepackages()
    monkeypatch.setattr(platform, "PACKAGE_PARENT", str(Path(sites[0]).resolve()))
    env = {"PYTHONPATH": "/somewhere", "X": "1"}
    assert platform.with_package(env) == env


def test_a_judge_that_exits_is_not_blamed_on_the_submission():
    """The judge never runs the hand-in's code: its plain exit is the grader's error."""
    from autograder.isolation.sandbox import describe_exit

    assert "in the submission?" in describe_exit(1)
    judge = describe_exit(1, runs_submission=False)
    assert "grader" in judge and "submission?" not in judge
    assert describe_exit(134, runs_submission=False) == describe_exit(134)  # a signal: either
