"""The speed grade off TPU comes from the TPU model: deterministic, and it tells overlap apart."""
import tempfile

import jax
import jax.numpy as jnp
from conftest import ROOT, SEED, check_of, grade
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from autograder.core.loader import load
from autograder.core.meshes import make_mesh
from autograder.course import registry
from autograder.supervisor import local


def test_blocking_allgather_fails_speed_and_the_reference_passes():
    # it fails structure, so the grader does not measure it: its speed check on its own
    blocking = grade("ps3", "monolithic_allgather", "matmul_allgather", with_speed=True,
                     rules=False)
    speed = check_of(blocking, "speed")
    assert not speed.passed and "modeled on TPU" in speed.message, speed.message
    ref = load(ROOT / "solutions" / "ps3_collective_matmul.py").function("matmul_allgather")
    good = local.grade_function(registry.get("matmul_allgather"), ref, seed=SEED)
    assert check_of(good, "speed").passed, good.report()


def test_model_survives_the_persistent_compilation_cache():
    from autograder.tpumodel.api import partitioned_hlo

    # the grader keeps this cache off on CPU; a student's notebook may have it on
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
    try:
        mesh = make_mesh(2, 4)
        a = jax.device_put(jnp.ones((64, 64)), NamedSharding(mesh, P("X", "Y")))
        f = lambda x: x @ x.T  # noqa: E731
        jax.jit(f).lower(a).compile()  # now in the cache
        first, second = partitioned_hlo(f, (a,)), partitioned_hlo(f, (a,))
        assert first == second
        assert "all-gather" in first or "all-reduce" in first
    finally:
        from jax._src import compilation_cache

        jax.config.update("jax_compilation_cache_dir", before)
        compilation_cache.reset_cache()
