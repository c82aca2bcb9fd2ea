"""Trusted grading: attacks written as a student would write them, through the path each targets.

Every attack below gains nothing over an honest attempt of the same work, leaves classmates'
grades alone, finishes within its limits and changes nothing on disk outside its sandbox. Most
of them are graded together as one hostile class through ``grade-all`` (one module fixture);
the rest go through ``grade`` and the nbgrader preprocessor.
"""
import csv
import hashlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, hang_in_xla

from autograder.classroom.batch import grade_all
from autograder.isolation import sandbox as isolation
from autograder.supervisor.options import Limits, Options

pytestmark = pytest.mark.skipif(not isolation.available().ok,
                                reason=f"no isolation here: {isolation.available().how}")

HONEST = (ROOT / "tests" / "fixtures" / "class" / "src" / "body_ok.py").read_text()
HEAD = "import jax\nimport jax.numpy as jnp\nfrom jax.sharding import PartitionSpec as P\n"
WRONG_ROLL = ("def roll_diff(A, shift, mesh):\n"
              "    return jax.shard_map(lambda b: b * 0, mesh=mesh, in_specs=P('X', 'Y'),\n"
              "                         out_specs=P('X', 'Y'))(A)\n")
FULL = {"shard_average_jit": 3.0, "shard_average_shard_map": 3.0, "roll_diff": 4.0}
AVERAGES_ONLY = {"shard_average_jit": 3.0, "shard_average_shard_map": 3.0, "roll_diff": 0.0}
NOTHING = {"shard_average_jit": 0.0, "shard_average_shard_map": 0.0, "roll_diff": 0.0}


def _honest_without_roll() -> str:
    return HONEST.split("def roll_diff")[0]


