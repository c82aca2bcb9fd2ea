"""Helpers for tests that look inside solutions/."""

from conftest import ROOT


def solution_bodies(asg: str) -> list[str]:
    """The non-trivial lines between BEGIN/END SOLUTION markers of solutions/<asg>.py."""
    lines = (ROOT / "solutions" / f"{asg}.py").read_text().splitlines()
    out, inside = [], False
    for line in lines:
        if "BEGIN SOLUTION" in line:
            inside = True
        elif "END SOLUTION" in line:
            inside = False
        elif inside and len(line.strip()) > 25 and not line.strip().startswith("#"):
            out.append(line.strip())
    return out


def reference_answer(name: str):
    """(problem, the reference answer for it from solutions/<assignment>.py)."""
    import importlib.util

    from autograder.course import registry

    problem = registry.get(name)
    spec = importlib.util.spec_from_file_location(
        f"sol_{problem.assignment}", ROOT / "solutions" / f"{problem.assignment}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return problem, getattr(module, name)
