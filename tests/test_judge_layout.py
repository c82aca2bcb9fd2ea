"""The judge's inside as its outside: modules of a size a reader can hold, and whose work the judge
is doing kept in one object per job, never in module state."""
import importlib
import pkgutil
import threading
from pathlib import Path

import pytest

import autograder
from autograder.core.records import Handover, Owner, parse

PACKAGE = Path(autograder.__file__).parent

#: the most lines a module of the package may have
MAX_LINES = 700


def test_no_module_of_the_package_is_over_700_lines():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not over, over
    assert sizes["judge/grading.py"] <= MAX_LINES


def _judge_modules(judge):
    """The judge's modules but ``__main__`` (importing it runs the judge)."""
    return [m for m in pkgutil.iter_modules(judge.__path__) if m.name != "__main__"]


def test_every_judge_module_says_in_its_docstring_what_it_owns():
    import autograder.judge as judge

    for info in _judge_modules(judge):
        module = importlib.import_module(f"autograder.judge.{info.name}")
        assert (module.__doc__ or "").strip(), info.name


def test_two_jobs_own_their_work_apart():
    """Whose work the judge is doing lives in a job's Ownership: another job's grader work,
    pool jobs or reset change nothing of it, and each tells its own listener."""
    from autograder.judge.ownership import Ownership

    one_told, two_told = [], []
    one, two = Ownership(hook=one_told.append), Ownership(hook=two_told.append)
    with one.grader_work("the checks"):
        assert one.now() is Owner.GRADER and two.now() is Owner.STUDENT
        with two.pool_job():
            assert one.now() is Owner.GRADER and two.now() is Owner.STUDENT
        two.reset()
        assert one.now() is Owner.GRADER
    assert one_told == [Owner.GRADER, Owner.STUDENT] and two_told == []


def test_the_judge_keeps_no_ownership_state_in_its_modules():
    """No module of the judge holds who owns the work: no hook, owner stack, pool-job count,
    lock or Ownership of its own at module level."""
    import autograder.judge as judge
    from autograder.judge.ownership import Ownership

    lock = type(threading.RLock())
    for info in _judge_modules(judge):
        module = importlib.import_module(f"autograder.judge.{info.name}")
        for name in ("OWNER_HOOK", "_owners", "_pool_jobs", "_told", "_owner_lock"):
            assert not hasattr(module, name), (info.name, name)
        for name, value in vars(module).items():
            assert not isinstance(value, (Ownership, lock)), (info.name, name)


def test_a_handover_crosses_as_the_owner_s_name_and_comes_back_as_the_enum():
    line = Handover(Owner.BOTH).to_line()
    assert '"owner": "both"' in line and '"type": "owner"' in line
    assert parse(line) == Handover(Owner.BOTH)
    with pytest.raises(TypeError):
        Handover("both")
    with pytest.raises(ValueError, match="owner: expected one of"):
        parse('{"type": "owner", "owner": "nobody"}')
