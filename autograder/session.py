"""Grading one submission inside a worker process.

The parent (:mod:`autograder.sandbox`) starts ``python -m autograder.session`` in a fresh process
for each submission and reads its verdicts from a pipe, one signed record per line, so a
submission that hangs or kills the interpreter loses only the statement or function it was in.

Student code shares this process with the grader, so the grader protects what it relies on:

* everything the checks use is imported, and the clocks bound, before student code runs;
* the student's module gets its own ``__builtins__`` whose ``__import__`` refuses the grader and
  the course's files (``autograder``, ``solutions``, ``source``, ...), and an import hook refuses
  them for everyone else; the course root is not on the import path at all;
* an :class:`Integrity` snapshot of the functions and classes of the grader, JAX, NumPy, ``time``
  and the standard modules the checks use (and of the registry's entries) is compared after
  loading and after every graded function: anything replaced is put back and the verdicts it
  could have bent score zero, with a message saying what was changed;
* results leave through an inherited pipe with an HMAC per record (key read from stdin before
  any student code runs), never through a file a submission could write.
"""
from __future__ import annotations

import argparse
import builtins
import hmac as _hmac
import json
import os
import sys
import threading
import types
from pathlib import Path

# ---------------------------------------------------------------------------------------------
# results channel


def _make_emitter(fd: int | None, key: bytes | None, results: Path | None):
    """A function writing one record; the key lives only in this closure."""
    if fd is not None:
        out = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
    elif results is not None:
        out = open(results, "a", encoding="utf-8")
    else:
        out = sys.__stderr__
    write, flush = out.write, out.flush
    dumps, new = json.dumps, _hmac.new
    state = [0]

    def emit(body: dict) -> None:
        if key is None:
            write(dumps(body) + "\n")
        else:
            text = dumps(body, sort_keys=True)
            mac = new(key, f"{state[0]}:{text}".encode(), "sha256").hexdigest()
            write(dumps({"seq": state[0], "mac": mac, "body": body}) + "\n")
        state[0] += 1
        flush()

    return emit


# ---------------------------------------------------------------------------------------------
# keeping student code away from the grader


BLOCKED = ("autograder", "solutions", "source", "release", "submitted", "autograded", "feedback",
           "tests", "nbgrader_config", "gradebook", "bench_grading", "benchmarks", "tools",
           "notebooks")


def _blocked(name: str) -> bool:
    return name.split(".")[0] in BLOCKED


class _Blocker:
    """sys.meta_path hook: the course's own packages cannot be found from a worker."""

    def find_spec(self, name, path=None, target=None):
        if _blocked(name) and name.split(".")[0] != "autograder":
            raise ImportError(f"importing {name!r} is not allowed while grading")
        return None


def student_builtins() -> dict:
    real = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and _blocked(name):
            raise ImportError(f"importing {name!r} is not allowed in graded code (the grader "
                              "and the course's solutions are off limits)")
        if level > 0 and globals is not None and _blocked(globals.get("__package__") or ""):
            raise ImportError("relative imports are not allowed in graded code")
        return real(name, globals, locals, fromlist, level)

    b = dict(vars(builtins))
    b["__import__"] = guarded_import
    return b


WATCHED = ("autograder", "jax", "jaxlib", "numpy", "ml_dtypes", "opt_einsum", "time", "builtins",
           "functools", "statistics", "json", "os", "posix", "signal", "threading", "math",
           "operator", "hmac", "hashlib", "traceback", "zlib", "contextlib", "dataclasses",
           "collections", "io", "itertools", "re", "select", "gc", "weakref", "abc", "types",
           "copy", "inspect", "warnings", "logging", "_thread")


def _watchable(v) -> bool:
    return isinstance(v, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                          type, types.ModuleType, staticmethod, classmethod, property,
                          types.MethodDescriptorType, types.WrapperDescriptorType,
                          types.GetSetDescriptorType)) or callable(v)


