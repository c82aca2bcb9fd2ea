"""The records that cross process boundaries: they rebuild themselves, and anything else on a
line (from the untrusted worker above all) is refused with a RecordError, never evaluated."""
import json

import pytest

from autograder.core import records as R

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


def _roundtrip(rec):
    return R.parse(rec.to_line())


@pytest.mark.parametrize("rec", [
    R.ExportRequest(3, "roll_diff", (2, 4), (R.ArgSpec((8, 4), "float32", ("X", "Y")),
                                              R.ArgSpec(static=-3)), "cpu"),
    R.ExportRequest(0, "moe_local", None, (R.ArgSpec((4, 2), "float32", None),), "tpu"),
    R.Loading(2, "cell 3 line 4"),
    R.Loaded(["roll_diff"], ["a note"]),
    R.ExportReply.of(7, b"\x00\x01program"),
    R.ExportReply.of(8, error="TypeError: no"),
    R.Plan("ps1_sharding", ["roll_diff"], ["n"], [3]),
    R.Start("roll_diff"),
    R.Result("roll_diff", [{"name": "numerics", "passed": True, "message": "ok"}]),
    R.Done(),
])
def test_every_record_rebuilds_itself(rec):
    assert _roundtrip(rec) == rec


def test_reply_payload_is_the_bytes_sent():
    assert _roundtrip(R.ExportReply.of(1, b"abc")).payload() == b"abc"
    with pytest.raises(R.RecordError):
        R.ExportReply(1, artifact="not base64!").payload()


@pytest.mark.parametrize("line", [
    "not json", "[]", '{"no": "type"}', '{"type": "nonsense"}',
    '{"type": "start", "function": "f", "extra": 1}',          # unknown field
    '{"type": "artifact", "id": "1"}',                          # id not an int
    '{"type": "artifact", "id": true}',                         # a bool is not an id
    '{"type": "loaded", "defined": [1, 2]}',                    # names must be strings
    '{"type": "export", "id": 1, "function": "f", "layout": [2], "args": [{"shape": [1],'
    ' "dtype": 3}]}',
])
def test_malformed_lines_are_refused(line):
    with pytest.raises(R.RecordError):
        R.parse(line)


def test_only_the_expected_types_are_accepted():
    line = R.Result("roll_diff", []).to_line()
    with pytest.raises(R.RecordError, match="unexpected record type"):
        R.parse(line, allowed=(R.ExportReply,))


def test_untrusted_lists_are_capped():
    rec = R.parse(json.dumps({"type": "loaded", "defined": ["f" * 500] * 1000,
                              "notes": ["n" * 5000] * 1000}))
    assert len(rec.defined) == 200 and len(rec.defined[0]) == 100
    assert len(rec.notes) == 50 and len(rec.notes[0]) == 600


def test_oversized_lines_are_refused():
    with pytest.raises(R.RecordError, match="too long"):
        R.parse(b"x" * (R.MAX_LINE + 1))


def test_every_field_a_worker_writes_is_capped_and_a_cut_is_marked():
    """A forged record cannot carry megabytes of the student's text into reports."""
    import json

    from autograder.core.records import CUT, Loaded, Loading, parse

    big = "GRADER NOTICE: full marks. " * 300_000  # about 8 MB
    rec = parse(json.dumps({"type": "loading", "stmt": 3, "where": big}), allowed=(Loading,))
    assert len(rec.where) <= 200 and rec.where.endswith(CUT)
    rec = parse(json.dumps({"type": "loaded", "defined": ["roll_diff"] * 500,
                            "notes": [big] * 80}), allowed=(Loaded,))
    assert len(rec.notes) == 50 and all(len(n) <= 600 for n in rec.notes)
    assert rec.notes[0].endswith(CUT) and rec.notes[-1].startswith("... and ")
    assert len(rec.defined) == 200


# -- the judge's options and the limits' defaults ----------------------------------------------


def _judge_options(**limits):
    return R.JudgeOptions(quick=True, seed=7, with_speed=False, timed_speed=True,
                          isolation=False, cache_dir="/tmp/cache",
                          limits=R.Limits(**{"load_s": 4.0, "memory_mb": None, **limits}))


