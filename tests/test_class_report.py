"""The class report's parts on hand-made reports (the page grade-all writes is checked, in a
browser too, by tests/test_batch.py)."""
from autograder.classroom import class_report as cr
import pytest

#: the same on every JAX: make test runs it, make test-latest leaves it out
pytestmark = pytest.mark.orchestration


def _hand_in(student, score, checks, **kw):
    fn = {"score": score, "max_score": 5.0,
          "checks": [{"name": n, "passed": p, "message": m} for n, p, m in checks]}
    return cr.HandIn(student=student, assignment="ps3_collective_matmul", score=score,
                     max_score=5.0, functions={"matmul_reducescatter": fn},
                     notes=kw.get("notes", ()), isolated=kw.get("isolated", True),
                     error=kw.get("error", ""), report=f"reports/{student}.json")


CLASS = [
    _hand_in("ann", 5.0, [("numerics", True, "ok"), ("structure", True, "ok"),
                          ("speed", True, "modeled on TPU v5e: 1 us vs 2 us (ratio 0.68)")]),
    _hand_in("bo", 3.5, [("numerics", True, "ok"),
                         ("structure", False, "on mesh 2x4: sent 4096 B, budget 3072 B"),
                         ("speed", False, "modeled on TPU v5e: 3 us vs 2 us (ratio 1.40)")]),
    _hand_in("cy", 3.5, [("numerics", True, "ok"),
                         ("structure", False, "on mesh 4x2: sent 8192 B, budget 4096 B"),
                         ("speed", True, "timed out after 150 s")], isolated=False),
]


def test_template_takes_out_the_particulars():
    a = cr.template("on mesh 2x4: sent 4096 B, budget 3072 B; shape [1024, 256]")
    b = cr.template("on mesh 4x2: sent 8192 B, budget 4096 B; shape [512, 128]")
    assert a == b and "4096" not in a and "mesh" in a


def test_the_same_mistake_is_one_row_with_its_students():
    html = cr.failures_section(CLASS)
    assert "<td>2</td><td><code>matmul_reducescatter</code></td><td>structure</td>" in html
    assert "bo, cy" in html


def test_check_shares_count_each_hand_in():
    shares = cr._check_shares(CLASS)["matmul_reducescatter"]
    assert shares["numerics"] == (3, 3) and shares["structure"] == (1, 3)
    assert shares["speed"] == (2, 3)


def test_speed_ratios_and_hand_ins_to_look_at():
    from autograder.course import registry

    speed = cr.speed_section(CLASS)
    limit = registry.get("matmul_reducescatter").threshold("tpu_model")
    assert "<td>0.68</td>" in speed and "<td>1.40</td>" in speed
    assert f"<td>{limit:g}</td>" in speed, (limit, speed[-400:])  # the grader's own limit
    look = cr.look_section(CLASS)
    assert "cy" in look and "graded without isolation" in look and "timed out" in look
    assert "ann" not in look and "bo" not in look


def test_page_embeds_its_charts():
    page = cr.render(CLASS)
    assert page.count('<img class="chart"') == 3  # scores, checks, speed
    assert "data:image/png;base64," in page and "http" not in page


def test_a_student_page_is_readable_and_the_class_page_links_to_it(tmp_path):
    """Each student gets a page of their own (not raw JSON): totals, notes, and every check's
    whole message; the class page links there. Counts on the charts are whole numbers."""
    import json

    long = "x" * 150 + " the end of a long message that must not be cut"
    doc = {"student": "bo", "assignments": {"ps3_collective_matmul": {
        "score": 3.5, "max_score": 5.0, "isolated": True, "notes": ["line 3: skipped"],
        "functions": {"matmul_reducescatter": {
            "score": 3.5, "max_score": 5.0,
            "checks": [{"name": "numerics", "passed": True, "message": "ok"},
                       {"name": "structure", "passed": False, "message": long},
                       {"name": "speed", "passed": False, "message": "time limit " + long}]}}}}}
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "bo.json").write_text(json.dumps(doc))
    cr.write(reports, tmp_path / "class_report.html")
    page = (reports / "bo.html").read_text()
    assert "3.5 of 5" in page and "line 3: skipped" in page and "FAIL" in page
    assert long in page
    cls = (tmp_path / "class_report.html").read_text()
    assert 'href="reports/bo.html"' in cls and ".json" not in cls
    look = cls[cls.index("need a look"):]
    assert "must not be cut" in look  # whole messages in "needs a look"


