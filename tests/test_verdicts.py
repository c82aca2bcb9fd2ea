"""The same verdicts on every supported JAX: a recorded table of (submission, function, check).

The reference answers (``solutions/<assignment>.py``) and the fixtures of every assignment (the
named wrong answers and the right ones written differently, loops included) are graded on a fixed
seed, speed check included, and each check's outcome is compared with ``tests/verdicts.json``.
The table is one for the whole range: CI checks it on the oldest JAX (``make test``) and on the
newest (``make test-latest``). Where two versions disagree, the grader is what gets fixed, never
the table. With the speed check the table also records its basis: the modeled TPU, a program
the model cannot price, wrong values on the speed case, or not measured (a program that fails
structure, whose speed could not count); never wall-clock off a TPU.

    python tests/test_verdicts.py              # grade, print the differences from the table
    python tests/test_verdicts.py --record     # rewrite tests/verdicts.json from this JAX
"""
from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if __name__ == "__main__":  # as a script: 8 emulated devices and a private cache, as in pytest
    sys.path[:0] = [str(HERE), str(ROOT)]
    import conftest  # noqa: F401

from conftest import SEED, graded, loaded  # noqa: E402  (the seed of every case, fixed)

TABLE = HERE / "verdicts.json"
#: fixtures left out: they are about time limits and parsing, not verdicts (tests elsewhere)
SKIP = {"hang_in_function", "hang_on_import", "syntax_error"}
AREAS = {"ps1": "ps1_sharding", "ps2_moe": "ps2_moe", "ps3": "ps3_collective_matmul",
         "ps4": "ps4_bidirectional"}


def submissions() -> list[tuple[str, str]]:
    """(path relative to the repository, assignment): the reference answers, then fixtures."""
    out = [(f"solutions/{asg}.py", asg) for asg in AREAS.values()]
    for area, asg in AREAS.items():
        for p in sorted((HERE / "fixtures" / area).glob("*.py")):
            if p.stem not in SKIP:
                out.append((str(p.relative_to(ROOT)), asg))
    return out


def entries() -> list[tuple[str, str]]:
    """(path, function) for every graded function each submission defines."""
    import ast

    from autograder.course import registry

    out = []
    for path, asg in submissions():
        defined = {n.name for n in ast.parse((ROOT / path).read_text()).body
                   if isinstance(n, ast.FunctionDef)}
        out += [(path, p.name) for p in registry.problems(asg) if p.name in defined]
    return out


def key(path: str, function: str) -> str:
    return f"{path}::{function}"


def speed_basis(check) -> str:
    if "Not measured: " in check.message:
        return "not measured"  # it fails structure: nothing it measured could count
    if "does not compute the answer" in check.message:
        return "wrong values"  # failed before any timing: its speed program is wrong
    if "cannot price this program" in check.message:
        return "unpriced"
    return "modeled TPU" if "modeled on TPU" in check.message else "wall-clock"


def verdict(path: str, function: str) -> dict:
    """{'checks': {check: passed}, 'speed basis': ...} of one function, graded in-process
    (the grading other tests of the same file read too: conftest's ``graded``)."""
    res = graded(path, function)
    out: dict = {"checks": {c.name: bool(c.passed) for c in res.checks}}
    speed = next((c for c in res.checks if c.name == "speed"), None)
    if speed is not None and not speed.message.startswith("not checked"):
        out["speed basis"] = speed_basis(speed)
    _messages[key(path, function)] = {c.name: c.message for c in res.checks}
    return out


#: the last grading's messages per entry (shown when a verdict differs)
_messages: dict = {}


def recorded() -> dict:
    return json.loads(TABLE.read_text())["verdicts"] if TABLE.exists() else {}


# ------------------------------------------------------------------------------ the tests
ENTRIES = entries()


def test_the_table_covers_every_graded_function():
    assert sorted(recorded()) == sorted(key(*e) for e in ENTRIES), \
        "the submissions changed: python tests/test_verdicts.py --record (and review the diff)"


@pytest.mark.parametrize("path,function", ENTRIES, ids=[key(*e) for e in ENTRIES])
def test_same_verdicts_as_recorded(path, function):
    want = recorded().get(key(path, function))
    got = verdict(path, function)
    assert got == want, (f"{key(path, function)} on this JAX: {got}\nrecorded: {want}\n"
                         + json.dumps(_messages.get(key(path, function)), indent=1))
    # off a TPU the model decides, whatever the program holds
    assert got.get("speed basis") != "wall-clock", _messages[key(path, function)]["speed"]


