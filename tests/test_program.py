"""The jaxpr walker: collectives with axes, bytes and loop multiplicity."""
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from autograder.core.meshes import make_mesh
from autograder.core.program import trace


def _ring(a, n_steps, how):
    n = jax.lax.axis_size("Y")
    perm = [(i, (i + 1) % n) for i in range(n)]
    step = lambda i, c: jax.lax.ppermute(c, "Y", perm) * 2.0
    if how == "fori":
        return jax.lax.fori_loop(0, n_steps, step, a)
    if how == "while":
        return jax.lax.while_loop(lambda c: c[0] < n_steps,
                                  lambda c: (c[0] + 1, step(c[0], c[1])), (0, a))[1]
    for i in range(n_steps):
        a = step(i, a)
    return a


def _prog(how, n_steps=3):
    mesh = make_mesh(2, 4)
    A = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("X", "Y")))
    f = functools.partial(jax.shard_map, mesh=mesh, in_specs=P("X", "Y"),
                          out_specs=P("X", "Y"))(functools.partial(_ring, n_steps=n_steps,
                                                                   how=how))
    return trace(f, (A,))


def test_loops_are_multiplied_out_however_written():
    for how in ("fori", "while", "python"):
        prog = _prog(how)
        assert prog.uses_shard_map
        assert prog.count("ppermute") == 3, how
        (op,) = {o.kind for o in prog.collectives()}
        assert op == "ppermute"
        assert prog.bytes_moved("ppermute", "Y") == 3 * 4 * 4 * 4  # 3 x f32[4, 4]
        assert prog.collectives()[0].shift(4) == {1}


def test_combined_and_async_collectives_are_seen_in_the_compiled_module():
    """XLA's combiners merge collectives into one of tuple type (a type with spaces in it)."""
    from autograder.core.program import compiled_collective_lines

    text = """
  %ar = (f32[2]{0}, f32[4]{0}) all-reduce(f32[2]{0} %a, f32[4]{0} %b), to_apply=%add
  %ag = f32[8]{0} all-gather(f32[2]{0} %a), channel_id=2, dimensions={0}
  %ags = (f32[2]{0}, f32[8]{0}) all-gather-start(f32[2]{0} %a), channel_id=3
  %s = (f32[2]{0}, u32[], token[]) send(f32[2]{0} %a, token[] %t), channel_id=4
  %f = f32[8]{0} fusion(f32[8]{0} %all-gather.3), kind=kLoop, calls=%fused
  %c = f32[8]{0} copy(f32[8]{0} %x), metadata={op_name="jit(f)/all-gather(x)"}"""
    assert [l.split(" =")[0] for l in compiled_collective_lines(text)] == [
        "%ar", "%ag", "%ags", "%s"]
    mesh = make_mesh(2, 4)
    A = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("X", "Y")))
    prog = trace(lambda a: (a.sum(0), (a * a).sum(0), jnp.exp(a).sum(1)), (A,))
    every = [l for l in prog.compiled_text.splitlines() if " all-reduce(" in l]
    assert len(prog.compiled_collectives()) == len(every) >= 2


def test_compiled_collectives_seen_after_gspmd():
    mesh = make_mesh(2, 4)
    A = jax.device_put(jnp.ones((8, 16)), NamedSharding(mesh, P("X", "Y")))
    prog = trace(lambda a: a.sum(axis=0), (A,))
    assert not prog.uses_shard_map
    assert not prog.collectives()  # nothing written by hand
    assert any("all-reduce" in l for l in prog.compiled_collectives())
