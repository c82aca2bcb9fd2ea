"""grade-all on a real Dask cluster: a scheduler and two workers, separate processes on loopback.

The same small class is graded locally and on the cluster with the same seed: every verdict,
score and CSV row must agree; the reports are signed by this process and a second cluster run
reuses them all. A worker killed while it grades loses nothing: the task is graded again on the
other worker. A class, not one function: the subject is the cluster's scheduling and the
reports it signs; one small class graded once serves every test.
"""
import csv
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration

distributed = pytest.importorskip("distributed")

from autograder.classroom import batch, cluster  # noqa: E402
from autograder.core import identity  # noqa: E402
from autograder.core.results import shown  # noqa: E402
from autograder.supervisor.options import Limits, Options  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = (ROOT / "solutions" / "ps1_sharding.py").read_text()
SEED = 20240917
FULL = {"shard_average_jit": 3.0, "shard_average_shard_map": 3.0, "roll_diff": 4.0}


def _opts(per_function_s: float = 40, **kw):
    return Options(quick=True, with_speed=False, seed=SEED,
                   limits=Limits(per_function_s=per_function_s, load_s=60), **kw)


def _broken() -> str:
    """The reference answers, broken: a wrong mean, a global-view 'shard_map', a wrong roll."""
    src = SOLUTION.replace("return blocks.mean(axis=1)", "return blocks.sum(axis=1)")
    src = src.replace("jnp.roll(block, shift, axis=0)", "jnp.roll(block, shift + 1, axis=0)")
    start = src.index("def shard_average_shard_map(")
    end = src.index("def roll_diff(")
    return src[:start] + (
        "def shard_average_shard_map(A, mesh):\n"
        "    x = mesh.shape['X']\n"
        "    return A.reshape(x, A.shape[0] // x, A.shape[1]).mean(axis=1)\n\n\n") + src[end:]


def _write(root: Path, student: str, files: dict) -> None:
    d = root / "submitted" / student / "ps1_sharding"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


def make_class(root: Path) -> Path:
    _write(root, "alice", {"ps1_sharding.py": SOLUTION})
    _write(root, "bob", {"ps1_sharding.py": _broken()})
    # carol's answer imports a helper module of her own folder: it crosses with the task
    helper = SOLUTION.split("def shard_average_shard_map(")[0]
    _write(root, "carol", {"helpers.py": helper, ".hidden-notes": "not sent",
                           "ps1_sharding.py": SOLUTION.split("def shard_average_jit(")[0]
                           + "from helpers import shard_average_jit\n\n\n"
                           + "def shard_average_shard_map(" + SOLUTION.split(
                               "def shard_average_shard_map(")[1]})
    return root


EXPECTED = {"alice": FULL, "carol": FULL,
            # a global-view "shard_map": the numbers, not the structure
            "bob": {"shard_average_jit": 0.0, "shard_average_shard_map": 2.2941, "roll_diff": 0.0}}


# -- processes ----------------------------------------------------------------------------------


def _children() -> dict:
    kids: dict = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _tree(pid: int) -> set:
    kids, out, todo = _children(), set(), [pid]
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(kids.get(p, []))
    return out


