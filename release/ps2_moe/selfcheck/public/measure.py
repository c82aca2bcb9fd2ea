"""The memory and speed checks at home: the grader's figures, from the grader's own code.

:func:`memory` compiles a graded function at the grader's memory case (its mesh and shapes) as
the grader's memory check compiles it and sets its temporary bytes beside the grader's bound.
:func:`speed` models it at the grader's speed case with the grader's own modeler
(:func:`autograder.tpumodel.api.grading_modeler`): the same compile, the same op table, the same
loop pinning and FLOPs floor, against the jit baseline (or, where its code stays with the grader,
the baseline's figures modeled there at the same case) and the same limit. Both return a
:class:`~autograder.core.results.CheckResult`, passed exactly where the grader's would be on the
same figures, or failed with what stops them from running here: never passed by default.

What differs from the grader, said in the messages: the grader's big cases hold values drawn
from its secret seed (here: seed 0, the same shapes), which changes the modeled time only where
a loop runs as often as the data says; and the grader also runs both programs once, to check
they compute the case's answer and keep the structure rules at that size (a function that does
the same thing whatever the size of its inputs passes those as it passes the small cases).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..core import devices
from ..core.calls import Call
from ..core.errors import describe_error
from ..core.results import MEASURED_NEED_STRUCTURE, CheckResult, failed, passed, ratio_text
from ..core.stablehlo import module_text

MIB = 1 << 20


@dataclass(frozen=True)
class MemoryProfile:
    """The compiled temporary memory of a graded function at the grader's memory case."""

    name: str
    where: str
    temp_bytes: int
    bound: int
    what: str

    @property
    def passes(self) -> bool:
        return self.temp_bytes <= self.bound

    def text(self) -> str:
        verdict = "within" if self.passes else "OVER"
        return (f"{self.name}{self.where}: temporary buffers {self.temp_bytes / MIB:.2f} MiB, "
                f"{verdict} the grader's bound of {self.bound / MIB:.2f} MiB\n"
                f"  ({self.what})\n"
                f"  {MEASURED_NEED_STRUCTURE} (check({self.name!r}, fn) runs them)")

    def __repr__(self) -> str:
        return self.text()


def memory_profile(problem, bar: dict, arg_names, fn) -> Optional[MemoryProfile]:
    """``fn`` compiled at the grader's memory case (``bar``: the public table's memory entry),
    its temporary bytes beside the bound; None where this JAX reports no memory figures.
    Compile only: nothing runs."""
    import numpy as np

    from ..core.compiling import MEMORY_CPU_COMPILE, on_cpu
    from ..core.meshes import make_mesh
    from ..tpumodel.profile import case_args

    x, y = bar["layout"]
    mesh = make_mesh(x, y)
    args = case_args(problem, mesh, size="memory")
    # compiled as the grader compiles its memory program (XLA's own passes as always, so the
    # same temp bytes; on CPU, LLVM's optimisation lowered: a quicker compile)
    stats = Call.of(problem, fn, mesh).lower(args).compile(
        on_cpu(MEMORY_CPU_COMPILE)).memory_analysis()
    if stats is None:
        return None
    shapes = ", ".join(f"{k}{list(np.shape(a))}" for k, a in zip(arg_names, args))
    where = f" on mesh {x}x{y}, per device," if problem.uses_mesh else ""
    return MemoryProfile(problem.name, f"{where} with {shapes}", int(stats.temp_size_in_bytes),
                         bar["bound"], bar["what"])


def memory(problem, bar: dict, arg_names, fn) -> CheckResult:
    """The grader's memory check, at home: the same figure against the same bound."""
    try:
        prof = memory_profile(problem, bar, arg_names, fn)
    except Exception as e:  # noqa: BLE001 - the student's program: say what stopped it
        return failed("memory", f"could not compile it at the grader's memory case: "
                      f"{describe_error(e)}")
    if prof is None:
        return failed("memory", "this JAX reports no compiled memory figures, so the memory "
                      "check cannot run here (the grader's JAX does): install a JAX of the "
                      "course's range (requirements.txt)")
    where = prof.where.strip(" ,").replace(", per device,", " (per device)")
    if prof.passes:
        return passed("memory", f"temporary buffers {prof.temp_bytes / MIB:.2f} MiB, within "
                      f"the grader's bound of {prof.bound / MIB:.2f} MiB ({prof.what}), {where}")
    return failed("memory", f"keep the temporary buffers within {prof.bound / MIB:.2f} MiB "
                  f"({prof.what}); {where}, the compiled program needs "
                  f"{prof.temp_bytes / MIB:.2f} MiB. memory_profile({problem.name!r}, fn) "
                  "shows the figure; look for an intermediate larger than the bound")