class Integrity:
    """What the grader relies on, as it was before student code ran; :meth:`check` says what
    changed and puts it back."""

    def __init__(self):
        self.mods: dict[str, tuple] = {}
        self.classes: list[tuple] = []
        self.objects: list[tuple] = []
        self.dicts: list[tuple] = []
        self.meta_path = list(sys.meta_path)
        self.threads = {t.ident for t in threading.enumerate()}
        self.take()

    def take(self) -> None:
        for name, mod in list(sys.modules.items()):
            if mod is None or name.split(".")[0] not in WATCHED or name in self.mods:
                continue
            try:
                d = dict(vars(mod))
            except TypeError:
                continue
            entries = {k: v for k, v in d.items() if not k.startswith("__") and _watchable(v)}
            self.mods[name] = (mod, entries)
            for k, v in entries.items():
                if isinstance(v, type) and getattr(v, "__module__", None) == name:
                    cd = {a: b for a, b in vars(v).items()
                          if a not in ("__dict__", "__weakref__", "__doc__", "_abc_impl")
                          and _watchable(b)}
                    self.classes.append((f"{name}.{k}", v, cd))

    def watch_object(self, label: str, obj) -> None:
        try:
            self.objects.append((label, obj, dict(vars(obj))))
        except TypeError:
            pass

    def watch_dict(self, label: str, d: dict) -> None:
        self.dicts.append((label, d, dict(d)))

    def check(self) -> list[str]:
        changed: list[str] = []
        for name, (mod, entries) in self.mods.items():
            if sys.modules.get(name, mod) is not mod:
                changed.append(f"sys.modules[{name!r}] was replaced")
                sys.modules[name] = mod
            d = vars(mod)
            for k, v in entries.items():
                if d.get(k, _MISSING) is not v:
                    changed.append(f"{name}.{k} was replaced")
                    try:
                        setattr(mod, k, v)
                    except Exception:  # noqa: BLE001
                        pass
        for label, cls, cd in self.classes:
            now = vars(cls)
            for k, v in cd.items():
                if now.get(k, _MISSING) is not v:
                    changed.append(f"{label}.{k} was replaced")
                    try:
                        setattr(cls, k, v)
                    except Exception:  # noqa: BLE001
                        pass
        for label, obj, fields in self.objects:
            now = vars(obj)
            for k, v in fields.items():
                if now.get(k, _MISSING) is not v:
                    changed.append(f"{label}.{k} was changed")
                    object.__setattr__(obj, k, v)
        for label, d, copy in self.dicts:
            if set(d) != set(copy) or any(d.get(k) is not v for k, v in copy.items()):
                changed.append(f"{label} was changed")
                d.clear()
                d.update(copy)
        if sys.gettrace() is not None or sys.getprofile() is not None:
            changed.append("a trace/profile hook was installed")
            sys.settrace(None)
            sys.setprofile(None)
        if list(sys.meta_path) != self.meta_path:
            changed.append("the import machinery (sys.meta_path) was changed")
            sys.meta_path[:] = self.meta_path
        new = [t for t in threading.enumerate() if t.ident not in self.threads and t.is_alive()]
        if new:
            changed.append(f"it started {len(new)} background thread(s)")
            self.threads |= {t.ident for t in new}
        return changed


_MISSING = object()


def integrity_result(problem, what: list[str]):
    from .results import CheckResult, FunctionResult

    shown = "; ".join(what[:4]) + ("; ..." if len(what) > 4 else "")
    msg = (f"the submission changed the grader's environment ({shown}). Graded code must not "
           "patch JAX, NumPy, time or the grader; this function's checks were not trusted and "
           "score zero.")
    checks = [CheckResult("integrity", False, msg)]
    for n in problem.check_names:
        checks.append(CheckResult(n, False, "not trusted: see the integrity check"))
    return FunctionResult(problem.name, float(problem.points), checks,
                          weights=dict(problem.weights))


# ---------------------------------------------------------------------------------------------


def _prune_path() -> None:
    """Drop import-path entries that lead to course files (an editable install's project root,
    a course folder): only the package copy the parent made provides ``autograder``."""
    from . import __file__ as pkg_file

    own = str(Path(pkg_file).resolve().parent.parent)
    keep = []
    for entry in sys.path:
        base = Path(entry or ".")
        try:
            course = any((base / n).exists() for n in ("solutions", "source", "autograder",
                                                        "nbgrader_config.py"))
        except OSError:
            course = False
        if str(base.resolve()) == own or not course:
            keep.append(entry)
    sys.path[:] = keep
    sys.path_importer_cache.clear()


def choose_problems(assignment: str | None, namespace: dict | None, path: Path):
    from . import registry

    if assignment:
        probs = registry.problems(assignment)
        if not probs:
            raise SystemExit(f"unknown assignment {assignment!r}; known: {registry.assignments()}")
        return assignment, probs
    for a in registry.assignments():
        if a in path.stem or a in str(path.parent.name):
            return a, registry.problems(a)
    defined = {n for n, v in (namespace or {}).items() if callable(v)}
    hit = [a for a in registry.assignments()
           if any(p.name in defined for p in registry.problems(a))]
    if len(hit) == 1:
        return hit[0], registry.problems(hit[0])
    chosen = hit or registry.assignments()
    return None, [p for a in chosen for p in registry.problems(a)]


def enable_cache(cache_dir: str | None) -> None:
    """Share compiled programs between workers through JAX's persistent compilation cache."""
    if not cache_dir:
        return
    import jax

    try:
        jax.config.update("jax_compilation_cache_dir", str(cache_dir))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    except Exception as e:  # noqa: BLE001 - an old JAX: no cache, same verdicts
        print(f"compilation cache not enabled: {e}", file=sys.stderr)


