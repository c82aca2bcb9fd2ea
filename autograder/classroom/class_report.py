"""The class at a glance: one self-contained HTML page built from grade-all's reports.

    python -m autograder class-report REPORTS_DIR [--out class_report.html]

``grade-all`` writes it next to its CSV. Everything comes from the per-submission reports (the
signed JSON files of :mod:`autograder.classroom.batch`); the page needs no server and no network: its
charts are matplotlib PNGs embedded as data URIs. Each section is one small function from the
reports to an HTML fragment:

* the score distribution of every assignment;
* for every graded function, the share of hand-ins passing each check;
* the most common failure messages, grouped by template (numbers, shapes and names of meshes
  taken out), with their count and the students behind them;
* the modeled TPU speed ratios against each function's limit;
* the hand-ins that need a human look (not graded, timed out, crashed, graded without isolation,
  notes about the submission);
* the students of the roster or gradebook who handed in nothing;
* every student's total, linked to their report, with when it was handed in and, where the
  gradebook gave a due date (``grade-all --gradebook``), how late and nbgrader's late penalty.
"""
from __future__ import annotations

import base64
import html
import io
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ..core.results import REGRADE, shown

CHECKS = ("numerics", "sharding", "structure", "memory", "speed")
#: words in a check message that mean the grader, not the student's answer, should be looked at
LOOK = re.compile(r"timed out|time limit|crash|killed|died|segmentation|out of memory|"
                  r"integrity|tamper", re.I)
RATIO = re.compile(r"\(ratio ([0-9.]+)\)")


#: the total shown for a hand-in refused before grading (its own fault: a person looks at it)
REFUSED = "refused"


def totals(report: dict) -> tuple:
    """The total and the maximum of one hand-in's report as the CSV and this page show them:
    scores to two decimals (the JSON reports and the gradebook keep them exact), and no number
    where there is no grade, since a 0 there would read as one: "refused" (and no maximum) for a
    hand-in refused before grading, "needs regrade" where the grader failed on some function or
    on the whole hand-in (the next run grades it again)."""
    return HandIn.from_report(report, "").totals()


def _total(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class HandIn:
    """One student's graded submission of one assignment, as grade-all reported it."""

    student: str
    assignment: str
    score: float
    max_score: float
    functions: dict
    notes: tuple
    isolated: bool
    error: str
    report: str  # the student's report file, relative to the page
    refused: str = ""  # why the hand-in was refused before grading (its own fault)
    regrade: bool = False  # the grader failed on some function: graded again by the next run
    #: when it was handed in (UTC) and where that time is from (batch.handed_in)
    timestamp: str = ""
    timestamp_from: str = ""
    timestamp_problem: str = ""
    #: from the gradebook (nbgrader's figures): None where grade-all had no gradebook
    seconds_late: Optional[float] = None
    late_penalty: Optional[float] = None

    @property
    def late(self) -> bool:
        return bool(self.seconds_late)

    def handed_in(self) -> str:
        """When, as the page shows it: the file's own time is said to be one."""
        if not self.timestamp:
            return ""
        return self.timestamp[:19] + " UTC" + (" (file time)" if self.timestamp_from == "file"
                                                else "")

    def late_text(self) -> str:
        """"on time", how late (and the penalty, if any), or "" where no gradebook said."""
        if self.seconds_late is None:
            return ""
        if not self.seconds_late:
            return "on time"
        text = f"late by {_duration(self.seconds_late)}"
        return text + (f", penalty {shown(self.late_penalty):g}" if self.late_penalty else "")

    @property
    def graded(self) -> bool:
        """Whether the hand-in has a grade that counts in the class's figures (a refused one, or
        one the grader failed on in part or whole, has none yet)."""
        return not (self.refused or self.error or self.regrade)

    def totals(self) -> tuple:
        """(total, out of) as shown: numbers to two decimals, or words where there is no grade
        (:func:`totals`)."""
        if self.refused:
            return REFUSED, ""
        if not self.graded:
            return REGRADE, shown(self.max_score) if self.functions else ""
        return shown(self.score), shown(self.max_score)

    @classmethod
    def from_report(cls, rep: dict, report: str) -> "HandIn":
        return cls(student=str(rep.get("student", "?")),
                   assignment=str(rep.get("assignment") or "?"),
                   score=float(rep.get("score", 0.0)), max_score=float(rep.get("max_score", 0.0)),
                   functions=dict(rep.get("functions") or {}),
                   notes=tuple(rep.get("notes") or ()), isolated=bool(rep.get("isolated", False)),
                   error=str(rep.get("error") or ""), report=report,
                   refused=str(rep.get("refused") or ""),
                   regrade=bool(rep.get("needs_regrade")),
                   timestamp=str(rep.get("timestamp") or ""),
                   timestamp_from=str(rep.get("timestamp_from") or ""),
                   timestamp_problem=str(rep.get("timestamp_problem") or ""),
                   seconds_late=_number(rep.get("seconds_late")),
                   late_penalty=_number(rep.get("late_penalty")))


def _number(value) -> Optional[float]:
    return None if value is None else float(value)


def _duration(seconds: float) -> str:
    """``1 d 2 h``, ``3 h 5 min``, ``40 s``: to the two largest units."""
    parts, left = [], int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size} {unit}")
            left %= size
        if len(parts) == 2:
            break
    return " ".join(parts)