def trips_text(trips) -> str:
    """How the model counted loops whose trip count the data decides (the grader's speed
    message says the same)."""
    return ("each loop whose length the data decides was modeled at the most iterations one "
            f"entry of it ran on the speed case's input ({', '.join(str(t) for t in trips)})")


def branches_text(n: int) -> str:
    """How the model priced conditionals it pinned to a run of the same program (the grader
    does the same)."""
    return (f"{n} conditional{'s' * (n != 1)} modeled at the branch each device ran on the "
            "speed case's input (one instrumented run of your program)")


def bounds_text(bounds) -> str:
    """Why a modeled time is an upper bound: the conditionals the model could not decide."""
    return ("an upper bound, since the model cannot know which way the program goes "
            f"({'; '.join(bounds)})")


def floor_text(factor: float) -> str:
    """The FLOPs floor, where it scaled the model's compute (:mod:`autograder.tpumodel.work`)."""
    return (f"XLA counts {100 * (factor - 1):.0f}% more FLOPs than the model: compute scaled "
            "up, as the grader does")


#: a modeled ratio this close to the limit (as a share of it) is said to be close, where loops
#: counted on this case's public values decide the time (the grader counts them on its own)
CLOSE = 0.9


class Unpriced(Exception):
    """The op table refuses the program (:mod:`autograder.core.optable`): the grader prices it
    not at all, and nor does anything here (the message says why)."""


def kept_baseline(problem, chip_name: str):
    """The jit baseline's :func:`~autograder.tpumodel.api.recorded` figures where its code
    stays with the grader (None where the baseline's code is here); raises ``ValueError``
    saying why where this folder cannot model it."""
    from ..tpumodel.api import recorded

    if problem.baseline is not None:
        return None
    x, y = problem.speed_layout
    kept = problem.baseline_model
    if kept is None:
        raise ValueError("this self-check holds neither the jit baseline nor its modeled "
                         "figures: rebuild the folder from the course (or ask for one that "
                         "ships them)")
    if tuple(kept["layout"]) != (x, y):
        raise ValueError(f"the jit baseline's figures were modeled on mesh {kept['layout'][0]}"
                         f"x{kept['layout'][1]}, the grader's speed case runs on {x}x{y}: this "
                         "folder's figures are stale; get the current release of the folder")
    figures = kept["chips"].get(chip_name)
    if figures is None:
        raise ValueError(f"this folder holds the jit baseline's figures for TPU "
                         f"{', '.join(sorted(kept['chips']))}, not {chip_name}")
    return recorded(figures, chip_name, (x, y) if problem.uses_mesh else (1,))


def speed_models(problem, fn, mesh, args, *, chip: str, baseline=None) -> tuple:
    """``(student, baseline, floor)`` (:func:`~autograder.tpumodel.api.grading_models`): ``fn``
    on the placed ``args`` priced as the grader prices its speed case: the program it exports
    (refused, :class:`Unpriced`, where the op table refuses it), one compile (the model's
    input and XLA's FLOP count, the floor under the model's), its loops and branches as one
    instrumented run of it on ``args`` measured them wherever the model's own reading differs
    (:func:`~autograder.tpumodel.api.run_hooks`), against the jit baseline (or ``baseline``:
    its recorded figures). Raises :class:`~autograder.tpumodel.hlo.ModelError` for a program
    the model cannot price."""

    from ..core.compiling import MODEL_CPU_COMPILE, SPEED_CPU_COMPILE, on_cpu, runner
    from ..core.optable import refusal
    from ..course.reading import export_for_reading
    from ..tpumodel.api import (
        _mesh_geometry,
        baseline_hlo,
        compile_partitioned,
        grading_models,
        run_hooks,
    )

    geo_mesh = mesh if problem.uses_mesh else None
    exported, dynamic = export_for_reading(Call.of(problem, fn, mesh), args)
    got = refusal(module_text(exported),
                  tuple(int(mesh.shape[a]) for a in ("X", "Y")) if geo_mesh else None)
    if got is not None:  # as the grader: never priced by a guess
        raise Unpriced(str(got).rstrip("."))
    # one compile, as the grader's speed program: the model's input and XLA's FLOP count (never
    # run: the instrumented copy below runs)
    compiled, text = compile_partitioned(devices.lower(exported.call, *dynamic),
                                         on_cpu(MODEL_CPU_COMPILE))
    base_text = None if baseline is not None else baseline_hlo(problem, mesh, args)
    measured, pinned = run_hooks(exported, dynamic, *_mesh_geometry(geo_mesh),
                                 run=runner(SPEED_CPU_COMPILE))
    return grading_models(problem, None, mesh, args, chip=chip, program=True,
                          texts=(text, base_text), pinned=pinned, measured=measured,
                          compiled=compiled, baseline=baseline)