def _warm_up(grading) -> None:
    """Run the machinery once on trusted code so lazily imported modules exist before the
    integrity snapshot (and the clock, the compiler and the tracer are bound)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from .meshes import make_mesh
    from .program import trace

    mesh = make_mesh(2, 4)

    def f(a, mesh):
        return jax.shard_map(lambda b: jax.lax.psum(b, "X"), mesh=mesh, in_specs=P("X", "Y"),
                             out_specs=P(None, "Y"))(a)

    a = jax.device_put(jnp.ones((8, 8), jnp.float32),
                       jax.sharding.NamedSharding(mesh, P("X", "Y")))
    jf = jax.jit(lambda a: f(a, mesh))
    c = jf.lower(a).compile()
    c.memory_analysis()
    out = c(a)
    out.block_until_ready()
    trace(lambda a: f(a, mesh), [a], compiled_text=c.as_text())
    grading.measure(c, c, [a], rounds=1, min_batch_s=0.0)
    import numpy as np

    np.asarray(jax.device_get(out))


def warm(assignments: list[str], *, seed: int, quick: bool, with_speed: bool) -> None:
    """Compile every baseline at the sizes the speed/memory checks use (no student code)."""
    from . import grading, registry

    for p in registry.problems():
        if assignments and p.assignment not in assignments:
            continue
        if p.baseline is None:
            continue
        layout, mesh, rng = grading._big_case(p, p.baseline, seed)
        sizes = (["memory"] if p.memory_bound is not None else []) + (
            ["speed"] if with_speed else [])
        for size in sizes:
            case = p.case(rng, *layout, size)
            args = grading._place(p, case, mesh)
            grading.compile_for(p, p.baseline, mesh, args, baseline=True)
            if size == "speed":
                # the grader compiles the baseline twice: as the reference program and in
                # the same call as the student (both hit the cache afterwards)
                grading.compile_for(p, p.baseline, mesh, args)


def run(submission: Path, assignment: str | None, emit, *, quick: bool, seed: int,
        with_speed: bool, only: list[str] | None = None, skip: set[int] = frozenset(),
        statement_timeout: float = 20.0) -> None:
    from . import grading, registry
    from .loader import load

    _warm_up(grading)
    registry.load_all()
    guard = Integrity()
    guard.watch_dict("the registry", registry.REGISTRY)
    for p in registry.problems():
        guard.watch_object(f"the registry entry {p.name}", p)
    sys.meta_path.insert(0, _Blocker())
    _prune_path()
    guard.meta_path = list(sys.meta_path)

    def on_statement(index: int, where: str) -> None:
        emit({"type": "loading", "stmt": index, "where": where})

    try:
        loaded = load(submission, builtins_dict=student_builtins(), skip=skip,
                      on_statement=on_statement, statement_timeout=statement_timeout)
        ns, notes = loaded.namespace, loaded.notes
    except Exception as e:  # unreadable file: still grade (everything "not found")
        ns, notes = {}, [f"could not read the submission: {e}"]
    tampered = guard.check()
    if tampered:
        notes.append("while loading, the submission changed the grader's environment: "
                     + "; ".join(tampered[:6]))
    chosen, probs = choose_problems(assignment, ns, submission)
    emit({"type": "plan", "assignment": chosen, "functions": [p.name for p in probs],
          "notes": notes})
    for p in probs:
        if only is not None and p.name not in only:
            continue
        emit({"type": "start", "function": p.name})
        if tampered:
            r = integrity_result(p, tampered)
        else:
            fn = ns.get(p.name)
            r = grading.grade_function(p, fn if callable(fn) else None, seed=seed, quick=quick,
                                       with_speed=with_speed)
            changed = guard.check()
            if changed:
                r = integrity_result(p, changed)
        d = r.to_dict()
        emit({"type": "result", "function": p.name, "max_score": d["max_score"],
              "checks": d["checks"], "weights": r.weights})
    emit({"type": "done"})


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m autograder.session")
    ap.add_argument("submission", type=Path, nargs="?")
    ap.add_argument("--results", type=Path, help="write plain records to this file instead")
    ap.add_argument("--channel-fd", type=int, help="signed records to this inherited pipe; "
                    "the key is read from stdin")
    ap.add_argument("--assignment")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated functions to grade (the rest: skipped)")
    ap.add_argument("--skip", default="", help="comma-separated statement indices not to load")
    ap.add_argument("--statement-timeout", type=float, default=20.0)
    ap.add_argument("--cache-dir", help="JAX persistent compilation cache")
    ap.add_argument("--warm", action="store_true", help="only compile the baselines")
    ap.add_argument("--warm-assignment", action="append", default=[])
    a = ap.parse_args(argv)
    key = None
    if a.channel_fd is not None:
        key = bytes.fromhex(sys.stdin.readline().strip())
        sys.stdin.close()
    emit = _make_emitter(a.channel_fd, key, a.results)
    del key
    # Student prints go to stderr so they never mix with anything a caller parses.
    sys.stdout = sys.stderr
    from .devices import setup_devices

    setup_devices()
    enable_cache(a.cache_dir)
    if a.warm:
        warm(a.warm_assignment, seed=a.seed, quick=a.quick, with_speed=not a.no_speed)
        return
    if a.submission is None:
        ap.error("a submission is required")
    only = [s for s in a.only.split(",") if s] if a.only else None
    skip = {int(s) for s in a.skip.split(",") if s.strip()}
    run(a.submission, a.assignment, emit, quick=a.quick, seed=a.seed,
        with_speed=not a.no_speed, only=only, skip=skip, statement_timeout=a.statement_timeout)


if __name__ == "__main__":
    main()
