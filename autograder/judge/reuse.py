"""Grading identical programs once.

Students often converge on the same program, written differently: other variable names,
comments, helper functions, a different file. What the grader judges is the exported program,
so two functions whose programs are identical, case by case, get the same verdict on the same
inputs. :class:`VerdictStore` keeps each verdict under a key made of

* every artifact of the function as the judge loaded it (:func:`artifact_digest`): every
  field of its ``jax.export.Exported`` (platforms, calling convention, avals, shardings, kept
  arguments, effects, ...; a field a later JAX adds is in it too, since the fields are read off
  the dataclass, not listed), its StableHLO in canonical form (:func:`canonical`: source
  locations stripped and function names numbered in order of appearance), and the request it
  answers;
* the run's secret seed and options (quick, speed, platform), the problem's name, the JAX
  version, and what the verdict is judged with: the grader's code and the course files of the
  problem's assignment (:func:`autograder.core.identity.assignment_hash`), so a verdict kept
  from an earlier run is found again only while neither has changed (a ps3 limit changed:
  ps3's verdicts are judged again, ps1's still found).

A verdict is reused only where everything it was judged from is in its key. What the key
strips (source locations, helper names) decides no check's outcome: the structure rules read
what the program does, and which compiled collectives the student wrote is decided by the
written program's collectives, never by an ``op_name`` (:mod:`autograder.course.added`). It
can still show in a failed check's message (the source line the op table names, the loop the
model could not price), so each verdict is kept with :func:`located_digest`, the programs'
text as handed in, locations included; a verdict with a failed check is reused only for the
same located text, one whose checks all passed (messages that quote figures, never the
program's names) for any program with its key.

The store lives in the trusted side's class-wide cache (``verdicts/``), which student code
never sees; only a function graded to the end in this process is stored, and a function
whose programs did not all arrive intact is never looked up. A verdict that an artifact's
failure to lower or compile in the judge decided is never stored
(:attr:`~autograder.judge.programs.Programs.unsettled`): such a failure comes from what the
judge does with the artifact as much as from the program's text, so it is nobody's verdict
but this hand-in's.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Optional, Sequence

from ..core.files import replaced

_FUNC = re.compile(r"func\.func\s+(?:public\s+|private\s+)?@([\w.$-]+)")
_SYMBOL = re.compile(r"@([\w.$-]+)")
_MODULE = re.compile(r"^(\s*module)\s+@[\w.$-]+", re.M)


def canonical(text: str) -> str:
    """The StableHLO module ``text`` without what does not change the program: source
    locations, the module's name (from the student's function name) and the names of its
    functions (from helper names), which are numbered in order of appearance."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir, passmanager

    ctx = mlir.make_ir_context()
    module = ir.Module.parse(text, context=ctx)
    with ctx:
        passmanager.PassManager.parse("builtin.module(strip-debuginfo)").run(module.operation)
        out = module.operation.get_asm(enable_debug_info=False)
    return canonical_bare(out)


def canonical_bare(bare: str) -> str:
    """:func:`canonical` of a module printed without source locations (an artifact's
    :func:`~autograder.core.stablehlo.bare_text`): its module's name dropped and its functions'
    names numbered in order of appearance."""
    out = _MODULE.sub(r"\1", bare)
    names = {n: f"fn{i}" for i, n in enumerate(dict.fromkeys(_FUNC.findall(out)))}
    return _SYMBOL.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), out)