def speed(problem, fn, *, chip: Optional[str] = None) -> CheckResult:
    """The grader's speed check, at home: ``fn`` modeled at the grader's speed case (its mesh
    and shapes, the values of seed 0) by :func:`speed_models` (the grader's own modeler, loop
    and branch pinning and FLOPs floor), the ratio to the jit baseline against the grader's
    limit. ``problem``: the registry's problem or the self-check's public one (a baseline kept
    with the grader comes as figures)."""
    import numpy as np

    from ..core.meshes import make_mesh
    from ..tpumodel.api import verdict
    from ..tpumodel.chips import get_chip
    from ..tpumodel.hlo import ModelError
    from ..tpumodel.profile import case_args

    x, y = problem.speed_layout
    chip_name = get_chip(chip).name
    try:
        base = kept_baseline(problem, chip_name)
    except ValueError as e:
        return failed("speed", f"{e}, so the speed check cannot run here")
    mesh = make_mesh(x, y)
    args = case_args(problem, mesh)
    shapes = ", ".join(f"{list(np.shape(a))}" if hasattr(a, "shape") else repr(a) for a in args)
    where = (f"the grader's speed case{f' on mesh {x}x{y}' if problem.uses_mesh else ''}, "
             f"arguments {shapes}")
    try:
        m = verdict(problem, *speed_models(problem, fn, mesh, args, chip=chip_name,
                                           baseline=base))
    except Unpriced as e:
        return failed("speed", f"the TPU model cannot price this program ({where}): {e}. Only "
                      "programs made of what the course's programs contain are timed, so this "
                      "check fails with the structure check")
    except ModelError as e:
        return failed("speed", f"the TPU model cannot price this program ({where}): "
                      f"{str(e)[:300]}. Speed is judged by the model alone, so this check "
                      "fails; write the program with the shard_map, collectives and loops the "
                      "exercise asks for")
    except Exception as e:  # noqa: BLE001 - said, never passed
        return failed("speed", f"could not model it at {where}: {describe_error(e)}")
    ratio, limit = m["ratio"], m["threshold"]
    figures = (f"modeled on TPU {m['chip']}: yours {m['student_us']:.1f} us, jit baseline "
               f"{m['baseline_us']:.1f} us, ratio {ratio_text(ratio, limit)}")
    extra = []
    if m.get("trips"):
        extra.append(trips_text(m["trips"]) + "; the grader counts them on its own values of "
                     "these shapes")
    if m.get("branches"):
        extra.append(branches_text(m["branches"]) + "; the grader counts them on its own values")
    bounds = (m.get("student") or {}).get("bounds")
    if bounds:
        extra.append(bounds_text(bounds))
    floor = m.get("flops") or {}
    if floor.get("applied"):
        extra.append(m["flops_clause"])
    if m.get("precision_clause"):
        extra.append(m["precision_clause"])
    tail = "".join(f"; {e}" for e in extra)
    if ratio <= limit:
        close = (f" (close to it: the grader's own values may count the loops differently)"
                 if (m.get("trips") or m.get("branches")) and ratio > CLOSE * limit else "")
        return passed("speed", f"{figures}, within the grader's limit {limit:g}{close} "
                      f"({where}{tail})")
    return failed("speed", f"make it faster: the grader's limit on the modeled ratio is "
                  f"{limit:g}, yours is {ratio_text(ratio, limit)} ({figures}; {where}{tail}). "
                  f"tpu_profile({problem.name!r}, fn) shows what waits for what")