def test_histogram_counts_are_whole_numbers():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.hist([1.0, 2.0, 2.0], bins=3)
    cr._whole_numbers(ax.yaxis)
    fig.canvas.draw()
    ticks = [t for t in ax.get_yticks() if 0 <= t <= 2]
    assert ticks and all(float(t).is_integer() for t in ticks)
    plt.close(fig)


def test_hand_ins_without_a_grade_stay_out_of_the_mean_and_say_why():
    """A hand-in refused before grading (a renamed notebook) and one the grader failed on have
    no grade: the class mean is of the graded ones, and their totals read "refused" and "needs
    regrade", never "0 / 0" or a 0 that reads as one."""
    refused = cr.HandIn.from_report(
        {"student": "dee", "assignment": "ps3_collective_matmul", "score": 0.0,
         "max_score": 0.0, "functions": {}, "refused": "renamed: ps3 (1).ipynb"}, "r/dee.html")
    regrade = cr.HandIn.from_report(
        {"student": "eli", "assignment": "ps3_collective_matmul", "score": 0.0,
         "max_score": 5.0, "needs_regrade": ["matmul_reducescatter"], "isolated": True,
         "functions": {"matmul_reducescatter": {"score": 0.0, "max_score": 5.0, "checks": [],
                                                "needs_regrade": "the judge crashed"}}},
        "r/eli.html")
    scores = cr.scores_section(CLASS + [refused, regrade])
    # ann 5, bo 3.5, cy 3.5: mean 4.00 (with the two as zeros it would be 2.40)
    assert "<td>5</td><td>3</td><td>4.00</td><td>3.50</td><td>5</td>" in scores, scores[:600]
    every = cr.students_section(CLASS + [refused, regrade])
    assert '<td class="total">refused</td><td class="max"></td>' in every
    assert '<td class="total">needs regrade</td><td class="max">5</td>' in every
    assert cr.totals({"score": 2.954545, "max_score": 3.0, "functions": {"f": {}}}) == (2.95, 3.0)


def test_the_csv_shows_a_grade_only_where_there_is_one(tmp_path):
    """grade-all's CSV: scores to two decimals (the JSON report keeps them exact), "needs
    regrade" as the total of a hand-in the grader failed on in part (not the part's sum, which
    reads as a grade), "refused" for one refused before grading; the class page shows the same."""
    import csv
    from pathlib import Path

    from autograder.classroom import batch

    fn = {"score": 2.9545, "max_score": 3.0, "checks": []}
    reps = {
        "ann": {"assignment": "ps1_sharding", "score": 6.9545, "max_score": 10.0,
                "isolated": True, "functions": {"shard_average_jit": fn,
                                                "roll_diff": {"score": 4.0, "max_score": 4.0}}},
        "bo": {"assignment": "ps1_sharding", "score": 4.0, "max_score": 10.0, "isolated": True,
               "needs_regrade": ["shard_average_jit"],
               "functions": {"shard_average_jit": {**fn, "score": 0.0, "needs_regrade": "x"},
                             "roll_diff": {"score": 4.0, "max_score": 4.0}}},
        "cy": {"assignment": "ps1_sharding", "score": 0.0, "max_score": 0.0, "functions": {},
               "refused": "ps1_sharding (1).ipynb: rename it"},
    }
    outcomes = [batch.Outcome(batch.Item(s, "ps1_sharding", Path(f"{s}.ipynb")),
                              {"student": s, "submission": f"{s}.ipynb", **r})
                for s, r in reps.items()]
    out = tmp_path / "grades.csv"
    batch.write_outputs(outcomes, out, tmp_path)
    rows = {r["student"]: r for r in csv.DictReader(out.open())}
    assert rows["ann"]["shard_average_jit"] == "2.95" and rows["ann"]["total"] == "6.95"
    assert rows["ann"]["max_total"] == "10.0"
    assert rows["bo"]["shard_average_jit"] == "needs regrade" and rows["bo"]["roll_diff"] == "4.0"
    assert rows["bo"]["total"] == "needs regrade" and rows["bo"]["max_total"] == "10.0"
    assert rows["cy"]["total"] == "refused" and rows["cy"]["max_total"] == ""
    page = cr.render(cr.load_reports(tmp_path, tmp_path))
    assert '<td class="total">6.95</td>' in page and "6.9545" not in page


