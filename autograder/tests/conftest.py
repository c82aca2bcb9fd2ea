"""`pytest autograder` grades the reference answers; `--submission PATH` grades a student's.

    pytest autograder                                   # every assignment's reference answers
    pytest autograder --submission alice.ipynb --assignment ps1_sharding
"""
from pathlib import Path

import pytest

from ..core.devices import setup_devices

setup_devices()

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def pytest_addoption(parser):
    g = parser.getgroup("autograder")
    g.addoption("--submission", default=None, help="notebook or .py file to grade")
    g.addoption("--assignment", default=None, help="only this assignment")
    g.addoption("--no-speed", action="store_true", help="skip the speed checks")


def pytest_generate_tests(metafunc):
    if "problem" not in metafunc.fixturenames:
        return
    from ..course import registry

    asg = metafunc.config.getoption("--assignment")
    probs = registry.problems(asg)
    metafunc.parametrize("problem", probs, ids=[p.name for p in probs])


@pytest.fixture(scope="session")
def submissions(request):
    """assignment -> where the programs come from: the reference answers (the course's own
    code, loaded here), or, for ``--submission``, the student's file in the sandbox (never run
    in this process)."""
    from ..core.loader import load
    from ..judge.channel import SandboxExporter
    from ..worker.local import LocalExporter

    path = request.config.getoption("--submission")
    cache = {}

    def get(asg):
        if asg not in cache:
            p = Path(path) if path else SOLUTIONS / f"{asg}.py"
            if not p.exists():
                pytest.skip(f"no submission at {p}")
            if path:
                exporter = SandboxExporter(p.resolve(), isolated=True)
                exporter.start()
                request.addfinalizer(exporter.close)
                cache[asg] = lambda name: exporter if name in exporter.defined else None
            else:
                loaded = load(p)
                cache[asg] = lambda name: (LocalExporter.of(name, loaded.function(name))
                                           if callable(loaded.function(name)) else None)
        return cache[asg]

    return get
