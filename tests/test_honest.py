"""An honest student never pays for the grader: no deadlock, no hang past a deadline.

The judge talks to the untrusted worker over two pipes. Requests go out without ever blocking
the judge, replies are taken off as they come, and every wait has a deadline, whatever the
worker does: never read its stdin, flood replies, or stop in the middle of a line
(tests/fixtures/workers/). A complete submission in one file (the four assignments, fifteen
functions) is graded in full.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.course import registry
from autograder.isolation import sandbox as isolation
from autograder.judge import channel, grading

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "fixtures" / "workers"


def _fake_spawner(name: str):
    """A stand-in for spawn_untrusted that starts the fake worker ``name`` (unconfined: it is
    the package's own test code)."""
    def spawn(target, extra, *, isolated, log=None, limits=None, whole_folder=False):
        names = extra[extra.index("--functions") + 1]
        return isolation.spawn([sys.executable, str(WORKERS / f"{name}.py"), names], binds=[],
                               env={"PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1"},
                               isolated=False)
    return spawn


def _many_requests(n: int):
    """``n`` requests (ids 0..n-1): far more than a pipe holds (each line is about 200 B)."""
    plan = grading.plan_for(registry.get("matmul_allgather"), seed=0)
    one = plan.all_requests()[0]
    return [dataclasses.replace(one, id=i) for i in range(n)]


@pytest.mark.parametrize("fake, why", [
    ("never_reads", "time limit"),
    ("half_line", "time limit"),
    ("floods", "nobody asked for"),
])
def test_a_worker_that_misbehaves_never_blocks_the_judge(fake, why, monkeypatch, tmp_path):
    monkeypatch.setattr(channel, "spawn_untrusted", _fake_spawner(fake))
    monkeypatch.setattr(channel, "MAX_UNREAD", 16 << 20)
    sub = tmp_path / "answers.py"
    sub.write_text("")
    ex = channel.SandboxExporter(sub, isolated=False, load_s=30,
                                 functions=["matmul_allgather"])
    try:
        ex.start()
        assert ex.defined == ["matmul_allgather"]
        requests = _many_requests(4000)
        t0 = time.monotonic()
        ex.submit(requests)  # about 800 KB: a worker that does not read cannot block this
        assert time.monotonic() - t0 < 5
        time.sleep(2)  # the judge busy elsewhere: a flooding worker fills its allowance
        replies = ex.export(requests[:3], timeout=4)
        assert time.monotonic() - t0 < 40
        assert sorted(replies) == [0, 1, 2]
        for r in replies.values():
            assert r.artifact is None and why in r.error, r.error
    finally:
        ex.close()


def test_a_submission_that_stops_its_worker_reading_is_told_so(tmp_path):
    """A student's module-level code that leaves the worker unable to read its requests costs
    that submission its functions (with the reason), within the limits: no hang."""
    from autograder.supervisor.options import Limits, Options
    from autograder.supervisor.supervise import grade_submission

    sub = tmp_path / "ps3_collective_matmul.py"
    # a decorator runs while the definitions load: it leaves the worker a stdin that blocks
    blocker = '''
def _never_read(f):
    import sys
    import time

    class Never:
        def __iter__(self):
            return self

        def __next__(self):
            time.sleep(3600)

    sys.stdin = Never()
    return f


'''
    answers = (ROOT / "solutions" / "ps3_collective_matmul.py").read_text()
    sub.write_text(answers.replace("def matmul_allgather(",
                                   blocker + "@_never_read\ndef matmul_allgather("))
    lim = Limits(per_function_s=40, load_s=60, export_s=20)
    t0 = time.monotonic()
    res = grade_submission(sub, Options(assignment="ps3_collective_matmul", quick=True,
                                        with_speed=False, limits=lim,
                                        only=["matmul_allgather", "matmul_allreduce"]))
    assert time.monotonic() - t0 < 200
    for name in ("matmul_allgather", "matmul_allreduce"):
        f = res.functions[name]
        assert f.score == 0.0
        assert "time limit for tracing and exporting" in f.checks[0].message, f.report()


def _complete_submission(tmp_path: Path) -> Path:
    """The fifteen reference answers in one .py file, as a student might hand them in."""
    parts = [(ROOT / "solutions" / f"{a}.py").read_text() for a in registry.assignments()]
    path = tmp_path / "answers.py"
    path.write_text("\n\n".join(parts))
    return path


def test_a_complete_submission_in_one_file_gets_full_marks(tmp_path):
    """One file holding all four assignments: every function graded by one judge and one
    worker, every request sent ahead (more than a pipe holds), full marks."""
    sub = _complete_submission(tmp_path)
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", str(sub), "--json"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    import json

    res = json.loads(p.stdout)
    assert len(res["functions"]) == 15
    lost = {n: f["score"] for n, f in res["functions"].items() if f["score"] != f["max_score"]}
    assert not lost and res["score"] == res["max_score"] == 62, lost
