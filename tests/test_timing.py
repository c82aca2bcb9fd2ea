"""Where a grading's seconds go (autograder/judge/timing.py, read by benchmarks/bench_submission.py):
each phase's wall-clock, its own thread's CPU and its process's CPU, and the CPU of the
processes a grader started, counted until the next reset."""
import json

import pytest

from autograder.judge import timing

pytestmark = pytest.mark.orchestration


def _spin(seconds: float) -> None:
    import time

    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_phase_counts_its_wall_clock_its_own_cpu_and_its_process_cpu(monkeypatch, tmp_path):
    timing.reset()
    with timing.phase("busy"):
        _spin(0.05)
    with timing.phase("idle"):
        import time

        time.sleep(0.05)
    wall, own, every = timing.totals(), timing.own_totals(), timing.cpu_totals()
    assert own["busy"] >= 0.04 and every["busy"] >= own["busy"] - 0.01
    assert wall["idle"] >= 0.04 and own["idle"] < 0.02
    timing.add_process("sandbox", 1.5)
    timing.add_process("sandbox", 0.5)
    used = timing.processes()
    assert used["sandbox"] == 2.0 and used["self"] >= 0.04 and "children" in used
    trace = tmp_path / "timings.jsonl"
    monkeypatch.setenv("AUTOGRADER_TIMINGS", str(trace))
    timing.write("ps1_sharding")
    rec = json.loads(trace.read_text())
    assert rec["label"] == "ps1_sharding" and rec["processes"]["sandbox"] == 2.0
    assert set(rec["phases"]) == set(rec["cpu"]) == set(rec["own cpu"]) == {"busy", "idle"}
    timing.reset()
    assert timing.totals() == {} and "sandbox" not in timing.processes()
    assert timing.processes()["self"] < 0.04  # counted afresh from the reset


def test_a_jobs_record_is_written_when_it_is_done(monkeypatch, tmp_path):
    """The judge's record of one job, written by the callback the job calls before its last
    record (the supervisor may end the judge right after it), with the job's grading phase."""
    trace = tmp_path / "timings.jsonl"
    monkeypatch.setenv("AUTOGRADER_TIMINGS", str(trace))
    timing.reset()
    done = timing.job_record("ps2_moe")
    assert not trace.exists()
    _spin(0.03)
    done()
    rec = json.loads(trace.read_text())
    assert rec["label"] == "ps2_moe" and rec["phases"]["grading"] >= 0.03
    assert rec["own cpu"]["grading"] >= 0.02


def test_the_benchs_medians_are_of_each_runs_own_ratio(capsys, monkeypatch):
    """``bench_submission.py --runs N`` ends with each row's median over the runs: the median
    time, the median floor, and the middle of the runs' ratios (each of one run's two
    figures), which the ratio of the two medians is not; beside it, the middle of the ratios
    each run's CPU seconds would give with every core busy."""
    from benchmarks import bench_submission
    from benchmarks.bench_submission import print_medians

    monkeypatch.setattr(bench_submission, "CORES", 2)
    # ratios 5.0, 1.0, 2.0: their median is 2.0, where the medians' ratio is 12 / 10 = 1.2;
    # every core busy: 16 / 2 / 2 = 4.0, 12 / 2 / 12 = 0.5, 30 / 2 / 10 = 1.5, median 1.5
    print_medians({"ps2_moe": [(10.0, 2.0, 16.0), (12.0, 12.0, 12.0), (20.0, 10.0, 30.0)],
                   "complete submission": [(30.0, 20.0, 50.0), (28.0, 20.0, 48.0),
                                           (33.0, 20.0, 60.0)]})
    out = capsys.readouterr().out
    assert "median of 3 runs" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "12.0 s" in rows["ps2_moe"] and "floor  10.0 s" in rows["ps2_moe"]
    assert "2.00x  (runs: 5.00x, 1.00x, 2.00x; every core busy: 1.50x)" in rows["ps2_moe"], \
        rows["ps2_moe"]
    assert "1.50x" in rows["complete"] and "every core busy: 1.25x" in rows["complete"], \
        rows["complete"]


def test_every_core_busy_is_the_cpu_over_the_cores(monkeypatch):
    """The least time a grading's CPU seconds can take on this machine: spread over all of its
    cores (a schedule cannot beat it; the bench prints it beside the measured time)."""
    from benchmarks import bench_submission

    monkeypatch.setattr(bench_submission, "CORES", 2)
    assert bench_submission.busy_bound(41.0) == 20.5
    monkeypatch.setattr(bench_submission, "CORES", 16)
    assert bench_submission.busy_bound(41.0) == 41.0 / 16
