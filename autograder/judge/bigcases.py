"""The memory and speed cases of one seed, drawn and answered once per class.

A class graded on one seed (``grade-all``, nbgrader's path) runs every submission's memory and
speed programs on the same big arrays: drawing them and computing their NumPy answers costs
about 5 CPU-s of a complete submission, the same 5 s for every student. :class:`BigCaseStore`
keeps each big case (its inputs and, once computed, its answer) in the trusted side's
class-wide cache (``bigcases/``, which student code never sees), one ``.npz`` file per case,
under a key made of this grader's own files, the NumPy version, the problem, the seed, the
size and the mesh layout: a case is only ever read back by the grader that would draw it
identically. A file that cannot be read, or whose arrays are not the shapes the plan asked
for, is a miss: the case is drawn again. The store holds at most :data:`CAP_BYTES`; the files
read least recently go first.

:class:`BigCase` is what the memory and speed checks use, with or without a store: the layout,
the inputs and their answer, made (or read) by :func:`big_case`.
"""
from __future__ import annotations

import hashlib
import os
import sys
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..core.files import replaced
from ..core.problem import Case
from ..core.records import ExportRequest

#: the most the store keeps on disk (a complete course's big cases are about 0.7 GB a seed)
CAP_BYTES = 3 << 30


@dataclass(frozen=True)
class BigCase:
    """One memory or speed case: its mesh ``layout``, its inputs ``case``, and ``expected``,
    the NumPy reference's answer on them; ``from_store``: read back, not drawn."""

    layout: tuple
    case: Case
    expected: np.ndarray
    from_store: bool = False


class BigCaseStore:
    """Big cases (inputs and answer) by :meth:`key`, one ``.npz`` each under ``root``."""

    def __init__(self, root: Path, cap_bytes: int = CAP_BYTES):
        self.root = Path(root)
        self.cap_bytes = int(cap_bytes)
        self._lock = threading.Lock()

    @staticmethod
    def key(problem_name: str, seed: int, size: str, layout) -> str:
        from ..core.identity import grader_hash

        body = repr((grader_hash(), np.__version__, problem_name, int(seed), size,
                     tuple(layout)))
        return hashlib.sha256(body.encode()).hexdigest()[:32]

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def get(self, key: str, request: ExportRequest) -> Optional[tuple[Case, np.ndarray]]:
        """``(case, answer)`` kept under ``key``, if its arguments are what ``request`` (the
        plan's request for this case) describes; None otherwise."""
        path = self._path(key)
        try:
            with np.load(path, allow_pickle=False) as f:
                n = int(f["n_args"])
                statics = set(int(i) for i in f["statics"])
                args = tuple(int(f[f"arg{i}"]) if i in statics else np.array(f[f"arg{i}"])
                             for i in range(n))
                label = str(f["label"])
                expected = np.array(f["expected"])
            os.utime(path)  # read recently: pruned last
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile):
            return None
        if len(args) != len(request.args):
            return None
        for a, spec in zip(args, request.args, strict=True):
            if spec.is_static:
                if not isinstance(a, int) or a != spec.static:
                    return None
            elif (not isinstance(a, np.ndarray) or tuple(a.shape) != tuple(spec.shape)
                  or a.dtype.name != spec.dtype):
                return None
        return Case(args, label), expected

    def put(self, key: str, case: Case, expected: np.ndarray) -> None:
        """Keep ``case`` and its answer (written whole, then renamed into place)."""
        arrays = {"n_args": np.int64(len(case.args)), "label": np.str_(case.label),
                  "expected": np.asarray(expected)}
        statics = []
        for i, a in enumerate(case.args):
            if isinstance(a, np.ndarray):
                arrays[f"arg{i}"] = a
            else:
                statics.append(i)
                arrays[f"arg{i}"] = np.int64(int(a))
        arrays["statics"] = np.asarray(statics, np.int64)
        try:
            with replaced(self._path(key)) as tmp, open(tmp, "wb") as f:
                np.savez(f, **arrays)
        except OSError as e:  # a full disk costs the next grading a draw, no more
            print(f"the big case {key} was not kept ({e}): the next grading on this seed "
                  "draws it again", file=sys.stderr)
            return
        self.prune()

    def prune(self) -> None:
        """Remove the least recently read files until the store is within its cap."""
        with self._lock:
            files = []
            try:
                for p in self.root.glob("*.npz"):  # a file being written ends in .tmp
                    st = p.stat()  # once: another grader may remove it meanwhile
                    files.append((st.st_mtime, st.st_size, p))
            except OSError:
                return
            total = sum(s for _, s, _ in files)
            for _, size, p in sorted(files):
                if total <= self.cap_bytes:
                    break
                p.unlink(missing_ok=True)
                total -= size


def big_case(problem, layout, draw: Callable[[], Case], request: ExportRequest, *, seed: int,
             size: str, store: Optional[BigCaseStore]) -> BigCase:
    """The ``size`` case of ``problem`` on ``layout`` with its answer: read from ``store``
    where it holds it, else drawn by ``draw()`` and answered by the NumPy reference now (and
    kept in ``store``, if given)."""
    if store is not None:
        key = store.key(problem.name, seed, size, layout)
        kept = store.get(key, request)
        if kept is not None:
            return BigCase(tuple(layout), *kept, from_store=True)
    case = draw()
    expected = np.asarray(problem.reference(case.args, *layout))
    if store is not None:
        store.put(key, case, expected)
    return BigCase(tuple(layout), case, expected)
