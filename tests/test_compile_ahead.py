"""The memory and speed programs compile ahead: in the function's compile pool, as soon as their
artifacts arrive, from the cases' shapes alone, while the numerics run (autograder/judge/grading.py).

What must hold: the program compiled from shapes is the program the checks would have compiled
from the placed arrays, each is compiled once, on a pool thread, and the verdict is the same.
And the judge's own planning overlaps the sandbox loading the submission.
"""
import threading

import pytest

from autograder.course import registry
from autograder.judge import grading
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
        call = programs._artifact(req).call
        placed = jax.jit(call).lower(*grading._dynamic(problem, grading._place(problem, case,
                                                                                 mesh)))
        shaped = jax.jit(call).lower(*grading._dynamic(problem, grading._shapes(problem, req,
                                                                                  mesh)))
        assert shaped.as_text() == placed.as_text(), size


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
    big = [(what, on_main) for what, on_main in made if what in ("memory", "speed")]
    assert sorted(big) == [("memory", False), ("speed", False)], made
    numerics = [on_main for what, on_main in made if what is True]
    assert numerics and not any(numerics), "a numerics program compiled on the main thread"


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

    monkeypatch.setattr(grading, "CACHE_DIR", None)
    before = jax.config.jax_compilation_cache_dir
    enable_cache(str(tmp_path))
    assert grading.CACHE_DIR == tmp_path  # the verdicts and the baselines' modules still go here
    assert jax.config.jax_compilation_cache_dir == before and not before
    assert grading._speed_ahead(None) == "model"  # so the speed program compiles ahead


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
    start_big = grading.Programs.start_big
    monkeypatch.setattr(grading.Programs, "start_big",
                        lambda self: started.append(1) or start_big(self))
    again = grade_function(problem, fn, seed=8, store=store)
    assert again.reused and [c.to_dict() for c in again.checks] == [
        c.to_dict() for c in first.checks]
    assert not started and not made, made  # nothing compiled: not even the numerics
    grade_function(problem, fn, seed=9, store=store)  # another seed: graded, so started
    assert started and "memory" in made and "speed" in made


def test_the_cases_are_planned_while_the_worker_loads(monkeypatch):
    """The judge plans every function's cases before it waits for the sandbox to load the
    submission (the two overlap); the records it sends keep their order."""
    import argparse

    from autograder.core.records import Done, Plan, Result, Start
    from autograder.judge import process

    events: list = []
    all_requests = grading.Plan.all_requests
    monkeypatch.setattr(grading.Plan, "all_requests",
                        lambda self: events.append("plan") or all_requests(self))
    monkeypatch.setattr(grading, "OWNER_HOOK", None)

    class Worker:  # a submission that defines none of the functions
        notes, defined, skip, late_notes = [], set(), [], []

        def start(self):
            events.append("wait for the load")

        def submit(self, requests):
            raise AssertionError("nothing is defined: nothing to export")

        def close(self):
            pass

    a = argparse.Namespace(submission="ps1_sharding.py", assignment="ps1_sharding", only=None,
                           cache_dir=None, seed=3, quick=True, no_speed=True, export_timeout=5,
                           serial="")
    sent: list = []
    process.run(a, sent.append, Worker())
    n = len(registry.problems("ps1_sharding"))
    assert events == ["plan"] * n + ["wait for the load"]
    assert [type(r) for r in sent] == [Plan] + [Start, Result] * n + [Done]


def test_a_limit_run_out_in_an_earlier_test_is_not_carried_into_the_next(request):
    """conftest resets ``errors.EXPIRED`` before each test: the judge loop above would
    otherwise ``os._exit`` the pytest worker it runs in after its first function."""
    from autograder.core import errors

    assert errors.EXPIRED == 0
    errors.EXPIRED = 1  # as an in-process hang leaves it; the next test must not see it