def load_reports(reports: Path, page_dir: Optional[Path] = None) -> list[HandIn]:
    """The hand-ins under ``reports`` (``<student>.json`` files of grade-all, each holding that
    student's assignments); links are made relative to ``page_dir``."""
    import os

    reports = Path(reports)
    page_dir = Path(page_dir or reports.parent)
    out = []
    for path in sorted(reports.glob("*.json")):
        doc = json.loads(path.read_text())
        if "assignments" not in doc:
            continue  # a per-assignment report; the student's file holds it too
        link = os.path.relpath(path.with_suffix(".html"), page_dir)  # student_page's
        for rep in doc["assignments"].values():
            out.append(HandIn.from_report({"student": doc.get("student"), **rep}, link))
    return out


# ------------------------------------------------------------------------------------ helpers
def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<img class="chart" alt="chart" src="data:image/png;base64,{data}">'


def _figure(w, h):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(w, h))


def _whole_numbers(axis) -> None:
    """Ticks at whole numbers only: a count of hand-ins has no fractions."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def _e(s) -> str:
    return html.escape(str(s))


def template(message: str) -> str:
    """A failure message with its particulars taken out, so that the same mistake made by
    several students reads the same: numbers, shapes and meshes become placeholders."""
    m = message.split("\n", 1)[0]
    m = re.sub(r"\b\d+x\d+\b", "<mesh>", m)
    m = re.sub(r"\[[\d, ]+\]", "[…]", m)
    m = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "#", m)
    return _cut(m, 240)


def _cut(text: str, limit: int) -> str:
    """``text`` to at most ``limit`` characters, cut at a space (never mid-word), marked …."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(" ,;:") + "…"


# ----------------------------------------------------------------------------------- sections
def scores_section(hand_ins: list[HandIn]) -> str:
    """Per assignment, the figures of the graded hand-ins: one refused before grading, or one
    the grader failed on (needs regrade), has no grade yet and would pull the mean down as a 0."""
    by_asg: dict[str, list[HandIn]] = defaultdict(list)
    for h in hand_ins:
        by_asg[h.assignment].append(h)
    rows, charts = [], []
    for asg in sorted(by_asg):
        hs = by_asg[asg]
        graded = [h for h in hs if h.graded]
        scores = sorted(h.score for h in graded)
        top = max((h.max_score for h in graded), default=0.0) or 1.0
        left_out = len(hs) - len(graded)
        if scores:
            half = len(scores) // 2
            mean = f"{sum(scores) / len(scores):.2f}"
            mid = scores[half] if len(scores) % 2 else (scores[half - 1] + scores[half]) / 2
            median = f"{mid:.2f}"
        else:
            mean = median = "&ndash;"
        rows.append(f"<tr><td>{_e(asg)}</td><td>{len(hs)}</td><td>{len(graded)}</td>"
                    f"<td>{mean}</td><td>{median}</td><td>{top:g}</td></tr>")
        if not scores:
            continue
        fig, ax = _figure(4, 2.2)
        ax.hist(scores, bins=10, range=(0, top), color="#4c72b0", edgecolor="white")
        ax.set_title(asg, fontsize=10)
        ax.set_xlabel("score" + (f" ({left_out} without a grade left out)" if left_out else ""))
        ax.set_ylabel("hand-ins")
        _whole_numbers(ax.yaxis)
        charts.append(_png(fig))
    return ("<h2>Scores per assignment</h2><table><tr><th>assignment</th><th>hand-ins</th>"
            "<th>graded</th><th>mean</th><th>median</th><th>out of</th></tr>" + "".join(rows)
            + "</table><p><small>The mean and median are of the graded hand-ins: one refused "
            "before grading, or one that needs a regrade, has no grade yet (listed under "
            "&ldquo;need a look&rdquo;).</small></p>"
            + '<div class="charts">' + "".join(charts) + "</div>")


