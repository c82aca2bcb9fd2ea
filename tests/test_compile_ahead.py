"""The memory and speed programs compile ahead: in the function's compile pool, as soon as their
artifacts arrive, from the cases' shapes alone, while the numerics run (autograder/judge/pool.py).

What must hold: the program compiled from shapes is the program the checks would have compiled
from the placed arrays, each is compiled once, on a pool thread, and the verdict is the same.
And the judge's own planning overlaps the sandbox loading the submission.
"""
import threading

import pytest

from autograder.course import registry
from autograder.judge import grading
from autograder.judge.programs import Reading
from autograder.supervisor.local import grade_function
from autograder.worker.local import LocalExporter
from tools_helpers import reference_answer


@pytest.mark.parametrize("name", ["moe_all_to_all", "moe_local"])  # a mesh; one device
def test_a_program_lowered_from_shapes_is_the_one_lowered_from_the_arrays(name):
    import jax

    problem, fn = reference_answer(name)
    plan = grading.plan_for(problem, seed=11)
    replies = LocalExporter.of(name, fn).export(plan.all_requests())
    programs = grading.Programs(plan, replies)
    assert plan.big_sizes() == ["memory", "speed"]
    for size in plan.big_sizes():
        layout, case = plan.big(size)
        mesh = grading.make_mesh(*layout)
        req = plan.big_request(size)
        call = programs.loaded(req).call
        placed = jax.jit(call).lower(*grading.dynamic_args(problem, grading.place_args(
            problem, case, mesh)))
        shaped = jax.jit(call).lower(*grading.dynamic_args(problem, grading.shaped_args(
            problem, req, mesh)))
        assert shaped.as_text() == placed.as_text(), size


#: a program with a loop whose trip count the data decides (alt_flag_loop's moe_all_to_all: a
#: while_loop over exchange rounds), a jit program XLA partitions (moe_jit), a ring of
#: collective permutes (ps3), and a one-device program (moe_local)
MODEL_READS = [("tests/fixtures/ps2_moe/alt_flag_loop.py", "moe_all_to_all"),
               ("solutions/ps2_moe.py", "moe_jit"),
               ("solutions/ps3_collective_matmul.py", "matmul_reducescatter"),
               ("solutions/ps2_moe.py", "moe_local")]


@pytest.mark.parametrize("path,name", MODEL_READS)
def test_the_models_compile_reads_what_the_speed_compile_would(path, name):
    """On CPU the speed case's program is compiled for the TPU model with LLVM at its least
    (``MODEL_CPU_COMPILE``: it never runs; the instrumented copy does): its partitioned
    module, its optimised module (what XLA added) and XLA's FLOP count are those of the
    speed compile's (``SPEED_CPU_COMPILE``), XLA's HLO passes being the same."""
    import jax

    from autograder.core.compiling import MODEL_CPU_COMPILE, SPEED_CPU_COMPILE, cpu_options
    from autograder.tpumodel.api import compile_partitioned
    from autograder.tpumodel.work import xla_flops
    from conftest import loaded

    problem = registry.get(name)
    plan = grading.plan_for(problem, seed=11, quick=True)
    req = plan.big_request("speed")
    replies = LocalExporter.of(name, loaded(path).function(name)).export([req])
    call = grading.Programs(plan, replies).loaded(req).call
    layout, case = plan.big("speed")
    args = grading.dynamic_args(problem, grading.place_args(problem, case,
                                                            grading.make_mesh(*layout)))

    def reads(options):
        compiled, text = compile_partitioned(jax.jit(call).lower(*args), cpu_options(options))
        return text, compiled.as_text(), xla_flops(compiled)

    model, speed = reads(MODEL_CPU_COMPILE), reads(SPEED_CPU_COMPILE)
    for what, m, s in zip(("partitioned module", "optimised module", "FLOP count"), model,
                          speed, strict=True):
        assert m == s, what
    assert speed[2][0], speed[2]  # a count, so the floor is read from both


