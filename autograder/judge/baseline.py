"""The jit baselines' partitioned modules the TPU model reads, computed once per grader and JAX
version and kept in the class-wide cache."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Optional

from ..core.files import replaced
from ..core.problem import Case, Problem
from .planning import signature_of

#: the trusted side's class-wide cache (set by :func:`.process.enable_cache`); the
#: jit baselines' partitioned modules are kept under ``model/`` there
CACHE_DIR: Optional[Path] = None


@functools.lru_cache(maxsize=None)
def _baseline_text_key(problem_name: str, layout: tuple, signature: tuple) -> str:
    import hashlib

    import jax

    from ..core.identity import grader_hash

    return hashlib.sha256(repr((grader_hash(), jax.__version__, problem_name, layout,
                                signature)).encode()).hexdigest()[:24]


_baseline_texts: dict = {}


def baseline_text(problem: Problem, layout, case: Case, mesh, args) -> str:
    """The partitioned module of the speed case's jit baseline, for the model: computed once per
    grader and JAX version, then read from the class-wide cache."""
    from ..tpumodel.api import baseline_hlo

    key = _baseline_text_key(problem.name, tuple(layout), signature_of(problem, case))
    if key in _baseline_texts:
        return _baseline_texts[key]
    path = CACHE_DIR / "model" / f"{problem.name}-{key}.hlo" if CACHE_DIR else None
    text = None
    if path is not None and path.exists():
        text = path.read_text(encoding="utf-8")
    if not text:
        text = baseline_hlo(problem, mesh, args)
        if path is not None:
            with replaced(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
    _baseline_texts[key] = text
    return text
