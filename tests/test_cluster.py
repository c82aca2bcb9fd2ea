"""grade-all on a real Dask cluster: a scheduler and two workers, separate processes on loopback,
locked with the course's TLS certificates (``cluster-certs``), as docs/cluster.md sets one up.

The same small class is graded locally and on the cluster with the same seed: every verdict,
score and CSV row must agree; the reports are signed by this process and a second cluster run
reuses them all. A worker killed while it grades loses nothing: the task is graded again on the
other worker. A class, not one function: the subject is the cluster's scheduling and the
reports it signs; one small class graded once serves every test.
"""
import csv
import dataclasses
import importlib.util
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
from conftest import HANGS_IN_XLA

from autograder.classroom import batch, cluster, credentials
from autograder.core import identity
from autograder.core.results import shown
from autograder.supervisor.options import Limits, Options

#: about processes, files and packaging, not JAX: make test-latest leaves it to make test.
#: Dask's distributed (the cluster extra) is imported by the tests that use it, not at
#: collection, which every pytest process of the suite does (half a second each)
pytestmark = [pytest.mark.orchestration,
              pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                 reason="dask distributed is not installed (the cluster extra)")]

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


def _tls(creds: Path, role: str) -> list:
    """The ``dask scheduler``/``dask worker`` options of ``role``'s files (docs/cluster.md)."""
    cert, key = credentials.files_of(role)
    return ["--tls-ca-file", str(creds / "ca.pem"), "--tls-cert", str(creds / cert),
            "--tls-key", str(creds / key)]


class Cluster:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list = []
        self.workers: list = []
        self.file = tmp / "scheduler.json"
        self.creds = tmp / "creds"
        credentials.make_credentials(self.creds, days=1)
        self.security = credentials.load(self.creds).security()

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
        self._start(_dask("scheduler") + ["--host", "127.0.0.1", "--port", "0", "--protocol",
                                          "tls", "--scheduler-file", str(self.file),
                                          "--no-dashboard"] + _tls(self.creds, "scheduler"),
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
                                   "--host", "127.0.0.1"] + _tls(self.creds, "worker"),
                f"worker-{i}", AUTOGRADER_CACHE_DIR=str(cache), TMPDIR=str(scratch)))
        with self.client() as c:
            c.wait_for_workers(n_workers, timeout=90)

    @property
    def address(self) -> str:
        return json.loads(self.file.read_text())["address"]

    def client(self):
        import distributed

        return distributed.Client(self.address, timeout=30, set_as_default=False,
                                  security=self.security)

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
                             progress=False, scheduler=dask_cluster.address,
                             security=dask_cluster.security)
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
        assert rep is not None and rep["worker"].endswith(")") and "tls://" in rep["worker"]
    # the workers graded with their own caches, never this process's
    assert any((dask_cluster.tmp / f"worker-cache-{i}" / "isolated").is_dir() for i in (0, 1))
    again = batch.grade_all(cls, out=tmp / "cluster" / "grades.csv", opts=_opts(),
                            progress=False, scheduler=dask_cluster.address,
                            security=dask_cluster.security)
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
                                            progress=False, scheduler=dask_cluster.address,
                                            security=dask_cluster.security)
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
    _write(cls, "hal", {"ps1_sharding.py": HANGS_IN_XLA})
    th = threading.Thread(target=lambda: batch.grade_all(
        cls, out=tmp_path / "g.csv", opts=_opts(only=["shard_average_jit"], per_function_s=12),
        progress=False, scheduler=dask_cluster.address, security=dask_cluster.security),
        daemon=True)  # the retry: one short limit
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
    key = bytes(range(32))
    other = cluster.GradeTask.of(item, _opts().to_dict(), grader="another", task_id="t1",
                                 run_key=key.hex())
    d = cluster.run_task(other.to_dict())
    # the worker signs its answer with the run's key, over the digest of the task it got
    out = cluster.verify_outcome(d, key, cluster.task_digest(other.to_dict()))
    assert out.result is None and "not the one" in out.error
    with pytest.raises(cluster.Unverified, match="another task"):
        cluster.verify_outcome(d, key, cluster.task_digest(dict(other.to_dict(), task_id="t2")))


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


