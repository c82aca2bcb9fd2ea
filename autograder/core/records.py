"""The records that cross a process boundary, and nothing else.

Two boundaries, one format (JSON lines, one record per line, ``{"type": ..., **fields}``):

* trusted grader <-> untrusted worker (:mod:`autograder.worker`): the grader asks for
  programs (:class:`ExportRequest`: a function, a mesh layout, argument shapes, dtypes, shardings
  and static values, never array values); the worker says how loading went (:class:`Loading`,
  :class:`Loaded`) and answers each request with a serialized ``jax.export`` artifact or an
  error text (:class:`ExportReply`). Everything the worker sends is untrusted: :func:`parse`
  checks types and sizes and never evaluates anything.
* trusted grader <-> supervisor (:mod:`autograder.supervisor`): a warm grader is told its
  :class:`JudgeOptions` (with its :class:`Limits`) once, as the first line on its stdin, then
  given a :class:`Job` (one submission) after another; it answers :class:`Plan`, :class:`Start`,
  :class:`Handover` (whose work it is: an :class:`Owner`), :class:`Result`, :class:`Restart` and
  :class:`Done`, then :class:`Ready` when it takes another.

Each record rebuilds itself with ``from_dict``; nothing is re-assembled by hand elsewhere.
:class:`Limits` holds every grading limit's default, written there once: the supervisor, the
judge, the sandbox and the command lines read them from it.
"""
from __future__ import annotations

import base64
import enum
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Optional

#: the largest line either side accepts (an artifact is a few KB to a few MB)
MAX_LINE = 64 << 20

PROTOCOL_VERSION = 1


class RecordError(ValueError):
    """A line that is not a well-formed record of an expected type."""


@dataclass(frozen=True)
class ArgSpec:
    """One argument of a graded function: an array (shape, dtype, sharding) or a static int."""

    shape: Optional[tuple] = None
    dtype: Optional[str] = None
    #: the PartitionSpec as a tuple of axis names / None / tuples (None: a single device)
    spec: Optional[tuple] = None
    static: Optional[int] = None

    @property
    def is_static(self) -> bool:
        return self.shape is None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ArgSpec":
        _expect_keys(d, cls)
        if d.get("shape") is None:
            return cls(static=_int(d.get("static"), "static"))
        spec = d.get("spec")
        return cls(shape=tuple(_int(v, "shape") for v in d["shape"]), dtype=_str(d["dtype"]),
                   spec=None if spec is None else tuple(
                       tuple(s) if isinstance(s, list) else s for s in spec))


class Record:
    """Base of every record: ``to_dict`` adds the type tag, ``from_dict`` checks it."""

    TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict:
        return {"type": self.TYPE, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict):
        _expect_keys(d, cls, extra=("type",))
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_line(self) -> str:
        return json.dumps(self.to_dict()) + "\n"


# -- trusted -> untrusted -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExportRequest(Record):
    TYPE: ClassVar[str] = "export"
    id: int
    function: str
    #: (x, y) of the ('X', 'Y') mesh, or None for a single-device function
    layout: Optional[tuple]
    args: tuple
    platform: str = "cpu"

    def to_dict(self) -> dict:
        return {"type": self.TYPE, "id": self.id, "function": self.function,
                "layout": None if self.layout is None else list(self.layout),
                "args": [a.to_dict() for a in self.args], "platform": self.platform}

    @classmethod
    def from_dict(cls, d: dict) -> "ExportRequest":
        _expect_keys(d, cls, extra=("type",))
        lay = d.get("layout")
        return cls(id=_int(d["id"], "id"), function=_str(d["function"]),
                   layout=None if lay is None else tuple(_int(v, "layout") for v in lay),
                   args=tuple(ArgSpec.from_dict(a) for a in d["args"]),
                   platform=_str(d.get("platform", "cpu")))


@dataclass(frozen=True)
class Quit(Record):
    TYPE: ClassVar[str] = "quit"


# -- untrusted -> trusted -----------------------------------------------------------------------


