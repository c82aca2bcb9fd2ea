"""Taking definitions out of submissions without running their demos."""
import math
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.core.loader import load


def test_notebook_skips_demos_magics_and_bad_cells(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell("%pip install nothing\nimport math\nK = 3"),
        new_code_cell("def f(x):\n    return x + K"),
        new_code_cell("print('demo output')\nraise RuntimeError('demo cell')"),
        new_code_cell("def g(:\n    pass"),
        new_code_cell("for i in range(10**12):\n    pass"),
        new_code_cell("def h():\n    return math.pi"),
        new_code_cell("%%bash\necho 'not Python' && ls -l"),
        new_code_cell("%%writefile notes.txt\ndef f(x):\n    return 'from a text file'"),
        new_code_cell("%%time\ndef t():\n    return 7"),
    ])
    path = tmp_path / "sub.ipynb"
    nbformat.write(nb, path)
    loaded = load(path)
    assert loaded.function("f")(1) == 4
    assert loaded.function("h")() > 3
    assert loaded.function("g") is None
    assert any("SyntaxError" in n and "cell 4" in n for n in loaded.notes)
    # a cell that a cell magic makes shell or file text is not Python: no note, no effect
    assert len(loaded.notes) == 1, loaded.notes
    assert loaded.function("t")() == 7  # %%time runs its cell as Python


def test_failing_assignment_is_a_note_not_a_crash(tmp_path):
    p = tmp_path / "s.py"
    p.write_text("x = 1 / 0\n\ndef f():\n    return 1\n\ndef g():\n    return x\n")
    loaded = load(p)
    assert loaded.function("f")() == 1
    assert any("ZeroDivisionError" in n for n in loaded.notes)


def test_statement_time_limit(tmp_path):
    p = tmp_path / "s.py"
    p.write_text("import time\nx = time.sleep(30)\n\ndef f():\n    return 2\n\n"
                 "def g():\n    return x\n")
    loaded = load(p, statement_timeout=1)
    assert loaded.function("f")() == 2
    assert any("ran for over" in n for n in loaded.notes)


def test_invalid_notebook_json(tmp_path):
    p = tmp_path / "broken.ipynb"
    p.write_text("{not json")
    try:
        load(p)
    except ValueError as e:
        assert "not a valid notebook" in str(e)
    else:
        raise AssertionError("expected ValueError")


def test_demo_assignments_are_not_run_but_constants_a_function_reads_are(tmp_path):
    p = tmp_path / "s.py"
    p.write_text("import math\nBASE = 10\nSCALE = BASE * 2\nDEMO = print('demo') or 1 / 0\n"
                 "def f(x):\n    return x * SCALE\n")
    loaded = load(p)
    assert loaded.function("f")(2) == 40
    assert "DEMO" not in loaded.namespace
    assert not loaded.notes


def test_blocks_of_definitions_are_loaded_and_demo_blocks_are_not(tmp_path):
    """Code written for several versions picks its imports and helpers in ``try``/``if``
    blocks: those are definitions too. A block that does anything else is a demo."""
    p = tmp_path / "s.py"
    p.write_text(
        "import math\n"
        "try:\n    from math import no_such_name as pick\n"
        "except ImportError:\n    print('an older math')\n    from math import floor as pick\n"
        "if hasattr(math, 'tau'):\n    def turn():\n        return math.tau\n"
        "else:\n    def turn():\n        return 2 * math.pi\n"
        "if math.pi > 3:\n    SCALE = 2\nelse:\n    SCALE = 3\n"
        "if True:\n    UNUSED = 1 / 0\n"
        "if True:\n    RAN = 1\n    print('demo')\n"
        "if True:\n    print('a demo block')\n    for _ in range(3):\n        pass\n"
        "def f(x):\n    return pick(x) * SCALE + turn()\n")
    loaded = load(p)
    assert loaded.function("f")(2.5) == 4 + math.tau
    assert "UNUSED" not in loaded.namespace  # a block of assignments nothing reads
    assert "RAN" not in loaded.namespace  # assignments nothing reads, beside a print
    assert not loaded.notes