# -- the lock: TLS, and the answers' signatures ---------------------------------------------------


def test_credentials_are_private_and_checked(tmp_path):
    files = credentials.make_credentials(tmp_path / "c", days=2)
    assert {f.name for f in files} == {"ca.pem", "scheduler.pem", "scheduler-key.pem",
                                       "worker.pem", "worker-key.pem", "client.pem",
                                       "client-key.pem"}  # the authority's key is not kept
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert (tmp_path / "c").stat().st_mode & 0o777 == 0o700
    with pytest.raises(FileExistsError, match="lock out"):
        credentials.make_credentials(tmp_path / "c")
    for role in credentials.ROLES:
        assert credentials.check(credentials.load(tmp_path / "c", role)) == ""
    creds = credentials.load(tmp_path / "c")
    assert "BEGIN" not in repr(creds)  # never the key in a log
    # a client certificate of another authority, a key of another certificate, out of date
    credentials.make_credentials(tmp_path / "other")
    other = credentials.load(tmp_path / "other")
    assert "not signed by ca.pem" in credentials.check(
        dataclasses.replace(creds, cert=other.cert, key=other.key))
    assert "is not the key" in credentials.check(dataclasses.replace(creds, key=other.key))
    import datetime

    assert "not now" in credentials.check(creds, now=datetime.datetime.now(
        datetime.timezone.utc) + datetime.timedelta(days=3))
    os.chmod(tmp_path / "c" / "client-key.pem", 0o644)
    with pytest.raises(credentials.CredentialsError, match="readable by others"):
        credentials.load(tmp_path / "c")
    with pytest.raises(credentials.CredentialsError, match="missing"):
        credentials.load(tmp_path / "nowhere")