@dataclass(frozen=True)
class Loading(Record):
    """The worker is about to run statement ``stmt`` of the submission (for blame on a hang)."""

    TYPE: ClassVar[str] = "loading"
    stmt: int
    where: str

    @classmethod
    def from_dict(cls, d: dict) -> "Loading":
        _expect_keys(d, cls, extra=("type",))
        return cls(_int(d["stmt"], "stmt"), _capped(_str(d["where"]), 200))


@dataclass(frozen=True)
class Loaded(Record):
    TYPE: ClassVar[str] = "loaded"
    #: names of the graded functions the submission defines
    defined: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Loaded":
        _expect_keys(d, cls, extra=("type",))
        return cls(_strs(d.get("defined", []), 200, 100), _strs(d.get("notes", []), 50, 600))


@dataclass(frozen=True)
class Unready(Record):
    """The worker cannot import what it needs to read any hand-in (``missing``: module names),
    said as its first record, before any of the hand-in's code ran: the grader's fault, never
    the hand-in's. The grader trusts it only as the worker's first record."""

    TYPE: ClassVar[str] = "unready"
    missing: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Unready":
        _expect_keys(d, cls, extra=("type",))
        return cls(_strs(d.get("missing", []), 20, 100))


@dataclass(frozen=True)
class ExportReply(Record):
    TYPE: ClassVar[str] = "artifact"
    id: int
    #: base64 of ``Exported.serialize()``; None when the export failed
    artifact: Optional[str] = None
    error: Optional[str] = None

    def payload(self) -> bytes:
        if self.artifact is None:
            raise RecordError("no artifact in this reply")
        try:
            return base64.b64decode(self.artifact.encode("ascii"), validate=True)
        except Exception as e:  # noqa: BLE001
            raise RecordError(f"the artifact is not valid base64 ({e})") from None

    @classmethod
    def from_dict(cls, d: dict) -> "ExportReply":
        _expect_keys(d, cls, extra=("type",))
        art, err = d.get("artifact"), d.get("error")
        return cls(_int(d["id"], "id"), None if art is None else _str(art),
                   None if err is None else _capped(_str(err), 4000))

    @classmethod
    def of(cls, rid: int, data: Optional[bytes] = None, error: Optional[str] = None):
        return cls(rid, None if data is None else base64.b64encode(data).decode("ascii"), error)


@dataclass(frozen=True)
class ExecutedNotebook(Record):
    """A notebook run by the worker (for its outputs in the feedback; it decides nothing)."""

    TYPE: ClassVar[str] = "notebook"
    text: str
    #: the index of the cell stopped by the cell time limit (the run ended there), if any
    stopped_cell: Optional[int] = None

    @classmethod
    def from_dict(cls, d: dict) -> "ExecutedNotebook":
        _expect_keys(d, cls, extra=("type",))
        stopped = d.get("stopped_cell")
        return cls(_str(d["text"]), None if stopped is None else _int(stopped, "stopped_cell"))


# -- trusted grader <-> supervisor --------------------------------------------------------------


