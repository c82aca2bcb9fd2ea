"""Grading identical programs once.

Students often converge on the same program, written differently: other variable names,
comments, helper functions, a different file. What the grader judges is the exported program,
so two functions whose programs are identical, case by case, get the same verdict on the same
inputs. :class:`VerdictStore` keeps each verdict under a key made of

* every artifact of the function in its canonical form (:func:`canonical`: the StableHLO with
  source locations stripped and function names numbered in order of appearance), together with
  the request it answers and the shardings the artifact declares;
* the run's secret seed and options (quick, speed, platform), the problem's name, this grader's
  own files (:func:`autograder.classroom.batch.grader_hash`) and the JAX version.

So a verdict is reused only for the same program, graded by the same grader, on the same
inputs. The store lives in the trusted side's class-wide cache (``verdicts/``), which student
code never sees; only a function graded to the end in this process is stored, and a function
whose programs did not all arrive intact is never looked up.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Optional

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
    out = _MODULE.sub(r"\1", out)
    names = {n: f"fn{i}" for i, n in enumerate(dict.fromkeys(_FUNC.findall(out)))}
    return _SYMBOL.sub(lambda m: "@" + names.get(m.group(1), m.group(1)), out)


def artifact_digest(artifact) -> str:
    """A digest of one artifact's program (:class:`~autograder.judge.artifacts.Artifact`)."""
    exp = artifact.exported
    h = hashlib.sha256(canonical(artifact.text).encode())
    h.update(repr((exp.in_shardings_hlo, exp.out_shardings_hlo, exp.module_kept_var_idx,
                   [(tuple(a.shape), str(a.dtype)) for a in exp.out_avals])).encode())
    return h.hexdigest()


def function_key(plan, digests: list[tuple], options: Optional[dict] = None) -> str:
    """The key of a function's verdict: ``digests`` is ``[(request, digest)]`` for every
    request of ``plan`` (an :class:`~autograder.judge.grading.Plan`); ``options``: anything else
    the verdict depends on (whether speed is checked)."""
    import jax

    from ..core.identity import grader_hash

    body = {
        "grader": grader_hash(), "jax": jax.__version__, "problem": plan.problem.name,
        "seed": plan.seed, "quick": plan.quick, "big": plan.with_big, "platform": plan.platform,
        "options": options or {},
        "programs": [[{k: v for k, v in req.to_dict().items() if k != "id"}, digest]
                     for req, digest in digests],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


class VerdictStore:
    """Verdicts (lists of check dicts) by :func:`function_key`, one small file each."""

    def __init__(self, root: Optional[Path]):
        self.root = Path(root) if root else None

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[list[dict]]:
        if self.root is None:
            return None
        try:
            doc = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        checks = doc.get("checks") if isinstance(doc, dict) else None
        return checks if isinstance(checks, list) else None

    def put(self, key: str, checks: list[dict]) -> None:
        if self.root is None:
            return
        with replaced(self._path(key)) as tmp:
            tmp.write_text(json.dumps({"checks": checks}), encoding="utf-8")
