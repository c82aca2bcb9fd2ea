"""Files written whole (autograder/core/files.py): the cache's verdicts, big cases and model
modules, and grade-all's reports and CSV are read by other graders and later runs."""
import threading

import pytest

from autograder.core.files import replaced

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


def test_a_file_is_replaced_whole_and_nothing_is_left_beside_it(tmp_path):
    path = tmp_path / "sub" / "verdict.json"
    with replaced(path) as tmp:
        assert tmp.parent == path.parent and tmp != path
        tmp.write_text("new")
        assert not path.exists()  # nothing is seen before the block ends
    assert path.read_text() == "new"
    assert [p.name for p in path.parent.iterdir()] == ["verdict.json"]


def test_a_write_that_fails_keeps_the_old_file(tmp_path):
    path = tmp_path / "verdict.json"
    path.write_text("old")
    with pytest.raises(OSError):
        with replaced(path) as tmp:
            tmp.write_text("half")
            raise OSError("disk full")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["verdict.json"]


def test_two_threads_never_share_a_temporary(tmp_path):
    path = tmp_path / "case.npz"
    names, both_open = [], threading.Barrier(2)

    def write(text):
        with replaced(path) as tmp:
            names.append(tmp)
            tmp.write_text(text)
            both_open.wait(timeout=10)

    threads = [threading.Thread(target=write, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == 2
    assert path.read_text() in ("a", "b")