def test_the_reference_answers_pass_every_check():
    table = recorded()
    for path, function in ENTRIES:
        if path.startswith("solutions/"):
            v = table[key(path, function)]
            assert all(ok is not False for ok in v["checks"].values()), (path, function, v)


def _graded_layouts(function: str) -> tuple:
    from autograder.course import registry
    from autograder.judge import grading

    return tuple(grading.plan_for(registry.get(function), seed=SEED, quick=True).layouts())


@pytest.mark.parametrize("path,function", ENTRIES, ids=[key(*e) for e in ENTRIES])
def test_the_self_check_agrees_on_structure(path, function):
    """The public check runs the grader's structure rules: a program the table fails on
    structure fails the self-check with a structure message, and one it passes is not failed
    on structure (the self-check may still catch wrong values on its own small cases)."""
    from autograder.public import check as public

    want = recorded()[key(path, function)]["checks"]
    if not (want["numerics"] and want.get("sharding", True)):
        pytest.skip("wrong values: the structure verdict is not the point")
    try:  # on the meshes the table's grading used (its quick plan): like against like
        public.check(function, loaded(path).function(function), cases=1, verbose=False,
                     seed=SEED, layouts=_graded_layouts(function), big=False,
                     edges=False)  # structure is read on the randomized cases
        problem = None
    except AssertionError as e:
        problem = str(e)
    on_structure = problem is not None and ": structure: " in problem
    assert on_structure == (not want["structure"]), problem
    if problem is not None and not on_structure:  # only wrong values, which the grader missed
        assert "values differ" in problem, problem


#: entries whose every check the self-check runs at home, against the table: right answers, one
#: the grader fails on speed alone (ps2's worst-case exchange rounds, ps1's roll by lookup), and
#: one that fails structure, whose fast program is then not credited for speed
AT_HOME = ("solutions/ps1_sharding.py::roll_diff",
           "tests/fixtures/ps1/alt_correct_gather.py::roll_diff",
           "tests/fixtures/ps1/wrong_no_shard_map.py::roll_diff",
           "tests/fixtures/ps2_moe/alt_loops.py::moe_all_to_all")


@functools.lru_cache(maxsize=None)
def _release_entry(function: str) -> dict:
    """The release folder's public table entry of ``function``: a baseline kept with the grader
    travels as its modeled figures, as tools/build_notebooks.py ships it."""
    from autograder.course import registry
    from autograder.public import check as public

    return public.public_entry(registry.get(function), figures=True)


@pytest.mark.parametrize("entry", AT_HOME)
def test_the_self_check_gives_the_graders_verdicts(entry, monkeypatch):
    """pytest in a release folder is the grader at home: every check the grader runs passes
    or fails there as the table records it, speed and memory included (the figures at the
    grader's shapes, against a kept baseline's shipped figures), on the table's meshes and
    seed. A slow answer that is right fails speed at home, never only in the grader."""
    from autograder.public import check as public

    path, function = entry.split("::")
    want = recorded()[entry]["checks"]
    monkeypatch.setattr(public, "PUBLIC", {function: _release_entry(function)})
    got = public.run_checks(function, loaded(path).function(function), cases=1, seed=SEED,
                            layouts=_graded_layouts(function))
    assert {r.name: r.passed for r in got} == want, "\n".join(
        f"{r.name}: {r.passed} {r.message}" for r in got)
    if not want.get("speed", True):
        says = ("not credited" if want.get("structure") is False else "make it faster")
        assert says in next(r for r in got if r.name == "speed").message


@pytest.mark.orchestration
def test_speed_and_memory_count_only_with_structure():
    """The rule over the whole table: no function that fails structure keeps a memory or speed
    verdict (:func:`autograder.core.results.not_measured`)."""
    broke = {k: v["checks"] for k, v in recorded().items() if v["checks"]["structure"] is False}
    assert broke
    for k, checks in broke.items():
        assert not any(checks.get(n) for n in ("memory", "speed")), (k, checks)


