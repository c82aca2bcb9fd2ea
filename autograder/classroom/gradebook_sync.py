"""Bring nbgrader's gradebook in line with the course after a change (``gradebook-sync``).

``nbgrader generate_assignment ASSIGNMENT --force`` saves an assignment's cells into the
gradebook, but refuses to add or remove a cell once the gradebook holds a submission of it (and
has then deleted ``release/ASSIGNMENT/``), and nbgrader has no command that removes one cell.
After a problem is added or removed mid-term the gradebook keeps the removed problem's grade
cell (its points stay in ``nbgrader export``'s maximum, and ``nbgrader autograde`` puts the cell
back into every hand-in) or lacks the new one (autograde and ``grade-all --gradebook`` find no
grade to write).

    python -m autograder gradebook-sync [DB] [--course DIR] [--apply]

compares each assignment of the gradebook with its instructor notebook
(``source/<assignment>/<assignment>.ipynb``, built from the registry by ``make release``) and says
what differs; ``--apply`` writes it. It records the cells as ``generate_assignment`` does
(nbgrader's own preprocessors, with the course's ``nbgrader_config.py``, up to its ``SaveCells``),
and does what nbgrader does for a submission when it creates or deletes one: a new grade cell
gets an empty grade in every submission (no score until the next grading, marked for a look),
a removed cell's grades and comments go with it. An assignment the course no longer has is
removed with its submissions (nbgrader's ``remove_assignment``); one the gradebook does not have
yet is left to ``generate_assignment`` or the first ``grade-all --gradebook``. An assignment
the gradebook has without its notebook (added with a due date, never released: an ``nbgrader
autograde`` run then records its submissions with nothing to grade in them) gets the notebook
and its cells, and each such submission what ``add_submission`` would have given it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..course import registry

#: the kinds of cell nbgrader records per notebook, by their attribute on its ``Notebook``
KINDS = ("grade", "solution", "task", "source")
#: what a change of a recorded cell is, per kind (other fields are nbgrader's bookkeeping)
COMPARED = {"grade": ("max_score", "cell_type"), "task": ("max_score",),
            "solution": (), "source": ("cell_type", "locked", "source", "checksum")}


@dataclass(frozen=True)
class Change:
    """One difference between the gradebook and the course."""
    assignment: str
    action: str  # remove-assignment, remove-notebook, add-notebook, remove, add, update
    kind: str = ""  # grade, solution, task, source ("" for an assignment or a notebook)
    name: str = ""  # the cell's (or notebook's) name
    detail: str = ""
    submissions: int = 0  # of the assignment, in the gradebook

    @property
    def blocks_grading(self) -> bool:
        """Whether grades written now would be wrong: a removed problem's points would stay
        in the maximum, or a new problem's cell has no grade to write in a submission."""
        if self.action in ("remove-assignment", "remove-notebook"):
            return True
        if self.action == "add-notebook":
            return self.submissions > 0
        return self.kind in ("grade", "task") and (
            self.action == "remove" or (self.action == "add" and self.submissions > 0))

    def text(self) -> str:
        if self.action == "remove-assignment":
            return (f"{self.assignment}: not in the course: remove the assignment from the "
                    f"gradebook{self.detail}")
        if self.action == "remove-notebook":
            return f"{self.assignment}: remove notebook {self.name!r}{self.detail}"
        if self.action == "add-notebook":
            return (f"{self.assignment}: no release recorded (the gradebook has no notebook "
                    f"{self.name!r} and no cells: `nbgrader generate_assignment` never ran for "
                    f"it){self.detail}: add the notebook and its cells from source/")
        what = {"remove": "remove", "add": "add", "update": "update"}[self.action]
        return f"{self.assignment}: {what} {self.kind} cell {self.name}{self.detail}"


def _score(info: Mapping) -> str:
    return f"{float(info.get('max_score') or 0):g}"


def plan_cells(assignment: str, current: Mapping[str, Mapping[str, Mapping]],
               target: Mapping[str, Mapping[str, Mapping]], submissions: int) -> list[Change]:
    """What turns the recorded cells ``current`` of ``assignment`` into ``target`` (each: kind ->
    cell name -> nbgrader's fields), given its number of ``submissions``: grade cells first."""
    out = []
    per = f" ({submissions} submission(s) have a grade in it)" if submissions else ""
    for kind in KINDS:
        old, new = current.get(kind, {}), target.get(kind, {})
        for name in sorted(set(old) - set(new)):
            detail = f", {_score(old[name])} point(s){per}" if kind in ("grade", "task") else ""
            out.append(Change(assignment, "remove", kind, name, detail, submissions))
        for name in sorted(set(new) - set(old)):
            detail = f", {_score(new[name])} point(s)" if kind in ("grade", "task") else ""
            if kind in ("grade", "task") and submissions:
                detail += (f" (an empty grade in each of the {submissions} submission(s), "
                           "until they are graded again)")
            out.append(Change(assignment, "add", kind, name, detail, submissions))
        for name in sorted(set(old) & set(new)):
            fields = [f for f in COMPARED[kind] if old[name].get(f) != new[name].get(f)]
            if fields:
                detail = (f": points {_score(old[name])} -> {_score(new[name])}"
                          if "max_score" in fields else f" ({', '.join(fields)})")
                out.append(Change(assignment, "update", kind, name, detail))
    return out


