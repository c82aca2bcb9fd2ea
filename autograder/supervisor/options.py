"""What one grading is told: its limits and options, validated before any process starts.

:class:`Options` crosses into the judge process once, as its command line (:meth:`Options.argv`),
and onto a Dask worker as plain data (:meth:`Options.to_dict`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class Limits:
    """Per-submission limits. Times are wall-clock seconds."""

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
    #: tracing and exporting one function's programs
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

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Limits":
        """The limits of ``to_dict``; unknown fields and mistyped values are a ValueError."""
        return cls(**cls._checked(d))

    @classmethod
    def _checked(cls, d) -> dict:
        """``d``'s fields, checked against this dataclass's annotations (loosely: an int is
        a float, None only where Optional)."""
        from dataclasses import fields

        if not isinstance(d, dict):
            raise ValueError(f"{cls.__name__}: expected a dict, found {type(d).__name__}")
        known = {f.name: str(f.type) for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}")
        kinds = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,),
                 "list": (list, tuple), "Path": (str,), "Limits": (dict,)}
        out = {}
        for name, value in d.items():
            ann = known[name]
            if value is None:
                if "Optional" not in ann:
                    raise ValueError(f"{cls.__name__}.{name}: may not be None")
                out[name] = None
                continue
            base = ann.replace("Optional[", "").rstrip("]")
            ok = kinds.get(base, (object,))
            if not isinstance(value, ok) or (isinstance(value, bool) and bool not in ok):
                raise ValueError(f"{cls.__name__}.{name}: expected {base}, "
                                 f"found {type(value).__name__}")
            out[name] = float(value) if base == "float" else value
        return out


@dataclass
class Options:
    """What to grade and how (passed to the trusted grader once, as its command line)."""

    assignment: Optional[str] = None
    quick: bool = False
    #: None: a fresh secret seed for every grading run (the instructor may fix one)
    seed: Optional[int] = None
    with_speed: bool = True
    #: time the speed case against the jit baseline even on emulated CPU devices (a test of
    #: the timed path, which real accelerators take by themselves; on CPU not a grade)
    timed_speed: bool = False
    #: grade only these functions (None: all of the assignment's)
    only: Optional[list] = None
    #: the trusted side's class-wide cache (None: none at all); see :func:`default_cache_dir`
    cache_dir: Optional[Path] = field(default_factory=lambda: default_cache_dir())
    #: run student code in the sandbox (False only when the instructor said --no-isolation)
    isolation: bool = True
    #: the submission's folder is the student's own (nbgrader's submitted/<student>/<asg>/):
    #: the sandbox gets a copy of it, so helper modules beside the notebook import
    folder: bool = False
    limits: Limits = field(default_factory=Limits)

    def argv(self) -> list[str]:
        """The trusted grader's options, shared by every submission it grades: the one place
        they cross the process boundary (what differs per submission, the assignment and the
        folder among it, travels in its :class:`~autograder.core.records.Job`)."""
        lim = self.limits
        out = ["--statement-timeout", str(lim.statement_s), "--load-timeout", str(lim.load_s),
               "--export-timeout", str(min(lim.export_s, lim.per_function_s / 2)),
               "--output-mb", str(lim.output_mb)]
        if lim.address_space_mb:
            out += ["--address-space-mb", str(lim.address_space_mb)]
        out += ["--memory-mb", str(lim.student_memory_mb)]
        if self.quick:
            out.append("--quick")
        if self.seed is not None:
            out += ["--seed", str(int(self.seed))]
        if not self.with_speed:
            out.append("--no-speed")
        if self.timed_speed:
            out.append("--timed-speed")
        if not self.isolation:
            out.append("--no-isolation")
        cache = cache_for(self)
        if cache is not None:
            out += ["--cache-dir", str(cache)]
        return out

    def to_dict(self) -> dict:
        """Plain data (JSON-able): ``cache_dir`` as a string or None, the limits as a dict."""
        from dataclasses import fields

        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(only=None if self.only is None else list(self.only),
                 cache_dir=None if self.cache_dir is None else str(self.cache_dir),
                 limits=self.limits.to_dict())
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Options":
        """The options of ``to_dict``; unknown fields and mistyped values are a ValueError.
        A field left out takes its default (``cache_dir``: this machine's own cache)."""
        kw = Limits._checked.__func__(cls, d)
        if kw.get("only") is not None:
            if not all(isinstance(n, str) for n in kw["only"]):
                raise ValueError("Options.only: expected a list of function names")
            kw["only"] = list(kw["only"])
        if kw.get("cache_dir") is not None:
            kw["cache_dir"] = Path(kw["cache_dir"])
        if "limits" in kw:
            kw["limits"] = Limits.from_dict(kw["limits"])
        return cls(**kw)


def default_cache_dir() -> Path:
    """The trusted side's class-wide cache (JAX's compilation cache, verdicts of programs
    already graded), the same from any working directory and any ``--out``:
    ``$AUTOGRADER_CACHE_DIR``, else ``$XDG_CACHE_HOME/jax-scaling-course`` (``~/.cache/...``).
    Student code never sees it: the sandbox does not mount the home folder."""
    env = os.environ.get("AUTOGRADER_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base) / "jax-scaling-course").resolve()


def cache_for(opts: "Options") -> Optional[Path]:
    """Where this grading's trusted side caches: a run without isolation gets a cache of its
    own (its student code ran unconfined and could have written there)."""
    if opts.cache_dir is None:
        return None
    return Path(opts.cache_dir).resolve() / ("isolated" if opts.isolation else "no-isolation")


class IsolationUnavailable(RuntimeError):
    """This machine cannot isolate student code, and --no-isolation was not given."""


def check_options(opts: Options) -> None:
    """Validate names before any process starts: a typo is an error, not a zero."""
    from ..course import registry

    if opts.assignment is not None and opts.assignment not in registry.assignments():
        raise ValueError(f"unknown assignment {opts.assignment!r}; known: "
                         f"{', '.join(registry.assignments())}")
    known = {p.name for p in registry.problems(opts.assignment)}
    bad = [n for n in (opts.only or []) if n not in known]
    if bad:
        raise ValueError(f"unknown graded function(s) {bad} for "
                         f"{opts.assignment or 'any assignment'}; known: {sorted(known)}")
    if opts.isolation:
        from ..isolation.sandbox import available

        avail = available()
        if not avail.ok:
            raise IsolationUnavailable(avail.how)
