"""Taking the graded functions out of a submission (a notebook or a .py file).

The submission's source is parsed, not run as a whole: imports, function and class definitions
and the plain ``name = value`` assignments those definitions read (and the calls that finish
defining one, ``f.defvjp(fwd, bwd)`` of a ``jax.custom_vjp``) are executed one statement at
a time, each with a time limit, in a module registered in ``sys.modules`` as an imported one is
(``@dataclass`` looks its module up there), and so are ``try`` and ``if`` blocks made of these (the
``try: from jax import shard_map`` / ``except ImportError: ...`` of code written for several JAX
versions; a print or a warning in such a block runs with it); top-level expressions, loops,
``with`` blocks, blocks doing anything else, demo assignments, cells that a cell magic makes
shell or file text, shell and magic lines (read as Jupyter reads them, by IPython's own
transformer) are skipped (a notebook's demos and prints have no
business running at grading time). A statement that fails or hangs is skipped, so one bad cell
costs only what depends on it.

The notes a load leaves are for the student's feedback, so they are kept only where they can
explain a grade: a statement that failed is noted when it defines a name a graded function
needs (directly or through a helper it calls); a notebook's set-up cell (``from selfcheck
import ...``, a module that lives next to the notebook) and its demo definitions fail at grading
time without costing anything, and say nothing. Syntax errors and statements that hang are
always noted.
"""
from __future__ import annotations

import ast
import json
import re
import symtable
import sys
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path

from .clock import CLOCK
from .errors import GradingTimeout, describe_error, time_limit
from .results import quoted, your_code_raised