def test_the_memory_and_speed_programs_compile_once_in_the_pool(monkeypatch):
    problem, fn = reference_answer("moe_local")
    made: list = []
    once = grading.Programs._once

    def recording(self, key, make):
        def tracked():
            made.append((key[1], threading.current_thread() is threading.main_thread()))
            return make()
        return once(self, key, tracked)

    monkeypatch.setattr(grading.Programs, "_once", recording)
    res = grade_function(problem, fn, seed=5)
    assert all(c.passed for c in res.checks), [c.message for c in res.checks]
    kinds = grading.CompileKind
    big = [(what.value, on_main) for what, on_main in made
           if what in (kinds.MEMORY, kinds.MODEL)]
    assert sorted(big) == [("memory", False), ("model", False)], made
    numerics = [on_main for what, on_main in made if what is kinds.NUMERICS]
    assert numerics and not any(numerics), "a numerics program compiled on the main thread"


def test_the_counting_copies_compile_once_each_in_the_pool(monkeypatch):
    """A program with loops runs its memory and speed cases once, instrumented: each case's
    counting copy compiles once, on a pool thread beside the numerics runs, and the speed
    case's public twin (the same shapes) runs the same executable. It grades a whole function
    (quick: fewer numerics cases): only a looped program's memory and speed checks, with the
    twin its data-dependent rounds call for, make the copies."""
    problem, fn = reference_answer("moe_all_to_all")
    made: list = []
    once = grading.Programs._once

    def recording(self, key, make):
        def tracked():
            made.append((key, threading.current_thread() is threading.main_thread()))
            return make()
        return once(self, key, tracked)

    monkeypatch.setattr(grading.Programs, "_once", recording)
    res = grade_function(problem, fn, seed=5, quick=True)
    assert all(c.passed for c in res.checks), [c.message for c in res.checks]
    counting = [(key[0], on_main) for key, on_main in made if key[2:] == ("compiled",)]
    kinds = grading.CompileKind
    big = {key[0] for key, _ in made if key[1:] in ((kinds.MEMORY,), (kinds.MODEL,))}
    assert len(big) == 2, made
    assert sorted(counting) == sorted((rid, False) for rid in big), made
    twins = [key for key, _ in made if key[1:] == (Reading.COUNTED, True)]
    assert twins, "the speed case's public twin was not counted: this test proves nothing"


def test_a_second_plan_on_the_same_seed_reuses_the_requests_without_drawing(monkeypatch):
    problem = registry.get("moe_all_to_all")
    first = grading.plan_for(problem, seed=123456).all_requests()

    def no_draw(self, size):
        raise AssertionError("the big case was drawn again only to read its shapes")

    monkeypatch.setattr(grading.Plan, "big", no_draw)
    again = grading.plan_for(problem, seed=123456)
    assert again.all_requests() == first
    assert again.big_request("speed") == first[-1]
    with pytest.raises(AssertionError):  # another seed is planned afresh
        grading.plan_for(problem, seed=123457).all_requests()


def test_on_cpu_the_grader_keeps_the_persistent_cache_off(tmp_path, monkeypatch):
    """The model's compile switches JAX's persistent cache off and on process-wide when it is
    on, and a switch (with its reset) while a pool thread compiles broke that compile: the
    grader on CPU, whose pool compiles beside the model, never turns the cache on."""
    import jax

    from autograder.judge.process import enable_cache

    from autograder.judge import baseline, speed

    monkeypatch.setattr(baseline, "CACHE_DIR", None)
    before = jax.config.jax_compilation_cache_dir
    enable_cache(str(tmp_path))
    assert baseline.CACHE_DIR == tmp_path  # the verdicts and the baselines' modules still go here
    assert jax.config.jax_compilation_cache_dir == before and not before
    # so the speed program compiles ahead
    assert speed.speed_ahead_kind(None) is grading.CompileKind.MODEL


def test_the_models_compile_switches_nothing_when_the_cache_is_off(monkeypatch):
    import jax
    import jax.numpy as jnp

    from autograder.tpumodel import api

    def switched(on):
        raise AssertionError("the persistent cache was switched process-wide")

    monkeypatch.setattr(api, "_set_persistent_cache", switched)
    assert not api.persistent_cache_on()
    _, text = api.compile_partitioned(jax.jit(lambda v: v * 2).lower(jnp.ones(4)))
    assert "multiply" in text


