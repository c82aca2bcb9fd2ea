"""Result types shared by the checks, the CLI, pytest and the nbgrader cells."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

CHECK_NAMES = ("numerics", "sharding", "structure", "memory", "speed")

#: the one rule on the measured checks, in the words the grader's message, the self-check,
#: CONTRACT.md and every notebook's "What the grader checks" block all use
#: (:func:`not_measured` in the grader, :func:`credited` in the self-check)
MEASURED_NEED_STRUCTURE = ("speed and memory count only for a program that keeps the structure "
                           "rules")

#: the checks :data:`MEASURED_NEED_STRUCTURE` is about
MEASURED = ("memory", "speed")

#: the longest message a check result keeps when it is read back (longer ones are cut, marked)
MAX_MESSAGE = 8000


@dataclass
class CheckResult:
    """The verdict of one check: what was expected, what was found, how to look."""

    name: str
    passed: bool
    message: str = ""
    #: not run, because an earlier check could not give it anything to judge (no points)
    skipped: bool = False

    def __post_init__(self):
        if self.skipped and self.passed:
            raise ValueError(f"check {self.name!r} cannot be both skipped and passed")

    def __bool__(self) -> bool:  # lets tests write ``assert check(...)``
        return self.passed

    @property
    def mark(self) -> str:
        """How a report shows the verdict."""
        return "SKIP" if self.skipped else "PASS" if self.passed else "FAIL"

    def to_dict(self) -> dict:
        d = {"name": self.name, "passed": bool(self.passed), "message": self.message}
        if self.skipped:
            d["skipped"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "CheckResult":
        if not isinstance(d, dict) or not {"name", "passed", "message"} <= set(d) <= {
                "name", "passed", "message", "skipped"}:
            raise ValueError(f"not a check result: {d!r}"[:200])
        message = str(d["message"])
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE - 10] + " [...cut]"
        return cls(str(d["name"])[:40], bool(d["passed"]), message,
                   skipped=bool(d.get("skipped", False)))


def passed(name: str, message: str = "ok") -> CheckResult:
    return CheckResult(name, True, message)


def failed(name: str, message: str) -> CheckResult:
    return CheckResult(name, False, message)


def skipped(name: str, why: str) -> CheckResult:
    """A check that was not run (no points), and why."""
    return CheckResult(name, False, f"not checked: {why}", skipped=True)


#: the longest text of a hand-in's that :func:`quoted` shows
MAX_QUOTED = 800


def quoted(text: object, limit: int = MAX_QUOTED) -> str:
    """Text a hand-in supplied (what its code raised or printed, what its sandbox reported) as
    a report shows it: in double quotes, on one line, with quotes, backslashes, newlines and
    every other unprintable character escaped (so no line of it can stand alone and read as the
    grader's), cut to ``limit`` characters with the cut said outside the quotes. Every message
    that carries such text says whose it is before the quote (``your code raised "..."``)."""
    out = []
    for ch in str(text):
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif not ch.isprintable():
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    kept, n = [], 0
    for piece in out:  # whole escapes only
        if n + len(piece) > limit:
            return f'"{"".join(kept)}" (cut: {len(out) - len(kept)} more characters)'
        kept.append(piece)
        n += len(piece)
    return f'"{"".join(kept)}"'


def your_code_raised(error: object, limit: int = MAX_QUOTED) -> str:
    """An error text that came from student code (or from the sandbox it ran in), attributed
    and :func:`quoted`."""
    return f"your code raised {quoted(error, limit)}"


#: how a report marks a verdict reused from an identical program
REUSED_NOTE = ("  (its programs are identical to ones already graded in this run, on the same "
               "inputs: that verdict is reused)")


#: how a report says a function was not judged because the grader failed on it
REGRADE = "needs regrade"


def shown(score: float) -> float:
    """A score as reports and the CSV show it: two decimals (a share of 3 points such as
    2.9545 reads 2.95). Sums are taken of the exact scores, and only their result is shown so;
    the JSON reports and nbgrader's gradebook keep the exact values."""
    return round(float(score), 2)


@dataclass
class FunctionResult:
    name: str
    max_score: float
    checks: list[CheckResult] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    #: the verdict of an identical program graded earlier in the same run, reused
    reused: bool = False
    #: why the grader could not judge this function (its own fault, never the student's): the
    #: function has no verdict and no score, and must be graded again
    regrade: str | None = None

    @property
    def score(self) -> float:
        """Points earned: nothing unless the numbers are right, then a weighted share (a
        function that needs a regrade has not earned or lost anything yet: 0 here, and every
        report says it is not a verdict)."""
        if self.regrade:
            return 0.0
        by_name = {c.name: c for c in self.checks}
        if not by_name.get("numerics", CheckResult("numerics", False)).passed:
            return 0.0
        total = sum(self.weights.get(c.name, 0.0) for c in self.checks)
        if total <= 0:
            return self.max_score
        got = sum(self.weights.get(c.name, 0.0) for c in self.checks if c.passed)
        return round(self.max_score * got / total, 4)

    def to_dict(self) -> dict:
        d = {
            "score": self.score,
            "max_score": self.max_score,
            "checks": [c.to_dict() for c in self.checks],
        }
        if self.reused:
            d["reused"] = True
        if self.regrade:
            d["needs_regrade"] = self.regrade
        return d

    def report(self) -> str:
        if self.regrade:
            return (f"{self.name}: {REGRADE} (not a grade: the grader failed here, not your "
                    f"code; it will be graded again)\n  {self.regrade}")
        lines = [f"{self.name}: {shown(self.score):g} / {shown(self.max_score):g}"
                 + (REUSED_NOTE if self.reused else "")]
        for c in self.checks:
            msg = c.message.replace("\n", "\n        ")
            lines.append(f"  [{c.mark}] {c.name}: {msg}")
        return "\n".join(lines)


@dataclass
class SubmissionResult:
    functions: dict[str, FunctionResult]
    assignment: str | None = None
    notes: list[str] = field(default_factory=list)
    #: whether the student's code ran in the sandbox (False: --no-isolation)
    isolated: bool = True

    @property
    def score(self) -> float:
        return round(sum(f.score for f in self.functions.values()), 4)

    @property
    def max_score(self) -> float:
        return round(sum(f.max_score for f in self.functions.values()), 4)

    @property
    def regrade(self) -> list[str]:
        """The functions the grader failed on (to be graded again)."""
        return [n for n, f in self.functions.items() if f.regrade]

    def to_dict(self) -> dict:
        d = {
            "score": self.score,
            "max_score": self.max_score,
            "functions": {n: f.to_dict() for n, f in self.functions.items()},
        }
        if self.assignment:
            d = {"assignment": self.assignment, **d}
        if self.notes:
            d["notes"] = list(self.notes)
        if self.regrade:
            d["needs_regrade"] = self.regrade
        d["isolated"] = self.isolated
        return d

    def report(self) -> str:
        head = (f"{self.assignment or 'submission'}: {shown(self.score):g} / "
                f"{shown(self.max_score):g}")
        if self.regrade:
            head += (f" so far; {len(self.regrade)} function(s) {REGRADE} (the grader's fault, "
                     "not a grade)")
        parts = [head] + [f"note: {n}" for n in self.notes]
        parts += [f.report() for f in self.functions.values()]
        return "\n".join(parts)


#: how a memory or speed check of a program that fails the structure rules begins, in the
#: grader (:func:`not_measured`) and in the self-check (:func:`credited`)
NOT_CREDITED = ("not credited: the program fails the structure rules (see structure); "
                f"{MEASURED_NEED_STRUCTURE}")


def not_measured(name: str) -> CheckResult:
    """The grader's memory or speed check (``name``) of a program that fails the structure
    rules: failed, and not measured, since nothing it could measure would count
    (:data:`MEASURED_NEED_STRUCTURE`)."""
    return failed(name, f"{NOT_CREDITED}. Not measured: a program that breaks the rules earns "
                  f"neither share, so the grader does not measure its {name}; the notebook's "
                  "check() still measures it, for information")


def credited(check: CheckResult, structure: CheckResult) -> CheckResult:
    """``check`` as the self-check at home counts it: a memory or speed check of a program
    that fails the structure rules is failed, whatever it measured
    (:data:`MEASURED_NEED_STRUCTURE`), with what it measured kept in the message for
    information (the grader does not measure it: :func:`not_measured`); any other check, or
    one of a program that keeps the rules, as it is. A skipped check stays skipped."""
    if check.name not in MEASURED or structure.passed or check.skipped:
        return check
    alone = "would pass" if check.passed else "fails too"
    return failed(check.name, f"{NOT_CREDITED}. For information, the {check.name} "
                  f"check alone {alone}: {check.message}")


__all__ = ["MEASURED", "MEASURED_NEED_STRUCTURE", "NOT_CREDITED", "CheckResult",
           "FunctionResult", "credited", "not_measured",
           "SubmissionResult", "passed", "failed", "skipped",
           "asdict", "quoted", "shown", "your_code_raised"]


def ratio_text(ratio: float, limit: float) -> str:
    """``ratio`` to two decimals, or as many more as it takes to tell it from ``limit`` (a
    failing 0.7514 against 0.75 reads 0.751, never 0.75)."""
    for n in range(2, 18):
        text = f"{ratio:.{n}f}"
        if (float(text) > limit) == (ratio > limit):
            return text
    return repr(ratio)
