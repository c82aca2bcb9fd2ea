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
