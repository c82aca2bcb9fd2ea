"""An honest student never pays for the grader: no deadlock, no hang past a deadline.

The judge talks to the untrusted worker over two pipes. Requests go out without ever blocking
the judge, replies are taken off as they come, and every wait has a deadline, whatever the
worker does: never read its stdin, flood replies, or stop in the middle of a line
(tests/fixtures/workers/). A complete submission in one file (the four assignments, fifteen
functions) is graded in full.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import HANGS_IN_XLA

from autograder.course import registry
from autograder.isolation import sandbox as isolation
from autograder.judge import channel, grading

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration

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


def test_a_fault_said_after_the_handins_code_ran_is_not_believed(monkeypatch, tmp_path):
    """Only the worker's first record can say the sandbox lacks a module (the grader's fault,
    a regrade): one said after a statement of the hand-in ran may be the hand-in's own forgery,
    to turn its zero into a regrade, and is ignored (tests/test_devices.py shows the first
    record believed, through a real sandbox that cannot import IPython)."""
    monkeypatch.setattr(channel, "spawn_untrusted", _fake_spawner("unready_late"))
    sub = tmp_path / "answers.py"
    sub.write_text("")
    ex = channel.SandboxExporter(sub, isolated=False, load_s=30, functions=["roll_diff"])
    try:
        ex.start()
        assert ex.fault is None and ex.defined == []
    finally:
        ex.close()


def _many_requests(n: int):
    """``n`` requests (ids 0..n-1): far more than a pipe holds (each line is about 200 B)."""
    plan = grading.plan_for(registry.get("matmul_allgather"), seed=0)
    one = plan.all_requests()[0]
    return [dataclasses.replace(one, id=i) for i in range(n)]


# A worker that never reads or stops mid-line is idle: its bounds (the submit in under 5 s of
# what takes milliseconds, the answer within its 4 s limit) hold beside other tests, so it runs
# in the parallel phase, as does the silent worker below (12 and 3 s of the serial phase's
# wall-clock, spent waiting). The flooding one is measured alone: beside other tests it would
# write less in its 2 s than the allowance it must fill.
@pytest.mark.parametrize("fake, why", [
    ("never_reads", "time limit"),
    ("half_line", "time limit"),
    pytest.param("floods", "nobody asked for", marks=pytest.mark.serial),
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


def _counting_spawner(name: str, started: list):
    """:func:`_fake_spawner`, counting the workers it starts in ``started``."""
    spawn = _fake_spawner(name)

    def counted(*a, **kw):
        started.append(name)
        return spawn(*a, **kw)
    return counted


def _requests_of(functions: list[str]):
    """One request per function (ids 0, 1, ...)."""
    one = grading.plan_for(registry.get("matmul_allgather"), seed=0).all_requests()[0]
    return [dataclasses.replace(one, id=i, function=f) for i, f in enumerate(functions)]


def test_a_silent_worker_costs_two_limits_not_one_per_function(monkeypatch, tmp_path):
    """A worker that answers nothing, idle (here it never reads; a replaced sys.stdin or a
    signal handler does the same): the first missed deadline restarts it, the fresh one misses
    too, and the functions left fail at once, saying the worker stopped answering. Six
    functions cost two limits and two workers, not six of each."""
    started: list = []
    monkeypatch.setattr(channel, "spawn_untrusted", _counting_spawner("never_reads", started))
    names = [f"f{i}" for i in range(6)]
    sub = tmp_path / "answers.py"
    sub.write_text("")
    ex = channel.SandboxExporter(sub, isolated=False, load_s=30, functions=names)
    try:
        ex.start()
        ex.submit(_requests_of(names))  # every request ahead, as the judge sends them
        errors = [ex.export([r], timeout=1.5)[r.id].error for r in _requests_of(names)]
    finally:
        ex.close()
    assert ex.misses == 2 and len(started) == 2, (ex.misses, started)
    assert all("time limit" in e for e in errors[:2]), errors
    assert all(e.startswith("the worker stopped answering") for e in errors[2:]), errors


@pytest.mark.serial  # it reads the sandbox's CPU time over a wait
def test_hangs_that_compute_cost_only_their_own_functions(monkeypatch, tmp_path):
    """Two functions in a row that loop at trace time (computing, as an honest student's
    endless loop does) each cost their own limit, and the function after them is still asked
    and answered: only an idle worker is taken for one that stopped answering."""
    started: list = []
    monkeypatch.setattr(channel, "spawn_untrusted", _counting_spawner("busy_hangs", started))
    names = ["hang_a", "hang_b", "answers_c"]
    sub = tmp_path / "answers.py"
    sub.write_text("")
    ex = channel.SandboxExporter(sub, isolated=False, load_s=30, functions=names)
    try:
        ex.start()
        ex.submit(_requests_of(names))
        errors = [ex.export([r], timeout=1.5)[r.id].error for r in _requests_of(names)]
    finally:
        ex.close()
    assert ex.misses == 2 and len(started) == 3, (ex.misses, started)
    assert all("time limit" in e for e in errors[:2]), errors
    assert errors[2] == "no program here", errors


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
    lim = Limits(per_function_s=15, load_s=60, export_s=6)  # short, as a course may set them
    t0 = time.monotonic()
    res = grade_submission(sub, Options(assignment="ps3_collective_matmul", quick=True,
                                        with_speed=False, limits=lim,
                                        only=["matmul_allgather", "matmul_allreduce"]))
    assert time.monotonic() - t0 < 150
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
    worker, every request sent ahead (more than a pipe holds), full marks. The whole
    submission is the point (one judge and one worker for all fifteen), so nothing smaller
    would do; two meshes each (--quick) still send far more than a pipe holds."""
    sub = _complete_submission(tmp_path)
    p = subprocess.run([sys.executable, "-m", "autograder", "grade", str(sub), "--json",
                        "--quick"],
                       capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    import json

    res = json.loads(p.stdout)
    assert len(res["functions"]) == 15
    lost = {n: f["score"] for n, f in res["functions"].items() if f["score"] != f["max_score"]}
    assert not lost and res["score"] == res["max_score"] == 62, lost


# -- the whole tree dies with its parent ---------------------------------------------------------


def _parents() -> dict[int, int]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[int(d)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _tree(root: int) -> set[int]:
    """``root`` and every process below it."""
    parents = _parents()
    out, frontier = set(), {root}
    while frontier:
        out |= frontier
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pids) -> list[int]:
    """Those of ``pids`` still running (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(pid)
    return out


def _kill_mid_run(argv: list[str], sig: int, cwd: Path) -> tuple[subprocess.Popen, list[int]]:
    """Start ``argv``; once a sandboxed worker runs below it (and a few seconds more, for the
    judge to be running a program), send ``sig`` to the parent alone. Returns the process and
    what was left running 15 s later."""
    import signal

    # As from a terminal, whatever ran this suite: a shell without job control starts a
    # background job with SIGINT ignored, and that disposition would pass on to the grader
    # (a handler of this process's own is reset to the default in the child)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            tree = _tree(p.pid)
            if any("autograder.worker" in _cmdline(q) for q in tree):
                break
            assert p.poll() is None, "it finished before it could be stopped"
            time.sleep(0.2)
        else:
            raise AssertionError("no sandboxed worker started")
        time.sleep(10.0)
        tree = _tree(p.pid) - {p.pid}
        assert any("autograder.judge" in _cmdline(q) for q in tree)
        os.kill(p.pid, sig)
        p.wait(timeout=60)
        end = time.monotonic() + 15
        while _alive(tree) and time.monotonic() < end:
            time.sleep(0.2)
        return p, [f"{q}: {_cmdline(q)[:120]}" for q in _alive(tree)]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_grade_stopped_mid_run_leaves_no_process_behind(sig, tmp_path):
    sub = tmp_path / "ps1_sharding.py"
    sub.write_text(HANGS_IN_XLA)
    import signal

    _, left = _kill_mid_run([sys.executable, "-m", "autograder", "grade", str(sub)],
                            getattr(signal, sig), tmp_path)
    assert not left, left


def test_grade_all_killed_mid_run_leaves_no_process_and_resumes(tmp_path):
    import csv
    import signal

    cls = tmp_path / "handins"
    cls.mkdir()
    (cls / "ann_ps1_sharding.py").write_text(HANGS_IN_XLA)
    for student in ("bea", "cid"):
        (cls / f"{student}_ps1_sharding.py").write_text(
            (ROOT / "solutions" / "ps1_sharding.py").read_text())
    out = tmp_path / "out" / "course_grades.csv"
    # a short function limit, as a course would set it: ann's hang costs 25 s, not 150
    argv = [sys.executable, "-m", "autograder", "grade-all", str(cls), "--workers", "2",
            "--quick", "--no-speed", "--no-progress", "--out", str(out),
            "--function-timeout", "25"]
    _, left = _kill_mid_run(argv, signal.SIGKILL, tmp_path)
    assert not left, left
    argv[-1] = "8"  # the resumed run waits out ann's hang: a shorter limit does
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out) as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["student"] for r in rows) == ["ann", "bea", "cid"]
    total = {r["student"]: float(r["total"]) for r in rows}
    assert total["bea"] == total["cid"] == 10.0 and total["ann"] == 0.0, rows


# -- faults named by their owner -------------------------------------------------------------

#: put on the judge's PYTHONPATH: the grader's own structure check fails for one function (a
#: bug of the grader's, not of the student's code), in the judge process only (the sandbox
#: clears its environment)
FAULTY_GRADER = """
import os

if os.environ.get("AUTOGRADER_TEST_FAULT"):
    from autograder.course import checks

    _structure = checks.structure

    def structure(problem, attempts):
        if problem.name == os.environ["AUTOGRADER_TEST_FAULT"]:
            raise RuntimeError("an injected bug in the grader's structure check")
        return _structure(problem, attempts)

    checks.structure = structure
"""


def _in_every_judge(code: str, tmp_path, monkeypatch) -> None:
    """``code`` runs first in every Python process started from now on (a sitecustomize on
    PYTHONPATH): in the judge, never in the sandbox, which clears its environment."""
    site = tmp_path / "judge-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))


@pytest.fixture
def faulty_grader(tmp_path, monkeypatch):
    _in_every_judge(FAULTY_GRADER, tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOGRADER_TEST_FAULT", "shard_average_shard_map")


def test_a_grader_fault_is_a_regrade_never_a_zero(faulty_grader, tmp_path):
    from autograder.supervisor.options import Options
    from autograder.supervisor.supervise import grade_submission

    sub = tmp_path / "ps1_sharding.py"
    sub.write_text((ROOT / "solutions" / "ps1_sharding.py").read_text())
    res = grade_submission(sub, Options(assignment="ps1_sharding", quick=True,
                                        with_speed=False))
    assert res.regrade == ["shard_average_shard_map"]
    f = res.functions["shard_average_shard_map"]
    assert "injected bug" in f.regrade and "needs regrade" in f.report()
    assert not any(c.passed for c in f.checks)
    d = res.to_dict()
    assert d["needs_regrade"] == ["shard_average_shard_map"]
    assert "needs_regrade" in d["functions"]["shard_average_shard_map"]
    # the rest is graded as usual
    assert res.functions["roll_diff"].score == 4.0 and not res.functions["roll_diff"].regrade


def test_grade_all_marks_a_regrade_exits_nonzero_and_grades_it_next_time(faulty_grader,
                                                                        tmp_path, monkeypatch):
    import csv
    import json

    cls = tmp_path / "handins"
    cls.mkdir()
    (cls / "ann_ps1_sharding.py").write_text((ROOT / "solutions" / "ps1_sharding.py").read_text())
    out = tmp_path / "out" / "course_grades.csv"
    argv = [sys.executable, "-m", "autograder", "grade-all", str(cls), "--quick", "--no-speed",
            "--no-progress", "--out", str(out)]
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "needs regrade: ann/ps1_sharding: shard_average_shard_map" in p.stderr
    with open(out) as f:
        row = next(csv.DictReader(f))
    assert row["shard_average_shard_map"] == "needs regrade"
    assert row["needs_regrade"] == "shard_average_shard_map"
    assert float(row["roll_diff"]) == 4.0
    page = (out.parent / "class_report.html").read_text()
    assert "needs regrade (the grader failed, not the student)" in page
    # the grader mended: the next run grades that function alone, and all is well
    monkeypatch.delenv("AUTOGRADER_TEST_FAULT")
    p = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out) as f:
        row = next(csv.DictReader(f))
    assert float(row["total"]) == 10.0 and row["needs_regrade"] == "", row
    rep = json.loads((out.parent / "reports" / "ann" / "ps1_sharding.json").read_text())
    assert "needs_regrade" not in rep and rep["score"] == 10.0


#: put on the judge's PYTHONPATH: the judge dies (a crash in native code) while grading one
#: function. With a compile pool it dies in the grader's own work while a pool job works on the
#: submission's program (whose fault: no telling); with none (the function graded alone) it
#: dies in the grader's own work ("grader") or in the submission's ("student").
CRASHING_JUDGE = """
import os

if os.environ.get("AUTOGRADER_TEST_CRASH"):
    from autograder.judge import judging

    _grade = judging._grade

    def _grade_and_crash(programs, pool, res, **kwargs):
        names, owner = os.environ["AUTOGRADER_TEST_CRASH"].split(":")
        if programs.plan.problem.name in names.split(","):
            own = programs.ownership
            if pool.open:
                with own.pool_job(), own.grader_work("injected"):
                    os.abort()
            if owner == "grader":
                with own.grader_work("injected"):
                    os.abort()
            os.abort()
        return _grade(programs, pool, res, **kwargs)

    judging._grade = _grade_and_crash
"""


@pytest.fixture
def crashing_judge(tmp_path, monkeypatch):
    _in_every_judge(CRASHING_JUDGE, tmp_path, monkeypatch)

    def grade(owner, names=("shard_average_shard_map",), **limits):
        from autograder.supervisor.options import Limits, Options
        from autograder.supervisor.supervise import grade_submission

        monkeypatch.setenv("AUTOGRADER_TEST_CRASH", f"{','.join(names)}:{owner}")
        sub = tmp_path / "ps1_sharding.py"
        sub.write_text((ROOT / "solutions" / "ps1_sharding.py").read_text())
        return grade_submission(sub, Options(assignment="ps1_sharding", quick=True,
                                             with_speed=False, limits=Limits(**limits)))

    return grade


def test_a_crash_while_grader_and_submission_work_together_is_graded_again_alone(
        crashing_judge):
    """A crash while the grader's own work and a compile of the submission's program ran
    together has no single owner: the function is graded again with nothing overlapping,
    where the crash is the owner's of its moment. Here that is the student's program: a
    zero with the reason, not a regrade a crafted program could ask for every time."""
    res = crashing_judge("student")
    f = res.functions["shard_average_shard_map"]
    assert not f.regrade and f.score == 0
    assert "while grading this function" in f.checks[0].message
    assert res.functions["roll_diff"].score == 4.0  # the rest is graded as usual


def test_every_function_is_reached_however_many_crash_the_judge(crashing_judge):
    """Each function crashes the judge twice (beside a pool job, then alone): six restarts
    on a budget of one. A restart that settled a function does not count against it, so
    none is left "needs regrade" for the grader having given up."""
    names = ("shard_average_jit", "shard_average_shard_map", "roll_diff")
    res = crashing_judge("student", names, max_restarts=1)
    assert not res.regrade, res.report()
    for name in names:
        f = res.functions[name]
        assert f.score == 0 and "while grading this function" in f.checks[0].message, name


def test_a_crash_in_the_grader_s_own_work_alone_is_still_a_regrade(crashing_judge):
    res = crashing_judge("grader")
    assert res.regrade == ["shard_average_shard_map"]
    assert "the grader's own work on this function failed" in \
        res.functions["shard_average_shard_map"].regrade
    assert res.functions["roll_diff"].score == 4.0


def test_the_owner_is_both_while_a_pool_job_runs_beside_the_grader_s_work():
    """The judge says "both" exactly while the main thread does the grader's work and a pool
    thread reads or compiles the submission's programs; a pool job beside the student's own
    work is the student's."""
    import threading

    from autograder.judge.ownership import Owner, Ownership

    told = []
    own = Ownership(hook=told.append)
    started, release = threading.Event(), threading.Event()

    def pool_job():
        with own.pool_job():
            started.set()
            release.wait(30)

    with own.grader_work("the checks"):
        t = threading.Thread(target=pool_job)
        t.start()
        started.wait(30)
        assert own.now() is Owner.BOTH
        release.set()
        t.join(30)
        assert own.now() is Owner.GRADER
    assert own.now() is Owner.STUDENT
    with own.pool_job():
        assert own.now() is Owner.STUDENT
    assert told == [Owner.GRADER, Owner.BOTH, Owner.GRADER, Owner.STUDENT]


# -- the same verdicts under load ------------------------------------------------------------


def test_effective_time_slows_with_the_load_and_never_stops(monkeypatch):
    from autograder.core import clock

    c = clock.LoadClock(cpus=2)
    monkeypatch.setattr(clock, "runnable", lambda: 3)  # two others besides the sampler: idle
    assert c._sample() == 1.0
    monkeypatch.setattr(clock, "runnable", lambda: 7)  # six gradings on two cores
    assert c._sample() == pytest.approx(2 / 6)
    monkeypatch.setattr(clock, "runnable", lambda: 500)  # a fork bomb next door
    assert c._sample() == clock.MIN_RATE
    monkeypatch.setattr(clock, "runnable", lambda: None)  # no /proc/stat: wall-clock time
    assert c._sample() == 1.0


def test_a_processs_own_clock_reads_its_own_threads(monkeypatch):
    """The process's clock (the judge's limits on its own work, the worker's on a statement)
    counts what its own threads got of what they asked for, not the machine's run queue: a
    neighbour's 500 runnable processes change nothing while its threads get the CPU."""
    from autograder.core import clock

    assert clock.CLOCK.own and not clock.MACHINE_CLOCK.own
    t = iter([0.0, 0.25, 0.5])
    c = clock.LoadClock(cpus=2, own=True, monotonic=lambda: next(t))
    monkeypatch.setattr(clock, "runnable", lambda: 500)
    looks = iter([{1: (0.0, 0.0)}, {1: (0.2, 0.0), 2: (0.1, 0.0)}, {1: (0.3, 0.9)}])
    monkeypatch.setattr(clock, "thread_times", lambda tids: next(looks))
    assert c._sample() == 1.0  # the first look
    assert c._sample() == 1.0  # 0.3 s of CPU asked for and got in 0.25 s
    assert c._sample() == clock.MIN_RATE  # 0.1 s run, 0.9 s waited


def test_a_sandboxs_clock_counts_what_it_got_of_what_it_asked_for():
    """A sandbox's limits run on its own clock: stretched only while it got less of the CPU than
    it asked for (ran + waited on the run queue, at most the machine's cores), whatever its
    neighbours run; from readings of its control group and threads (here made up)."""
    from autograder.core import clock
    from autograder.core.clock import CpuReading, share_rate

    # (CPU seconds run, seconds waited on the run queue) over 1 s on 2 cores
    assert share_rate(1.0, 0.0, 1.0, 2) == 1.0  # one busy process alone
    assert share_rate(1.0, 0.02, 1.0, 2) > 0.97  # beside a 16-process hog, its fair share
    assert share_rate(1 / 3, 2 / 3, 1.0, 2) == pytest.approx(1 / 3)  # six gradings, 2 cores
    assert share_rate(2.0, 6.0, 1.0, 2) == 1.0  # 8 XLA threads alone: all 2 cores
    assert share_rate(1.0, 7.0, 1.0, 2) == pytest.approx(0.5)  # ... beside a hog: one core
    assert share_rate(0.01, 0.03, 1.0, 2) == 1.0  # waiting on its stdin: never stretched
    assert share_rate(0.02, 0.98, 1.0, 2) == clock.MIN_RATE  # starved: the floor

    t = [0.0]
    readings = iter([
        CpuReading("a", used_s=0.0, threads={1: (0.0, 0.0)}),
        CpuReading("a", used_s=0.5, threads={1: (0.5, 0.5)}),  # half of what it asked for
        CpuReading("b", used_s=0.9, threads={7: (0.9, 0.1)}),  # a fresh sandbox: from zero
        None,  # no sandbox: wall-clock time
        CpuReading("c", used_s=None, threads={3: (2.0, 0.0), 4: (1.0, 3.0)}),  # no group
    ])
    c = clock.ShareClock(lambda: next(readings), cpus=2, monotonic=lambda: t[0])
    deadline = c.deadline(1.0)
    assert c.now() == 0.0 and not deadline.expired()
    t[0] = 1.0
    assert c.asked_s() == pytest.approx(0.0)  # the first look at sandbox "a"
    t[0] = 2.0
    assert c.now() == pytest.approx(1.5) and c.rate() == pytest.approx(0.5)
    assert deadline.expired() and c.used_s == pytest.approx(0.5)
    t[0] = 3.0
    assert c.now() == pytest.approx(2.4) and c.waited_s == pytest.approx(0.6)
    t[0] = 4.0
    assert c.now() == pytest.approx(3.4)
    t[0] = 5.0  # its threads' own time: 3 s run, 3 s waited: 3 of 2 cores x 1 s asked for
    assert c.now() == pytest.approx(4.4) and c.used_s == pytest.approx(4.4)


def test_a_time_limit_ticks_safely_while_its_thread_reads_the_clock(monkeypatch):
    """A time limit's handler reads the clock wherever the signal lands, a read of the clock by
    the same thread included (grading code reads it all the time). On a busy machine the load
    sampler is slow (here 0.3 s a read): the limit must still end the work on time with its own
    timeout, not hang on the clock or stack handlers until Python's recursion limit (which
    once failed an honest student's speed check)."""
    import time

    from autograder.core import clock, errors

    def slow_load():
        time.sleep(0.3)
        return 1

    real = clock.thread_times

    def slow_threads(tids):
        time.sleep(0.3)
        return real(tids)

    monkeypatch.setattr(clock, "runnable", slow_load)  # the machine's clock
    monkeypatch.setattr(clock, "thread_times", slow_threads)  # the process's own
    t0 = time.monotonic()
    with pytest.raises(errors.GradingTimeout):
        with errors.time_limit(1.0):
            while True:
                clock.CLOCK.deadline(5.0).expired()
    assert time.monotonic() - t0 < 10


def test_a_recursion_error_in_the_grader_is_a_regrade_not_a_zero(monkeypatch):
    """No student Python runs in the trusted grader, so a Python recursion error there is the
    grader's (or JAX's) own: the function is marked for a regrade, never failed."""
    from autograder.core.loader import load
    from autograder.supervisor import local

    def recurses(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    from autograder.judge import measured

    monkeypatch.setattr(measured, "big_case_values", recurses)
    fn = load(ROOT / "solutions" / "ps1_sharding.py").function("shard_average_jit")
    with pytest.raises(grading.GraderFault, match="RecursionError"):
        local.grade_function(registry.get("shard_average_jit"), fn, quick=True,
                             with_speed=True, seed=3)


@pytest.mark.serial  # it loads the machine on purpose
def test_an_oversubscribed_class_gets_the_same_verdicts(tmp_path):
    """The same hand-ins graded with 2 and with 6 at once on this machine (2 cores here):
    every check of every function gets the same verdict. Six hand-ins, because the subject is
    a machine loaded by gradings beside each other (ps1, on two meshes)."""
    from autograder.classroom.batch import grade_all
    from autograder.supervisor.options import Options

    cls = tmp_path / "handins"
    cls.mkdir()
    sources = {"ann": ROOT / "solutions" / "ps1_sharding.py"}
    for f in ("alt_correct", "alt_correct_gather", "wrong_global_roll", "wrong_replicated",
              "wrong_no_shard_map"):
        sources[f.replace("_", "")] = ROOT / "tests" / "fixtures" / "ps1" / f"{f}.py"
    for student, src in sources.items():
        (cls / f"{student}_ps1_sharding.py").write_text(src.read_text())
    verdicts = {}
    for workers in (2, 6):
        # a cache of its own for each run: no verdict is reused from the other run; two
        # meshes (quick) and the speed check, whose model is what load could sway
        opts = Options(seed=7, quick=True, cache_dir=tmp_path / f"cache{workers}")
        outcomes = grade_all(cls, workers=workers, out=tmp_path / f"w{workers}" / "g.csv",
                             opts=opts, progress=False)
        verdicts[workers] = {
            (o.item.student, fn): [(c["name"], c["passed"]) for c in f["checks"]]
            for o in outcomes for fn, f in o.report["functions"].items()}
        assert not any(o.report.get("needs_regrade") for o in outcomes)
    assert verdicts[2] == verdicts[6]
    assert all(p for _, p in verdicts[6][("ann", "roll_diff")])
    assert not all(p for _, p in verdicts[6][("wrongglobalroll", "roll_diff")])


#: a hand-in's sandbox that runs 16 busy processes (it and its forks loop forever)
CPU_HOG = ("import os\nfor _ in range(15):\n    if os.fork() == 0:\n        break\n"
           "while True:\n    pass\n")


def _victim(monkeypatch, tmp_path) -> tuple[list, float]:
    """A classmate's worker: one function computed within its limit (about 0.6 s of a core),
    then one that computes forever and runs out of its 2 s limit: the errors, and the wall-clock
    seconds the second export took (its limit, then a fresh worker)."""
    monkeypatch.setattr(channel, "spawn_untrusted", _fake_spawner("computes"))
    sub = tmp_path / "answers.py"
    sub.write_text("")
    names = ["work_a", "hang_b"]
    ex = channel.SandboxExporter(sub, isolated=False, load_s=30, functions=names)
    try:
        ex.start()
        a, b = _requests_of(names)
        errors = [ex.export([a], timeout=4.0)[a.id].error]
        t0 = time.monotonic()
        errors.append(ex.export([b], timeout=2.0)[b.id].error)
        return errors, time.monotonic() - t0
    finally:
        ex.close()


@pytest.mark.serial  # it measures wall-clock time beside a busy sandbox
def test_a_busy_sandbox_changes_neither_a_classmates_verdict_nor_its_limits(monkeypatch,
                                                                            tmp_path):
    """Each sandbox has its own, equal share of the CPU (cgroup cpu controller) and its limits
    run on its own clock: beside a sandbox of 16 busy processes, a classmate's computation
    still ends within its limit, and its limit lasts what it lasts alone (within 20%), where a
    clock read off the machine's run queue stretched it 5x."""
    from autograder.core import clock
    from autograder.isolation import cgroup

    if cgroup.cpu_support() is None:
        pytest.skip(f"no fair share here: {cgroup.cpu_describe()}")
    if clock.cpu_count() < 2:
        pytest.skip("one core: the hog's fair share is half of it, whatever the grader does")
    alone, alone_s = _victim(monkeypatch, tmp_path)
    hog = isolation.spawn([sys.executable, "-c", CPU_HOG], binds=[], isolated=False,
                          env={"PATH": os.environ["PATH"]})
    try:
        assert hog.group is not None and hog.group.cpu_shared
        time.sleep(0.5)
        assert len(hog.members()) == 16
        beside, beside_s = _victim(monkeypatch, tmp_path)
        assert hog.group.usage_s() > 1.0  # it did keep the CPU busy meanwhile
    finally:
        hog.kill()
    assert beside[0] == alone[0] and beside[0].startswith("computed"), (alone, beside)
    assert "2 s time limit" in beside[1] and "stretched" not in beside[1], beside
    assert beside_s <= 1.2 * alone_s, (alone_s, beside_s)


# -- the sandbox's memory, for as long as it lives ------------------------------------------------

#: a correct ps1 answer whose first function, while it is traced, starts a thread that takes
#: gigabytes once the export has gone back (when nobody waits on the worker any more)
HOG = (ROOT / "solutions" / "ps1_sharding.py").read_text().replace(
    "def shard_average_jit(", '''def _hog():
    import time

    block = bytearray(3 << 30)
    time.sleep(120)
    return block


def shard_average_jit(''', 1).replace('''    ### BEGIN SOLUTION''', '''    import threading

    threading.Thread(target=_hog, daemon=True).start()
    ### BEGIN SOLUTION''', 1)


@pytest.mark.serial  # memory
def test_a_sandbox_that_takes_memory_late_is_stopped_and_told_why(tmp_path):
    from autograder.classroom.batch import grade_all
    from autograder.supervisor.options import Limits, Options

    assert "_hog" in HOG and "threading.Thread" in HOG
    cls = tmp_path / "handins"
    cls.mkdir()
    (cls / "hog_ps1_sharding.py").write_text(HOG)
    (cls / "ann_ps1_sharding.py").write_text((ROOT / "solutions" / "ps1_sharding.py").read_text())
    lim = Limits(student_memory_mb=1536)
    outcomes = grade_all(cls, workers=2, out=tmp_path / "out" / "g.csv", progress=False,
                         opts=Options(quick=True, with_speed=False, limits=lim))
    reports = {o.item.student: o.report for o in outcomes}
    assert reports["ann"]["score"] == 10.0 and "notes" not in reports["ann"], reports["ann"]
    # said where it was found: in a note, or in the function whose tracing it stopped (by the
    # kernel's bound or the watchdog, whichever sees it first)
    said = json.dumps(reports["hog"])
    assert "memory bound" in said or "MB of memory" in said, said


@pytest.mark.serial  # memory
def test_the_kernel_bounds_a_sandboxs_memory_where_the_machine_offers_it():
    from autograder.isolation import cgroup
    from autograder.isolation import sandbox as isolation

    if cgroup.support() is None:
        pytest.skip("no control group can be made here: the watchdog alone bounds memory")
    box = isolation.spawn([sys.executable, "-c", "b = bytearray(1 << 30); import time; "
                           "time.sleep(60)"], binds=[], env={"PATH": os.environ["PATH"]},
                          isolated=False, limits=isolation.SandboxLimits(memory_mb=256))
    try:
        assert box.proc.wait(timeout=60) != 0
        assert box.out_of_memory()
    finally:
        box.kill()


# -- what is graded is decided on the trusted side --------------------------------------------


def test_the_judge_decides_what_to_grade_from_the_source_not_the_worker(tmp_path):
    """A flat-folder file whose worker claims every graded function (its module code rewrites
    the list it reports) is graded on the assignment its source defines, and a file defining
    no graded function is graded on nothing, with a note."""
    from autograder.supervisor.options import Options
    from autograder.supervisor.supervise import grade_submission

    claims = tmp_path / "eve.py"
    claims.write_text((ROOT / "solutions" / "ps1_sharding.py").read_text() + '''

def _claim_everything(f):
    import sys

    worker = sys.modules.get("__main__")
    sys.modules["builtins"].sorted = lambda names, **kw: [
        "matmul_allgather", "moe_topk", "roll_diff", "shard_average_jit"]
    return f


@_claim_everything
def helper():
    pass
''')
    res = grade_submission(claims, Options(quick=True, with_speed=False))
    assert res.assignment == "ps1_sharding"
    assert sorted(res.functions) == ["roll_diff", "shard_average_jit", "shard_average_shard_map"]
    empty = tmp_path / "nobody.py"
    empty.write_text("x = 1\n")
    res = grade_submission(empty, Options(quick=True, with_speed=False))
    assert res.functions == {} and res.assignment is None
    assert any("cannot be told" in n for n in res.notes), res.notes


# -- grade-all reads only what it should ------------------------------------------------------


def test_grade_all_reads_only_regular_files_and_keeps_students_apart(tmp_path):
    """Links to a classmate's file or to the course's solutions, a link to /proc/kmsg beside a
    notebook, two files that map to one student, a name a spreadsheet would run: each is dealt
    with before anything is read, and classmates keep their grades."""
    import csv
    import threading

    from autograder.classroom.batch import grade_all
    from autograder.supervisor.options import Options

    solution = (ROOT / "solutions" / "ps1_sharding.py").read_text()
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "ann_ps1_sharding.py").write_text(solution)
    (flat / "mallory_ps1_sharding.py").symlink_to(flat / "ann_ps1_sharding.py")
    (flat / "bob_ps1_sharding.py").write_text(solution)
    (flat / "bob_ps1_sharding_.py").write_text("def roll_diff(A, shift, mesh):\n    return A\n")
    (flat / "=cmd_ps1_sharding.py").write_text(solution)
    done: dict = {}

    def run():
        done["out"] = grade_all(flat, workers=2, out=tmp_path / "f" / "g.csv", progress=False,
                                opts=Options(quick=True, with_speed=False))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout=600)
    assert "out" in done, "grade-all did not finish"
    by = {o.item.path.name: o.report for o in done["out"]}
    assert by["ann_ps1_sharding.py"]["score"] == 10.0
    assert "is a link" in by["mallory_ps1_sharding.py"]["refused"]  # the hand-in's, not ours
    for name in ("bob_ps1_sharding.py", "bob_ps1_sharding_.py"):
        err = by[name]["refused"]
        assert "two hand-ins" in err and "bob_ps1_sharding_.py" in err, err
    with open(tmp_path / "f" / "g.csv") as f:
        students = [r["student"] for r in csv.DictReader(f)]
    assert "'=cmd" in students and "=cmd" not in students

    course = tmp_path / "course" / "submitted"
    for student in ("cid", "dee", "eve"):
        (course / student / "ps1_sharding").mkdir(parents=True)
    (course / "cid" / "ps1_sharding" / "ps1_sharding.py").write_text(solution)
    (course / "cid" / "ps1_sharding" / "notes.txt").symlink_to("/proc/kmsg")
    (course / "dee" / "ps1_sharding" / "ps1_sharding.py").symlink_to(
        ROOT / "solutions" / "ps1_sharding.py")
    (course / "eve" / "ps1_sharding" / "ps1_sharding.py").symlink_to(
        course / "cid" / "ps1_sharding" / "ps1_sharding.py")
    th = threading.Thread(target=lambda: done.update(nb=grade_all(
        course.parent, workers=2, out=tmp_path / "n" / "g.csv", progress=False,
        opts=Options(quick=True, with_speed=False))), daemon=True)
    th.start()
    th.join(timeout=600)
    assert "nb" in done, "grade-all did not finish (a link to /proc/kmsg blocked it?)"
    by = {o.item.student: o.report for o in done["nb"]}
    assert by["cid"]["score"] == 10.0
    assert "is a link" in by["dee"]["refused"] and "is a link" in by["eve"]["refused"]
