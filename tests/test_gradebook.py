"""grade-all --gradebook's writing into nbgrader's gradebook, on a hand-made report (the grades
of a graded class reaching nbgrader's export are checked by tests/test_batch.py)."""
import warnings

import pytest

pytest.importorskip("nbgrader")

#: about nbgrader's gradebook, not JAX: make test-latest leaves it to make test
pytestmark = pytest.mark.orchestration


def test_publishing_prints_none_of_nbgraders_sqlalchemy_noise(tmp_path):
    """nbgrader's update_or_create_submission makes SQLAlchemy warn that the new submission is
    not in the session (nbgrader's own noise): grade-all --gradebook prints none of it, and the
    grades are written all the same."""
    from nbgrader.api import Gradebook

    from autograder.classroom.gradebook import db_url, publish

    rep = {"student": "ann", "assignment": "ps1_sharding",
           "functions": {"roll_diff": {"score": 4.0, "max_score": 4.0}}}
    db = str(tmp_path / "gradebook.db")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert publish([rep], db) == 3
        assert publish([rep], db) == 3  # again: updated in place
    assert not [w for w in seen if "not in session" in str(w.message)], \
        [str(w.message) for w in seen]
    with Gradebook(db_url(db)) as gb:
        assert gb.find_grade("grade_roll_diff", "ps1_sharding", "ps1_sharding", "ann").score == 4
