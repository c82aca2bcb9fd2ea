"""Shared fixtures: 8 emulated devices before anything touches JAX, fixture loading, and the
gradings several tests read (each done once per process: :func:`graded`)."""
import atexit
import functools
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import pytest

# The trusted side's class-wide cache: one per test session, never the user's own
# ($AUTOGRADER_CACHE_DIR is set over). The session that makes it removes it (its big cases
# alone are about 0.7 GB); one named by $SUITE_CACHE_DIR (tools/run_suite.py's, shared by its
# two phases; pytest-xdist's workers inherit their session's) is its namer's to remove.
SUITE_CACHE = "SUITE_CACHE_DIR"
if not os.environ.get(SUITE_CACHE):
    os.environ[SUITE_CACHE] = tempfile.mkdtemp(prefix="autograder-cache-")
    atexit.register(shutil.rmtree, os.environ[SUITE_CACHE], ignore_errors=True)  # a script's too
os.environ["AUTOGRADER_CACHE_DIR"] = os.environ[SUITE_CACHE]

from autograder.core.devices import setup_devices
from autograder.core.imports import light_nbformat
from autograder.core.mlir_reuse import reuse_per_thread
from autograder.supervisor import local

setup_devices()
reuse_per_thread()  # as the grader's processes do
light_nbformat()  # the suite's notebooks are read as the grader reads them, a second sooner

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups off the items
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``tools/run_suite.py``), tests that share one expensive piece of
    work run on one worker, which does it once: those parametrized with one submission file
    (its loading and its :func:`graded` gradings: the verdict table's, the self-check's, the
    named failures'), and those of a module-scoped fixture (one group per module, and per
    parameter of a parametrized one: each notebook runs apart)."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        group = _shared_work(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    # a unit (a group, or a test of none) runs on one worker, so one started last would be
    # the suite's tail: the dearest first (longest processing time first), by the seconds
    # tests/costs.tsv recorded, a unit it does not know by its number of tests. run_suite.py
    # passes --no-loadscope-reorder, so pytest-xdist keeps this order (by default it sorts the
    # units by their number of tests, which put the dearest, a notebook's few tests, last)
    costs = recorded_costs()
    size: dict = {}
    for item in items:
        size[_unit(item)] = size.get(_unit(item), 0) + 1
    items.sort(key=lambda item: -costs.get(_unit(item), UNKNOWN_TEST_S * size[_unit(item)]))


#: what the suite runner last measured: a worker's seconds for each unit of the parallel
#: phase (``tools/run_suite.py --costs-file tests/costs.tsv`` rewrites it); it only orders
#: the dispatch, so a stale or missing entry costs time, never a result
COSTS = Path(__file__).resolve().parent / "costs.tsv"
#: a test the table does not know: about the median of the table's single tests
UNKNOWN_TEST_S = 0.5


def recorded_costs(path: Path = COSTS) -> dict[str, float]:
    """``unit -> seconds`` from ``path`` (lines ``seconds<TAB>unit``); empty if it is missing."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            secs, unit = line.split("\t", 1)
            out[unit] = float(secs)
    return out


def _unit(item) -> str:
    """What pytest-xdist schedules as one: the item's group, or the item itself."""
    group = _group(item)
    return f"@{group}" if group else item.nodeid


_CPU_START = pytest.StashKey[float]()
_STARTED = pytest.StashKey[float]()


def _cpu_s() -> float:
    """CPU seconds of this process (its threads included) and of its finished children."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_START] = _cpu_s()
    item.stash[_STARTED] = time.time()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Each test's CPU seconds (set-up, call and tear-down; the processes it waited for
    included) as the ``cpu`` property of its report, before the tear-down's report copies
    them: tools/run_suite.py's durations file says what each test costs the machine, not
    only how long it waited beside the others. And when it started (``start``, seconds since
    the epoch), so that the runner can say how long its phase ran on fewer workers."""
    yield
    if _CPU_START in item.stash:
        item.user_properties.append(("cpu", round(_cpu_s() - item.stash[_CPU_START], 2)))
        item.user_properties.append(("start", round(item.stash[_STARTED], 2)))