def test_cli_refuses_a_scheduler_it_cannot_authenticate(tmp_path, monkeypatch, capsys):
    """Said before anything is graded, without connecting: a plain address, no credentials,
    credentials readable by others; --insecure-scheduler is said aloud."""
    import argparse

    from autograder.cli import grade_all
    from autograder.cli.main import main

    (tmp_path / "cls").mkdir()
    monkeypatch.delenv(credentials.ENV, raising=False)
    base = ["grade-all", str(tmp_path / "cls"), "--no-progress", "--out", str(tmp_path / "g.csv")]
    assert main(base + ["--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "not a TLS one" in capsys.readouterr().err
    assert main(base + ["--scheduler", "tls://127.0.0.1:1"]) == 2
    assert "no cluster credentials" in capsys.readouterr().err
    credentials.make_credentials(tmp_path / "c", days=1)
    os.chmod(tmp_path / "c" / "client-key.pem", 0o640)
    monkeypatch.setenv(credentials.ENV, str(tmp_path / "c"))
    assert main(base + ["--scheduler", "tls://127.0.0.1:1"]) == 2
    assert "chmod 600" in capsys.readouterr().err
    assert not (tmp_path / "g.csv").exists()  # nothing graded, nothing written
    os.chmod(tmp_path / "c" / "client-key.pem", 0o600)
    sec = grade_all._cluster_security(argparse.Namespace(
        scheduler="tls://h:1", insecure_scheduler=False, cluster_credentials=None))
    assert sec.require_encryption and "BEGIN CERTIFICATE" in sec.tls_client_cert
    assert grade_all._cluster_security(argparse.Namespace(
        scheduler="tcp://h:1", insecure_scheduler=True, cluster_credentials=None)) is None
    assert "WARNING: --insecure-scheduler" in capsys.readouterr().err
    with pytest.raises(credentials.CredentialsError, match="not a TLS one"):
        cluster.connect("tcp://127.0.0.1:1", security=sec)  # the library refuses it too


def test_doctor_reports_cluster_credentials(tmp_path, monkeypatch):
    from autograder.cli import doctor

    monkeypatch.delenv(credentials.ENV, raising=False)
    f = doctor.check_cluster_credentials()
    assert not f.ok and not f.required and "cluster-certs" in f.fix
    credentials.make_credentials(tmp_path / "c", days=30)
    monkeypatch.setenv(credentials.ENV, str(tmp_path / "c"))
    f = doctor.check_cluster_credentials()
    assert f.ok and "valid until" in f.detail, f.detail
    os.chmod(tmp_path / "c" / "ca.pem", 0o644)
    f = doctor.check_cluster_credentials()
    assert not f.ok and "readable by others" in f.detail


def test_secured_cluster_refuses_strangers(tmp_path):
    """A LocalCluster locked with the course's certificates: the course's client runs a task;
    a client without a certificate, with one of another authority, or over plain tcp is
    refused by the scheduler; a scheduler of another authority is refused by the client."""
    import operator
    import socket
    import ssl

    import distributed
    from distributed.security import Security

    credentials.make_credentials(tmp_path / "course", days=1)
    credentials.make_credentials(tmp_path / "stranger", days=1)
    course, stranger = (credentials.load(tmp_path / n) for n in ("course", "stranger"))
    role = {r: credentials.load(tmp_path / "course", r) for r in ("scheduler", "worker")}
    members = Security(require_encryption=True, tls_ca_file=course.ca,
                       tls_scheduler_cert=role["scheduler"].cert,
                       tls_scheduler_key=role["scheduler"].key,
                       tls_worker_cert=role["worker"].cert, tls_worker_key=role["worker"].key,
                       # the LocalCluster's own connection to its scheduler
                       tls_client_cert=course.cert, tls_client_key=course.key)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  protocol="tls://", host="127.0.0.1", security=members,
                                  dashboard_address=":0") as lc:
        addr = lc.scheduler_address
        assert addr.startswith("tls://")
        with cluster.connect(addr, security=course.security(), timeout=10) as c:
            assert c.submit(operator.add, 1, 2).result() == 3
        # a client certificate of another authority (it trusts the course's scheduler)
        outsider = Security(require_encryption=True, tls_ca_file=course.ca,
                            tls_client_cert=stranger.cert, tls_client_key=stranger.key)
        with pytest.raises(cluster.SchedulerRefused, match="authenticate"):
            cluster.connect(addr, security=outsider, timeout=5)
        # the scheduler's certificate is not of the authority the client trusts
        with pytest.raises(cluster.SchedulerRefused):
            cluster.connect(addr, security=dataclasses.replace(course, ca=stranger.ca)
                            .security(), timeout=5)
        # plain tcp to the TLS port
        with pytest.raises(OSError):
            distributed.Client(addr.replace("tls://", "tcp://"), timeout=5,
                               set_as_default=False)
        # no certificate at all: the scheduler asks for one and ends the connection
        host, port = addr.removeprefix("tls://").rsplit(":", 1)
        ctx = ssl.create_default_context(cadata=course.ca)
        ctx.check_hostname = False
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            with pytest.raises((ssl.SSLError, ConnectionError)):
                with ctx.wrap_socket(sock) as tls:
                    tls.sendall(b"hello")
                    assert tls.recv(16) == b""  # (closed) or SSLError: certificate required
                    raise ConnectionError("closed by the scheduler")
        # without credentials the client refuses a TLS scheduler before connecting
        with pytest.raises(credentials.CredentialsError, match="no cluster credentials"):
            cluster.connect(addr)


def _result_of(names, *, passed=True) -> dict:
    """A ``SubmissionResult.to_dict()`` of ps1_sharding's ``names``, as a worker makes it."""
    from autograder.core.results import CheckResult, FunctionResult, SubmissionResult
    from autograder.course import registry

    fns = {}
    for n in names:
        p = registry.get(n)
        fns[n] = FunctionResult(n, float(p.points), [CheckResult(c, passed, "ok")
                                                     for c in p.check_names],
                                weights=dict(p.weights))
    return SubmissionResult(fns, "ps1_sharding").to_dict()


def test_answers_are_verified_and_rechecked(tmp_path):
    """A pure function of the answer, the run's key, the task's digest and the client's plan:
    a wrong signature, another task, or a result its checks and the plan do not give is
    rejected as the grader's fault (not graded), never a score."""
    item = {i.student: i for i in batch.discover(make_class(tmp_path / "cls"))}["bob"]
    expected = cluster.expected_for(item, dataclasses.replace(_opts(), with_speed=True))
    assert expected.assignment == "ps1_sharding" and set(expected.functions) == set(FULL)
    key, digest = b"k" * 32, "d" * 64
    zero = _result_of(FULL, passed=False)

    def answer(result, k=key, dg=digest) -> dict:
        d = cluster.GradeOutcome(result=result, seconds=1.0, worker="tls://w", hostname="w",
                                 digest=dg).to_dict()
        d["signature"] = cluster.sign_outcome(d, k)
        return d

    good = cluster.accepted(answer(zero), key, digest, expected)
    assert good.error is None and good.result == zero
    full = _result_of(FULL)
    forged = answer(zero)
    forged["result"] = full  # bob's zero turned into full marks after signing
    for bad, why in ((answer(zero, k=b"x" * 32), "not signed with this run's key"),
                     (forged, "not signed with this run's key"),
                     (dict(answer(zero), signature=""), "not signed"),
                     (answer(zero, dg="e" * 64), "another task")):
        with pytest.raises(cluster.Unverified, match=why):
            cluster.verify_outcome(bad, key, digest)
        out = cluster.accepted(bad, key, digest, expected)
        assert out.result is None and "not graded (the grader's fault" in out.error
    # signed, but not what the client's own plan and registry give
    inflated = json.loads(json.dumps(zero))
    inflated["functions"]["roll_diff"]["score"] = 4.0
    inflated["score"] = 4.0
    fewer = _result_of(["roll_diff"])
    other = dict(zero, assignment="ps2_collectives")
    top = json.loads(json.dumps(full))
    top["functions"]["roll_diff"]["max_score"] = 40.0
    unplanned = json.loads(json.dumps(full))
    unplanned["functions"]["roll_diff"]["checks"].pop()
    for res, why in ((inflated, "its checks give 0.0"), (fewer, "planned"),
                     (other, "planned 'ps1_sharding'"), (top, "the registry gives"),
                     (unplanned, "checks"), (dict(full, score=99.0), "totals"),
                     (dict(full, isolated=False), "isolated")):
        assert why in cluster.plan_problem(res, expected), why
        out = cluster.accepted(answer(res), key, digest, expected)
        assert out.result is None and "does not match this run's plan" in out.error
    assert cluster.plan_problem(full, expected) == ""
    # without the speed check, a function's "speed" is absent (or skipped, after a failure)
    fast = cluster.expected_for(item, _opts())  # no speed check
    nospeed = json.loads(json.dumps(full))
    for f in nospeed["functions"].values():
        f["checks"] = [c for c in f["checks"] if c["name"] != "speed"]
    assert cluster.plan_problem(nospeed, fast) == "" and cluster.plan_problem(zero, fast) == ""
    assert "planned" in cluster.plan_problem(nospeed, expected)
    assert "without speed" in cluster.plan_problem(full, fast)  # a speed verdict not asked for


def test_the_documented_recipe_is_the_tested_one():
    """The README's and docs/cluster.md's commands start the scheduler and workers as the
    Cluster above does (TLS, each role's files), and grade-all with the client's."""
    for doc in (ROOT / "README.md", ROOT / "docs" / "cluster.md"):
        lines = [ln.strip() for ln in doc.read_text().splitlines()]
        starts = {w: [ln for ln in lines if ln.startswith(f"dask {w} ")]
                  for w in ("scheduler", "worker")}
        assert starts["scheduler"] and starts["worker"], doc
        for role, cmds in starts.items():
            flags = " ".join(_tls(Path("."), role))  # --tls-ca-file ca.pem --tls-cert ...
            for cmd in cmds:
                assert flags in cmd, (doc, cmd)
                assert "tcp://" not in cmd
        assert "--protocol tls" in starts["scheduler"][0]
        assert all("tls://" in c for c in starts["worker"])
        grade = [ln for ln in lines if ln.startswith("python -m autograder grade-all")
                 and "--scheduler" in ln]
        assert grade and all("--scheduler tls://" in g for g in grade), doc
