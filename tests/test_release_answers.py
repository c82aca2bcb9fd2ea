"""Nothing a release folder ships earns full marks when handed in as an answer.

A release folder's ``selfcheck/`` carries copies of course modules (the references, the jit
baselines, the structure rules; ``tools/build_notebooks.py``'s :func:`shipped_modules`, copied
as they are). Every top-level function there named like a graded function or a jit baseline is
graded here as each problem it could answer, as a student who copied it would hand it in: a
baseline that is an exercise's answer must stay with the grader (``Problem.baseline_public``),
its modeled figures shipped instead. A copy is handed in with its result put on the problem's
output sharding (one line more: a global-view baseline that misses only the sharding is an
answer all the same). Gradings are in-process, two meshes (``quick``), no speed check: a copy
that loses a check there is no answer.
"""
import ast
import sys

import jax
import pytest
from jax.sharding import NamedSharding

import conftest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from build_notebooks import shipped_modules, templates  # noqa: E402

from autograder.course import registry  # noqa: E402
from autograder.supervisor import local  # noqa: E402

registry.load_all()
ASSIGNMENTS = templates()


def _answers_by_name() -> dict[str, list[str]]:
    """function name -> the problems a function of that name would be handed in as: a graded
    function's own name, and the name of each problem's jit baseline."""
    out: dict[str, list[str]] = {}
    for p in registry.problems():
        out.setdefault(p.name, []).append(p.name)
        if p.baseline is not None:
            out.setdefault(p.baseline.__name__, []).append(p.name)
    return out


def answer_like(asg: str) -> list[tuple[str, str, str]]:
    """(module file relative to the repository, function, problem) for every top-level
    function that the release folder of ``asg`` ships and that is named like a graded function
    or a jit baseline, once per problem it could answer."""
    names = _answers_by_name()
    out = []
    for path in shipped_modules(asg).values():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out += [(path.relative_to(ROOT).as_posix(), node.name, problem)
                        for problem in names.get(node.name, ())]
    return out


SHIPPED = {asg: answer_like(asg) for asg in ASSIGNMENTS}
#: each shipped (file, function, problem) once: ps4's release folder ships ps3's baselines
CANDIDATES = sorted({c for cs in SHIPPED.values() for c in cs})


@pytest.mark.orchestration
@pytest.mark.parametrize("asg", ASSIGNMENTS)
def test_withheld_baselines_do_not_travel(asg):
    """A baseline kept with the grader is in no module the release folder carries (another
    problem's public baseline in the same module would carry it along); a folder whose
    baselines are all kept carries no function named like a graded function or a baseline
    at all, so the grading test below has nothing of it to grade."""
    shipped = shipped_modules(asg)
    carried = {node.name for path in shipped.values()
               for node in ast.parse(path.read_text()).body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    kept = [p for p in registry.problems(asg) if p.baseline is not None and not p.baseline_public]
    for p in kept:
        assert p.baseline.__module__ not in shipped, (
            f"{p.name}'s baseline is kept with the grader, but release/{asg}/selfcheck carries "
            f"its module {p.baseline.__module__} (another problem's public baseline lives "
            "there): keep every baseline of that module with the grader, or move it")
        assert p.baseline.__name__ not in carried, (p.name, p.baseline.__name__)
    if kept and all(p.baseline is None or not p.baseline_public
                    for p in registry.problems(asg)):
        assert not carried & set(_answers_by_name()), sorted(carried & set(_answers_by_name()))


def handed_in(fn, problem):
    """``fn`` as a student who copied it hands it in as ``problem``: its result put on the
    problem's output sharding, the one line a copy of a global-view baseline lacks."""
    if not problem.uses_mesh:
        return fn

    def copied(*args, mesh):
        out = fn(*args, mesh=mesh)
        return jax.lax.with_sharding_constraint(out, NamedSharding(mesh, problem.out_spec))

    return copied


@pytest.mark.parametrize("path,function,problem", CANDIDATES)
def test_shipped_function_is_no_answer(path, function, problem):
    prob = registry.get(problem)
    res = local.grade_function(prob, handed_in(conftest.loaded(path).function(function), prob),
                               seed=conftest.SEED, quick=True, with_speed=False)
    assert not res.regrade, res.regrade
    assert res.score < res.max_score, (
        f"{function} from {path}, which a release folder ships, scores {res.score:g}/"
        f"{res.max_score:g} handed in as {problem}: keep it with the grader "
        "(Problem.baseline_public=False: its modeled figures travel instead)\n" + res.report())