def plan_assignments(recorded: Mapping[str, Mapping[str, int]], course: set[str],
                     ) -> list[Change]:
    """The assignments and notebooks to remove: ``recorded`` is assignment -> notebook ->
    submissions (the gradebook's), ``course`` the course's assignments (one notebook each,
    named as the assignment)."""
    out = []
    for asg in sorted(recorded):
        notebooks = recorded[asg]
        if asg not in course:
            n = max(notebooks.values(), default=0)
            out.append(Change(asg, "remove-assignment",
                              detail=f", with its {n} submission(s)" if n else "", submissions=n))
            continue
        for nb in sorted(set(notebooks) - {asg}):
            n = notebooks[nb]
            out.append(Change(asg, "remove-notebook", name=nb,
                              detail=f", with its {n} submitted notebook(s)" if n else ""))
    return out


def _course_config(course: Path):
    """The course's nbgrader configuration (its ``nbgrader_config.py``), as nbgrader loads it."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    path = Path(course) / "nbgrader_config.py"
    if not path.is_file():
        return Config()
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def target_cells(assignment: str, gb, course: Path, config=None) -> dict[str, dict[str, dict]]:
    """The cells ``nbgrader generate_assignment`` would record for ``assignment`` (kind -> name
    -> fields): its preprocessors up to ``SaveCells`` on the instructor notebook, then what
    ``SaveCells`` collects, without its refusal to change a notebook that has submissions."""
    from ..core.imports import light_nbformat

    nbformat = light_nbformat()
    from nbgrader.converters.generate_assignment import GenerateAssignment
    from nbgrader.preprocessors import SaveCells

    config = _course_config(course) if config is None else config
    path = Path(course) / "source" / assignment / f"{assignment}.ipynb"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `make release` first")
    nb = nbformat.read(path, as_version=4)
    resources = {"nbgrader": {"notebook": assignment, "assignment": assignment,
                              "db_url": str(gb.engine.url)}}
    for cls in GenerateAssignment.class_traits()["preprocessors"].default():
        if issubclass(cls, SaveCells):
            break
        nb, resources = cls(config=config).preprocess(nb, resources)
    save = SaveCells(config=config)
    save.notebook_id = save.assignment_id = assignment
    save.gradebook = gb  # fields already recorded are kept, as SaveCells keeps them
    save.new_grade_cells, save.new_solution_cells, save.new_task_cells = {}, {}, {}
    save.new_source_cells = {}
    for i, cell in enumerate(nb.cells):
        save.preprocess_cell(cell, resources, i)
    return {"grade": save.new_grade_cells, "solution": save.new_solution_cells,
            "task": save.new_task_cells, "source": save.new_source_cells}


def _recorded(notebook) -> dict[str, dict[str, dict]]:
    return {kind: {c.name: c.to_dict() for c in getattr(notebook, f"{kind}_cells")}
            for kind in KINDS}


def _course_problems(assignment: str, target) -> None:
    """The instructor notebook must be built from today's registry (``make release``)."""
    want = {f"grade_{p.name}" for p in registry.problems(assignment)}
    have = set(target["grade"])
    if want != have:
        raise ValueError(
            f"source/{assignment}/{assignment}.ipynb grades {sorted(have)}, the registry "
            f"{sorted(want)}: run `make release` first, then gradebook-sync")


def plan(gb, course: Path, config=None) -> tuple[list[Change], dict]:
    """(the changes, the target cells per assignment) that bring the gradebook ``gb`` in line
    with the course folder ``course``. A notebook the gradebook records with grade cells only
    (written by ``grade-all --gradebook`` alone) is compared on its grade cells."""
    from nbgrader.api import MissingEntry

    course_asgs = set(registry.assignments())
    recorded = {a.name: {nb.name: len(nb.submissions) for nb in a.notebooks}
                for a in gb.assignments}
    changes = plan_assignments(recorded, course_asgs)
    targets = {}
    for a in gb.assignments:
        if a.name not in course_asgs:
            continue
        try:
            notebook = gb.find_notebook(a.name, a.name)
        except MissingEntry:  # the assignment was added (a due date) but never released
            if not (Path(course) / "source" / a.name / f"{a.name}.ipynb").is_file():
                continue
            target = target_cells(a.name, gb, course, config)
            _course_problems(a.name, target)
            n = len(a.submissions)
            detail = (f"; {n} submission(s) recorded without it (an `nbgrader autograde` run "
                      "before the release?), which get its empty grades, until graded"
                      if n else "")
            changes.append(Change(a.name, "add-notebook", name=a.name, detail=detail,
                                  submissions=n))
            targets[a.name] = target
            continue
        target = target_cells(a.name, gb, course, config)
        _course_problems(a.name, target)
        current = _recorded(notebook)
        if not current["source"]:  # grade-all's record: grade cells only
            target = {"grade": target["grade"]}
        targets[a.name] = target
        changes += plan_cells(a.name, current, target, len(notebook.submissions))
    return changes, targets


