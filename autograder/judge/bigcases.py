"""The memory and speed cases of one seed, drawn and answered once per class.

A class graded on one seed (``grade-all``, nbgrader's path) runs every submission's memory and
speed programs on the same big arrays: drawing them and computing their NumPy answers costs
about 5 CPU-s of a complete submission, the same 5 s for every student. :class:`BigCaseStore`
keeps each big case (its inputs and, once computed, its answer) in the trusted side's
class-wide cache (``bigcases/``, which student code never sees), one directory per case (a
plain ``.npy`` file per array, read back in milliseconds, and a ``meta.json``), under a key
made of this grader's own files, the NumPy version, the problem, the seed, the size and the
mesh layout: a case is only ever read back by the grader that would draw it identically. A case
is written into a temporary directory and renamed into place, so a reader never sees half of
one. A case that cannot be read (a file missing or damaged), or whose arrays are not the shapes
the plan asked for, is a miss: the case is drawn again. The store holds at most
:data:`CAP_BYTES`; the cases read least recently go first (and so do the ``.npz`` files an
earlier grader kept, one per case, which this one never reads).

:class:`BigCase` is what the memory and speed checks use, with or without a store: the layout,
the inputs and their answer, made (or read) by :func:`big_case`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

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
    """Big cases (inputs and answer) by :meth:`key`, one directory each under ``root``: a
    ``.npy`` file per array (``arg0.npy``, ..., ``expected.npy``) and ``meta.json`` (how many
    arguments, the static ones' values, the label)."""

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
        return self.root / key

    def get(self, key: str, request: ExportRequest) -> Optional[tuple[Case, np.ndarray]]:
        """``(case, answer)`` kept under ``key``, if its arguments are what ``request`` (the
        plan's request for this case) describes; None otherwise."""
        path = self._path(key)
        try:
            # Every file is opened through the directory the read began with: a case replaced
            # meanwhile (put) is read whole as it was, or is a miss, never a mix of two
            dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                with open(os.open("meta.json", os.O_RDONLY, dir_fd=dir_fd), "rb") as f:
                    meta = json.loads(f.read())
                n = meta["n_args"]
                statics = {int(i): int(v) for i, v in meta["statics"]}
                label = meta["label"]
                if (not isinstance(n, int) or not isinstance(label, str)
                        or not set(statics) <= set(range(n))):
                    return None
                args = tuple(statics[i] if i in statics else _load(f"arg{i}.npy", dir_fd)
                             for i in range(n))
                expected = _load("expected.npy", dir_fd)
                os.utime(path)  # read recently: pruned last
            finally:
                os.close(dir_fd)
        except (OSError, KeyError, ValueError, TypeError, EOFError):  # bad JSON: ValueError
            return None
        if not isinstance(expected, np.ndarray) or len(args) != len(request.args):
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
        """Keep ``case`` and its answer: written whole into a temporary directory beside the
        case's, then renamed into place (over a case kept before under ``key``; of two writers
        of one key at once, one case stays and the other writer's directory is removed)."""
        path = self._path(key)
        tmp = self.root / f".{key}.{os.getpid()}.{threading.get_ident()}{_TMP}"
        old = tmp.with_name(f"{tmp.name[:-len(_TMP)]}.old{_TMP}")
        statics = [[i, int(a)] for i, a in enumerate(case.args) if not isinstance(a, np.ndarray)]
        meta = {"n_args": len(case.args), "statics": statics, "label": str(case.label)}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp.mkdir()
            for i, a in enumerate(case.args):
                if isinstance(a, np.ndarray):
                    np.save(tmp / f"arg{i}.npy", a, allow_pickle=False)
            np.save(tmp / "expected.npy", np.asarray(expected), allow_pickle=False)
            (tmp / "meta.json").write_text(json.dumps(meta))
            try:
                os.rename(tmp, path)
            except OSError:  # a case is there (a damaged one, or another writer's just now)
                try:
                    os.rename(path, old)
                    os.rename(tmp, path)
                except OSError:  # another writer's case landed meanwhile: it stays
                    pass
        except OSError as e:  # a full disk costs the next grading a draw, no more
            print(f"the big case {key} was not kept ({e}): the next grading on this seed "
                  "draws it again", file=sys.stderr)
            return
        finally:
            _remove(tmp)
            _remove(old)
        self.prune()

    def prune(self) -> None:
        """Remove the least recently read cases until the store is within its cap (a case's
        size: its files'). The ``.npz`` files an earlier grader kept count, and go the same
        way; a directory being written is left alone, unless no writer has touched it for
        :data:`STALE_S` (its writer died)."""
        with self._lock:
            cases, now = [], time.time()
            try:
                with os.scandir(self.root) as it:
                    entries = list(it)
            except OSError:
                return
            for e in entries:
                try:  # stat once: another grader may remove it meanwhile
                    st = e.stat(follow_symlinks=False)
                    if e.name.endswith(_TMP):
                        if now - st.st_mtime > STALE_S:
                            _remove(Path(e.path))
                    elif e.is_dir(follow_symlinks=False):
                        with os.scandir(e.path) as files:
                            size = sum(f.stat(follow_symlinks=False).st_size for f in files)
                        cases.append((st.st_mtime, size, Path(e.path)))
                    elif e.name.endswith(".npz"):
                        cases.append((st.st_mtime, st.st_size, Path(e.path)))
                except OSError:
                    continue
            total = sum(s for _, s, _ in cases)
            for _, size, p in sorted(cases):
                if total <= self.cap_bytes:
                    break
                _remove(p)
                total -= size


#: what the name of a directory (or an earlier grader's file) still being written ends in
_TMP = ".tmp"

#: a temporary directory no writer has touched for this long is a dead writer's: pruned
STALE_S = 3600


def _load(name: str, dir_fd: int):
    """The array in the ``.npy`` file ``name`` of the directory open as ``dir_fd``."""
    with open(os.open(name, os.O_RDONLY, dir_fd=dir_fd), "rb") as f:
        return np.load(f, allow_pickle=False)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


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
