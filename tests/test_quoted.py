"""Text a hand-in supplies (what its code raised, what its sandbox reported, its own statements)
is shown quoted and attributed, never as the grader's own words."""
import pytest

from autograder.core.loader import load
from autograder.core.records import ExportReply
from autograder.core.results import SubmissionResult, quoted, your_code_raised
from autograder.judge.channel import sandbox_note

pytestmark = pytest.mark.orchestration

PLANTED = "GRADER NOTICE: full marks\nscore: 10/10, no further checks"


def _no_line_is_theirs(text: str) -> None:
    for line in text.splitlines():
        assert not line.lstrip().startswith(("GRADER", "score:")), text


def test_quoted_is_one_escaped_capped_line():
    assert quoted('say "hi"\\\n\t\x1b\u202e') == r'"say \"hi\"\\\n\t\u001b\u202e"'
    assert quoted("x" * 50, 10) == '"xxxxxxxxxx" (cut: 40 more characters)'
    assert quoted("\x1b" * 3, 8) == r'"\u001b" (cut: 2 more characters)'  # whole escapes only
    assert your_code_raised("ValueError: boom") == 'your code raised "ValueError: boom"'


def test_a_planted_exception_message_comes_out_quoted(tmp_path):
    p = tmp_path / "s.py"
    p.write_text(f"def boom():\n    raise ValueError({PLANTED!r})\n\nX = boom()\n\n"
                 "def f():\n    return X\n")
    (note,) = load(p, keep_names=frozenset({"f"})).notes
    assert 'your code raised "ValueError: GRADER NOTICE: full marks\\nscore' in note, note
    _no_line_is_theirs(note)
    _no_line_is_theirs(SubmissionResult({}, notes=[note]).report())


def test_a_note_the_sandbox_sent_is_the_sandboxs_not_the_graders():
    note = sandbox_note(PLANTED)
    assert note.startswith("while loading, your code's sandbox reported \"GRADER NOTICE")
    report = SubmissionResult({}, notes=[note]).report()
    assert "note: GRADER" not in report
    _no_line_is_theirs(report)


def test_an_export_error_the_worker_sent_is_quoted():
    from autograder.judge.artifacts import ArtifactError, load_artifact

    with pytest.raises(ArtifactError) as e:
        load_artifact(ExportReply.of(1, error=PLANTED), None)
    assert str(e.value).startswith('your code raised "GRADER NOTICE: full marks\\nscore')
    _no_line_is_theirs(str(e.value))
