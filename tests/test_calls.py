"""The one call shape (:mod:`autograder.core.calls`) on every graded function of the registry:
the static/dynamic split is the problem's declaration, placed arrays live on the course's
mesh, abstract arguments carry the shardings placement gives, and the worker reads the same
declaration from the grader's request."""
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding

from autograder.core import devices
from autograder.core.calls import Call, CallShape
from autograder.core.meshes import make_mesh
from autograder.core.records import ArgSpec, ExportRequest, spec_of
from autograder.course import registry

PROBLEMS = registry.problems()


def _request(problem, case, layout) -> ExportRequest:
    """What the grader asks the worker for (``judge.grading.request_for``'s shape)."""
    args = tuple(ArgSpec(static=int(a)) if s is None else
                 ArgSpec(shape=tuple(a.shape), dtype=a.dtype.name,
                         spec=spec_of(s) if problem.uses_mesh else None)
                 for a, s in zip(case.args, problem.in_specs, strict=True))
    return ExportRequest(0, problem.name, tuple(layout) if problem.uses_mesh else None, args,
                         devices.platform())


@pytest.mark.parametrize("problem", PROBLEMS, ids=[p.name for p in PROBLEMS])
def test_every_problem_is_called_by_its_declaration(problem):
    layout = problem.speed_layout
    mesh = make_mesh(*layout)
    case = problem.case(np.random.default_rng(0), *layout, "small")
    call = Call.of(problem, problem.baseline, mesh)
    # the split is the declaration, and the values agree with it
    assert call.static_argnums == problem.static_argnums
    call.shape.check(case.args)
    assert sorted(call.static(case.args)) == list(problem.static_argnums)
    assert len(call.dynamic(case.args)) == len(case.args) - len(problem.static_argnums)
    # placed on the course's mesh, as the problem shards each array
    placed = call.place(case.args)
    course = set(devices.course_devices())
    for a, p, s in zip(case.args, placed, problem.in_specs, strict=True):
        if s is None:
            assert p is a
            continue
        want = (NamedSharding(mesh, s) if problem.uses_mesh
                else SingleDeviceSharding(mesh.devices.flat[0]))
        assert p.sharding == want, (p.sharding, want)
        assert set(p.sharding.device_set) <= course
        np.testing.assert_array_equal(np.asarray(p), a)
    # abstract arguments: the placed arrays' shapes, dtypes and shardings; static values kept
    for source in (case.args, _request(problem, case, layout).args):
        for ab, p, s in zip(call.abstract(source), placed, problem.in_specs, strict=True):
            if s is None:
                assert ab == p
            else:
                assert (ab.shape, ab.dtype, ab.sharding) == (p.shape, p.dtype, p.sharding)
    # the worker, which never sees the problem, reads the same declaration off the request
    req = _request(problem, case, layout)
    shape = CallShape.of_request(req)
    assert (shape.static_argnums, shape.uses_mesh) == (problem.static_argnums,
                                                        problem.uses_mesh)
    worker = Call(shape, problem.baseline, mesh if problem.uses_mesh else None)
    for ab, s in zip(worker.abstract(req.args), problem.in_specs, strict=True):
        if s is not None:  # a single-device function's artifact names no device
            assert ab.sharding == (NamedSharding(mesh, s) if problem.uses_mesh else None)
    if problem.baseline is not None:  # bound and exported for the course's platform
        exported, dynamic = worker.export(worker.abstract(req.args), keep_unused=True)
        assert exported.platforms == (devices.platform(),)
        assert len(exported.in_avals) == len(dynamic) == len(call.dynamic(case.args))
    assert call.out_sharding == (NamedSharding(mesh, problem.out_spec) if problem.uses_mesh
                                 else None)


def test_a_value_that_disagrees_with_the_declaration_is_refused():
    """The declaration decides; a value of the other kind is an error naming the argument."""
    roll = registry.get("roll_diff")  # (x: P('X', 'Y'), shift: static)
    shape = CallShape.of(roll)
    x = np.zeros((8, 8), np.float32)
    shape.check((x, 1))
    with pytest.raises(TypeError, match="argument 1 of roll_diff is declared static"):
        shape.check((x, x))
    with pytest.raises(TypeError, match="argument 0 of roll_diff is declared an array"):
        shape.check((1, 1))
    with pytest.raises(ValueError, match="takes mesh="):
        Call.of(roll, roll.baseline or (lambda x, s, mesh: x)).bound
