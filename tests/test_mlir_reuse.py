"""MLIR contexts reused per thread (autograder.core.mlir_reuse): bounded, never shared between
threads, and invisible in what a program exports and compiles to."""
import threading

import jax
import numpy as np
import pytest
from jax._src.interpreters import mlir
from jax.sharding import PartitionSpec as P

from autograder.core import devices, mlir_reuse
from autograder.core.meshes import make_mesh


def _contexts(n: int) -> list:
    """``n`` contexts handed out, one after the other, to a new thread."""
    got: list = []
    t = threading.Thread(target=lambda: got.extend(mlir.make_ir_context() for _ in range(n)))
    t.start()
    t.join()
    return got


def test_the_grader_processes_reuse_contexts():
    # conftest calls it, as the judge and the worker do at start-up
    assert mlir_reuse.reuse_per_thread() in ("installed", "jax")
    assert mlir_reuse.reuse_per_thread() == mlir_reuse.state  # idempotent
    made_by = getattr(mlir.make_ir_context, "made_by", None)
    assert not hasattr(made_by, "made_by")  # never wrapped twice


def test_a_thread_reuses_its_context_a_bounded_number_of_times():
    got = _contexts(3 * (mlir_reuse.REUSES + 1))
    runs: list = []
    for ctx in got:
        if runs and runs[-1][0] is ctx:
            runs[-1][1] += 1
        else:
            runs.append([ctx, 1])
    assert len(runs) >= 3, "a context was handed out more often than the bound allows"
    assert all(n <= mlir_reuse.REUSES + 1 for _, n in runs)
    assert runs[0][1] > 1, "no context was reused"


def test_threads_never_share_a_context():
    one, two = _contexts(4), _contexts(4)
    assert all(a is not b for a in one for b in two)


def _fresh_maker():
    """JAX's own context factory, without reuse."""
    fresh = getattr(mlir.make_ir_context, "made_by", None) or getattr(
        mlir, "_create_ir_context", None)
    if fresh is None:
        pytest.skip("this JAX has no factory of fresh contexts to compare with")
    return fresh


def test_a_program_exports_and_compiles_alike_in_a_reused_context(monkeypatch):
    mesh = make_mesh(2, 4)

    def program(x):
        def local(v):
            v = jax.lax.ppermute(v, "X", [(0, 1), (1, 0)])
            return jax.lax.psum(v * 2.0, "Y")
        return jax.shard_map(local, mesh=mesh, in_specs=P("X", "Y"), out_specs=P("X", None))(x)

    x = devices.place(np.arange(64, dtype=np.float32).reshape(8, 8), mesh, P("X", "Y"))

    def made():
        exported = devices.export(program, x)
        compiled = devices.lower(exported.call, x).compile()
        return exported.serialize(), compiled.as_text(), np.asarray(compiled(x))

    reusing = mlir.make_ir_context
    got = []
    # made from one line (a compiled module records where its program was called from); the
    # third in a context this thread used twice before, the last in a fresh one
    for maker in (reusing, reusing, reusing, _fresh_maker()):
        monkeypatch.setattr(mlir, "make_ir_context", maker)
        got.append(made())
    reused, fresh = got[2], got[3]
    assert reused[0] == fresh[0]
    assert reused[1] == fresh[1]
    np.testing.assert_array_equal(reused[2], fresh[2])


def test_forget_hands_out_no_context_made_before_it():
    """A warm grader forgets its contexts after each job: the next submission's programs are
    never read in a context that held the last one's."""
    before: list = []
    after: list = []

    def run():
        before.extend(mlir.make_ir_context() for _ in range(2))
        mlir_reuse.forget()
        after.extend(mlir.make_ir_context() for _ in range(2))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert before[0] is before[1]  # reused until then
    assert all(a is not b for a in after for b in before)
    assert after[0] is after[1]  # and reused again after