#: a cell magic that makes its cell something other than Python (``%%bash``, ``%%writefile``,
#: ``%%html``, ...): the whole cell is skipped. The cell magics that run their cell as Python
#: (timing, capturing output) leave it in.
_CELL_MAGIC = re.compile(r"^\s*%%(\w+)")
#: characters without which a cell holds no IPython syntax
_IPYTHON_CHARS = re.compile(r"[%!?]")
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "python", "python3"}
_KEEP = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: methods whose call at top level finishes defining a function (``f.defvjp(fwd, bwd)`` of a
#: ``jax.custom_vjp``): run, like an assignment to ``f``, where a graded function needs ``f``
_COMPLETING = {"defvjp", "defjvp", "defjvps", "def_vmap", "def_transpose"}


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
        except RecursionError:
            raise ValueError(f"{path.name} is not a valid notebook (its JSON is nested too "
                             "deeply)") from None
        if not isinstance(nb, dict) or not isinstance(nb.get("cells", []), list):
            raise ValueError(f"{path.name} is not a valid notebook (its JSON holds no list of "
                             "cells)")
        chunks = []
        for i, cell in enumerate(nb.get("cells", [])):
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue  # a damaged cell costs only itself
            src = cell.get("source", "")
            src = ("".join(str(x) for x in src) if isinstance(src, list)
                   else src if isinstance(src, str) else "")
            lines = src.splitlines()
            first = next((k for k, l in enumerate(lines) if l.strip()), None)
            magic = _CELL_MAGIC.match(lines[first]) if first is not None else None
            if magic and magic.group(1) not in _PYTHON_CELL_MAGICS:
                continue
            if magic:  # %%time and the like run the rest of the cell as Python
                lines[first] = ""
            chunks.append((f"cell {i + 1}", _python_of("\n".join(lines))))
        return chunks
    return [(path.name, text)]


def _python_of(cell: str) -> str:
    """A cell's IPython syntax as the Python Jupyter runs (IPython's own transformer): a magic,
    ``!cmd``, ``x = !cmd``, ``x = %timeit -o ...`` or ``name?`` becomes a ``get_ipython()``
    call, which loading then skips like any other top-level call; a ``%`` that continues an
    expression (``(shift\n % rows)``) stays the operator it is. A cell IPython cannot read is
    left as it is, for the parser to name its error."""
    if not _IPYTHON_CHARS.search(cell):
        return cell  # plain Python (most cells): IPython is not even imported
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(cell)
    except Exception:  # noqa: BLE001 - a SyntaxError of the student's, noted when parsed
        return cell


def written_names(path: Path) -> set[str]:
    """The names a submission binds at its top level by a definition (``def``, ``class``, an
    import, a plain assignment, or a ``try``/``if`` block of these), read from its source
    without running any of it; a cell that does not parse binds nothing. ValueError: not a
    notebook or source file at all."""
    names: set[str] = set()
    for _, code in source_chunks(Path(path)):
        try:
            tree = _parse(code)
        except SyntaxError:
            continue
        for node in tree.body:
            if _kind(node) is not None:
                names |= _defines(node)
    return names


#: blocks whose branches are statements too: kept where every statement in them is kept
_BLOCKS = (ast.Try, ast.If) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _branches(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists inside a ``try`` or ``if`` block."""
    out = [node.body, node.orelse]
    if not isinstance(node, ast.If):
        out += [h.body for h in node.handlers] + [node.finalbody]
    return out


def _kind(node: ast.stmt):
    """What loading does with a top-level statement: ``"definition"`` (always run: an import,
    a ``def``, a ``class``, or a block holding one), ``"assignment"`` (run where a definition
    needs what it binds: a plain assignment, or a block of nothing but these), or None
    (skipped: expressions, loops, ``with``, a block doing anything else). Inside a block,
    ``pass``, ``raise`` and expressions (``print("old JAX")``, ``warnings.warn(...)``) are
    allowed too, and run with it."""
    if isinstance(node, _KEEP):
        return "definition"
    if _is_plain_assign(node) or _completes(node):
        return "assignment"
    if not isinstance(node, _BLOCKS):
        return None
    kinds = set()
    for branch in _branches(node):
        for inner in branch:
            if isinstance(inner, (ast.Pass, ast.Raise, ast.Expr)):
                continue  # a print or a warning beside the definitions runs with them
            k = _kind(inner)
            if k is None:
                return None
            kinds.add(k)
    if not kinds:
        return None
    return "definition" if "definition" in kinds else "assignment"


def _is_plain_assign(node: ast.stmt) -> bool:
    if isinstance(node, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.value is not None
    return False


def _completes(node: ast.stmt) -> str | None:
    """The name whose definition a top-level ``name.defvjp(...)`` call finishes, else None."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        f = node.value.func
        if isinstance(f, ast.Attribute) and f.attr in _COMPLETING and \
                isinstance(f.value, ast.Name):
            return f.value.id
    return None


#: one ``ast.parse`` at a time in a process: CPython 3.11 keeps the AST constructor's recursion
#: depth in state shared by every thread, and two parses that interleave (a thread switch while
#: one builds its tree) fail with "SystemError: AST constructor recursion depth mismatch" (a
#: class run's threads lost a hand-in to it; python/cpython#106905)
AST_LOCK = threading.Lock()


def parse_python(code: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse``, one thread at a time (:data:`AST_LOCK`)."""
    with AST_LOCK:
        return ast.parse(code, filename)


def _parse(code: str) -> ast.Module:
    """``ast.parse``; source nested too deeply for Python's parser (``x = ------...1``, a chain
    of ten thousand ``+1``) is a SyntaxError too, like any other source it cannot read."""
    try:
        return parse_python(code)
    except (RecursionError, MemoryError):
        raise SyntaxError("nested too deeply for Python to read it") from None


def _global_reads(node: ast.stmt) -> set[str]:
    """The module-level names a top-level statement reads: when it runs (an assignment's value,
    decorators, defaults, base classes) or when the functions it defines run. A function's own
    parameters and locals are not among them (``mesh`` in ``def f(A, mesh)`` is no global)."""
    names: set[str] = set()
    tables = [symtable.symtable(ast.unparse(node), "<statement>", "exec")]
    while tables:
        t = tables.pop()
        names |= {s.get_name() for s in t.get_symbols() if s.is_referenced() and s.is_global()}
        tables += t.get_children()
    return names


def _defines(node: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds ('*' for a star import)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if _completes(node):
        return {_completes(node)}
    if isinstance(node, _BLOCKS):
        names: set[str] = set()
        for branch in _branches(node):
            for inner in branch:
                if _kind(inner) is not None:
                    names |= _defines(inner)
        return names
    return _targets(node)


def _kept_statements(chunks, notes, keep_names=frozenset(),
                     skipped: list | None = None) -> tuple[list, dict]:
    """``([(label, statement), ...], reads)``: the statements loading runs, in order, and, by
    the ``id`` of each statement kept, the module-level names it reads (:func:`_global_reads`,
    read once here; a statement too deep to read is noted and left out). ``skipped``, where
    given, receives the top-level statements loading never runs, in order: those of no kind it
    runs, and the assignments no definition needs."""
    kept, reads, order = [], {}, []
    for label, code in chunks:
        try:
            tree = _parse(code)
        except SyntaxError as e:
            at = f" at line {e.lineno}" if e.lineno else ""
            notes.append(f"{label}: SyntaxError{at}: {quoted(e.msg, 200)}; its definitions "
                         "were not loaded")
            continue
        for node in tree.body:
            order.append((label, node))
            if _kind(node) is None:
                continue
            try:
                reads[id(node)] = _global_reads(node)
            except (RecursionError, MemoryError, SyntaxError, ValueError):
                notes.append(f"{label} line {node.lineno}: nested too deeply to be read, so it "
                             "was not loaded")
                continue
            kept.append((label, node))
    needed = _needed(kept, reads, keep_names)
    if skipped is not None:  # skipped by kind, or an assignment no definition needs
        run = {id(node) for _, node in needed}
        skipped += [(label, node) for label, node in order if id(node) not in run
                    and (_kind(node) is None or id(node) in reads)]  # too deep: noted above
    return needed, reads


def _functions(node: ast.stmt) -> set[str]:
    """The functions and classes a top-level statement defines (inside its blocks too)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, _BLOCKS):
        return set().union(*(_functions(inner) for branch in _branches(node)
                             for inner in branch))
    return set()


def _targets(node: ast.stmt) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _needed(kept: list[tuple[str, ast.stmt]], reads: dict,
            keep_names=frozenset()) -> list[tuple[str, ast.stmt]]:
    """Imports and definitions, plus only the assignments some definition depends on.

    A notebook's ``out = f(A, mesh)`` demo is not needed to grade ``f``; a module constant a
    function reads (``BLOCK = 128``) is, with whatever that constant is computed from. A graded
    function bound by assignment (``roll_diff = jax.jit(_roll)``; names in ``keep_names``) is
    kept like a definition.
    """
    deps = _Dependencies(kept, reads)
    need = deps.closure(set(keep_names).union(*(deps.reads[id(node)] for _, node in kept
                                                if _kind(node) == "definition")))
    return [(label, node) for label, node in kept
            if _kind(node) == "definition" or _defines(node) & need]


class _Dependencies:
    """Which module-level names each kept statement binds and reads."""

    def __init__(self, statements: list[tuple[str, ast.stmt]], reads: dict):
        self.statements = [node for _, node in statements]
        self.defines = {id(n): _defines(n) for n in self.statements}
        #: what each reads (:func:`_global_reads`, read once by :func:`_kept_statements`)
        self.reads = {id(n): reads[id(n)] for n in self.statements}

    def closure(self, names: set[str]) -> set[str]:
        """``names`` and every name the statements binding them read, transitively."""
        need = set(names)
        while True:
            more = set().union(*(self.reads[id(n)] for n in self.statements
                                 if self.defines[id(n)] & need)) - need
            if not more:
                return need
            need |= more


class _Relevance:
    """Which failed statements can explain a grade: those binding a name some graded function
    needs (itself, a helper it calls, a constant it reads, an import behind any of these).
    Without graded names (a self-check of any file) every function and class counts."""

    def __init__(self, statements: list[tuple[str, ast.stmt]], reads: dict,
                 keep_names=frozenset()):
        deps = _Dependencies(statements, reads)
        roots = set(keep_names) or set().union(*(_functions(node) for _, node in statements))
        #: graded name -> the module-level names it needs
        self.needs = {r: deps.closure({r}) for r in sorted(roots)}
        #: the functions, classes and modules it defines or imports: a call on one
        #: (``jax.block_until_ready(out)``, ``np.set_printoptions(...)``) changes no value
        self.functions = set().union(*(_functions(node) for _, node in statements)) | {
            n for _, node in statements if isinstance(node, (ast.Import, ast.ImportFrom))
            for n in _defines(node)}
        #: the submission's own top-level functions: a call of one changes what its body does
        self.defs = {node.name: node for _, node in statements
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        #: the names its imports bind (modules, and what ``from m import x`` takes out of one)
        self.imports = {n for _, node in statements for n in _imported(node)}

    def skipped_note(self, where: str, node: ast.stmt) -> str | None:
        """Information about a top-level statement loading skips (a loop, a call) that would
        change a value some graded function reads, else None."""
        changed = sorted(n for n in _changes(node, self.defs) if n not in self.functions and
                         any(n in need for need in self.needs.values()))
        if not changed:
            return None
        users = [g for g, need in self.needs.items() if set(changed) & need]
        return (f"{where}: not run at grading time (a submission's imports, definitions and the "
                f"assignments they need run; loops, calls and other statements do not), but it "
                f"changes {_listing(changed)}, which {_listing(users)} read"
                f"{'s' if len(users) == 1 else ''}: compute {_listing(changed)} in one "
                f"assignment (a comprehension, or a function that returns it)")

    def setup_note(self, where: str, node: ast.stmt) -> str | None:
        """Information about a top-level statement loading skips that sets something up outside
        the submission's own names (``jax.config.update(...)``, ``np.random.seed(0)``, a
        registration, ``os.environ[...] = ...``, an ``exec``, or a call of its own function
        that does one of these), else None: the notebook ran it, the grader does not, so a
        graded function may behave differently there."""
        effects = _setup_effects(node, self.imports, self.defs)
        if not effects:
            return None
        text = ast.unparse(node).splitlines()[0]
        shown = [e for e in effects if not text.startswith(e.split("(")[0].split(" = ")[0])]
        how = f" (it runs {_listing(shown)})" if shown else ""
        return (f"{where}: your statement {quoted(text, _SHOWN)} is not run at grading "
                f"time{how}: the grader runs only "
                "your imports, definitions and the assignments they read, so what it sets up "
                "is missing when your functions are graded (your notebook ran it, so your own "
                "runs do not show this). Put the set-up a graded function needs inside that "
                "function, or leave it to the course's set-up cell (the grader sets up the "
                "devices itself)")

    def note(self, where: str, node: ast.stmt, error: BaseException) -> str | None:
        """Information about a statement that raised, or None where no graded function needs
        what it binds (a notebook's set-up or demo statement)."""
        names = _defines(node)
        users = [g for g, need in self.needs.items() if "*" in names or names & need]
        if not users:
            return None
        wanted = set().union(*(self.needs[u] for u in users))
        missing = sorted(names if "*" in names else names & wanted)
        why = your_code_raised(describe_error(error, limit=300), 300)
        head = f"{where}: not loaded ({why}), so {_listing(missing)}"
        if set(users) <= names:
            return f"{head} could not be graded{_own_module_hint(error)}"
        return (f"{head} {'is' if len(missing) == 1 else 'are'} undefined for "
                f"{_listing(users)}{_own_module_hint(error)}")


def _own_module_hint(error: BaseException) -> str:
    """What to do where an import of a module found nowhere failed: a helper module of the
    student's own, left out of the hand-in, is the usual cause (the grader has only the files
    handed in, while the notebook found it in its folder at home)."""
    name = getattr(error, "name", None) if isinstance(error, ModuleNotFoundError) else None
    if not name or name.split(".")[0] in ("autograder", "selfcheck"):
        return ""
    top = name.split(".")[0]
    return (f". If {top} is a module of your own ({top}.py beside the notebook), hand it in "
            "beside the notebook: the grader has only the files you hand in")


#: how much of a skipped statement its note quotes
_SHOWN = 60
#: the method names that set something up when called on what a submission imported
#: (``jax.config.update``, ``np.random.seed``, ``sys.path.append``, ``os.environ.setdefault``)
_SETUP_METHODS = {"seed", "putenv", "unsetenv", "patch"}
#: methods that change a container a module holds (``sys.path.append``, ``os.environ.pop``);
#: on a module itself they are functions (``np.append``, ``jnp.add``)
_MUTATORS = {"update", "setdefault", "append", "insert", "extend", "add", "pop", "remove",
             "clear"}
_SETUP_PREFIXES = ("register", "set_", "enable", "disable", "install", "initialize")
#: parts of an imported module's attribute path that hold global settings
_SETUP_PARTS = {"config", "environ", "flags"}
#: calls that set nothing a graded function reads (display and warnings settings)
_HARMLESS_METHODS = {"set_printoptions", "set_loglevel", "filterwarnings", "simplefilter"}
#: builtins that define or change things by name at run time
_SETUP_BUILTINS = {"exec", "eval", "setattr", "delattr", "__import__"}


def _imported(node: ast.stmt) -> set[str]:
    """The names an import binds, inside ``try``/``if`` blocks too."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return _defines(node) - {"*"}
    if isinstance(node, _BLOCKS):
        return set().union(*(_imported(inner) for branch in _branches(node)
                             for inner in branch))
    return set()


def _chain(expr: ast.AST) -> list[str] | None:
    """``jax.config.update`` -> ['jax', 'config', 'update']; None for anything but names and
    attributes (subscripts and calls in the path included: ``os.environ['X']`` -> ['os',
    'environ'])."""
    parts = []
    while True:
        if isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Name):
            return [expr.id] + parts[::-1]
        else:
            return None


def _setup_effects(node: ast.AST, imports: set[str], defs: dict, seen=frozenset()) -> list[str]:
    """What a statement sets up outside the submission's own names, as short texts (outside
    the functions, classes and lambdas it defines): see :meth:`_Relevance.setup_note`."""
    found: list[str] = []
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, ast.Call):
            chain = _chain(n.func)
            if chain and len(chain) == 1 and chain[0] in _SETUP_BUILTINS and \
                    chain[0] not in imports and chain[0] not in defs:
                found.append(f"{chain[0]}(...)")
            elif chain and len(chain) > 1 and chain[0] in imports:
                last = chain[-1]
                if last not in _HARMLESS_METHODS and (
                        last in _SETUP_METHODS or last.startswith(_SETUP_PREFIXES)
                        or _SETUP_PARTS & set(chain[:-1]) or (last in _MUTATORS
                                                             and len(chain) > 2)):
                    found.append(".".join(chain) + "(...)")
            elif chain and len(chain) == 1 and chain[0] in defs and chain[0] not in seen:
                inner = [e for stmt in defs[chain[0]].body
                         for e in _setup_effects(stmt, imports, defs, seen | {chain[0]})]
                found += [f"{e} in {chain[0]}" for e in inner[:1]]
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
            for t in targets:
                chain = _chain(t) if isinstance(t, (ast.Attribute, ast.Subscript)) else None
                if chain and chain[0] in imports:
                    found.append(f"del {ast.unparse(t)}" if isinstance(n, ast.Delete)
                                 else f"{ast.unparse(t)} = ...")
        todo.extend(ast.iter_child_nodes(n))
    return list(dict.fromkeys(found))


def _changes(node: ast.AST, defs=None, seen=frozenset()) -> set[str]:
    """The module-level names a statement loading skips would change had it run: ``T[k] = v``,
    ``T.x = v``, ``N += 1``, ``for N in ...``, ``T.append(...)`` (outside the functions and
    classes it defines), and what a call of one of the submission's own functions (``defs``,
    name -> definition) changes: its ``global`` names and the module-level values it mutates."""
    names: set[str] = set()
    defs = defs or {}
    todo = [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(n, (ast.Subscript, ast.Attribute)) and \
                isinstance(n.ctx, (ast.Store, ast.Del)):
            base = n.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            names.add(n.target.id)
        elif isinstance(n, (ast.For, ast.AsyncFor)):
            names |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                isinstance(n.func.value, ast.Name):
            names.add(n.func.value.id)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and \
                n.func.id in defs and n.func.id not in seen:
            names |= _function_changes(defs[n.func.id], defs, seen | {n.func.id})
        todo.extend(ast.iter_child_nodes(n))
    return names


def _function_changes(fn, defs, seen) -> set[str]:
    """The module-level names a call of ``fn`` changes: those it declares ``global`` and binds,
    and those it mutates without binding them locally (its parameters and locals are its own)."""
    declared = {name for n in ast.walk(fn) if isinstance(n, ast.Global) for name in n.names}
    args = fn.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    bound = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
             and isinstance(n.ctx, (ast.Store, ast.Del))}
    local = (params | bound) - declared
    changed = set().union(*(_changes(stmt, defs, seen) for stmt in fn.body))
    return {n for n in changed if n not in local} | (bound & declared)


def _listing(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _skipped_notes(skipped, relevance: _Relevance) -> list[str]:
    """A note for each skipped statement that changes a value a graded function reads, or sets
    something up outside the submission's names; demos, prints and plots say nothing."""
    notes = []
    for label, node in skipped:  # said, since the student's own notebook did run it
        where = f"{label} line {node.lineno}"
        note = relevance.skipped_note(where, node) or relevance.setup_note(where, node)
        if note is not None:
            notes.append(note)
    return notes