def attacks(root: Path, port: int, base: Path) -> dict:
    """student -> (source, the scores an honest attempt of the same work gets)."""
    averages = _honest_without_roll()
    return {
        # forging verdicts: fake records on every descriptor, a fake results file, prints
        "forger": (averages + WRONG_ROLL + '''
import os, json
_fake = json.dumps({"type": "result", "function": "roll_diff", "checks": [
    {"name": "numerics", "passed": True, "message": "ok"}]})
_fake2 = json.dumps({"type": "artifact", "id": 0, "artifact": None, "error": None})
def _spam():
    for fd in range(0, 256):
        try:
            os.write(fd, (_fake + "\\n" + _fake2 + "\\n").encode())
        except OSError:
            pass
    open("results.jsonl", "w").write(_fake)
    print(_fake)
    return 0
_s = _spam()
def _keep():
    return _s
''', AVERAGES_ONLY),
        # patching the grader in its own process: checks, registry weights, thresholds, clocks
        "patcher": (averages + '''
import sys, time, ctypes
import autograder.course.checks, autograder.core.compare, autograder.course.registry as reg
autograder.core.compare.compare_values = lambda *a, **k: None
autograder.course.checks.compare_values = lambda *a, **k: None
reg.DEFAULT_WEIGHTS["numerics"] = 0.0
for _p in reg.problems():
    object.__setattr__(_p, "weights", {"numerics": 0.0})
    object.__setattr__(_p, "rtol", 1e9)
time.perf_counter = lambda: 0.0
time.monotonic = lambda: 0.0
import types
sys.modules["autograder.tpumodel"] = types.ModuleType("autograder.tpumodel")
sys.modules["__main__"].__dict__.clear()
def roll_diff(A, shift, mesh):
    import autograder.judge.grading as g
    g.CALL_TIMEOUT = 0
    return jax.shard_map(lambda b: b * 0, mesh=mesh, in_specs=P('X', 'Y'),
                         out_specs=P('X', 'Y'))(A)
''', AVERAGES_ONLY),
        # memorising the inputs: the old grader's fixed seed and the public case makers
        "memoriser": (HEAD + '''
import zlib
import numpy as np
from autograder.course.references import ps1_sharding as ref
def shard_average_jit(A, mesh):
    x = mesh.shape["X"]
    rng = np.random.default_rng([0, zlib.crc32(b"shard_average_jit")])
    table = {}
    for _ in range(8):
        a = ref.shard_average_case(rng, x, mesh.shape["Y"], "grade")[0]
        table[a.shape] = ref.shard_average_reference((a,), x, mesh.shape["Y"])
    want = table.get(A.shape)
    out = jnp.zeros((x, A.shape[1]), A.dtype) if want is None else jnp.asarray(want)
    return jax.lax.with_sharding_constraint(out, jax.sharding.NamedSharding(mesh, P("X", "Y")))
''', NOTHING),
        # reading the course's files: absolute paths, the parent's cwd and environment
        "reader": (HEAD + f'''
_found = []
for _p in ["{root}/solutions/ps1_sharding.py", "/proc/1/cwd/solutions/ps1_sharding.py",
           "/proc/self/../1/cwd/solutions/ps1_sharding.py", "/proc/1/environ"]:
    try:
        _found.append(open(_p).read())
    except OSError:
        pass
for _pid in os.listdir("/proc"):
    try:
        _found.append(open(f"/proc/{{_pid}}/cwd/solutions/ps1_sharding.py").read())
    except OSError:
        pass
_src = next((s for s in _found if "def roll_diff" in s), "")
exec(_src)
def _keep():
    return _src, _found
''', NOTHING),
        # harming classmates: a daemon that outlives the worker, writes into the class
        # folder, the reports and the grader's package, and holds the pipes open
        "vandal": (averages + WRONG_ROLL + f'''
import os, time, signal
def _daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            for _ in range(600):
                for _p in ["{root}/tests/fixtures/class/src/body_ok.py",
                           "/opt/grader/autograder/core/records.py", "/submission/x.py",
                           "{base}/cache/isolated/xla/poison", "{base}/grades.csv",
                           "{base}/reports/honest/ps1_sharding.json", "/tmp/home/x"]:
                    try:
                        open(_p, "a").write("# vandalised\\n")
                    except OSError:
                        pass
                try:
                    os.kill(1, signal.SIGKILL)
                except OSError:
                    pass
                time.sleep(0.1)
        os._exit(0)
    return 0
_d = _daemon()
def _keep():
    return _d
''', AVERAGES_ONLY),
        # resources and the network: raise the hard limits again, call home
        "greedy": (averages + f'''
import resource, socket
def roll_diff(A, shift, mesh):
    try:
        resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY,) * 2)
    except (ValueError, OSError):
        pass
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"hello")
    except OSError:
        pass
    return jax.shard_map(lambda b: jnp.roll(b, shift, axis=0) - b, mesh=mesh,
                         in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)
''', FULL),
        # classmates: honest work, graded alongside
        "honest": (HONEST, FULL),
    }


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the host's loopback that records whoever connects."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.5)
    seen = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                seen.append(conn.recv(100))
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1], seen
    stop.set()
    srv.close()


def _tree_digest(*dirs: Path) -> str:
    h = hashlib.sha256()
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p).encode())
                h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def hostile_class(tmp_path_factory, listener):
    """Seven hand-ins graded as one class, once for every test below: the attacks' subject is
    what one hand-in can do to its classmates and the machine, which needs classmates (ps1, the
    cheapest assignment, on two meshes, no speed check)."""
    port, seen = listener
    base = tmp_path_factory.mktemp("hostile")
    course = base / "course"
    table = attacks(ROOT, port, base)
    for student, (src, _) in table.items():
        d = course / "submitted" / student / "ps1_sharding"
        d.mkdir(parents=True)
        (d / "ps1_sharding.py").write_text(src)
    watched = (ROOT / "autograder", ROOT / "solutions", ROOT / "tests" / "fixtures")
    before = _tree_digest(*watched)
    lim = Limits(per_function_s=40, load_s=60, statement_s=10, output_mb=4)
    t0 = time.monotonic()
    outcomes = grade_all(course, workers=2, out=base / "grades.csv",
                         opts=Options(quick=True, with_speed=False, limits=lim,
                                      cache_dir=base / "cache"),
                         progress=False)
    took = time.monotonic() - t0
    time.sleep(1.0)  # a surviving daemon would act now
    return {
        "reports": {o.item.student: o.report for o in outcomes},
        "table": table, "took": took, "base": base, "seen": seen,
        "unchanged": _tree_digest(*watched) == before,
        "csv": list(csv.DictReader(open(base / "grades.csv"))),
    }


def _scores(report) -> dict:
    return {n: f["score"] for n, f in report["functions"].items()}


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
@pytest.mark.parametrize("student", ["forger", "patcher", "memoriser", "reader", "vandal",
                                     "greedy", "honest"])