def test_the_late_column_says_how_late_as_the_gradebook_said():
    """Every hand-in's row shows when it was handed in (the file's own time marked as one) and,
    where grade-all had a gradebook, "on time" or how late with nbgrader's penalty; without a
    gradebook the page says how to get the late column."""
    from autograder.classroom.class_report import HandIn, students_section

    base = {"assignment": "ps1_sharding", "score": 6.0, "max_score": 10.0, "isolated": True,
            "functions": {"roll_diff": {"score": 4.0, "max_score": 4.0}}}
    ann = HandIn.from_report({**base, "student": "ann", "timestamp": "2026-11-21 12:00:00",
                              "timestamp_from": "timestamp.txt", "seconds_late": 0.0,
                              "late_penalty": 0.0}, "r/ann.html")
    bo = HandIn.from_report({**base, "student": "bo", "timestamp": "2026-11-22 09:30:00",
                             "timestamp_from": "timestamp.txt", "seconds_late": 55800.0,
                             "late_penalty": 6.0}, "r/bo.html")
    cy = HandIn.from_report({**base, "student": "cy", "timestamp": "2026-11-23 01:02:03",
                             "timestamp_from": "file"}, "r/cy.html")
    page = students_section([ann, bo, cy])
    assert "1 late hand-in(s)" in page
    assert '<td class="late">on time</td>' in page
    assert '<td class="late"><b>late by 15 h 30 min, penalty 6</b></td>' in page
    assert "2026-11-23 01:02:03 UTC (file time)" in page
    page = students_section([cy])
    assert "--gradebook" in page and '<td class="late"></td>' in page


def test_the_heatmap_has_a_column_only_for_a_check_some_function_has(monkeypatch):
    """CLASS has no memory check: neither the heatmap's columns nor the table's show one."""
    shown = {}
    real = cr._figure

    def figure(w, h):
        fig, ax = real(w, h)
        monkeypatch.setattr(ax, "set_xticks", lambda ticks, labels, **kw: shown.update(
            x=list(labels)))
        return fig, ax
    monkeypatch.setattr(cr, "_figure", figure)
    html = cr.checks_section(CLASS)
    assert shown["x"] == ["numerics", "structure", "speed"]
    assert "<th>memory</th>" not in html and "<th>sharding</th>" not in html
    with_memory = CLASS + [_hand_in("di", 5.0, [("numerics", True, "ok"),
                                                ("memory", True, "ok")])]
    html = cr.checks_section(with_memory)
    assert shown["x"] == ["numerics", "structure", "memory", "speed"]
    assert "<th>memory</th>" in html


def test_a_long_message_is_cut_between_words():
    words = [f"word{i}" for i in range(80)]
    msg = " ".join(w.replace("word", "token") for w in words)
    cut = cr.template(msg)
    assert len(cut) <= 240 and cut.endswith("…")
    assert all(w in msg.split() for w in cut[:-1].split()), cut  # every word whole
    assert cr.template("short message") == "short message"


def test_students_who_handed_in_nothing_are_named():
    page = cr.render(CLASS, students=["ann", "bo", "cy", "dee", "eli"])
    section = page[page.index("handed in nothing"):page.index("Every hand-in")]
    assert "dee, eli" in section and "ann" not in section
    assert "handed in nothing" not in cr.render(CLASS)  # no roster, no gradebook: no section
    every = cr.render(CLASS, students=["ann", "bo", "cy"])
    assert "None: every student" in every