def test_a_version_switch_block_is_what_a_graded_function_needs(tmp_path):
    """The note for a failed block names what it left undefined, as for a bare statement."""
    p = tmp_path / "s.py"
    p.write_text("try:\n    from nowhere import shard_map\n"
                 "except ImportError:\n    from nowhere_either import shard_map\n"
                 "def f(x):\n    return shard_map(x)\n")
    loaded = load(p, keep_names={"f"})
    assert loaded.function("f") is not None
    assert any("shard_map" in n and "undefined for f" in n for n in loaded.notes), loaded.notes


def _refused_as_no_notebook(path):
    """Both readers of a hand-in (the loader, and the judge's look at its names) say that
    ``path`` is no notebook, with a ValueError, and nothing else."""
    from autograder.core.loader import written_names

    for read in (load, written_names):
        with pytest.raises(ValueError, match="not a valid notebook"):
            read(path)


def test_a_damaged_notebook_is_refused_with_a_reason_and_a_damaged_cell_costs_itself(tmp_path):
    """JSON that is not a notebook is a ValueError that says so (the judge reads the source to
    choose the assignment: anything else would stop it); a cell that is not a cell is
    skipped, and the cells around it load."""
    from autograder.core.loader import written_names

    for text in ("[1, 2]", '{"cells": 5}', '"text"'):
        p = tmp_path / "bad.ipynb"
        p.write_text(text)
        _refused_as_no_notebook(p)
    p = tmp_path / "damaged.ipynb"
    p.write_text('{"cells": ["x", {"cell_type": "code", "source": 5}, 7, '
                 '{"cell_type": "code", "source": ["def f():\\n", "    return 3"]}]}')
    assert load(p).function("f")() == 3
    assert written_names(p) == {"f"}


def test_source_too_deep_for_python_is_a_note_not_a_crash(tmp_path):
    """Nesting that Python's own parser or compiler cannot take (the judge reads the source
    before any sandbox runs it: an exception there would stop the grader on every retry)."""
    from autograder.core.loader import written_names

    p = tmp_path / "deep.ipynb"
    p.write_text("[" * 100_000 + "]" * 100_000)
    _refused_as_no_notebook(p)
    p = tmp_path / "deep.py"
    p.write_text("X = " + "-" * 100_000 + "1\n\ndef f():\n    return 1\n")
    assert written_names(p) == set()  # the file as a whole cannot be parsed
    assert any("SyntaxError" in n and "too deeply" in n for n in load(p).notes)
    # a cell Python cannot parse, and a statement it parses but cannot analyse further
    nb = new_notebook(cells=[new_code_cell("Y = " + "-" * 100_000 + "1"),
                             new_code_cell("Z = a" + ".b" * 900),
                             new_code_cell("def f():\n    return 1")])
    path = tmp_path / "chain.ipynb"
    nbformat.write(nb, path)
    assert written_names(path) == {"Z", "f"}
    loaded = load(path)
    assert loaded.function("f")() == 1
    assert any("cell 1" in n and "too deeply" in n for n in loaded.notes), loaded.notes
    assert any("cell 2 line 1" in n and "too deeply" in n for n in loaded.notes), loaded.notes


def test_a_dataclass_and_a_custom_vjp_load_as_an_import_would(tmp_path):
    """Two honest definitions that failed at grading time: ``@dataclass`` looks its module up
    in ``sys.modules``, and ``f.defvjp(fwd, bwd)`` is a call at top level that finishes
    defining ``f``. A demo call beside it is still not run."""
    p = tmp_path / "s.py"
    p.write_text(
        "from __future__ import annotations\n"
        "import dataclasses\nimport jax\n\n"
        "@dataclasses.dataclass(frozen=True)\nclass Layout:\n    rows: int\n    cols: int = 2\n\n"
        "@jax.custom_vjp\ndef scale(x):\n    return 2.0 * x\n\n"
        "def _fwd(x):\n    return scale(x), None\n\n"
        "def _bwd(res, g):\n    return (2.0 * g,)\n\n"
        "scale.defvjp(_fwd, _bwd)\n"
        "print(scale(1.0))\n"
        "unrelated.defvjp(_fwd, _bwd)\n\n"  # what no graded function needs is not run
        "def f(x):\n    return scale(x) * Layout(3).cols\n")
    loaded = load(p, keep_names=frozenset({"f"}))
    assert loaded.notes == [], loaded.notes
    assert loaded.function("f")(1.0) == 4.0
    import jax
    assert float(jax.grad(loaded.function("f"))(1.0)) == 4.0  # the vjp rule was attached