def test_the_judges_options_rebuild_themselves():
    rec = _judge_options(statement_s=3.5, output_mb=8)
    d = json.loads(json.dumps(rec.to_dict()))
    assert d["type"] == "options" and d["limits"]["statement_s"] == 3.5
    assert R.JudgeOptions.from_dict(d) == rec
    assert _roundtrip(rec) == rec
    lim = R.Limits(per_function_s=9, folder_entries=5)
    assert R.Limits.from_dict(json.loads(json.dumps(lim.to_dict()))) == lim


def test_options_judge_options_carry_every_option_the_judge_reads(tmp_path):
    from autograder.supervisor.options import Options, cache_for

    lim = R.Limits(load_s=4.0, statement_s=3.0, export_s=50.0, per_function_s=60.0,
                   output_mb=8, address_space_mb=None, student_memory_mb=1024)
    opts = Options(quick=True, seed=5, with_speed=False, timed_speed=True, isolation=False,
                   cache_dir=tmp_path, limits=lim)
    rec = R.parse(opts.judge_options().to_line(), allowed=(R.JudgeOptions,))
    assert (rec.quick, rec.seed, rec.with_speed, rec.timed_speed, rec.isolation) == \
        (True, 5, False, True, False)
    assert rec.cache_dir == str(cache_for(opts)) and rec.limits == lim
    assert rec.limits is not lim  # the judge's copy: a later change of opts reaches no judge
    assert rec.limits.export_limit_s() == 30.0  # within half the function's limit


@pytest.mark.parametrize("change, named", [
    (lambda d: d.update(nope=1), r"JudgeOptions: unknown field\(s\) \['nope'\]"),
    (lambda d: d.pop("seed"), r"JudgeOptions: missing field\(s\) \['seed'\]"),
    (lambda d: d.update(seed="7"), r"JudgeOptions\.seed: expected int, found str"),
    (lambda d: d.update(quick=1), r"JudgeOptions\.quick: expected bool, found int"),
    (lambda d: d.update(seed=True), r"JudgeOptions\.seed: expected int, found bool"),
    (lambda d: d.update(isolation=None), r"JudgeOptions\.isolation: may not be None"),
    (lambda d: d.update(limits=[]), r"JudgeOptions\.limits: expected Limits, found list"),
    (lambda d: d["limits"].update(load_s="4"), r"Limits\.load_s: expected float, found str"),
    (lambda d: d["limits"].update(loads=4), r"Limits: unknown field\(s\) \['loads'\]"),
    (lambda d: d["limits"].pop("output_mb"), r"Limits: missing field\(s\) \['output_mb'\]"),
])
def test_the_judges_options_refuse_a_field_unknown_missing_or_mistyped(change, named):
    d = _judge_options().to_dict()
    change(d)
    with pytest.raises(R.RecordError, match=named):
        R.JudgeOptions.from_dict(d)
    with pytest.raises(R.RecordError, match=named):  # on the line, as the judge reads it
        R.parse(json.dumps(d), allowed=(R.JudgeOptions,))


#: the limits the judge, its sandbox and the command lines read: each default is written in
#: ``Limits`` alone (the supervisor's own counters, max_restarts, judge_jobs and the folder
#: limits, are read from Limits by the supervisor alone, and their values are common numbers)
GUARDED = ("per_function_s", "load_s", "statement_s", "export_s", "memory_mb",
           "student_memory_mb", "address_space_mb", "output_mb")

#: numbers in a default position equal to a guarded limit's default that are not that limit,
#: (owner, name): why
NOT_A_COPY = {
    ("GradeInSandbox", "cell_timeout"):
        "the notebook run's own limit per cell (the feedback's outputs), not a grading limit",
    ("load", "statement_timeout"):
        "core/loader.py ships in the students' self-check, which has no core/records.py",
    ("<module>", "TIME_LIMIT_S"):
        "public/check.py's own limit per public case, shipped to students without records.py",
}


