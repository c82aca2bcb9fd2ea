"""The class report's parts on hand-made reports (the page grade-all writes is checked, in a
browser too, by tests/test_batch.py)."""
from autograder.classroom import class_report as cr


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
    speed = cr.speed_section(CLASS)
    assert "<td>0.68</td>" in speed and "<td>1.40</td>" in speed and "<td>0.9</td>" in speed
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