#: fields of ``jax.export.Exported`` not read into the key, each for its reason; every other
#: field is (:func:`artifact_digest`)
NOT_KEYED = {
    # a name: the student's function's, which the module's name repeats (canonical drops it)
    "fun_name": "a name",
    # a function that makes the derivative's artifact: the judge grades no derivative
    "_get_vjp": "never called by the judge",
    # the module: keyed as the artifact's StableHLO text in canonical form, which
    # load_artifact reads from these bytes (Artifact.text)
    "mlir_module_serialized": "keyed as its canonical text",
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Unkeyable(ValueError):
    """An artifact with a field that has no stable text: its function's verdict is neither
    looked up nor stored."""


def _field_text(name: str, value) -> str:
    text = repr(value)
    if _ADDRESS.search(text):  # an object's address: another text in every process
        raise Unkeyable(f"the artifact's {name} has no stable text ({text[:80]})")
    return text


def artifact_digest(artifact) -> str:
    """A digest of one artifact as the judge loaded it (:class:`~autograder.judge.artifacts.
    Artifact`): its program in canonical form and every field of its ``Exported`` but those
    :data:`NOT_KEYED` names, read off the dataclass (a field added by a later JAX is in the key
    without a change here). :class:`Unkeyable` where a field has no stable text."""
    import dataclasses

    from ..core.stablehlo import bare_text

    exp = artifact.exported
    h = hashlib.sha256(canonical_bare(bare_text(exp)).encode())
    for f in dataclasses.fields(exp):
        if f.name in NOT_KEYED:
            continue
        h.update(b"\0" + f.name.encode() + b"=" + _field_text(f.name, getattr(exp, f.name)).encode())
    return h.hexdigest()


def located_digest(artifacts) -> str:
    """A digest of ``artifacts``' StableHLO as handed in, source locations and names included:
    what a failed check's message may quote beyond the key (see the module doc)."""
    h = hashlib.sha256()
    for art in artifacts:
        h.update(art.text.encode())
        h.update(b"\0")
    return h.hexdigest()


def function_key(plan, digests: list[tuple], options: Optional[dict] = None) -> str:
    """The key of a function's verdict: ``digests`` is ``[(request, digest)]`` for every
    request of ``plan`` (an :class:`~autograder.judge.planning.Plan`); ``options``: anything else
    the verdict depends on (whether speed is checked)."""
    return _key("function", plan, digests, options)


def program_key(plan, request, digest: str, options: Optional[dict] = None) -> str:
    """The key of one program of a function (``request``'s, whose artifact has ``digest``) as
    a kept verdict records it (:meth:`VerdictStore.seen`): a program never seen in a kept
    verdict makes its function's key new, so its compiles need not wait for the lookup."""
    return _key("program", plan, [(request, digest)], options)


def _key(kind: str, plan, digests: list[tuple], options: Optional[dict]) -> str:
    import jax

    from ..core.identity import GRADER_VERSION, assignment_hash

    body = {
        "kind": kind,
        "grader": [GRADER_VERSION, assignment_hash(plan.problem.assignment)],
        "jax": jax.__version__, "problem": plan.problem.name,
        "seed": plan.seed, "quick": plan.quick, "big": plan.with_big, "platform": plan.platform,
        "options": options or {},
        "programs": [[{k: v for k, v in req.to_dict().items() if k != "id"}, digest]
                     for req, digest in digests],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class VerdictStore:
    """Verdicts (lists of check dicts) by :func:`function_key`, one small file each, kept with
    the :func:`located_digest` of the programs they were judged on."""

    def __init__(self, root: Optional[Path]):
        self.root = Path(root) if root else None

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, located: str) -> Optional[list[dict]]:
        """The verdict kept under ``key``, if it may be reused for programs whose located
        digest is ``located``: the same programs as handed in, or a verdict whose checks all
        passed (see the module doc)."""
        if self.root is None:
            return None
        try:
            doc = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        checks = doc.get("checks") if isinstance(doc, dict) else None
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            return None
        if doc.get("located") != located and not all(c.get("passed") is True for c in checks):
            return None
        return checks

    def put(self, key: str, checks: list[dict], located: str,
            programs: Sequence[str] = ()) -> None:
        """Keep a verdict, and mark each of its ``programs`` (:func:`program_key`) seen."""
        if self.root is None:
            return
        for pkey in programs:
            path = self._seen_path(pkey)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        with replaced(self._path(key)) as tmp:
            tmp.write_text(json.dumps({"checks": checks, "located": located}),
                           encoding="utf-8")

    def _seen_path(self, pkey: str) -> Path:
        return self.root / "programs" / pkey[:2] / pkey

    def seen(self, pkey: str) -> bool:
        """Whether a kept verdict was judged on the program of key ``pkey``
        (:func:`program_key`): where not, no kept verdict can be this function's."""
        return self.root is not None and self._seen_path(pkey).exists()