def _check_shares(hand_ins: Iterable[HandIn]) -> dict[str, dict[str, tuple[int, int]]]:
    """function -> check -> (passed, graded)."""
    out: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for h in hand_ins:
        for fn, res in h.functions.items():
            for c in res.get("checks", []):
                cell = out[fn][c["name"]]
                cell[0] += bool(c.get("passed"))
                cell[1] += 1
    return {f: {c: tuple(v) for c, v in d.items()} for f, d in out.items()}


def checks_section(hand_ins: list[HandIn]) -> str:
    shares = _check_shares(hand_ins)
    if not shares:
        return "<h2>Checks passed</h2><p>No graded functions.</p>"
    funcs = _ordered(shares)
    #: the checks some function has: a column no function has (memory, in a course whose
    #: problems set no memory bound) would be an empty column of the heatmap
    checks = [c for c in CHECKS if any(c in shares[f] for f in funcs)]
    rows = []
    for f in funcs:
        cells = []
        for c in checks:
            if c in shares[f]:
                p, n = shares[f][c]
                cells.append(f'<td class="share" data-check="{c}">{100 * p / n:.0f}% '
                             f'<small>({p}/{n})</small></td>')
            else:
                cells.append("<td>—</td>")
        rows.append(f"<tr><td><code>{_e(f)}</code></td>{''.join(cells)}</tr>")
    fig, ax = _figure(6, 0.35 * len(funcs) + 1)
    grid = [[(shares[f][c][0] / shares[f][c][1]) if c in shares[f] else float("nan")
             for c in checks] for f in funcs]
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(checks)), checks, fontsize=8)
    ax.set_yticks(range(len(funcs)), funcs, fontsize=8)
    fig.colorbar(im, ax=ax, label="share passing")
    return ("<h2>Checks passed, per function</h2>" + _png(fig)
            + "<table><tr><th>function</th>" + "".join(f"<th>{c}</th>" for c in checks)
            + "</tr>" + "".join(rows) + "</table>")


def _ordered(names) -> list[str]:
    try:
        from ..course import registry

        order = {p.name: i for i, p in enumerate(registry.problems())}
    except Exception:  # noqa: BLE001 - a report can be rebuilt without the registry
        order = {}
    return sorted(names, key=lambda n: (order.get(n, 1 << 30), n))


def failures_section(hand_ins: list[HandIn], top: int = 15) -> str:
    groups: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for h in hand_ins:
        for fn, res in h.functions.items():
            for c in res.get("checks", []):
                if not c.get("passed") and not c.get("skipped"):
                    groups[(fn, c["name"], template(c["message"]))].append(h.student)
    if not groups:
        return "<h2>Most common failures</h2><p>No check failed.</p>"
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]
    rows = "".join(
        f"<tr><td>{len(who)}</td><td><code>{_e(fn)}</code></td><td>{_e(check)}</td>"
        f"<td>{_e(msg)}</td><td>{_e(', '.join(sorted(set(who))))}</td></tr>"
        for (fn, check, msg), who in ranked)
    return ("<h2>Most common failures</h2><p>Messages grouped by template (numbers, shapes and "
            "meshes taken out).</p><table><tr><th>count</th><th>function</th><th>check</th>"
            "<th>message</th><th>students</th></tr>" + rows + "</table>")


def _limit(fn: str) -> Optional[float]:
    try:
        from ..course import registry

        return registry.get(fn).threshold("tpu_model")
    except Exception:  # noqa: BLE001
        return None


def speed_section(hand_ins: list[HandIn]) -> str:
    ratios: dict[str, list[float]] = defaultdict(list)
    for h in hand_ins:
        for fn, res in h.functions.items():
            for c in res.get("checks", []):
                m = RATIO.search(c.get("message", "")) if c["name"] == "speed" else None
                if m:
                    ratios[fn].append(float(m.group(1)))
    if not ratios:
        return "<h2>Modeled speed</h2><p>No modeled speed ratios in these reports.</p>"
    funcs = _ordered(ratios)
    fig, ax = _figure(6, 0.4 * len(funcs) + 1)
    for i, f in enumerate(funcs):
        ax.scatter(ratios[f], [i] * len(ratios[f]), s=18, color="#4c72b0", alpha=0.7)
        lim = _limit(f)
        if lim is not None:
            ax.plot([lim, lim], [i - 0.4, i + 0.4], color="#c44e52", lw=2)
    ax.set_yticks(range(len(funcs)), funcs, fontsize=8)
    ax.set_xlabel("modeled TPU time / jit baseline (red: the limit)")
    rows = "".join(
        f"<tr><td><code>{_e(f)}</code></td><td>{len(ratios[f])}</td>"
        f"<td>{min(ratios[f]):.2f}</td><td>{sorted(ratios[f])[len(ratios[f]) // 2]:.2f}</td>"
        f"<td>{max(ratios[f]):.2f}</td><td>{_limit(f) if _limit(f) is not None else '?'}</td></tr>"
        for f in funcs)
    return ("<h2>Modeled speed against the limits</h2>" + _png(fig)
            + "<table><tr><th>function</th><th>modeled</th><th>best</th><th>median</th>"
            "<th>worst</th><th>limit</th></tr>" + rows + "</table>")