def test_attacker_gains_nothing_over_honest_work(hostile_class, student):
    report = hostile_class["reports"][student]
    assert _scores(report) == hostile_class["table"][student][1], report
    assert report["isolated"] is True


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_classmates_keep_their_grades_and_the_batch_finishes(hostile_class):
    rows = {r["student"]: r for r in hostile_class["csv"]}
    assert float(rows["honest"]["total"]) == 10.0
    assert all(r["isolated"] == "yes" for r in rows.values())
    # 7 submissions, 2 at a time, each bounded by its limits (load 60 s + 3 x 40 s)
    assert hostile_class["took"] < 4 * 200


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_nothing_outside_the_sandbox_changed(hostile_class):
    assert hostile_class["unchanged"]
    assert not (hostile_class["base"] / "cache" / "isolated" / "xla" / "poison").exists()
    reports = hostile_class["base"] / "reports"
    for student in hostile_class["table"]:
        rep = json.loads((reports / student / "ps1_sharding.json").read_text())
        assert "signature" in rep and rep["student"] == student


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_no_process_outlives_its_sandbox(hostile_class):
    leftovers = [p for p in isolation._pids()
                 if (isolation._uid_of(p) or 0) >= 200_000]
    assert leftovers == [], leftovers


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_no_network(hostile_class):
    assert hostile_class["seen"] == []


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_forged_records_are_ignored(hostile_class):
    msg = " ".join(c["message"] for c in
                   hostile_class["reports"]["forger"]["functions"]["roll_diff"]["checks"])
    assert "values differ" in msg


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_reading_the_solutions_finds_nothing(hostile_class):
    msg = hostile_class["reports"]["reader"]["functions"]["roll_diff"]["checks"][0]["message"]
    assert "not found" in msg


@pytest.mark.serial  # the hostile class: no sandbox process may be left on the machine
def test_resume_reuses_only_signed_reports(hostile_class):
    """A report edited on disk (a higher score) is graded again, not reused."""
    base = hostile_class["base"]
    path = base / "reports" / "forger" / "ps1_sharding.json"
    rep = json.loads(path.read_text())
    rep["score"] = 10.0
    rep["functions"]["roll_diff"]["score"] = 4.0
    path.write_text(json.dumps(rep))
    lim = Limits(per_function_s=40, load_s=60, statement_s=10, output_mb=4)
    outcomes = grade_all(base / "course", workers=2, out=base / "grades.csv",
                         opts=Options(quick=True, with_speed=False, limits=lim,
                                      cache_dir=base / "cache"),
                         progress=False)
    by = {o.item.student: o for o in outcomes}
    assert not by["forger"].skipped and by["forger"].report["score"] == 6.0
    assert by["honest"].skipped and by["honest"].report["score"] == 10.0


def test_every_run_draws_fresh_inputs():
    from autograder.course import registry
    from autograder.judge import grading

    p = registry.get("roll_diff")
    shapes = set()
    for _ in range(4):
        plan = grading.Plan(problem=p, seed=grading.fresh_seed(), quick=False, with_big=False,
                            platform="cpu")
        (layout, cases), *_ = plan.cases()
        shapes.add(tuple(c.args[0].tobytes()[:64] for c in cases))
    assert len(shapes) == 4


def test_requests_carry_no_values():
    from autograder.course import registry
    from autograder.judge import grading

    p = registry.get("roll_diff")
    plan = grading.Plan(problem=p, seed=123, quick=False, with_big=True, platform="cpu")
    for r in plan.all_requests():
        line = r.to_line()
        assert len(line) < 1000 and "[[" not in line
        for a in r.args:
            assert a.is_static or (a.shape and a.dtype)


def test_unknown_names_are_refused_before_any_worker(tmp_path):
    from autograder.cli.main import main

    sub = tmp_path / "x.py"
    sub.write_text(HONEST)
    assert main(["grade", str(sub), "--assignment", "ps1_shardin"]) == 2
    from autograder.supervisor.options import check_options

    with pytest.raises(ValueError, match="unknown graded function"):
        check_options(Options(assignment="ps1_sharding", only=["roll_dif"]))