def apply(gb, changes: list[Change], targets: dict) -> None:
    """Write ``changes`` (from :func:`plan`) into the gradebook ``gb``."""
    from nbgrader.api import Comment, Grade, SubmittedNotebook

    db = gb.db
    for ch in changes:
        if ch.action == "remove-assignment":
            gb.remove_assignment(ch.assignment)
        elif ch.action == "remove-notebook":
            gb.remove_notebook(ch.name, ch.assignment)
        elif ch.action == "add-notebook":
            gb.add_notebook(ch.name, ch.assignment)
    for asg, target in targets.items():
        notebook = gb.find_notebook(asg, asg)
        removed = {(c.kind, c.name) for c in changes
                   if c.assignment == asg and c.action == "remove"}
        for kind in KINDS:  # a removed cell takes its grades and comments with it
            for cell in list(getattr(notebook, f"{kind}_cells")):
                if (kind, cell.name) in removed:
                    for row in list(getattr(cell, "grades", ())) + \
                            list(getattr(cell, "comments", ())):
                        db.delete(row)
                    db.delete(cell)
        db.commit()
        added = {(c.kind, c.name) for c in changes if c.assignment == asg and c.action == "add"}
        create = {"grade": gb.update_or_create_grade_cell,
                  "solution": gb.update_or_create_solution_cell,
                  "task": gb.update_or_create_task_cell,
                  "source": gb.update_or_create_source_cell}
        for kind, cells in target.items():
            for name, info in cells.items():
                fields = {k: v for k, v in info.items()
                          if k not in ("id", "name", "notebook", "assignment")}
                cell = create[kind](name, asg, asg, **fields)
                if (kind, name) not in added or kind == "source":
                    continue
                for submitted in gb.find_notebook(asg, asg).submissions:
                    # what nbgrader's add_submission creates for a cell: a grade with no
                    # score (marked for a look until graded) and a comment
                    if kind in ("grade", "task"):
                        db.add(Grade(cell_id=cell.id, notebook=submitted,
                                     needs_manual_grade=True))
                    if kind in ("solution", "task"):
                        db.add(Comment(cell_id=cell.id, notebook=submitted))
        db.commit()
        if any(c.assignment == asg and c.action == "add-notebook" for c in changes):
            # a submission recorded before the notebook gets what nbgrader's add_submission
            # gives one: its notebook, an empty grade per grade cell, a comment per solution
            notebook = gb.find_notebook(asg, asg)
            for sub in gb.find_assignment(asg).submissions:
                if any(n.notebook_id == notebook.id for n in sub.notebooks):
                    continue
                nb = SubmittedNotebook(notebook=notebook, assignment=sub)
                for cell in notebook.grade_cells:
                    db.add(Grade(cell_id=cell.id, notebook=nb, needs_manual_grade=True))
                for cell in notebook.solution_cells:
                    db.add(Comment(cell_id=cell.id, notebook=nb))
                for cell in notebook.task_cells:
                    db.add(Comment(cell_id=cell.id, notebook=nb))
                    db.add(Grade(cell_id=cell.id, notebook=nb, needs_manual_grade=True))
                db.add(nb)
            db.commit()


def sync(target: str, course: Path, *, write: bool = False) -> list[Change]:
    """The changes that bring the gradebook at ``target`` (a URL or an sqlite file) in line
    with ``course``; written when ``write``."""
    from nbgrader.api import Gradebook

    from .gradebook import db_url, quiet_nbgrader

    with quiet_nbgrader(), Gradebook(db_url(target)) as gb:
        changes, targets = plan(gb, Path(course))
        if write and changes:
            apply(gb, changes, targets)
    return changes


def before_grading(target: str, course: Path) -> str | None:
    """Why ``grade-all --gradebook target`` must not write into that gradebook yet (it is out
    of line with the course where grades written now would be wrong), or None. A gradebook not
    made yet, or a course folder with no instructor notebooks, has nothing to check."""
    from .gradebook import db_url

    url = db_url(target)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        return None
    if not (Path(course) / "source").is_dir():
        return None
    try:
        changes = sync(target, course)
    except FileNotFoundError:  # an assignment with no instructor notebook here: not ours
        return None
    except ValueError as e:  # source/ built from another registry
        return f"{e}; nothing was graded"
    blocking = [c for c in changes if c.blocks_grading]
    if not blocking:
        return None
    return (f"the gradebook {target} is out of line with the course (a problem or an "
            "assignment was added or removed):\n  " + "\n  ".join(c.text() for c in blocking)
            + f"\nrun `python -m autograder gradebook-sync {target} --course {course}` to see "
            "every change and the same with --apply to write them (copy the gradebook first), "
            "then grade again; nothing was graded")