def skipped_notes(path: str | Path, keep_names=frozenset()) -> list[str]:
    """The notes :func:`load` gives about the top-level statements it would not run (see
    :func:`_skipped_notes`), read from the source alone: nothing runs. The self-check says them
    at home, where the notebook did run those statements."""
    notes: list[str] = []
    skipped: list = []
    statements, reads = _kept_statements(source_chunks(Path(path)), notes, keep_names, skipped)
    return _skipped_notes(skipped, _Relevance(statements, reads, keep_names))


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
    sys.modules[module_name] = mod  # as an import would: @dataclass reads its module there
    ns = mod.__dict__
    if builtins_dict is not None:
        ns["__builtins__"] = builtins_dict
    deadline = CLOCK.deadline(total_timeout)
    skipped: list = []
    statements, reads = _kept_statements(chunks, notes, keep_names, skipped)
    relevance = _Relevance(statements, reads, keep_names)
    notes += _skipped_notes(skipped, relevance)
    for index, (label, node) in enumerate(statements):
        where = f"{label} line {node.lineno}"
        if index in skip:
            continue
        if on_statement is not None:
            on_statement(index, where)
        left = deadline.left()
        if left <= 0:
            notes.append(f"loading stopped: the submission's definitions took over "
                         f"{total_timeout:g} s")
            break
        with AST_LOCK:  # the tree read back into C: the same shared depth as a parse
            code = compile(ast.Module(body=[node], type_ignores=[]), f"<{label}>", "exec")
        try:
            with time_limit(min(statement_timeout, left)):
                exec(code, ns)
        except GradingTimeout:
            notes.append(f"{where}: skipped, it ran for over {min(statement_timeout, left):g} s, "
                         "so what it defines is missing at grading time")
        except BaseException as e:  # noqa: BLE001 - any student failure is a note
            if isinstance(e, KeyboardInterrupt):
                raise
            note = relevance.note(where, node, e)
            if note is not None:
                notes.append(note)
    return Loaded(ns, notes)
