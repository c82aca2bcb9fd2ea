"""What one grading is told: its limits and options, validated before any process starts.

:class:`Options` crosses into the judge process once, as the
:class:`~autograder.core.records.JudgeOptions` record on its stdin (:meth:`Options.judge_options`),
and onto a Dask worker as plain data (:meth:`Options.to_dict`). The limits and their defaults are
:class:`~autograder.core.records.Limits` (re-exported here).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..core.records import JudgeOptions, Limits, typed_fields


@dataclass
class Options:
    """What to grade and how (the trusted grader is told its part once, as
    :meth:`judge_options`)."""

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

    def judge_options(self) -> JudgeOptions:
        """The trusted grader's options, shared by every submission it grades: the one record
        they cross the process boundary in (what differs per submission, the assignment and the
        folder among it, travels in its :class:`~autograder.core.records.Job`)."""
        cache = cache_for(self)
        return JudgeOptions(quick=bool(self.quick),
                            seed=None if self.seed is None else int(self.seed),
                            with_speed=bool(self.with_speed), timed_speed=bool(self.timed_speed),
                            isolation=bool(self.isolation),
                            cache_dir=None if cache is None else str(cache),
                            limits=Limits.from_dict(self.limits.to_dict()))

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
        A field left out takes its default (``cache_dir``: this machine's own cache); the limits,
        when given, are given whole."""
        kw = typed_fields(cls, d, complete=False)
        if kw.get("only") is not None:
            if not all(isinstance(n, str) for n in kw["only"]):
                raise ValueError("Options.only: expected a list of function names")
            kw["only"] = list(kw["only"])
        if kw.get("cache_dir") is not None:
            kw["cache_dir"] = Path(kw["cache_dir"])
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
