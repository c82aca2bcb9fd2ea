"""Files written whole (autograder/core/files.py): the cache's verdicts and model modules, and
grade-all's reports and CSV are read by other graders and later runs (the big cases, one
directory each, are renamed into place whole by autograder/judge/bigcases.py)."""
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


def test_a_notebook_read_lightly_is_read_and_validated_as_nbformat_reads_it():
    """core.imports.light_nbformat (the worker's, grade-all's gradebook and the build's
    nbformat): a release notebook reads and validates in a fresh process, the same notebook
    as a plain ``import nbformat`` reads, and the IRI grammar module is never imported."""
    import subprocess
    import sys

    from conftest import ROOT

    code = (
        "import sys, json\n"
        "from autograder.core.imports import light_nbformat\n"
        "nbformat = light_nbformat()\n"
        f"nb = nbformat.read({str(ROOT / 'release/ps1_sharding/ps1_sharding.ipynb')!r}, 4)\n"
        "nbformat.validate(nb)\n"
        "print(json.dumps([sys.modules.get('rfc3987_syntax', 'absent') is None,"
        " len(nb.cells), nbformat.writes(nb)[:2000]]))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    import json

    import nbformat

    light, cells, text = json.loads(p.stdout)
    plain = nbformat.read(ROOT / "release/ps1_sharding/ps1_sharding.ipynb", 4)
    assert light and cells == len(plain.cells) > 3
    assert text == nbformat.writes(plain)[:2000]