def test_graded_function_bound_by_assignment(tmp_path):
    from autograder.cli.main import grade_path

    sub = tmp_path / "ps1_sharding.py"
    sub.write_text(HONEST.replace("def roll_diff(", "def _roll(").replace(
        "def shard_average_jit(", "def _avg(") + "\nroll_diff = jax.jit(_roll, static_argnums=1, "
        "static_argnames='mesh')\nshard_average_jit = _avg\n")
    res = grade_path(sub, "ps1_sharding", quick=True, with_speed=False)
    assert {n: f.score for n, f in res.functions.items()} == FULL


def test_host_callbacks_fail_clearly_and_debug_prints_cost_nothing(tmp_path):
    from autograder.cli.main import grade_path

    sub = tmp_path / "ps1_sharding.py"
    sub.write_text(_honest_without_roll().replace(
        "    return blocks.mean(axis=1)",
        "    jax.debug.print('avg {}', blocks[0, 0, 0])\n"
        "    jax.debug.visualize_array_sharding(A)\n    return blocks.mean(axis=1)") + '''
import numpy as np
def roll_diff(A, shift, mesh):
    def host(b):
        n = b.shape[0]
        return np.roll(b, shift % n, axis=0) - b
    def local(b):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(b.shape, b.dtype), b)
    return jax.shard_map(local, mesh=mesh, in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)
''')
    res = grade_path(sub, "ps1_sharding", quick=True, with_speed=False)
    assert res.functions["shard_average_jit"].score == 3.0
    msg = res.functions["roll_diff"].checks[0].message
    assert res.functions["roll_diff"].score == 0 and "calls back into Python" in msg, msg


def test_hang_in_one_function_keeps_the_rest(tmp_path):
    """A program that never ends inside XLA (on the trusted side) loses only itself."""
    from autograder.cli.main import grade_path

    src = tmp_path / "sub.py"
    src.write_text(hang_in_xla("shard_average_shard_map") + '''

def roll_diff(A, shift, mesh):
    return jax.shard_map(lambda b: jnp.roll(b, shift, axis=0) - b, mesh=mesh,
                         in_specs=P('X', 'Y'), out_specs=P('X', 'Y'))(A)
''')
    res = grade_path(src, "ps1_sharding", quick=True, with_speed=False,
                     limits=Limits(per_function_s=5, load_s=45))
    f = res.functions
    assert "not found" in f["shard_average_jit"].checks[0].message
    assert f["shard_average_shard_map"].score == 0
    assert "time limit" in f["shard_average_shard_map"].checks[0].message
    assert f["roll_diff"].score == 4.0


@pytest.mark.serial  # memory, and no sandbox process left on the machine
def test_memory_of_child_processes_counts(tmp_path):
    """Memory held by a child process the submission forks counts against the sandbox: the
    statement is stopped and skipped, the rest is graded, nothing is left running."""
    from autograder.cli.main import grade_path

    sub = tmp_path / "ps1_sharding.py"
    sub.write_text(HONEST + '''
import os, time
import numpy as np
def _hog():
    if os.fork() == 0:
        block = np.ones(1200 << 20, np.uint8)  # 1.2 GB resident, in a child
        time.sleep(120)
        os._exit(0)
    time.sleep(60)
    return 0
_h = _hog()
def _keep():
    return _h
''')
    res = grade_path(sub, "ps1_sharding", quick=True, with_speed=False,
                     limits=Limits(student_memory_mb=900, per_function_s=60, load_s=100))
    assert {n: f.score for n, f in res.functions.items()} == FULL
    assert any("more than 900 MB" in n for n in res.notes), res.notes
    assert [p for p in isolation._pids() if (isolation._uid_of(p) or 0) >= 200_000] == []