@dataclass
class Limits:
    """Per-submission limits, each default written here and nowhere else. Times are
    effective seconds (:mod:`autograder.core.clock`), sizes MiB."""

    #: one graded function, from its 'start' record to its result
    per_function_s: float = 150.0
    #: loading the submission (all its statements)
    load_s: float = 120.0
    #: the whole submission, restarts included (None: load_s + per_function_s * n + slack)
    per_submission_s: Optional[float] = None
    #: resident memory of the trusted grader, which runs the student's programs (None: off)
    memory_mb: Optional[int] = 6144
    #: resident memory of the student's sandbox, all its processes together
    student_memory_mb: int = 6144
    #: virtual address space of every process (RLIMIT_AS): a runaway allocation fails instead
    #: of swapping. XLA:CPU with 8 devices needs about 2 GiB; 16 GiB leaves room.
    address_space_mb: Optional[int] = 16384
    #: one top-level statement of the submission while loading
    statement_s: float = 20.0
    #: tracing and exporting one function's programs (within half of ``per_function_s``:
    #: :meth:`export_limit_s`)
    export_s: float = 120.0
    #: largest file a process may write (logs included)
    output_mb: int = 32
    #: how many times a crashed/hung grader is restarted for one submission without settling
    #: another function (a restart after a stop that gave a function its result, or sent it
    #: to be graded alone, does not count: every function is reached, however many crash)
    max_restarts: int = 12
    #: submissions one warm trusted grader takes before it is replaced (1: a fresh grader for
    #: every submission); see :class:`autograder.supervisor.supervise.JudgePool`
    judge_jobs: int = 25
    #: entries (files, folders, links, hidden ones included) a student's own folder may list,
    #: how deep its folders may nest, and effective seconds for listing it: past any of them
    #: the hand-in is refused with the reason (:func:`autograder.supervisor.handin.own_files`)
    folder_entries: int = 10_000
    folder_depth: int = 32
    folder_s: float = 30.0

    def budget(self, n_functions: int) -> float:
        if self.per_submission_s:
            return self.per_submission_s
        return self.load_s + self.per_function_s * max(1, n_functions) + 30.0

    def export_limit_s(self) -> float:
        """The judge's limit for tracing and exporting one function's programs: ``export_s``,
        within half the function's own limit (the other half is the judge's)."""
        return min(self.export_s, self.per_function_s / 2)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Limits":
        """The limits of ``to_dict``: a field missing or unknown, or a value of the wrong type,
        is a :class:`RecordError` naming it."""
        return cls(**typed_fields(cls, d))


@dataclass(frozen=True)
class JudgeOptions(Record):
    """What a trusted grader is told once, before its first :class:`Job`: the options every
    submission it grades shares (what differs per submission travels in the job). The
    supervisor sends it as the first line on a ``--serve`` judge's stdin; a judge started by
    hand builds it from its flags and :class:`Limits`' defaults. No field has a default of its
    own: one missing from the line is refused, never filled in."""

    TYPE: ClassVar[str] = "options"
    quick: bool
    #: None: a fresh secret seed (nothing graded shares its inputs)
    seed: Optional[int]
    with_speed: bool
    #: time the speed case on emulated CPU devices too (a test of the timed path, not a grade)
    timed_speed: bool
    #: run the student's code in the sandbox (False: ``--no-isolation``)
    isolation: bool
    #: the trusted side's class-wide cache for this grading (None: none)
    cache_dir: Optional[str]
    limits: Limits

    @classmethod
    def from_dict(cls, d: dict) -> "JudgeOptions":
        return cls(**typed_fields(cls, d, extra=("type",)))


def typed_fields(cls, d: Any, *, complete: bool = True, extra: tuple = ()) -> dict:
    """``d``'s fields for the dataclass ``cls``, checked against its annotations: a name it
    does not declare, one it declares and ``d`` lacks (unless not ``complete``: the dataclass's
    default is then taken), or a value of another type is a :class:`RecordError` naming the
    field. Loosely typed as JSON is: an int is a float, a list a tuple, a str a ``Path``; None
    only where ``Optional``; a nested :class:`Limits` is given as its dict."""
    if not isinstance(d, dict):
        raise RecordError(f"{cls.__name__}: expected an object, found {type(d).__name__}")
    known = {f.name: str(f.type) for f in fields(cls)}
    unknown = sorted(set(d) - set(known) - set(extra))
    if unknown:
        raise RecordError(f"{cls.__name__}: unknown field(s) {unknown}")
    missing = sorted(set(known) - set(d))
    if complete and missing:
        raise RecordError(f"{cls.__name__}: missing field(s) {missing}")
    kinds = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
             "list": (list, tuple), "Path": (str,), "Limits": (dict,)}
    out = {}
    for name, ann in known.items():
        if name not in d:
            continue
        value = d[name]
        if value is None:
            if "Optional" not in ann:
                raise RecordError(f"{cls.__name__}.{name}: may not be None")
            out[name] = None
            continue
        base = ann.replace("Optional[", "").rstrip("]")
        ok = kinds.get(base, (object,))
        if not isinstance(value, ok) or (isinstance(value, bool) and bool not in ok):
            raise RecordError(f"{cls.__name__}.{name}: expected {base}, "
                              f"found {type(value).__name__}")
        out[name] = (float(value) if base == "float" else
                     Limits.from_dict(value) if base == "Limits" else value)
    return out