def test_ipython_syntax_is_read_as_jupyter_reads_it(tmp_path):
    """Valid cells that lost every point: ``f?``, ``x = !cmd`` and ``r = %timeit -o ...`` made
    the whole cell a SyntaxError, a continuation line starting with ``%`` (the modulo operator)
    became ``pass``, and ``!pip`` indented under an ``if`` left the block empty."""
    nb = new_notebook(cells=[
        new_code_cell("def f(shift, rows):\n    s = (shift\n         % rows)\n    return s\n"
                      "f?\nout = !echo hi\nres = %timeit -o -n1 -r1 f(3, 2)"),
        new_code_cell("import sys\nif 'google.colab' in sys.modules:\n    !pip install -q x\n"
                      "def g():\n    return 2"),
        new_code_cell("%%time\ndef t():\n    return f(7, 4)"),
    ])
    path = tmp_path / "sub.ipynb"
    nbformat.write(nb, path)
    loaded = load(path, keep_names=frozenset({"f", "g", "t"}))
    assert loaded.notes == [], loaded.notes
    assert loaded.function("f")(7, 4) == 3 and loaded.function("g")() == 2
    assert loaded.function("t")() == 3
    assert "out" not in loaded.namespace and "res" not in loaded.namespace  # demos: not run


def test_a_skipped_statement_that_changes_what_a_function_reads_is_said(tmp_path):
    """A top-level loop filling a table, a call filling a list and an augmented assignment are
    not run at grading time (the notebook ran them): the student is told which statement and
    which name, where a graded function reads it. Demos, prints and plots say nothing."""
    p = tmp_path / "s.py"
    p.write_text(
        "import math\nSIGN = {}\nfor k in range(3):\n    SIGN[k] = 1.0\n"
        "ROWS = []\nROWS.append(2)\nK = 1\nK += 1\n"
        "def f(i):\n    return SIGN[i] * len(ROWS) * K * math.pi\n"
        "print(f(0))\nresults = [f(i) for i in range(2)]\nmath.floor(1.5)\n"
        "f.__doc__ = 'demo'\n")
    loaded = load(p, keep_names=frozenset({"f"}))
    said = " | ".join(loaded.notes)
    assert len(loaded.notes) == 3, loaded.notes
    assert "line 3: not run at grading time" in said and "changes SIGN, which f reads" in said
    assert "changes ROWS" in said and "changes K" in said


def test_a_skipped_call_of_the_submissions_own_function_that_fills_a_global_is_said(tmp_path):
    """``fill(4)`` at the top level is skipped like any call; where the helper binds a
    ``global`` or mutates a module-level table a graded function reads, the student is told.
    A call of a helper that changes only its own locals, or of the graded function, says
    nothing."""
    p = tmp_path / "s.py"
    p.write_text(
        "TABLE = {}\nSCALE = 1.0\n"
        "def fill(n):\n    for k in range(n):\n        TABLE[k] = k\n"
        "def set_scale(v):\n    global SCALE\n    SCALE = v\n"
        "def both(n):\n    fill(n)\n    set_scale(2.0)\n"
        "def pure(n):\n    TABLE = {}\n    TABLE[0] = n\n    return TABLE\n"
        "def f(i):\n    return TABLE[i] * SCALE\n"
        "fill(4)\nset_scale(3.0)\nboth(2)\npure(1)\nprint(f(0))\n")
    loaded = load(p, keep_names=frozenset({"f"}))
    assert len(loaded.notes) == 3, loaded.notes
    line = {int(n.split("line ")[1].split(":")[0]): n for n in loaded.notes}
    assert "changes TABLE, which f reads" in line[18]
    assert "changes SCALE, which f reads" in line[19]
    assert "changes SCALE and TABLE, which f reads" in line[20]