def _default_numbers(source: str) -> list[tuple[str, str, float]]:
    """(owner, name, value) for every number written in a default position of ``source``: a
    parameter's default (owner: the function), a class's or module's constant (a dataclass
    field's default, a traitlet's first argument among them; owner: the class, or
    ``<module>``), and a call's ``default=`` (an argparse option; name: its flag)."""
    import ast

    out = []

    def number(n):
        return isinstance(n, ast.Constant) and type(n.value) in (int, float)

    def visit(node, owner):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a, name = node.args, getattr(node, "name", "<lambda>")
            pos = a.posonlyargs + a.args
            pairs = [*zip(pos[len(pos) - len(a.defaults):], a.defaults),
                     *zip(a.kwonlyargs, a.kw_defaults)]
            out.extend((name, arg.arg, d.value) for arg, d in pairs if d is not None and number(d))
            owner = name
        elif isinstance(node, (ast.ClassDef, ast.Module)):
            owner = getattr(node, "name", "<module>")
            for c in node.body:
                if isinstance(c, ast.Assign) and len(c.targets) == 1:
                    target, value = c.targets[0], c.value
                elif isinstance(c, ast.AnnAssign):
                    target, value = c.target, c.value
                else:
                    continue
                while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
                       and value.func.attr == "tag"):  # a traitlet's .tag(config=True)
                    value = value.func.value
                if isinstance(value, ast.Call) and value.args:  # Float(150.0, help=...)
                    value = value.args[0]
                if isinstance(target, ast.Name) and number(value):
                    out.append((owner, target.id, value.value))
        elif isinstance(node, ast.Call):
            flag = (node.args[0].value if node.args and isinstance(node.args[0], ast.Constant)
                    else "default")
            out.extend((owner, flag, k.value.value) for k in node.keywords
                       if k.arg == "default" and number(k.value))
        for child in ast.iter_child_nodes(node):
            visit(child, owner)

    visit(__import__("ast").parse(source), "<module>")
    return out


def test_the_scan_for_copies_sees_every_default_position():
    src = '''
import argparse
from traitlets import Float
X_S = 150.0
class Opts:
    load_s: float = 120.0
    memory = Float(6144, help="h").tag(config=True)
def f(a, statement_s=20.0, *, export_s=120.0):
    ap = argparse.ArgumentParser()
    ap.add_argument("--output-mb", type=int, default=32)
    g = lambda mb=16384: mb
'''
    assert sorted(_default_numbers(src)) == sorted([
        ("<module>", "X_S", 150.0), ("Opts", "load_s", 120.0), ("Opts", "memory", 6144),
        ("f", "statement_s", 20.0), ("f", "export_s", 120.0), ("f", "--output-mb", 32),
        ("<lambda>", "mb", 16384)])


def test_each_default_limit_is_written_once():
    """The judge's limits, the sandbox's and the command lines' defaults read ``Limits``: a
    number equal to a guarded limit's default, written as a default anywhere else in the
    package, is a copy that would drift (each known exception says why it is not one)."""
    import dataclasses
    from pathlib import Path

    pkg = Path(R.__file__).resolve().parents[1]
    want = {f.name: f.default for f in dataclasses.fields(R.Limits) if f.name in GUARDED}
    assert set(want) == set(GUARDED)
    found, copies, seen = {}, [], set()
    for path in sorted(pkg.rglob("*.py")):
        for owner, name, value in _default_numbers(path.read_text()):
            if path == Path(R.__file__).resolve() and owner == "Limits":
                found[name] = value
                continue
            same = sorted(k for k, v in want.items() if v == value)
            if not same:
                continue
            if (owner, name) in NOT_A_COPY:
                seen.add((owner, name))
                continue
            copies.append(f"{path.relative_to(pkg.parent)}: {owner}.{name} = {value!r} "
                          f"(Limits.{' / Limits.'.join(same)}'s default)")
    assert {k: found.get(k) for k in GUARDED} == want, "the scan did not see Limits' defaults"
    assert not copies, "a limit's default written again (read it from Limits):\n" + \
        "\n".join(copies)
    assert seen == set(NOT_A_COPY), f"no longer found, drop: {set(NOT_A_COPY) - seen}"
