"""tools/run_suite.py's parallel phase keeps the tests that share one piece of work together."""
import pytest

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


@pytest.mark.parametrize("path", ["solutions/ps1_sharding.py"])
def test_tests_of_one_submission_share_one_worker(request, path):
    """Under ``--dist loadgroup`` a test parametrized with a submission carries that file's
    group in its node id (pytest-xdist schedules by it); a pytest whose node ids drop it would
    silently grade every fixture once per worker."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("run by tools/run_suite.py's parallel phase (pytest-xdist, --dist loadgroup)")
    assert request.node.nodeid.endswith(f"@submission:{path}"), request.node.nodeid