def look_section(hand_ins: list[HandIn]) -> str:
    rows = []
    for h in sorted(hand_ins, key=lambda h: (h.student, h.assignment)):
        why = []
        if h.refused:
            why.append(f"refused (the hand-in's, not the grader's): {h.refused}")
        if h.error:
            why.append(f"not graded: {h.error}")
        if not h.isolated and not h.refused:
            why.append("graded without isolation")
        if not h.functions and not h.error and not h.refused:
            why.append("no graded function was found: its assignment could not be told")
        for fn, res in h.functions.items():
            if res.get("needs_regrade"):
                why.append(f"{fn}: needs regrade (the grader failed, not the student): "
                           f"{res['needs_regrade']}")
                continue
            for c in res.get("checks", []):
                if LOOK.search(c.get("message", "")):
                    why.append(f"{fn} {c['name']}: {c['message']}")  # whole, never cut
        why += [f"note: {n}" for n in h.notes]
        if h.timestamp_problem:
            why.append(f"handed-in time unknown: {h.timestamp_problem} (nbgrader autograde "
                       "fails such a hand-in)")
        if why:
            rows.append(f'<tr><td><a href="{_e(h.report)}">{_e(h.student)}</a></td>'
                        f"<td>{_e(h.assignment)}</td><td>{'<br>'.join(_e(w) for w in why)}</td>"
                        "</tr>")
    if not rows:
        return "<h2>Hand-ins that need a look</h2><p>None.</p>"
    return ("<h2>Hand-ins that need a look</h2><table><tr><th>student</th><th>assignment</th>"
            "<th>why</th></tr>" + "".join(rows) + "</table>")


def students_section(hand_ins: list[HandIn]) -> str:
    rows = "".join(
        f'<tr class="grade" data-student="{_e(h.student)}" data-assignment="{_e(h.assignment)}">'
        f'<td><a href="{_e(h.report)}">{_e(h.student)}</a></td><td>{_e(h.assignment)}</td>'
        f'<td class="total">{_e(_total(h.totals()[0]))}</td>'
        f'<td class="max">{_e(_total(h.totals()[1]))}</td>'
        f'<td class="handed-in">{_e(h.handed_in())}</td>'
        f'<td class="late">{"<b>" if h.late else ""}{_e(h.late_text())}'
        f'{"</b>" if h.late else ""}</td></tr>'
        for h in sorted(hand_ins, key=lambda h: (h.student, h.assignment)))
    late = sum(h.late for h in hand_ins)
    known = any(h.seconds_late is not None for h in hand_ins)
    note = (f"<p>{late} late hand-in(s), against the due dates in nbgrader's gradebook (the total "
            "is before nbgrader's late penalty, as in nbgrader export).</p>" if known else
            "<p><small>Late: run grade-all with <code>--gradebook</code> to compare the times with "
            "the due dates in nbgrader's gradebook.</small></p>")
    return ("<h2>Every hand-in</h2>" + note + "<table><tr><th>student</th><th>assignment</th>"
            "<th>total</th><th>out of</th><th>handed in</th><th>late</th></tr>" + rows
            + "</table>")


def missing_section(hand_ins: list[HandIn], students: Iterable[str]) -> str:
    """The students of the roster or gradebook (``students``) with no hand-in of an assignment
    the page shows: nbgrader export gives each a 0.0; here they are named."""
    students = sorted(set(students))
    if not students:
        return ""
    seen: dict[str, set] = defaultdict(set)
    for h in hand_ins:
        seen[h.assignment].add(h.student)
    rows = []
    for asg in sorted(seen):
        missing = [s for s in students if s not in seen[asg]]
        if missing:
            rows.append(f'<tr class="missing" data-assignment="{_e(asg)}"><td>{_e(asg)}</td>'
                        f"<td>{len(missing)}</td><td>{_e(', '.join(missing))}</td></tr>")
    if not rows:
        return ("<h2>Students who handed in nothing</h2><p>None: every student of the roster "
                "handed in every assignment shown.</p>")
    return ("<h2>Students who handed in nothing</h2><p>On the roster (or in nbgrader's "
            "gradebook), with no hand-in of the assignment: nbgrader export gives them 0.0."
            "</p><table><tr><th>assignment</th><th>students</th><th>who</th></tr>"
            + "".join(rows) + "</table>")