def test_a_reused_verdict_compiles_no_memory_or_speed_program(tmp_path, monkeypatch):
    """A clone's verdict is known once its programs have arrived: the big programs, which
    start only when a function is to be graded, are not compiled for it."""
    from autograder.judge.reuse import VerdictStore

    problem, fn = reference_answer("moe_local")
    store = VerdictStore(tmp_path / "verdicts")
    first = grade_function(problem, fn, seed=8, store=store)
    assert not first.reused
    made: list = []
    once = grading.Programs._once

    def recording(self, key, make):
        made.append(key[1])
        return once(self, key, make)

    monkeypatch.setattr(grading.Programs, "_once", recording)
    started = []
    start_big = grading.CompilePool.start_big
    monkeypatch.setattr(grading.CompilePool, "start_big",
                        lambda self: started.append(1) or start_big(self))
    again = grade_function(problem, fn, seed=8, store=store)
    assert again.reused and [c.to_dict() for c in again.checks] == [
        c.to_dict() for c in first.checks]
    compiled = [k for k in made if isinstance(k, grading.CompileKind)]
    assert not started and not compiled, made  # nothing compiled: not even the numerics
    grade_function(problem, fn, seed=9, store=store)  # another seed: graded, so started
    assert started and grading.CompileKind.MEMORY in made and grading.CompileKind.MODEL in made


def test_where_verdicts_are_kept_a_new_program_compiles_as_it_arrives(tmp_path, monkeypatch):
    """With a verdict store, a program no kept verdict was judged on starts compiling as soon
    as it arrives, beside the worker exporting the others (its function's verdict cannot be
    a kept one); a classmate's clone, every program seen, compiles nothing."""
    from autograder.judge.reuse import VerdictStore

    problem, fn = reference_answer("moe_local")
    store = VerdictStore(tmp_path / "verdicts")
    exporting: list = []
    started: list = []

    class Watched:
        def __init__(self):
            self.inner = LocalExporter.of(problem.name, fn)

        def export(self, requests, timeout, on_reply=None):
            exporting.append(True)
            try:
                return self.inner.export(requests, timeout, on_reply=on_reply)
            finally:
                exporting.clear()

    start = grading.CompilePool._start
    monkeypatch.setattr(grading.CompilePool, "_start",
                        lambda self, rid: started.append(bool(exporting)) or start(self, rid))
    first = grading.grade_function(problem, Watched(), seed=8, store=store)
    assert all(c.passed for c in first.checks) and not first.reused
    assert started and started[0], "the first program waited for the lookup"
    started.clear()
    again = grading.grade_function(problem, Watched(), seed=8, store=store)
    assert again.reused and not started, started


@pytest.mark.parametrize("area,fixture,function,measured", [
    ("ps3", "single_psum", "matmul_allreduce", ["speed"]),
    ("ps2_moe", "wrong_a2a_gathers", "moe_all_to_all", ["memory", "speed"]),
])
def test_a_program_that_fails_structure_is_not_measured(area, fixture, function, measured,
                                                        monkeypatch):
    """Memory and speed count only for a program that keeps the structure rules: for one
    that fails them nothing is measured (the big cases' answers, the memory and speed checks
    would raise here), the big compiles not started are cancelled, and the grading ends with
    every pool job done (no thread left waiting, none counted as the submission's work)."""
    from conftest import grade

    from autograder.core.records import Owner
    from autograder.core.results import NOT_CREDITED
    from autograder.judge import judging, measured as measured_mod, ownership, speed

    def never(*a, **k):
        raise AssertionError("a program that fails structure was measured")

    for module, name in ((judging, "memory_check"), (judging, "speed_check"),
                         (measured_mod, "answered"), (speed, "answered")):
        monkeypatch.setattr(module, name, never)
    cancelled, made = [], []
    cancel = grading.CompilePool.cancel
    monkeypatch.setattr(grading.CompilePool, "cancel",
                        lambda self: cancelled.append(1) or cancel(self))
    once = grading.Programs._once

    def recording(self, key, make):
        made.append(self)
        return once(self, key, make)

    monkeypatch.setattr(grading.Programs, "_once", recording)
    told: list = []
    job = ownership.Ownership(told.append)
    before = set(threading.enumerate())
    res = grade(area, fixture, function, with_speed=True, quick=True, ownership=job)
    by = {c.name: c for c in res.checks}
    assert by["numerics"].passed and not by["structure"].passed, res.report()
    assert [c.name for c in res.checks if c.name in ("memory", "speed")] == measured
    for name in measured:
        assert not by[name].passed and not by[name].skipped, by[name].message
        assert by[name].message.startswith(f"{NOT_CREDITED}. Not measured: "), by[name].message
    assert cancelled, "the big cases' compiles were not cancelled"
    assert made and all(f.done() for f in made[0]._made.values())  # no future left unset
    assert job._pool_jobs == 0 and job.now() is Owner.STUDENT
    assert not told or told[-1] is Owner.STUDENT, told
    left = [t for t in set(threading.enumerate()) - before if t.name.startswith("ThreadPool")]
    assert not left, left  # the compile pool's threads all ended with the grading