@dataclass(frozen=True)
class Job(Record):
    """One submission for a warm trusted grader (``python -m autograder.judge --serve``): what
    differs between submissions graded with the same options. Paths are the supervisor's
    private copies; ``only`` and ``skip`` as the judge's ``--only``/``--skip``."""

    TYPE: ClassVar[str] = "job"
    submission: str
    #: the folder the judge works in for this job, and its own log there
    cwd: str
    grader_log: str
    #: the untrusted worker's output
    log: str
    assignment: Optional[str] = None
    only: Optional[list] = None
    skip: list = field(default_factory=list)
    folder: bool = False
    #: functions graded with nothing overlapping (no compile pool): a fault during their last
    #: grading could not be told the student's or the grader's (its owner ``Owner.BOTH``)
    serial: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Job":
        _expect_keys(d, cls, extra=("type",))
        asg, only = d.get("assignment"), d.get("only")
        return cls(_str(d["submission"]), _str(d["cwd"]), _str(d["grader_log"]), _str(d["log"]),
                   None if asg is None else _str(asg),
                   None if only is None else _strs(only, 100, 100),
                   [_int(v, "skip") for v in d.get("skip", [])][:1000],
                   bool(d.get("folder", False)), _strs(d.get("serial", []), 100, 100))


@dataclass(frozen=True)
class Ready(Record):
    """A warm trusted grader finished its job (its :class:`Done` was sent), cleared what it
    compiled, and takes another. A grader that does not say so is never given one."""

    TYPE: ClassVar[str] = "ready"




@dataclass(frozen=True)
class Plan(Record):
    TYPE: ClassVar[str] = "plan"
    assignment: Optional[str]
    functions: list
    notes: list = field(default_factory=list)
    #: statements of the submission skipped because they hung or crashed the worker
    skip: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Plan":
        _expect_keys(d, cls, extra=("type",))
        asg = d.get("assignment")
        return cls(None if asg is None else _capped(_str(asg), 100),
                   _strs(d.get("functions", []), 100, 100), _strs(d.get("notes", []), 60, 1000),
                   [_int(v, "skip") for v in d.get("skip", [])][:1000])


@dataclass(frozen=True)
class Start(Record):
    TYPE: ClassVar[str] = "start"
    function: str


class Owner(enum.Enum):
    """Whose work the judge is doing: the submission's (reading, compiling and running its
    programs, waiting for its worker), the grader's own (the baseline, the model, the checks),
    or both at once (the grader's own work while the compile pool reads or compiles the
    submission's programs beside it: a crash or a deadline then cannot be told apart, and the
    function is graded again with nothing overlapping, where it can). Its value is what a
    :class:`Handover` record carries."""

    STUDENT = "student"
    GRADER = "grader"
    BOTH = "both"


#: the owners' names as :class:`Handover` records carry them
OWNERS = tuple(o.value for o in Owner)


@dataclass(frozen=True)
class Handover(Record):
    """From now on, the judge's work for the current function is ``owner``'s. A deadline
    missed or a crash is blamed on the owner of that moment: the student's is a zero with the
    reason, the grader's a regrade. On the wire ``{"type": "owner", "owner": "grader"}``."""

    TYPE: ClassVar[str] = "owner"
    owner: Owner

    def __post_init__(self):
        if not isinstance(self.owner, Owner):
            raise TypeError(f"owner: expected an Owner, got {self.owner!r}")

    def to_dict(self) -> dict:
        return {"type": self.TYPE, "owner": self.owner.value}

    @classmethod
    def from_dict(cls, d: dict) -> "Handover":
        _expect_keys(d, cls, extra=("type",))
        if d.get("owner") not in OWNERS:
            raise RecordError(f"owner: expected one of {OWNERS}")
        return cls(Owner(d["owner"]))


