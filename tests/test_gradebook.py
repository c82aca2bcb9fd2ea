"""grade-all --gradebook's writing into nbgrader's gradebook, on a hand-made report (the grades
of a graded class reaching nbgrader's export are checked by tests/test_batch.py)."""
import warnings

import pytest

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


def test_late_and_resubmitted_as_nbgrader_records_them(tmp_path):
    """The submission's time from timestamp.txt (a later run's newer time replaces it, as
    nbgrader autograde's call does), its seconds past the assignment's due date and the late
    penalty of nbgrader's own AssignLatePenalties step with the course's penalty method; the
    file's own time is never written (nbgrader records none without timestamp.txt); a folder
    without a notebook gets no submission."""
    from nbgrader.api import Gradebook, MissingEntry
    from traitlets.config import Config

    from autograder.classroom.gradebook import db_url, lateness, publish

    db = str(tmp_path / "gradebook.db")
    fns = {"roll_diff": {"score": 4.0, "max_score": 4.0}}
    reps = [{"student": "ann", "assignment": "ps1_sharding", "functions": fns,
             "timestamp": "2026-11-21 12:00:00", "timestamp_from": "timestamp.txt"},
            {"student": "bo", "assignment": "ps1_sharding", "functions": fns,
             "timestamp": "2026-11-22 09:30:00", "timestamp_from": "timestamp.txt"},
            {"student": "cy", "assignment": "ps1_sharding", "functions": fns,
             "timestamp": "2026-11-23 09:30:00", "timestamp_from": "file"},
            {"student": "dan", "assignment": "ps1_sharding", "functions": {},
             "refused": "a .py", "no_notebook": True, "timestamp": "2026-11-23 09:30:00",
             "timestamp_from": "timestamp.txt"}]
    publish(reps[:1], db)
    with Gradebook(db_url(db)) as gb:
        gb.update_or_create_assignment("ps1_sharding", duedate="2026-11-21 18:00:00 UTC")
    cfg = Config()
    cfg.LateSubmissionPlugin.penalty_method = "zero"
    reps[0]["timestamp"] = "2026-11-22 08:00:00"  # ann hands in again, after the due date
    publish(reps, db, config=cfg)
    with Gradebook(db_url(db)) as gb:
        ann, bo, cy = (gb.find_submission("ps1_sharding", s) for s in ("ann", "bo", "cy"))
        assert str(ann.timestamp) == "2026-11-22 08:00:00" and ann.total_seconds_late == 50400
        assert bo.total_seconds_late == 15.5 * 3600 and bo.late_submission_penalty == 4.0
        assert cy.timestamp is None and cy.total_seconds_late == 0
        assert not cy.late_submission_penalty
        with pytest.raises(MissingEntry):
            gb.find_submission("ps1_sharding", "dan")
    late = lateness(reps, db)
    assert late[("bo", "ps1_sharding")]["seconds_late"] == 55800.0
    assert late[("bo", "ps1_sharding")]["late_penalty"] == 4.0
    assert late[("cy", "ps1_sharding")]["seconds_late"] == 0.0 and ("dan", "ps1_sharding") \
        not in late


def test_the_export_leaves_a_hand_in_without_a_grade_empty_and_says_why(tmp_path):
    """nbgrader export, as the course configures it: a hand-in refused before grading and one
    with a function that needs a regrade have empty raw_score and score and a needs_look
    reason (nbgrader's own CSV says 0.0 for both, with a time); a graded hand-in keeps its
    score; a student who handed in nothing keeps nbgrader's 0.0; a manual score given in
    formgrader makes the row a score again."""
    import csv

    from nbgrader.api import Gradebook
    from traitlets.config import Config

    from autograder.classroom.export import CourseCsvExport
    from autograder.classroom.gradebook import db_url, publish
    from autograder.classroom.nbgrader_plugin import configure

    c = Config()
    configure(c)
    assert c.ExportApp.plugin_class is CourseCsvExport

    fns = {"shard_average_jit": {"score": 3.0, "max_score": 3.0},
           "shard_average_shard_map": {"score": 3.0, "max_score": 3.0},
           "roll_diff": {"score": 4.0, "max_score": 4.0}}
    when = {"timestamp": "2026-11-21 12:00:00", "timestamp_from": "timestamp.txt"}
    regrade = dict(fns, roll_diff={"score": 0.0, "max_score": 4.0, "needs_regrade": "judge died"})
    db = str(tmp_path / "gradebook.db")
    publish([{"student": "ann", "assignment": "ps1_sharding", "functions": fns, **when},
             {"student": "bo", "assignment": "ps1_sharding", "functions": {},
              "refused": "renamed notebook", **when},
             {"student": "cy", "assignment": "ps1_sharding", "functions": regrade, **when}], db)
    out = tmp_path / "grades.csv"

    def export():
        with Gradebook(db_url(db)) as gb:
            gb.update_or_create_student("dee")  # on the roster, handed in nothing
            CourseCsvExport(to=str(out)).export(gb)
        return {r["student_id"]: r for r in csv.DictReader(out.open())}

    rows = export()
    assert rows["ann"]["raw_score"] == "10.0" and rows["ann"]["needs_look"] == ""
    for s, cells in (("bo", "grade_roll_diff, grade_shard_average_jit"), ("cy", "grade_roll_diff")):
        assert rows[s]["raw_score"] == rows[s]["score"] == "", rows[s]
        assert rows[s]["needs_look"].startswith(f"not graded: {cells}"), rows[s]
        assert rows[s]["timestamp"] == "2026-11-21 12:00:00"
    assert rows["dee"]["raw_score"] == "0.0" and rows["dee"]["needs_look"] == ""
    with Gradebook(db_url(db)) as gb:  # a TA grades cy's roll_diff by hand in formgrader
        gb.find_grade("grade_roll_diff", "ps1_sharding", "ps1_sharding", "cy").manual_score = 2.0
        gb.db.commit()
    assert export()["cy"]["raw_score"] == "8.0"
