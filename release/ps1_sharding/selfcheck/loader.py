"""Taking the graded functions out of a submission (a notebook or a .py file).

The submission's source is parsed, not run as a whole: imports, function and class definitions
and the plain ``name = value`` assignments those definitions read are executed one statement at
a time, each with a time limit; top-level expressions, loops, ``with``/``if`` blocks, demo
assignments, shell and magic lines are skipped (a notebook's demos and prints have no business
running at grading time). A statement that fails or
hangs is skipped with a note, so one bad cell costs only what depends on it.
"""
from __future__ import annotations

import ast
import json
import re
import signal
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

_MAGIC = re.compile(r"^\s*[%!]")
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class GradingTimeout(Exception):
    """Raised inside student code that runs past its time limit."""


@contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`GradingTimeout` in this (main) thread after ``seconds``.

    Interrupts Python-level hangs (a ``while True``, a ``time.sleep``). Off the main thread it
    is a no-op; the process-level limits of the batch grader cover that case.
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):
        raise GradingTimeout(f"timed out after {seconds:g} s")

    old = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass
class Loaded:
    namespace: dict
    notes: list[str] = field(default_factory=list)

    def function(self, name: str):
        f = self.namespace.get(name)
        return f if callable(f) else None


def source_chunks(path: Path) -> list[tuple[str, str]]:
    """(label, code) pieces: one per notebook code cell, or the whole .py file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        try:
            nb = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path.name} is not a valid notebook (JSON error: {e})") from None
        chunks = []
        for i, cell in enumerate(nb.get("cells", [])):
            if cell.get("cell_type") != "code":
                continue
            src = cell.get("source", "")
            src = "".join(src) if isinstance(src, list) else str(src)
            lines = [("pass" if _MAGIC.match(l) else l) for l in src.splitlines()]
            chunks.append((f"cell {i + 1}", "\n".join(lines)))
        return chunks
    return [(path.name, text)]


def _is_plain_assign(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.value is not None
    return False


def _kept_statements(chunks, notes, keep_names=frozenset()) -> list[tuple[str, ast.stmt]]:
    kept = []
    for label, code in chunks:
        try:
            tree = ast.parse(code)
        except SyntaxError as e:
            notes.append(f"{label}: SyntaxError at line {e.lineno}: {e.msg}; its definitions "
                         "were not loaded")
            continue
        for node in tree.body:
            if isinstance(node, _KEEP) or _is_plain_assign(node):
                kept.append((label, node))
    return _needed(kept, keep_names)


def _loads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def _targets(node: ast.stmt) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _needed(kept: list[tuple[str, ast.stmt]],
            keep_names=frozenset()) -> list[tuple[str, ast.stmt]]:
    """Imports and definitions, plus only the assignments some definition depends on.

    A notebook's ``out = f(A, mesh)`` demo is not needed to grade ``f``; a module constant a
    function reads (``BLOCK = 128``) is, with whatever that constant is computed from. A graded
    function bound by assignment (``roll_diff = jax.jit(_roll)``; names in ``keep_names``) is
    kept like a definition.
    """
    assigns = [(label, node) for label, node in kept if _is_plain_assign(node)]
    need: set[str] = set(keep_names)
    for _, node in kept:
        if not _is_plain_assign(node):
            need |= _loads(node)
    while True:
        more = set()
        for _, node in assigns:
            if _targets(node) & need:
                more |= _loads(node.value) - need
        if not more:
            break
        need |= more
    return [(label, node) for label, node in kept
            if not _is_plain_assign(node) or _targets(node) & need]


def load(path: str | Path, *, statement_timeout: float = 20.0, total_timeout: float = 90.0,
         module_name: str = "submission", builtins_dict: dict | None = None,
         skip=frozenset(), on_statement=None, keep_names=frozenset()) -> Loaded:
    """Load a submission's definitions into a fresh module namespace.

    ``builtins_dict`` becomes the module's ``__builtins__`` (the grader passes one whose
    ``__import__`` refuses its own packages); statements whose index is in ``skip`` are not run
    (they hung or crashed an earlier worker); ``on_statement(index, where)`` is called before
    each statement runs, so a parent process knows which one to blame for a crash;
    assignments to ``keep_names`` (the graded functions' names) are always run.
    """
    path = Path(path)
    notes: list[str] = []
    chunks = source_chunks(path)
    mod = types.ModuleType(module_name)
    mod.__file__ = str(path)
    ns = mod.__dict__
    if builtins_dict is not None:
        ns["__builtins__"] = builtins_dict
    deadline = time.monotonic() + total_timeout
    for index, (label, node) in enumerate(_kept_statements(chunks, notes, keep_names)):
        where = f"{label} line {node.lineno}"
        if index in skip:
            continue
        if on_statement is not None:
            on_statement(index, where)
        left = deadline - time.monotonic()
        if left <= 0:
            notes.append(f"loading stopped: the submission's definitions took over "
                         f"{total_timeout:g} s")
            break
        code = compile(ast.Module(body=[node], type_ignores=[]), f"<{path.name} {label}>", "exec")
        try:
            with time_limit(min(statement_timeout, left)):
                exec(code, ns)
        except GradingTimeout:
            notes.append(f"{label} line {node.lineno}: skipped, it ran for over "
                         f"{min(statement_timeout, left):g} s")
        except BaseException as e:  # noqa: BLE001 - any student failure is a note
            if isinstance(e, KeyboardInterrupt):
                raise
            notes.append(f"{label} line {node.lineno}: skipped, {type(e).__name__}: {e}"[:300])
    return Loaded(ns, notes)
