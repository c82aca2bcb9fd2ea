"""tpu_profile's result: a few lines (times, the ratio beside the grader's limit, which task
waits for which) and one picture, not a dump."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from autograder.core.meshes import make_mesh
from autograder.core.results import MEASURED_NEED_STRUCTURE
from autograder.course import registry
from autograder.tpumodel import profile
from autograder.tpumodel.cost import Task
from autograder.tpumodel.profile import critical_path
from autograder.tpumodel.schedule import schedule

US = 1e-6


def _task(i, kind, label, us, deps=(), resources=None):
    res = resources or (("compute",) if kind == "compute" else (("Y", "+"),))
    return Task(i, kind, label, us * US, res, set(deps))


def test_critical_path_names_the_transfer_a_computation_waits_for():
    # a slice, its send (10 us), a matmul that does not need it (4 us), and the one that does
    tasks = [_task(0, "compute", "slice", 1), _task(1, "comm", "ppermute", 10, deps=[0]),
             _task(2, "compute", "dot_local", 4), _task(3, "compute", "dot_recv", 4, deps=[1])]
    path = critical_path(schedule(tasks))
    assert [w.task for w in path] == ["slice", "ppermute", "dot_recv"]
    assert [w.exposed for w in path] == [False, False, True]
    assert path[-1].on == "ppermute" and path[-1].why == "data"
    assert "waits for the result of ppermute (comm, 10.0 us)" in path[-1].line()
    assert path[0].on is None and "starts the program" in path[0].line()


def test_critical_path_through_a_busy_compute_stream():
    tasks = [_task(0, "compute", "first", 5), _task(1, "compute", "second", 3)]
    path = critical_path(schedule(tasks))
    assert [w.task for w in path] == ["first", "second"]
    assert not path[1].exposed and path[1].why == "the compute stream"


def _blocking(A, W, mesh):
    """All of A gathered before the matmul: the transfer cannot hide."""
    def body(a, w):
        return jax.lax.all_gather(a, "Y", axis=1, tiled=True) @ w

    return jax.shard_map(body, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)


@pytest.fixture(scope="module")
def args():
    mesh = make_mesh(2, 4)
    put = lambda shape, spec: jax.device_put(jnp.zeros(shape, jnp.float32),  # noqa: E731
                                             NamedSharding(mesh, spec))
    return mesh, [put((256, 1024), P("X", "Y")), put((1024, 1024), P(None, "Y"))]


def test_profile_shows_the_limit_and_what_waits(args, tmp_path):
    mesh, a = args
    prob = registry.get("matmul_allgather")
    p = profile(_blocking, prob, mesh, a, png=str(tmp_path / "t.png"))
    text = repr(p)
    assert p.limit == prob.threshold("tpu_model")
    assert f"limit {p.limit:g}" in text and f"{p.ratio:.2f}" in text
    assert ("within the limit" in text) == (p.ratio <= p.limit) == p.passes
    assert "dot_general (compute" in text and "waits for the result of all_gather" in text
    assert len(text.splitlines()) <= 12
    # the limit comes with the rule the grader applies to it
    assert f"{MEASURED_NEED_STRUCTURE} (check('matmul_allgather', fn) runs them)" in text
    html = p._repr_html_()
    assert html.count("<img") == 1 and "waits for the result" in html


def test_profile_limit_follows_the_registry(args):
    """Not a number of its own: a problem with another limit shows that one."""
    mesh, a = args
    prob = dataclasses.replace(registry.get("matmul_allgather"),
                               speed_threshold={"tpu_model": 0.37})
    p = profile(_blocking, prob, mesh, a, png=None)
    assert p.limit == 0.37 and "limit 0.37: OVER the limit" in repr(p) and p.passes is False


def _local(A, W, mesh):
    """Each device multiplies what it holds and keeps it: nothing moves between devices."""
    return jax.shard_map(lambda a, w: a @ w[:a.shape[1]], mesh=mesh,
                         in_specs=(P("X", "Y"), P(None, "Y")), out_specs=P("X", "Y"))(A, W)


def test_profile_of_a_program_that_sends_nothing(args):
    """No transfer: the text says so instead of calling the communication hidden."""
    mesh, a = args
    text = repr(profile(_local, registry.get("matmul_allgather"), mesh, a, png=None))
    assert "nothing is sent between devices" in text and "hidden" not in text


def _unrolled(A, W, mesh):
    """A ring written as a Python loop: the same few kinds of task, many times."""
    def body(a, w):
        ny, me = jax.lax.axis_size("Y"), jax.lax.axis_index("Y")
        d = a.shape[1]
        out = jnp.zeros((a.shape[0], w.shape[1]), a.dtype)
        for s in range(ny):
            blk = (me + s) % ny
            out = out + a @ jax.lax.dynamic_slice_in_dim(w, blk * d, d, axis=0)
            a = jax.lax.ppermute(a, "Y", [(j, (j - 1) % ny) for j in range(ny)])
        return out

    return jax.shard_map(body, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)


def test_profile_counts_an_unrolled_loop_by_kind(args):
    """The critical-path line names a handful of task kinds, not one entry per iteration."""
    mesh, a = args
    text = repr(profile(_unrolled, registry.get("matmul_allgather"), mesh, a, png=None))
    path = next(line for line in text.splitlines() if "critical path" in line)
    assert "[" not in path and len(path) < 300, path


def _solution(name):
    from conftest import ROOT

    from autograder.core.loader import load

    return load(ROOT / "solutions" / "ps2_moe.py").function(name)


def test_tpu_profile_of_a_single_device_function_needs_no_mesh_nor_matplotlib(monkeypatch):
    """``tpu_profile('moe_local', fn)``: no mesh to pass (None neither raises), and without
    matplotlib the text comes alone, saying what the picture needs."""
    import sys

    from autograder.public.tools import tpu_profile

    fn = _solution("moe_local")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as where it is not installed
    for p in (tpu_profile("moe_local", fn), tpu_profile("moe_local", fn, None)):
        assert p.png is None
        text = repr(p)
        assert text.startswith("moe_local modeled on TPU v5e, one device:")
        assert "the timeline picture needs matplotlib: pip install matplotlib" in text
        assert "within the limit" in text


def test_tpu_profile_says_the_loop_iterations_it_modeled(monkeypatch):
    """A loop whose length the data decides (the all-to-all's rounds) is counted on the speed
    case and modeled at that count, as the grader does; the profile says the count, and its
    default mesh is the grader's speed mesh. (Modeled on a small case here, to be quick.)"""
    import numpy as np

    from autograder.public.tools import tpu_profile
    import importlib

    profmod = importlib.import_module("autograder.tpumodel.profile")

    prob = registry.get("moe_all_to_all")

    def small(problem, mesh, **kw):
        x, y = (int(mesh.shape[a]) for a in ("X", "Y"))
        case = problem.case(np.random.default_rng(0), x, y, "small").args
        return [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(case, problem.in_specs)]

    monkeypatch.setattr(profmod, "case_args", small)
    p = tpu_profile("moe_all_to_all", _solution("moe_all_to_all"))
    assert p.student.mesh_shape == tuple(prob.speed_layout)
    assert p.student.trips and all(t > 0 for t in p.student.trips)
    counts = ", ".join(map(str, p.student.trips))
    assert (f"modeled at the most iterations one entry of it ran on the speed case's input "
            f"({counts}), as the grader does") in repr(p)


def _small_case(monkeypatch):
    """tpu_profile's case drawn at the problem's 'small' size (quick), as it draws the speed
    case: the same arrays for every reading of one test."""
    import importlib

    import numpy as np

    profmod = importlib.import_module("autograder.tpumodel.profile")

    def small(problem, mesh, **kw):
        x, y = (int(mesh.shape[a]) for a in ("X", "Y"))
        case = problem.case(np.random.default_rng(0), x, y, "small").args
        return [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip(case, problem.in_specs)]

    monkeypatch.setattr(profmod, "case_args", small)
    return small


def _gather_unless_the_data_says(A, W, mesh):
    """A branch on the data: the model cannot read it (alone, it prices the dearer branch, an
    upper bound), and the run never takes the all-gather (a sum of squares is never negative)."""
    def local(a, w):
        def dear(a, w):
            return jax.lax.all_gather(a, "Y", axis=1, tiled=True) @ w

        def cheap(a, w):
            return jnp.zeros((a.shape[0], w.shape[1]), a.dtype)

        return jax.lax.cond(jnp.sum(a * a) < -1.0, dear, cheap, a, w)

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"), check_vma=False)(A, W)


def test_tpu_profile_prices_the_branches_the_run_took_as_the_grader_does(monkeypatch):
    """Where the model's own reading of a branch is not what a run of the program did,
    tpu_profile gives the grader's figure: the program pinned to the branch each device ran on
    this input (one instrumented run, as the grader's), the same figure the self-check's speed
    check gives, and it says so; the model's reading alone (profile) is the upper bound."""
    import functools

    from autograder.public import measure
    from autograder.public.tools import tpu_profile
    from autograder.tpumodel import loops
    from autograder.tpumodel.api import compile_partitioned, model_hlo

    prob = registry.get("matmul_allgather")
    small = _small_case(monkeypatch)
    mesh = make_mesh(*prob.speed_layout)
    a, w = small(prob, mesh)
    fn = _gather_unless_the_data_says
    own = profile(fn, prob, mesh, [a, w], png=None)  # the model's reading alone
    assert own.student.bounds, own.student.bounds

    exp = jax.export.export(jax.jit(functools.partial(fn, mesh=mesh)))(a, w)
    geometry = (tuple(mesh.devices.shape), tuple(mesh.axis_names))
    run = loops.count_run(exp, [a, w])
    assert run.taken(*geometry) == {0: (0,) * 8}  # cond's branch 0 is its false one: cheap
    fixed = loops.pinned(exp, run.trips(), run.taken(*geometry))
    ran = model_hlo(compile_partitioned(jax.jit(fixed.call).lower(a, w))[1], *geometry)

    p = tpu_profile("matmul_allgather", fn)
    assert p.student.branches == 1 and not p.student.bounds
    assert p.student.time_us == pytest.approx(ran.time_us, rel=1e-6)
    assert p.student.time_us < own.student.time_us / 2
    assert p.baseline.time_us == pytest.approx(own.baseline.time_us, rel=1e-6)
    assert ("1 conditional modeled at the branch each device ran on the speed case's input "
            "(one instrumented run of your program), as the grader does") in repr(p), repr(p)
    checked = measure.speed(prob, fn)
    assert f"ratio {p.ratio:.2f}" in checked.message, checked.message


def test_tpu_profile_applies_the_grader_s_flops_floor(monkeypatch):
    """Where XLA counts more FLOPs than the model (here: the model's count cut to a tenth),
    tpu_profile scales the compute up as the grader does, and says by how much."""
    from autograder.public.tools import tpu_profile
    from autograder.tpumodel import api

    _small_case(monkeypatch)
    honest = tpu_profile("matmul_allgather", _blocking)
    assert "FLOPs" not in repr(honest), repr(honest)
    counted = api.static_work
    monkeypatch.setattr(api, "static_work", lambda t: counted(t) / 10)
    low = tpu_profile("matmul_allgather", _blocking)
    compute = lambda p: p.student.timeline.summary()["compute_us"]  # noqa: E731
    assert compute(low) > 9 * compute(honest)
    note = [n for n in low.notes if "FLOPs" in n]
    assert len(note) == 1 and note[0].startswith("XLA counts ") and note[0].endswith(
        "% more FLOPs than the model: compute scaled up, as the grader does"), note


def _blocking_highest(A, W, mesh):
    """:func:`_blocking` with its matmul at HIGHEST: 6 MXU passes on a TPU."""
    def body(a, w):
        a = jax.lax.all_gather(a, "Y", axis=1, tiled=True)
        return jnp.matmul(a, w, precision=jax.lax.Precision.HIGHEST)

    return jax.shard_map(body, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"))(A, W)


def test_tpu_profile_says_what_a_higher_precision_costs(monkeypatch):
    """A matmul at HIGHEST is priced at 6 MXU passes (the grader's speed message says so);
    tpu_profile says it too, its matmul priced so (on the small case drawn here each op's fixed
    cost hides the passes; tests/test_tpumodel.py weighs them), and says nothing of precision at
    the default."""
    from autograder.public.tools import tpu_profile

    _small_case(monkeypatch)
    default = tpu_profile("matmul_allgather", _blocking)
    assert not [n for n in default.notes if "precision" in n], default.notes
    highest = tpu_profile("matmul_allgather", _blocking_highest)
    note = [n for n in highest.notes if "MXU passes" in n]
    assert len(note) == 1 and note[0].startswith("precision=HIGHEST") and "costs 6 MXU passes" \
        in note[0], \
        highest.notes
    assert highest.student.summary()["mxu_passes"] == 6
    assert "mxu_passes" not in default.student.summary()


def test_the_tiled_all_reduce_gains_where_the_notebook_shows_it():
    """ps3's "Where the tiles pay off": at B, D, F = 1024, 24576, 4096 the matmul takes about as
    long as the all-reduce, so the reference's tiles model clearly below jit (the notebook says
    0.75) while one psum of the whole output is jit's program (1.00) and ends on its transfer;
    at a shape that is not the grader's, no limit is shown."""
    from conftest import ROOT

    from autograder.core.loader import load
    from autograder.public.tools import tpu_profile

    tiles = load(ROOT / "solutions" / "ps3_collective_matmul.py").function("matmul_allreduce")
    one = load(ROOT / "tests" / "fixtures" / "ps3" / "single_psum.py").function(
        "matmul_allreduce")
    shape = (1024, 24576, 4096)  # one MXU pass per f32 dot: D deep enough to match the psum
    t = tpu_profile("matmul_allreduce", tiles, make_mesh(2, 4), shape=shape)
    o = tpu_profile("matmul_allreduce", one, make_mesh(2, 4), shape=shape)
    assert round(t.ratio, 2) == 0.75 and round(o.ratio, 2) == 1.00, (t.ratio, o.ratio)
    assert t.limit is None and "limit" not in t.verdict() and "no limit applies" in repr(t)
    assert "it ends on a transfer" in repr(o) and "hidden" not in repr(o), repr(o)
    exposed = lambda p: p.student.timeline.summary()["exposed_comm_us"]  # noqa: E731
    assert exposed(t) < exposed(o) / 2


def test_cpu_wall_clock_is_kept_apart_from_the_tpu_limits(capsys):
    """On emulated CPU devices time_vs_jit's figure is no TPU ratio: it is not printed as a
    'ratio' a limit could be read against, and it says that no limit applies to it."""
    from autograder.public.tools import time_vs_jit

    x = jnp.ones((64, 64))
    r = time_vs_jit(lambda a: a @ a, lambda a: a @ a, x, reps=2)
    out = capsys.readouterr().out
    assert r > 0 and "emulated CPU devices" in out and "no limit applies to it" in out
    assert "ratio" not in out.split("\n")[0] and "limit 1" not in out, out


@pytest.mark.orchestration
def test_no_notebook_cell_sets_wall_clock_beside_a_limit():
    """A notebook cell that times the program on this machine (time_vs_jit) shows nothing that
    carries a TPU limit (tpu_profile, check, memory_profile): the CPU figure stands apart."""
    import re

    from conftest import ROOT

    timed = 0
    for nb in sorted((ROOT / "notebooks").glob("ps*.py")):
        for cell in re.split(r"^# %%.*$", nb.read_text(encoding="utf-8"), flags=re.M):
            if "time_vs_jit(" not in cell or "import" in cell:
                continue
            timed += 1
            beside = [f for f in ("tpu_profile(", "check(", "memory_profile(") if f in cell]
            assert not beside, f"{nb.name}: time_vs_jit beside {beside} in\n{cell}"
    assert timed >= 7



def test_side_by_side_shows_a_transfer_that_waits_for_its_matmul_exposed():
    """ps3's overlap lesson: a ring that sends what it holds overlaps each send with the step's
    matmul, wherever the send is written; one that sends the matmul's own product cannot, and
    its communication is all exposed (model_side_by_side, the notebook's cell)."""
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from autograder.core import devices
    from autograder.core.meshes import make_mesh
    from autograder.public.tools import model_side_by_side

    mesh = make_mesh(2, 4)

    def ring(tile, m, *, send):
        left = [(j, (j - 1) % 4) for j in range(4)]
        held, total = tile, jnp.zeros_like(tile)
        for _ in range(3):
            early = jax.lax.ppermute(held, "Y", left) if send == "first" else None
            product = held @ m
            total = total + product
            held = early if send == "first" else jax.lax.ppermute(
                product if send == "product" else held, "Y", left)
        return total + held @ m

    tiles = devices.place(np.zeros((512, 2048), np.float32), mesh, P("X", "Y"))
    small = devices.place(np.zeros((512, 512), np.float32), mesh, P())
    table = model_side_by_side(
        {s: jax.shard_map(functools.partial(ring, send=s), mesh=mesh, in_specs=(P("X", "Y"), P()),
                          out_specs=P("X", "Y"), check_vma=False)
         for s in ("first", "after", "product")}, tiles, small, mesh=mesh)
    assert table["first"] == {**table["after"], "name": "first"}, table  # the same program
    assert table["product"]["exposed_comm_us"] > 0.99 * table["product"]["comm_us"] > 0, table
    assert table["product"]["exposed_comm_us"] > table["after"]["exposed_comm_us"] + 10, table
    assert table["product"]["time_us"] > table["after"]["time_us"] + 10, table
    assert "exposed" in repr(table) and "product" in repr(table)


#: a student's ring whose send carries each step's own product (the transfer waits for the
#: matmul, and the next step waits for the transfer), written in a file of its own
_STUDENT_RING = '''import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def matmul_allgather(A, W, mesh):
    ny = mesh.shape["Y"]

    def local(a, w):
        me = jax.lax.axis_index("Y")
        k = a.shape[1]
        acc = jnp.zeros((a.shape[0], w.shape[1]), a.dtype)
        for step in range(ny):
            prod = a @ jax.lax.dynamic_slice_in_dim(w, ((me + step) % ny) * k, k, 0)
            acc = acc + prod
            if step < ny - 1:
                a = jax.lax.ppermute(prod[:, :k], "Y", [(j, (j - 1) % ny) for j in range(ny)])
        return acc

    return jax.shard_map(local, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")),
                         out_specs=P("X", "Y"), check_vma=False)(A, W)
'''


def _student_ring(tmp_path):
    import importlib.util

    path = tmp_path / "student_ring.py"
    path.write_text(_STUDENT_RING)
    spec = importlib.util.spec_from_file_location("student_ring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.matmul_allgather


def test_the_critical_path_names_the_student_s_own_lines(args, tmp_path):
    """Issue 54: tpu_profile in the student's words. Each wait names the line of the student's
    file its op was traced from, says when XLA made a kernel from several of them, and quotes
    those lines; the timeline tags each wide task the same way."""
    mesh, a = args
    p = profile(_student_ring(tmp_path), registry.get("matmul_allgather"), mesh, a,
                png=str(tmp_path / "t.png"))
    text = repr(p)
    line = {n: i + 1 for i, n in enumerate(_STUDENT_RING.splitlines())}
    send = line['                a = jax.lax.ppermute(prod[:, :k], "Y", [(j, (j - 1) % ny) '
                'for j in range(ny)])']
    mm = line["            prod = a @ jax.lax.dynamic_slice_in_dim(w, ((me + step) % ny) * "
              "k, k, 0)"]
    add = line["            acc = acc + prod"]
    assert f" us; line {send})" in text, text
    # the matmul and the sum XLA fused into one kernel
    assert f"dot_general (compute, 1.6 us; made by XLA from lines {mm} and {add}) waits for " \
        f"the result of ppermute (comm, 3.9 us; line {send})" in text, text
    assert "your lines named above:" in text, text
    assert f"line {mm} (student_ring.py): prod = a @ jax.lax.dynamic_slice_in_dim(" in text, text
    assert f"line {add} (student_ring.py): acc = acc + prod" in text, text
    from autograder.tpumodel.sources import short_origin

    tags = {short_origin(t) for t in p.student.timeline.tasks}
    assert f"line {mm}" in tags and f"XLA: lines {mm}, {add}" in tags, tags


def test_a_profile_shows_itself_where_it_is_called_once_per_cell(args, tmp_path, monkeypatch):
    """Called anywhere in a cell, tpu_profile displays its lines and its picture (as a picture,
    not only inside the HTML); the cell's echo of the returned profile adds nothing, and a
    later cell that asks for it shows it again."""
    import IPython
    import IPython.display

    mesh, a = args
    p = profile(_blocking, registry.get("matmul_allgather"), mesh, a,
                png=str(tmp_path / "t.png"))
    shown = []

    class Shell:
        execution_count = 3

    shell = Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    assert p.show()
    assert len(shown) == 2 and "waits for the result" in shown[0]["text/plain"]
    assert isinstance(shown[1], IPython.display.Image)
    p._ipython_display_()  # the same cell's echo
    assert len(shown) == 2
    shell.execution_count = 4
    p._ipython_display_()  # `p` in a later cell
    assert len(shown) == 4
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)  # a script: nothing displayed
    assert not p.show() and len(shown) == 4
