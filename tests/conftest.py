"""Shared fixtures: 8 emulated devices before anything touches JAX, and fixture loading."""
import os
import tempfile
from pathlib import Path

import pytest

# The trusted side's class-wide cache: one per test session, never the user's own.
os.environ.setdefault("AUTOGRADER_CACHE_DIR", tempfile.mkdtemp(prefix="autograder-cache-"))

from autograder.core.devices import setup_devices
from autograder.supervisor import local

setup_devices()

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def load_fixture(area: str, name: str):
    from autograder.core.loader import load

    return load(FIXTURES / area / f"{name}.py", statement_timeout=5, total_timeout=20)


def grade(area: str, fixture: str, function: str, **kw):
    """Grade one function of a fixture file in-process (no speed check unless asked)."""
    from autograder.course import registry

    kw.setdefault("with_speed", False)
    loaded = load_fixture(area, fixture)
    return local.grade_function(registry.get(function), loaded.function(function), **kw)


def check_of(result, name):
    return next(c for c in result.checks if c.name == name)