def _group(item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    return (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark else None


def _submission(value) -> str | None:
    """The submission file a test parameter names (a path relative to the repository or to
    tests/fixtures, or absolute), relative to the repository; None if it names none."""
    if not isinstance(value, (str, Path)) or not str(value).endswith((".py", ".ipynb")):
        return None
    for p in (Path(value), ROOT / value, FIXTURES / value):
        if p.is_absolute() and p.is_file() and p.resolve().is_relative_to(ROOT):
            return p.resolve().relative_to(ROOT).as_posix()
    return None


#: submissions whose tests also grade another submission, and run on that one's worker so
#: each is graded once in the session (a test of the first compares it with the second)
JOINED = {
    # test_loops: gathering every token models slower than the reference's exchange
    "tests/fixtures/ps2_moe/wrong_a2a_gathers.py": "solutions/ps2_moe.py",
}


def _shared_work(item) -> str | None:
    module = item.module.__name__ if getattr(item, "module", None) else None
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in params.values():
        path = _submission(value)
        if path:
            return f"submission:{JOINED.get(path, path)}"
    defs = getattr(item, "_fixtureinfo", None)
    for name in sorted(item.fixturenames):
        fixdefs = defs.name2fixturedefs.get(name) if defs else None
        if not fixdefs or fixdefs[-1].scope != "module":
            continue
        return f"{module}" + (f":{params[name]}" if name in params else "")  # no "]": xdist
    return None


@pytest.fixture(autouse=True)
def _no_time_limit_carried_over():
    """Every test starts with no time limit counted as run out in this process
    (``core.errors.EXPIRED``: a judge that counts one stops after the function, with
    ``os._exit``). A hang graded in-process by one test would otherwise end the judge loop
    another test runs in the same pytest-xdist worker, and the worker with it (a CI run lost
    its worker in ``test_compile_ahead`` so)."""
    from autograder.core import errors

    errors.EXPIRED = 0
    yield


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def load_fixture(area: str, name: str):
    from autograder.core.loader import load

    return load(FIXTURES / area / f"{name}.py", statement_timeout=5, total_timeout=20)


def grade(area: str, fixture: str, function: str, *, rules: bool = True, **kw):
    """Grade one function of a fixture file in-process (no speed check unless asked), on
    :data:`SEED` unless a seed is given: a test's verdict never depends on the draw (an attack
    may fail one rule on one draw and another on the next: the case's shapes decide which
    weighs more). ``rules`` False: the problem without its structure rules, so that a program
    that breaks them is measured (the grader measures memory and speed only for a program
    that keeps them): the memory and speed checks on their own."""
    from dataclasses import replace

    from autograder.course import registry

    kw.setdefault("with_speed", False)
    kw.setdefault("seed", SEED)
    loaded = load_fixture(area, fixture)
    problem = registry.get(function) if rules else replace(registry.get(function), rules=())
    return local.grade_function(problem, loaded.function(function), **kw)


def hang_in_xla(name: str) -> str:
    """The source of a function ``name(A, mesh)`` whose program never ends inside XLA, with
    its imports (tests/fixtures/class/src/hang_in_xla.py, the class's dave's too): device
    (0, 0) loops forever, the others finish and wait (one busy core, not two)."""
    src = (FIXTURES / "class" / "src" / "hang_in_xla.py").read_text()
    return src[src.index("import jax"):].replace("def hang_in_xla(", f"def {name}(", 1)


#: a ps1 hand-in whose first function's program never ends when run (the judge is busy with it,
#: saying nothing to its parent, for as long as its time limit allows): test_honest,
#: test_judge_pool, test_cluster, test_nbgrader
HANGS_IN_XLA = hang_in_xla("shard_average_jit")


#: the inputs of every shared grading (tests/verdicts.json was recorded on this seed)
SEED = 20240611


def _relative(path) -> str:
    p = Path(path)
    return (p if p.is_absolute() else ROOT / p).resolve().relative_to(ROOT).as_posix()


def loaded(path):
    """The submission at ``path`` (absolute, or relative to the repository), loaded once per
    process."""
    return _loaded(_relative(path))


@functools.lru_cache(maxsize=None)
def _loaded(path: str):
    from autograder.core.loader import load

    return load(ROOT / path, statement_timeout=5, total_timeout=20)


def graded(path, function: str, *, quick: bool = True, speed: bool = True):
    """``function`` of the submission at ``path`` graded in-process on :data:`SEED`, once per
    process for each (quick, speed): every test that needs a grading reads this one. The
    default is the verdict table's (tests/test_verdicts.py: two meshes, speed included);
    ``quick=False`` grades every mesh and edge case. A test parametrized with the path runs
    on the worker of that file's other tests (:func:`pytest_collection_modifyitems`).

    A right answer of :data:`EVERY_MESH` is graded once, on every mesh and edge case with
    the speed check: its own tests read that grading, and so does the verdict table (whose
    outcomes are the same on two meshes and on four for a right answer: a second grading on
    two would only run its memory and speed cases again)."""
    path = _relative(path)
    if path in EVERY_MESH and (quick, speed) in ((True, True), (False, False)):
        quick, speed = False, True
    return _graded(path, function, quick, speed)


#: right answers their own tests grade on every mesh and edge case (test_ps1, test_ps2_moe,
#: test_ps3_ps4): see :func:`graded`. Only right answers: a wrong one may fail on a mesh or an
#: edge case the table's two meshes leave out, and the table would then read another verdict
EVERY_MESH = frozenset({
    "tests/fixtures/ps1/alt_correct.py", "tests/fixtures/ps1/alt_correct_gather.py",
    "tests/fixtures/ps2_moe/alt_ragged.py", "tests/fixtures/ps2_moe/alt_flag_loop.py",
    "solutions/ps3_collective_matmul.py", "tests/fixtures/ps3/alt_correct_a.py",
    "tests/fixtures/ps3/alt_correct_b.py",
    "solutions/ps4_bidirectional.py", "tests/fixtures/ps4/alt_correct.py",
})


@functools.lru_cache(maxsize=None)
def _graded(path: str, function: str, quick: bool, speed: bool):
    from autograder.course import registry
    from autograder.judge import grading

    problem = registry.get(function)
    plan = grading.plan_for(problem, seed=SEED, quick=quick, with_speed=speed,
                            big_cases=big_cases())
    return local.grade_function(problem, _loaded(path).function(function), plan=plan,
                                with_speed=speed)


@functools.lru_cache(maxsize=None)
def big_cases():
    """The big (memory and speed) cases of :data:`SEED` with their NumPy answers, drawn once
    per test session and read by every worker's gradings, as a class run shares them
    (:class:`~autograder.judge.bigcases.BigCaseStore`; the workers inherit the session's
    cache folder)."""
    from autograder.judge.bigcases import BigCaseStore

    return BigCaseStore(Path(os.environ["AUTOGRADER_CACHE_DIR"]) / "test-bigcases")


def check_of(result, name):
    return next(c for c in result.checks if c.name == name)