def test_skipped_set_up_is_said_and_demos_are_not(tmp_path):
    """A top-level call or assignment kept for its side effect (``jax.config.update``, a seed,
    a registration, ``os.environ[...] =``, ``exec``, a helper that does one of these) is not
    run at grading time: each is named, with what to do. Prints, checks, array functions,
    display settings, demo assignments and docstrings say nothing."""
    from autograder.core.loader import skipped_notes

    p = tmp_path / "s.py"
    p.write_text(
        '"""my answers"""\n'
        "import os, sys, random\nimport jax\nimport numpy as np\nfrom jax import config\n"
        "jax.config.update('jax_enable_x64', True)\n"           # 6
        "config.update('jax_default_matmul_precision', 'highest')\n"  # 7
        "np.random.seed(0)\n"                                    # 8
        "os.environ['XLA_FLAGS'] = '--xla_cpu_foo'\n"            # 9
        "jax.tree_util.register_pytree_node(int, None, None)\n"  # 10
        "_ = jax.config.update('jax_log_compiles', False)\n"     # 11
        "def setup():\n    random.seed(1)\n"                     # 12
        "def f(x):\n    return x\n"                              # 14
        "setup()\n"                                              # 16
        "print(np.append(np.add(1, 2), 3))\nnp.set_printoptions(precision=3)\n"
        "out = f(jax.numpy.arange(3))\nf(2)\njax.block_until_ready(out)\n'a note'\n")
    loaded = load(p, keep_names=frozenset({"f"}))
    said = {int(n.split("line ")[1].split(":")[0]): n for n in loaded.notes}
    assert sorted(said) == [6, 7, 8, 9, 10, 11, 16], loaded.notes
    assert ("your statement \"jax.config.update('jax_enable_x64', True)\" is not run at grading "
            "time") in said[6]
    assert "(it runs jax.config.update(...))" in said[11]
    assert "(it runs random.seed(...) in setup)" in said[16]
    for note in said.values():
        assert "Put the set-up a graded function needs inside that function" in note
    assert skipped_notes(p, frozenset({"f"})) == loaded.notes  # the same, without running
    assert loaded.function("f")(3) == 3


def test_an_assignment_kept_for_a_helpers_effect_is_said(tmp_path):
    """``filled = fill()`` binds a name nothing reads, so it is not run; the helper fills a
    table a graded function reads: that is said as for a bare call."""
    p = tmp_path / "s.py"
    p.write_text("TABLE = {}\ndef fill():\n    TABLE[0] = 1\n    return True\n"
                 "def f(i):\n    return TABLE[i]\nfilled = fill()\n")
    loaded = load(p, keep_names=frozenset({"f"}))
    assert len(loaded.notes) == 1 and "line 7" in loaded.notes[0], loaded.notes
    assert "changes TABLE, which f reads" in loaded.notes[0]



def test_the_trusted_sides_parses_hold_one_lock(monkeypatch, tmp_path):
    """CPython 3.11's AST constructor keeps its recursion depth in state every thread shares,
    and two parses that interleave fail with "SystemError: AST constructor recursion depth
    mismatch" (a class run's threads lost a hand-in to it): every parse of the trusted side (a
    hand-in loaded, the grader's own files hashed) and every tree compiled back holds
    ``loader.AST_LOCK``."""
    import ast
    import builtins

    from autograder.core import identity, loader

    held: list[tuple[str, bool]] = []
    parse, compile_ = ast.parse, builtins.compile

    def spy_parse(*a, **k):
        held.append(("parse", loader.AST_LOCK.locked()))
        return parse(*a, **k)

    def spy_compile(source, *a, **k):
        if isinstance(source, ast.AST):
            held.append(("compile", loader.AST_LOCK.locked()))
        return compile_(source, *a, **k)

    monkeypatch.setattr(ast, "parse", spy_parse)
    monkeypatch.setattr(builtins, "compile", spy_compile)
    src = tmp_path / "sub.py"
    src.write_text("import math\n\ndef f(x):\n    return math.sqrt(x)\n")
    assert loader.load(src).function("f")(4.0) == 2.0
    identity._imported(Path(identity.__file__), Path(identity.__file__).parents[1])
    kinds = {k for k, _ in held}
    assert kinds == {"parse", "compile"}, held
    assert all(locked for _, locked in held), held
    assert not loader.AST_LOCK.locked()