@dataclass(frozen=True)
class Result(Record):
    """One graded function's checks (each a :class:`~autograder.core.results.CheckResult` dict);
    the supervisor scores them with its own registry's points and weights. ``regrade``: the
    grader failed on this function (its own fault, said here): no verdict, a regrade."""

    TYPE: ClassVar[str] = "result"
    function: str
    checks: list
    #: the verdict of an identical program graded earlier in this run (see autograder.judge.reuse)
    reused: bool = False
    regrade: Optional[str] = None

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        _expect_keys(d, cls, extra=("type",))
        checks = d.get("checks", [])
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            raise RecordError("checks: expected a list of objects")
        regrade = d.get("regrade")
        return cls(_capped(_str(d["function"]), 100), checks[:10], bool(d.get("reused", False)),
                   None if regrade is None else _capped(_str(regrade), 2000))


@dataclass(frozen=True)
class Restart(Record):
    """The judge stops after the function it just reported: work of the submission's may still
    run in it past a time limit (a compile, a program on XLA's threads). The supervisor grades
    the functions left with a fresh judge; nobody is blamed."""

    TYPE: ClassVar[str] = "restart"
    why: str


@dataclass(frozen=True)
class Done(Record):
    """The judge graded every function it planned. ``notes``: what happened meanwhile that the
    submission's report should say (its sandbox stopped while nobody waited on it, ...)."""

    TYPE: ClassVar[str] = "done"
    notes: list = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> "Done":
        _expect_keys(d, cls, extra=("type",))
        return cls(_strs(d.get("notes", []), 20, 600))


TYPES = {c.TYPE: c for c in (ExportRequest, Quit, Loading, Loaded, Unready, ExportReply,
                             ExecutedNotebook, JudgeOptions, Job, Plan, Start, Handover, Result,
                             Restart, Done, Ready)}


def parse(line: str | bytes, allowed: tuple = ()) -> Record:
    """The record on ``line``; :class:`RecordError` for anything else (wrong type included)."""
    if isinstance(line, bytes):
        if len(line) > MAX_LINE:
            raise RecordError("line too long")
        line = line.decode("utf-8", "replace")
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise RecordError(f"not JSON ({e.msg})") from None
    if not isinstance(d, dict) or not isinstance(d.get("type"), str):
        raise RecordError("not a record")
    cls = TYPES.get(d["type"])
    if cls is None or (allowed and cls not in allowed):
        raise RecordError(f"unexpected record type {d['type']!r}")
    try:
        return cls.from_dict(d)
    except RecordError:
        raise
    except Exception as e:  # noqa: BLE001 - a malformed field
        raise RecordError(f"malformed {d['type']} record ({type(e).__name__}: {e})") from None


def _expect_keys(d: Any, cls, extra: tuple = ()) -> None:
    if not isinstance(d, dict):
        raise RecordError(f"{cls.__name__}: expected an object")
    known = {f.name for f in fields(cls)} | set(extra)
    unknown = set(d) - known
    if unknown:
        raise RecordError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise RecordError(f"{what}: expected an integer, found {type(v).__name__}")
    return v


#: how a string cut to its cap ends, so nobody mistakes it for the whole
CUT = " [...cut]"


def _capped(s: str, longest: int) -> str:
    """``s``, or its first characters and :data:`CUT` when it is longer than ``longest``."""
    return s if len(s) <= longest else s[:max(0, longest - len(CUT))] + CUT


def _strs(v: Any, most: int, longest: int) -> list:
    """A list of at most ``most`` strings, each cut to ``longest`` characters (and marked)."""
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise RecordError("expected a list of strings")
    out = [_capped(s, longest) for s in v[:most]]
    if len(v) > most:
        out[-1] = f"... and {len(v) - most + 1} more"
    return out


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise RecordError(f"expected a string, found {type(v).__name__}")
    return v


def spec_of(problem_spec) -> tuple | None:
    """A PartitionSpec as the tuple an :class:`ArgSpec` carries."""
    if problem_spec is None:
        return None
    return tuple(tuple(s) if isinstance(s, (list, tuple)) else s for s in tuple(problem_spec))