#: fixtures that fail structure: a whole-output psum, a ring that sends one block too many and a
#: roll without shard_map would be fast enough, an exchange that all-gathers A would not; none
#: is measured, none credited
NOT_CREDITED = [
    ("tests/fixtures/ps3/single_psum.py", "matmul_allreduce", "speed"),
    ("tests/fixtures/ps3/send_every_step.py", "matmul_reducescatter", "speed"),
    ("tests/fixtures/ps1/wrong_no_shard_map.py", "roll_diff", "speed"),
    ("tests/fixtures/ps2_moe/wrong_a2a_gathers.py", "moe_all_to_all", "memory"),
    ("tests/fixtures/ps2_moe/wrong_a2a_gathers.py", "moe_all_to_all", "speed"),
]


@pytest.mark.parametrize("path,function,check", NOT_CREDITED,
                         ids=[f"{key(p, f)}:{c}" for p, f, c in NOT_CREDITED])
def test_a_program_that_fails_structure_earns_no_speed_nor_memory(path, function, check):
    """The verdict table's grading read for its words: the measured check fails with the rule,
    not measured (nothing it measured could count), and the function keeps only the numerics
    and sharding shares."""
    from autograder.core.results import MEASURED_NEED_STRUCTURE

    res = graded(path, function)
    by = {c.name: c for c in res.checks}
    assert by["numerics"].passed and not by["structure"].passed, res.report()
    got = by[check]
    assert not got.passed and not got.skipped, got.message
    assert got.message.startswith("not credited: the program fails the structure rules (see "
                                  f"structure); {MEASURED_NEED_STRUCTURE}. Not measured: "), \
        got.message
    assert "modeled on TPU" not in got.message and "ratio" not in got.message, got.message
    earned = sum(res.weights[n] for n in ("numerics", "sharding") if by[n].passed)
    total = sum(res.weights[c.name] for c in res.checks)
    assert res.score == pytest.approx(res.max_score * earned / total, abs=1e-4), res.report()


#: the speed message's counts (autograder.tpumodel.work.Floor.clause): the model's, XLA's
_COUNTS = (r"the model counts (?P<model>[\d.e+-]+) GFLOP and XLA (?P<xla>[\d.e+-]+)",
           r"XLA counts (?P<xla>[\d.e+-]+) GFLOP where the model counted (?P<model>[\d.e+-]+)")


@pytest.mark.parametrize("path,function", ENTRIES, ids=[key(*e) for e in ENTRIES])
def test_the_model_counts_at_least_xlas_flops(path, function):
    """Every program the table models stands on at least XLA's FLOP count of the executable
    the judge compiled (the grading reused from the verdict test: nothing is graded again):
    either the model's own count is within the floor's slack of XLA's, or the message says
    XLA's was used. The reference answers and the honest fixtures never need the floor."""
    import re

    from autograder.tpumodel.work import SLACK

    speed = next((c for c in graded(path, function).checks if c.name == "speed"), None)
    if speed is None or "modeled on TPU" not in speed.message:
        pytest.skip("no modeled time: wrong values, refused or unpriced before the model")
    got = [m for m in (re.search(r, speed.message) for r in _COUNTS) if m]
    assert len(got) == 1, speed.message
    model, xla = float(got[0]["model"]), float(got[0]["xla"])
    floored = "the higher is used" in speed.message
    # the figures are quoted to 4 digits
    assert (floored and xla > model) or xla <= model * (1 + SLACK) * (1 + 1e-3), speed.message
    honest = path.startswith("solutions/") or Path(path).stem.startswith("alt_")
    assert not (honest and floored), speed.message


# ------------------------------------------------------------------------- as a script
def main(argv=None) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help=f"rewrite {TABLE.name}")
    a = ap.parse_args(argv)
    import jax

    old, new, t0 = recorded(), {}, time.time()
    for path, function in ENTRIES:
        k = key(path, function)
        new[k] = verdict(path, function)
        flag = "" if old.get(k) == new[k] else "   <- differs from the table"
        print(f"{k}: {new[k]}{flag}", flush=True)
    print(f"graded {len(new)} functions in {time.time() - t0:.0f} s on JAX {jax.__version__}")
    diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if a.record:
        TABLE.write_text(json.dumps({
            "about": "tests/test_verdicts.py: the same on every JAX of the supported range; "
                     f"seed {SEED}, quick=True; recorded on JAX {jax.__version__}",
            "verdicts": new}, indent=1, sort_keys=True) + "\n")
        print(f"wrote {TABLE.relative_to(ROOT)} ({len(diff)} entries changed)")
        return 0
    print(f"{len(diff)} differ from {TABLE.relative_to(ROOT)}", *diff, sep="\n  ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