def kill_tree(pid: int) -> None:
    """``pid`` and every process below it: frozen first (none escapes by forking), then
    killed, like a machine that dies."""
    stopped: set = set()
    for _ in range(10):
        new = _tree(pid) - stopped
        if not new:
            break
        for p in new:
            try:
                os.kill(p, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        stopped |= new
    for p in stopped:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _dask(which: str) -> list:
    exe = Path(sys.executable).with_name("dask")
    if exe.exists():
        return [str(exe), which]
    if shutil.which("dask"):
        return [shutil.which("dask"), which]
    return [sys.executable, "-m", f"distributed.cli.dask_{which}"]


class Cluster:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list = []
        self.workers: list = []
        self.file = tmp / "scheduler.json"

    def _start(self, cmd, name, **env) -> subprocess.Popen:
        full = dict(os.environ, JAX_NUM_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3",
                    PYTHONPATH=str(ROOT), **env)
        log = open(self.tmp / f"{name}.log", "wb")
        p = subprocess.Popen(cmd, env=full, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def start(self, n_workers: int = 2) -> None:
        self._start(_dask("scheduler") + ["--host", "127.0.0.1", "--port", "0",
                                          "--scheduler-file", str(self.file), "--no-dashboard"],
                    "scheduler")
        t0 = time.monotonic()
        while not self.file.exists():
            assert time.monotonic() - t0 < 60, (self.tmp / "scheduler.log").read_text()
            time.sleep(0.2)
        for i in range(n_workers):
            cache = self.tmp / f"worker-cache-{i}"  # each "machine" its own class-wide cache
            scratch = self.tmp / f"worker-tmp-{i}"  # what a killed worker leaves, cleaned up
            scratch.mkdir()
            self.workers.append(self._start(
                _dask("worker") + ["--scheduler-file", str(self.file), "--nworkers", "1",
                                   "--nthreads", "1", "--no-dashboard", "--memory-limit", "0",
                                   "--host", "127.0.0.1"],
                f"worker-{i}", AUTOGRADER_CACHE_DIR=str(cache), TMPDIR=str(scratch)))
        with self.client() as c:
            c.wait_for_workers(n_workers, timeout=90)

    @property
    def address(self) -> str:
        return json.loads(self.file.read_text())["address"]

    def client(self):
        return distributed.Client(self.address, timeout=30, set_as_default=False)

    def stop(self) -> None:
        for p in self.procs:
            kill_tree(p.pid)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory, request):
    c = Cluster(tmp_path_factory.mktemp("dask"))
    request.addfinalizer(c.stop)  # every process we started dies, whatever the tests did
    c.start(2)
    return c


@pytest.fixture(scope="module")
def graded(dask_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    cls = make_class(tmp / "cls")
    t0 = time.monotonic()
    local = batch.grade_all(cls, workers=2, out=tmp / "local" / "grades.csv", opts=_opts(),
                            progress=False)
    t1 = time.monotonic()
    remote = batch.grade_all(cls, out=tmp / "cluster" / "grades.csv", opts=_opts(),
                             progress=False, scheduler=dask_cluster.address)
    t2 = time.monotonic()
    print(f"local {t1 - t0:.1f} s, cluster {t2 - t1:.1f} s")
    return tmp, cls, local, remote


def _verdicts(outcomes) -> dict:
    return {(o.item.student, fn, c["name"]): c["passed"]
            for o in outcomes for fn, f in o.report["functions"].items() for c in f["checks"]}


# -- the tests ----------------------------------------------------------------------------------


def test_cluster_grades_like_local(graded):
    tmp, _, local, remote = graded
    assert not any("error" in o.report for o in remote), [o.report.get("error") for o in remote]
    assert len(remote) == len(local) == 3 and not any(o.skipped for o in remote)
    assert _verdicts(remote) == _verdicts(local)
    assert len(_verdicts(remote)) >= 3 * 3 * 3  # every check of every function of everyone
    scores = {o.item.student: {n: f["score"] for n, f in o.report["functions"].items()}
              for o in remote}
    assert scores == EXPECTED
    assert scores == {o.item.student: {n: f["score"] for n, f in o.report["functions"].items()}
                      for o in local}
    # bob's global-view "shard_map" has the right numbers and the wrong structure
    bob = {o.item.student: o.report for o in remote}["bob"]["functions"]
    checks = {c["name"]: c["passed"] for c in bob["shard_average_shard_map"]["checks"]}
    assert checks["numerics"] and not checks["structure"]
    rows = [list(csv.reader(open(tmp / d / "grades.csv"))) for d in ("local", "cluster")]
    assert rows[0] == rows[1] and len(rows[0]) == 4


def test_reports_signed_here_and_resumed(graded, dask_cluster):
    tmp, cls, _, remote = graded
    reports = tmp / "cluster" / "reports"
    key = batch.report_key(reports)
    for o in remote:
        path = reports / o.item.student / "ps1_sharding.json"
        rep = batch.verified(path, batch.fingerprint(o.item, _opts()), key)
        assert rep is not None and rep["worker"].endswith(")") and "tcp://" in rep["worker"]
    # the workers graded with their own caches, never this process's
    assert any((dask_cluster.tmp / f"worker-cache-{i}" / "isolated").is_dir() for i in (0, 1))
    again = batch.grade_all(cls, out=tmp / "cluster" / "grades.csv", opts=_opts(),
                            progress=False, scheduler=dask_cluster.address)
    assert len(again) == 3 and all(o.skipped for o in again)
    rows = list(csv.DictReader(open(tmp / "cluster" / "grades.csv")))
    assert {r["student"]: float(r["total"]) for r in rows} == {
        s: shown(sum(v.values())) for s, v in EXPECTED.items()}  # the CSV shows 2 decimals


def test_killed_worker_task_is_retried_elsewhere(dask_cluster, tmp_path):
    """A worker that dies while grading: Dask reschedules its task on the other worker."""
    cls = tmp_path / "slow"
    # the loader runs definitions only: a default argument makes loading take 6 s
    _write(cls, "sam", {"ps1_sharding.py": "import time\n\n\ndef _slow(_=time.sleep(6)):\n"
                                           "    pass\n\n\n" + SOLUTION})
    result: dict = {}

    def run():
        try:
            result["out"] = batch.grade_all(cls, out=tmp_path / "g.csv", opts=_opts(),
                                            progress=False, scheduler=dask_cluster.address)
        except BaseException as e:  # noqa: BLE001
            result["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    with dask_cluster.client() as c:
        pids = c.run(os.getpid)  # worker address -> its process
        victim = None
        t0 = time.monotonic()
        while victim is None and time.monotonic() - t0 < 60:
            for addr, keys in c.processing().items():
                if any(str(k).startswith("grade-") for k in keys):
                    victim = addr
            time.sleep(0.2)
        assert victim is not None, "the task never started"
        time.sleep(2.0)  # well inside the grading (the submission sleeps while loading)
        proc = next(p for p in dask_cluster.workers if pids[victim] in _tree(p.pid))
        kill_tree(proc.pid)
        dask_cluster.workers.remove(proc)
        th.join(timeout=120)
    assert not th.is_alive(), "grading did not finish after the worker died"
    assert "error" not in result, result.get("error")
    (o,) = result["out"]
    assert "error" not in o.report, o.report["error"]
    assert {n: f["score"] for n, f in o.report["functions"].items()} == FULL
    assert victim not in o.report["worker"]


def test_a_killed_worker_takes_its_judge_and_sandbox_with_it(dask_cluster, tmp_path):
    """Only the Dask worker's own process is killed (not its children): the judge it started,
    busy running a program that never ends, and that judge's sandbox end within 15 s."""
    cls = tmp_path / "hang"
    _write(cls, "hal", {"ps1_sharding.py": "import jax\n\n\ndef shard_average_jit(A, mesh):\n"
                        "    return jax.lax.while_loop(lambda c: c[0, 0] == c[0, 0], "
                        "lambda c: c + 1.0, A)\n"})
    th = threading.Thread(target=lambda: batch.grade_all(
        cls, out=tmp_path / "g.csv", opts=_opts(only=["shard_average_jit"], per_function_s=12),
        progress=False, scheduler=dask_cluster.address), daemon=True)  # the retry: one short limit
    th.start()
    with dask_cluster.client() as c:
        pids = c.run(os.getpid)  # worker address -> its process
        below: set = set()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            for pid in pids.values():
                tree = _tree(pid) - {pid}
                if any(b"autograder.worker" in _cmdline(q) for q in tree):
                    below, victim = tree, pid
            if below:
                break
            time.sleep(0.2)
        assert below, "no grading started"
        time.sleep(6.0)  # the judge is running the program that never ends
        below = _tree(victim) - {victim}
        assert any(b"autograder.judge" in _cmdline(q) for q in below)
        os.kill(victim, signal.SIGKILL)
        end = time.monotonic() + 15
        while _running(below) and time.monotonic() < end:
            time.sleep(0.2)
        assert not _running(below), [_cmdline(q)[:100] for q in _running(below)]
    th.join(timeout=300)  # the task is retried on a worker that lives, and ends


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _running(pids) -> list:
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(pid)
        except (OSError, IndexError):
            pass
    return out


# -- the records, without a cluster --------------------------------------------------------------


def test_options_round_trip():
    o = _opts(only=["roll_diff"], assignment="ps1_sharding")
    d = json.loads(json.dumps(o.to_dict()))
    assert isinstance(d["cache_dir"], str)
    assert set(d) == {f.name for f in dataclasses.fields(Options)}  # every option crosses
    assert Options.from_dict(d) == o
    for bad in ({"nope": 1}, {"quick": "yes"}, {"seed": True}, {"limits": {"load_s": "x"}},
                {"limits": {"nope": 1}}, {"isolation": None}):
        with pytest.raises(ValueError):
            Options.from_dict(bad)
    assert Limits.from_dict(Limits(load_s=3).to_dict()) == Limits(load_s=3)


def test_task_files_and_checks(tmp_path):
    cls = make_class(tmp_path / "cls")
    (cls / "submitted" / "carol" / "ps1_sharding" / "data").mkdir()
    (cls / "submitted" / "carol" / "ps1_sharding" / "data" / "x.txt").write_text("x")
    items = {i.student: i for i in batch.discover(cls)}
    task = cluster.GradeTask.of(items["carol"], _opts().to_dict(), grader="g")
    assert set(task.files) == {"ps1_sharding.py", "helpers.py", "data/x.txt"}  # no hidden
    back = cluster.GradeTask.from_dict(task.to_dict())
    assert back == task and back.folder == "ps1_sharding" and back.own_folder
    sub = back.lay_out(tmp_path / "out")
    assert sub == tmp_path / "out" / "submitted" / "carol" / "ps1_sharding" / "ps1_sharding.py"
    assert (sub.parent / "data" / "x.txt").read_text() == "x"
    capped = cluster.GradeTask.of(items["carol"], {}, limit=0)
    assert set(capped.files) == {"ps1_sharding.py"}
    for bad in ({"files": {"../x": b""}}, {"files": {".x": b""}}, {"files": {"/etc/x": b""}},
                {"student": ".."}, {"filename": "a/b"}, {"nope": 1}, {"files": {"x": "str"}}):
        d = dict(task.to_dict(), **bad)
        with pytest.raises(ValueError):
            cluster.GradeTask.from_dict(d)


def test_worker_without_isolation_sends_an_error(tmp_path, monkeypatch):
    from autograder.isolation import sandbox as isolation

    item = batch.discover(make_class(tmp_path / "cls"))[0]
    task = cluster.GradeTask.of(item, _opts().to_dict(), grader=identity.grader_hash())
    monkeypatch.setattr(isolation, "available",
                        lambda: isolation.Availability(False, "no bubblewrap here"))
    out = cluster.GradeOutcome.from_dict(cluster.run_task(task.to_dict()))
    assert out.result is None and "cannot isolate" in out.error and "no bubblewrap" in out.error
    other = cluster.GradeTask.of(item, _opts().to_dict(), grader="another")
    out = cluster.GradeOutcome.from_dict(cluster.run_task(other.to_dict()))
    assert out.result is None and "not the one" in out.error


def test_worker_cache_dir(tmp_path, monkeypatch):
    from autograder.supervisor.options import default_cache_dir

    monkeypatch.setenv("AUTOGRADER_CACHE_DIR", str(tmp_path / "mine"))
    assert cluster.worker_cache_dir(None, True) is None
    assert cluster.worker_cache_dir(tmp_path, True) == default_cache_dir()
    assert cluster.worker_cache_dir(tmp_path, False) == tmp_path  # named, and here too
    assert cluster.worker_cache_dir(tmp_path / "nowhere", False) == default_cache_dir()


def test_cli_without_distributed(tmp_path, monkeypatch):
    from autograder.cli.main import main

    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails
    (tmp_path / "cls").mkdir()
    assert main(["grade-all", str(tmp_path / "cls"), "--scheduler", "tcp://127.0.0.1:1",
                 "--no-progress", "--out", str(tmp_path / "g.csv")]) == 2
