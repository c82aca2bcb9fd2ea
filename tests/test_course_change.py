"""Changing the course mid-term: the build stops on a cell that names a removed function, and
``gradebook-sync`` brings nbgrader's gradebook in line with the registry."""
import sys

import pytest
from conftest import ROOT
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

#: pure Python on hand-made notebooks and a tiny gradebook: make test-latest leaves it out
pytestmark = pytest.mark.orchestration

sys.path.insert(0, str(ROOT / "tools"))


def _notebook(*cells):
    nb = new_notebook(cells=list(cells))
    for i, c in enumerate(nb.cells):
        c["id"] = f"ps9-{i:03d}"
    return nb


def test_build_names_each_cell_that_calls_a_removed_function():
    from build_notebooks import unknown_names

    nb = _notebook(
        new_markdown_cell("# PS 9\n\n| `mlp_block(In, W, mesh)` | `matmul(A, B)` | `relu(x)` |"),
        new_code_cell("import numpy as np\nfrom selfcheck import check\n\n"
                      "def matmul(A, B):\n    return A @ B"),
        new_code_cell('check("matmul", matmul)\n%timeit matmul(1, 2)'),
        new_code_cell("mine = mlp_block(np.ones(3), W, mesh)\ntry:\n    pass\n"
                      "except ValueError as e:\n    print(e)"),
    )
    errors = unknown_names(nb, {"matmul"}, library=lambda n: n == "relu")
    assert len(errors) == 4, errors
    text, w, mesh, mlp = errors  # in cell order, then by name
    assert text.startswith("cell ps9-000 (markdown: '# PS 9')") and "`mlp_block(...)`" in text
    assert mlp.startswith("cell ps9-003 (code: 'mine = mlp_block(") and "`mlp_block`" in mlp
    assert "NameError" in mlp and "`mesh`" in mesh and "`W`" in w


def test_build_passes_a_notebook_whose_names_are_defined():
    from build_notebooks import unknown_names

    nb = _notebook(new_markdown_cell("Write `matmul(A, B)`; `jnp.roll(x)` is JAX's."),
                   new_code_cell("def matmul(A, B):\n    return [a for a in A]"),
                   new_code_cell("matmul([1], [2])"))
    assert unknown_names(nb, {"matmul"}) == []


def test_build_stops_naming_the_notebook(monkeypatch):
    import build_notebooks

    nb = _notebook(new_code_cell("mlp_block(1)"))
    with pytest.raises(SystemExit) as e:
        build_notebooks.check_names("ps3_collective_matmul", nb)
    assert "notebooks/ps3_collective_matmul.py" in str(e.value)
    assert "cell ps9-000" in str(e.value) and "`mlp_block`" in str(e.value)