def test_nbgrader_student_cell_cannot_replace_the_grader(tmp_path):
    """A cell that swaps ``autograder.classroom.cells`` in the kernel (so a hidden cell would print full
    marks) changes nothing: hidden cells are written by the trusted side."""
    import nbformat

    from autograder.classroom.nbgrader_plugin import GradeInSandbox

    cells = [
        nbformat.v4.new_code_cell(
            "import sys, types\nm = types.ModuleType('autograder.classroom.cells')\n"
            "m.grade = lambda *a, **k: 10\nsys.modules['autograder.classroom.cells'] = m\n"
            "import autograder\nautograder.nb = m\nprint('patched')"),
        nbformat.v4.new_code_cell(HEAD + WRONG_ROLL),
        nbformat.v4.new_code_cell("from autograder.classroom.cells import grade\ngrade('roll_diff', globals())",
                                  metadata={"nbgrader": {"grade": True, "solution": False,
                                                         "grade_id": "grade_roll_diff",
                                                         "points": 4, "locked": True,
                                                         "schema_version": 3}}),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    folder = tmp_path / "alice" / "ps1_sharding"
    folder.mkdir(parents=True)
    resources = {"nbgrader": {"assignment": "ps1_sharding", "notebook": "ps1_sharding"},
                 "metadata": {"path": str(folder)}}
    out, _ = GradeInSandbox(cell_timeout=120).preprocess(nb, resources)
    assert "patched" in out.cells[0].outputs[0]["text"]  # the student's cell ran (sandboxed)
    results = [o for o in out.cells[2].outputs if o["output_type"] == "execute_result"]
    assert results and results[0]["data"]["text/plain"] == "0"
    assert "values differ" in out.cells[2].outputs[0]["text"]


def test_refuses_without_isolation_unless_told(tmp_path, monkeypatch):
    from autograder.cli.main import grade_path, main
    from autograder.supervisor.options import IsolationUnavailable

    sub = tmp_path / "ps1_sharding.py"
    sub.write_text(HONEST)
    monkeypatch.setattr(isolation, "available",
                        lambda: isolation.Availability(False, "no bwrap (test)"))
    assert main(["grade", str(sub)]) == 2
    with pytest.raises(IsolationUnavailable):
        grade_path(sub, "ps1_sharding", quick=True, with_speed=False)
    res = grade_path(sub, "ps1_sharding", quick=True, with_speed=False, isolation=False,
                     only=["roll_diff"])
    assert res.functions["roll_diff"].score == 4.0
    assert res.isolated is False and "WITHOUT isolation" in res.notes[0]
    assert res.to_dict()["isolated"] is False


def test_a_students_own_folder_is_importable_a_flat_folder_is_not(tmp_path):
    """In the nbgrader layout a helper module beside the notebook is the student's own and
    imports; in a flat folder of hand-ins the file beside it is a classmate's and does not."""
    helper = "import jax.numpy as jnp\n\ndef block_rows(A, x):\n    return A.reshape(x, -1, A.shape[1])\n"
    user = HEAD + ("from helpers import block_rows\n\ndef shard_average_jit(A, mesh):\n"
                   "    return block_rows(A, mesh.shape['X']).mean(axis=1)\n")
    own = tmp_path / "course" / "submitted" / "alice" / "ps1_sharding"
    own.mkdir(parents=True)
    (own / "ps1_sharding.py").write_text(user)
    (own / "helpers.py").write_text(helper)
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "bob_ps1_sharding.py").write_text(user)
    (flat / "helpers.py").write_text(helper)  # someone else's file in the hand-in folder
    opts = Options(quick=True, with_speed=False, only=["shard_average_jit"])
    a = grade_all(tmp_path / "course", out=tmp_path / "a.csv", opts=opts, progress=False)
    b = grade_all(flat, out=tmp_path / "b.csv", opts=opts, progress=False)
    got = {o.item.student: o.report["functions"].get("shard_average_jit") for o in a + b}
    assert got["helpers"] is None  # no graded function: its assignment cannot be told
    assert got["alice"]["score"] == 3.0
    assert got["bob"]["score"] == 0.0
    assert "name 'block_rows' is not defined" in got["bob"]["checks"][0]["message"]
    bob = next(o.report for o in b if o.item.student == "bob")
    assert any("No module named 'helpers'" in n for n in bob["notes"]), bob["notes"]


def test_memory_watch_sees_child_processes_without_a_dedicated_uid():
    """The watchdog's view of a sandbox started as an ordinary user (no dedicated uid) is the
    whole process tree below it, not just the first process."""
    box = isolation.spawn(["/bin/sh", "-c", "sleep 30 & sleep 30 & wait"],
                          binds=[], env={"PATH": "/usr/bin:/bin"}, isolated=False)
    try:
        for _ in range(50):
            if len(box.members()) >= 3:
                break
            time.sleep(0.1)
        assert len(box.members()) == 3 and box.proc.pid in box.members()
    finally:
        box.kill()
    assert box.members() == []