def test_the_cases_are_planned_while_the_worker_loads(monkeypatch):
    """The judge plans every function's cases before it waits for the sandbox to load the
    submission (the two overlap); the records it sends keep their order, its timings written
    before the last."""
    from autograder.core.records import Done, Job, JudgeOptions, Limits, Plan, Result, Start
    from autograder.judge import process

    events: list = []
    all_requests = grading.Plan.all_requests
    monkeypatch.setattr(grading.Plan, "all_requests",
                        lambda self: events.append("plan") or all_requests(self))

    class Worker:  # a submission that defines none of the functions
        notes, defined, skip, late_notes = [], set(), [], []
        fault = None  # its sandbox imports what it needs

        def start(self):
            events.append("wait for the load")

        def submit(self, requests):
            raise AssertionError("nothing is defined: nothing to export")

        def close(self):
            pass

    job = Job(submission="ps1_sharding.py", cwd=".", grader_log="", log="",
              assignment="ps1_sharding")
    opts = JudgeOptions(quick=True, seed=3, with_speed=False, timed_speed=False,
                        isolation=False, cache_dir=None, limits=Limits(export_s=5))
    sent: list = []
    process.run(job, opts, sent.append, Worker(), before_done=lambda: sent.append("timings"))
    n = len(registry.problems("ps1_sharding"))
    assert events == ["plan"] * n + ["wait for the load"]
    # the job's timing record is written before Done: the supervisor may end the judge then
    assert [type(r) for r in sent] == [Plan] + [Start, Result] * n + [str, Done]


def test_a_limit_run_out_in_an_earlier_test_is_not_carried_into_the_next(request):
    """conftest resets ``errors.EXPIRED`` before each test: the judge loop above would
    otherwise ``os._exit`` the pytest worker it runs in after its first function."""
    from autograder.core import errors

    assert errors.EXPIRED == 0
    errors.EXPIRED = 1  # as an in-process hang leaves it; the next test must not see it


def test_the_compile_options_this_xla_accepts_are_probed_in_one_compile(monkeypatch):
    """Every judge and worker asks which of the course's compile options its XLA knows: all
    of them at once (one compile where all are known), an option XLA refuses left out by the
    name its refusal gives, and the rest kept."""
    from autograder.core import compiling

    compiling._accepted.cache_clear()  # counted afresh, whatever this process probed before
    tried: list = []
    real = compiling._compiles_with
    monkeypatch.setattr(compiling, "_compiles_with", lambda o: tried.append(dict(o)) or real(o))
    known = {"xla_backend_optimization_level": 0, "xla_cpu_parallel_codegen_split_count": 1}
    assert compiling.cpu_options({**known, "xla_no_such_option_here": True}) == known
    assert len(tried) == 2 and tried[-1] == known, tried
    tried.clear()
    assert compiling.cpu_options({"xla_backend_optimization_level": 1}) == {
        "xla_backend_optimization_level": 1}
    assert len(tried) == 1


def test_a_warming_judge_compiles_baselines_to_run_only_where_they_are_timed(monkeypatch,
                                                                             tmp_path):
    """``python -m autograder.judge --warm`` keeps each jit baseline's partitioned module for
    the TPU model; it compiles the baseline to run only where the speed case is timed (real
    accelerators): on CPU that compile was thrown away, in every class run."""
    from autograder.judge import process

    from autograder.judge import baseline

    compiled, texts = [], []
    monkeypatch.setattr(baseline, "CACHE_DIR", None)
    monkeypatch.setattr(grading, "compile_for", lambda p, *a, **k: compiled.append(p.name))
    monkeypatch.setattr(grading, "baseline_text", lambda p, *a: texts.append(p.name))
    process.warm(["ps1_sharding"], with_speed=True)
    baselines = [p.name for p in registry.problems("ps1_sharding") if p.baseline is not None]
    assert texts == baselines and not compiled
    monkeypatch.setattr(grading, "timed_here", lambda: True)  # real accelerators: timed
    process.warm(["ps1_sharding"], with_speed=True)
    assert compiled == baselines
