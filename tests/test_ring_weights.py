"""The ring rules weigh the partial matmuls by what they contribute (issue 41, item 4).

A ``dot_general`` counts towards the ring's partial matmuls up to one chunk's share of the
device's FLOPs, only where it uses the ring's data (A, the blocks that arrive, the partial
sums) and its result reaches the output; the blocks that arrive by ppermute must be what the
partial matmuls multiply. Each test reads one small program's StableHLO, as the grader does."""
import functools

import numpy as np
import pytest

from conftest import ROOT


def _read(fn, name, layout=(2, 4)):
    """(the program ``fn`` is on ``layout``, read as the grader reads it; mesh; problem)."""
    import jax
    from jax.sharding import NamedSharding

    from autograder.core.meshes import make_mesh
    from autograder.course import registry
    from autograder.course.reading import export_for_reading, read_paths

    problem = registry.get(name)
    mesh = make_mesh(*layout)
    args = problem.make_case(np.random.default_rng(0), *layout, "small")
    placed = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(args, problem.in_specs)]
    exported, dynamic = export_for_reading(functools.partial(fn, mesh=mesh), placed)
    paths = read_paths(exported, mesh, "", dynamic, args)
    assert paths.error is None, paths.error
    (_, prog), = paths.programs
    return prog, mesh, problem


def _structure(fn, name, layout=(2, 4)):
    prog, mesh, problem = _read(fn, name, layout)
    (rule,) = problem.rules
    return rule(prog, mesh, problem)


def _fixture(area, stem, name):
    from autograder.core.loader import load

    return load(ROOT / area / f"{stem}.py").function(name)


def test_the_flow_follows_each_block_from_its_ppermute_into_the_dot():
    """In a fori_loop the block that arrives is carried into the next iteration's dot; a dot
    on a constant uses no argument; the result of a dot that is dropped reaches no output."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def ring(A, W, mesh):
        n = mesh.shape["Y"]

        def local(a, w):
            def body(i, c):
                acc, held = c
                acc = acc + held @ jax.lax.dynamic_slice_in_dim(w, i * a.shape[1], a.shape[1])
                return acc, jax.lax.ppermute(held, "Y", [(j, (j - 1) % n) for j in range(n)])

            acc = jnp.zeros((a.shape[0], w.shape[1]), a.dtype)
            acc, _ = jax.lax.fori_loop(0, n, body, (acc, a))
            lone = jnp.ones((3, 3), a.dtype) @ jnp.ones((3, 3), a.dtype)
            return acc + lone[0, 0]

        return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                             out_specs=P("X", "Y"), check_vma=False)(A, W)

    prog, _, _ = _read(ring, "matmul_allgather")
    (perm,) = [o for o in prog.ops if o.prim == "ppermute"]
    lone, dot = sorted((o for o in prog.ops if o.prim == "dot_general"),
                       key=lambda o: o.in_shapes[0] != (3, 3))
    assert perm.index in dot.from_ops and dot.from_args == {0, 1}
    assert lone.from_args == frozenset() and lone.flops == 2 * 3 * 3 * 3
    assert dot.flops == 2 * (2 * 2) * 4  # [2, 4] @ [4, 2]: [B/X, D/Y] @ [D/Y, F/Y]
    assert {dot.index, perm.index, lone.index} <= prog.out_from_ops


def test_decoy_dots_carry_nothing_and_the_message_says_how_much_the_matmuls_carry():
    """ring_decoy_dots: the blocks go round the ring, ONE matmul multiplies them all, and
    Y [1, 1] dots stand in for the partial matmuls: Y+1 dots ran, and passed when counted."""
    res = _structure(_fixture("tests/fixtures/attacks", "ring_decoy_dots",
                              "matmul_allgather"), "matmul_allgather")
    assert not res.passed
    assert "the matmuls that use the ring's data and reach the output carry 40 FLOP of the " \
           "128 FLOP" in res.message, res.message
    assert "multiplies 4.0 chunks' worth at once" in res.message, res.message
    good = _fixture("solutions", "ps3_collective_matmul", "matmul_allgather")
    assert _structure(good, "matmul_allgather").passed


def _gather_then(extra):
    """The blocks gathered round the ring, one matmul of them all, plus ``extra(a, w, rows)``
    Y times (added to the output times zero, so that it reaches it)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    def f(A, W, mesh):
        n = mesh.shape["Y"]

        def local(a, w):
            y, width = jax.lax.axis_index("Y"), a.shape[1]
            blk, blocks, junk = a, [a], 0.0
            for s in range(n):
                rows = jax.lax.dynamic_slice_in_dim(w, ((y + s) % n) * width, width, 0)
                junk = junk + extra(a, w, rows).sum()
                if s < n - 1:
                    blk = jax.lax.ppermute(blk, "Y", [(j, (j - 1) % n) for j in range(n)])
                    blocks.append(blk)
            order = [jax.lax.dynamic_slice_in_dim(w, ((y + s) % n) * width, width, 0)
                     for s in range(n)]
            return (jnp.concatenate(blocks, axis=1) @ jnp.concatenate(order, axis=0)
                    + 0.0 * junk)

        return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                             out_specs=P("X", "Y"))(A, W)

    return f


def test_full_size_dots_on_data_that_did_not_come_from_a_count_nothing():
    import jax.numpy as jnp

    res = _structure(_gather_then(lambda a, w, rows: jnp.ones_like(a) @ rows),
                     "matmul_allgather")
    assert not res.passed and "carry 32 FLOP of the 128 FLOP" in res.message, res.message


def test_the_blocks_that_arrive_must_be_the_ones_multiplied():
    """Full-size partial matmuls, but all on the device's own block: the blocks that arrive
    are multiplied only in the one matmul after the ring."""
    res = _structure(_gather_then(lambda a, w, rows: a @ rows), "matmul_allgather")
    assert not res.passed, res.message
    assert "multiply each block of A as it arrives" in res.message, res.message
    assert "found 32 FLOP (1.00 blocks' worth)" in res.message, res.message


@pytest.mark.parametrize("stem, name, layout", [
    ("alt_correct_c", "matmul_allreduce", (2, 4)),  # psum'd row tiles, some of them empty
    ("alt_custom_vjp_while", "matmul_allgather", (4, 2)),
])
def test_honest_rings_carry_the_flops(stem, name, layout):
    res = _structure(_fixture("tests/fixtures/ps3", stem, name), name, layout)
    assert res.passed, res.message