SECTIONS = (scores_section, checks_section, failures_section, speed_section, look_section,
            students_section)

STYLE = """body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;
text-align:left;vertical-align:top}th{background:#f3f3f3}img.chart{margin:.3em}small{color:#777}"""

#: marks the page once the browser has decoded every chart, so a headless test can tell
SCRIPT = """window.addEventListener('load', function () {
  var imgs = document.querySelectorAll('img.chart'), drawn = 0;
  imgs.forEach(function (i) { if (i.complete && i.naturalWidth > 0) drawn++; });
  document.body.setAttribute('data-charts', imgs.length);
  document.body.setAttribute('data-charts-drawn', drawn);
});"""


def render(hand_ins: list[HandIn], title: str = "Class report",
           students: Iterable[str] = ()) -> str:
    """The whole page; ``students``: the class's students by the roster or gradebook, so that
    those who handed in nothing are named (:func:`missing_section`)."""
    n_students = len({h.student for h in hand_ins})
    head = (f"<h1>{_e(title)}</h1><p>{n_students} students, {len(hand_ins)} hand-ins.</p>")
    body = (head + "".join(section(hand_ins) for section in SECTIONS[:-1])
            + missing_section(hand_ins, students) + SECTIONS[-1](hand_ins))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>{body}</body></html>")


def student_page(doc: dict) -> str:
    """One student's report as a page a person reads: per assignment its total and notes, then
    each function's checks with their whole messages."""
    student = str(doc.get("student", "?"))
    parts = [f"<h1>{_e(student)}</h1>"]
    for asg, rep in sorted((doc.get("assignments") or {}).items()):
        total, top = totals(rep)
        parts.append(f"<h2>{_e(asg)}: {_e(_total(total))}"
                     + (f" of {_e(_total(top))}" if top != "" else "") + "</h2>")
        if rep.get("refused"):
            parts.append(f"<p><b>refused before grading</b>: {_e(rep['refused'])}</p>")
        if rep.get("error"):
            parts.append(f"<p><b>not graded</b>: {_e(rep['error'])}</p>")
        notes = list(rep.get("notes") or ())
        if not rep.get("isolated", True) and not rep.get("refused"):
            notes.insert(0, "graded without isolation")
        if notes:
            parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
        rows = []
        for fn, res in (rep.get("functions") or {}).items():
            checks = res.get("checks") or []
            regrade = res.get("needs_regrade")
            head = (f'<td rowspan="{max(1, len(checks))}"><code>{_e(fn)}</code><br>'
                    f"{shown(res.get('score', 0)):g} / {shown(res.get('max_score', 0)):g}"
                    + (f"<br><b>needs regrade</b>: {_e(regrade)}" if regrade else "") + "</td>")
            if not checks:
                rows.append(f"<tr>{head}<td colspan='3'></td></tr>")
            for i, c in enumerate(checks):
                verdict = ("skipped" if c.get("skipped") else
                           "pass" if c.get("passed") else "FAIL")
                rows.append(f"<tr>{head if i == 0 else ''}<td>{_e(c.get('name', ''))}</td>"
                            f'<td class="{verdict.lower()}">{verdict}</td>'
                            f"<td>{_e(c.get('message', ''))}</td></tr>")
        if rows:
            parts.append("<table><tr><th>function</th><th>check</th><th></th>"
                         "<th>message</th></tr>" + "".join(rows) + "</table>")
    style = STYLE + ".fail{color:#b00;font-weight:bold}.pass{color:#070}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(student)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")


def write(reports: Path, out: Path, title: str = "Class report",
          students: Iterable[str] = ()) -> Path:
    """The class page at ``out`` and, beside each student's JSON report, that student's page
    (``<student>.html``), which the class page links to. ``students``: the roster's or
    gradebook's, to name those who handed in nothing."""
    out = Path(out)
    for path in sorted(Path(reports).glob("*.json")):
        doc = json.loads(path.read_text())
        if "assignments" in doc:
            path.with_suffix(".html").write_text(student_page(doc))
    out.write_text(render(load_reports(reports, out.parent), title, students))
    return out

