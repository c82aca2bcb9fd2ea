"""What one graded function is: its arguments and shardings, inputs, reference, rules, points.

:class:`Problem` is the shared vocabulary of every side of the package (the judge, the
supervisor's scoring, the self-check's table); the course's entries themselves live in
:mod:`autograder.course.problems` and are looked up through :mod:`autograder.course.registry`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

#: How much each check counts towards a function's points (numerics also gates the rest).
DEFAULT_WEIGHTS = {"numerics": 0.5, "sharding": 0.15, "structure": 0.2, "memory": 0.1, "speed": 0.15}


#: Speed thresholds (student time / jit baseline time); a Problem's ``speed_threshold`` may
#: override either by the same key, and "tpu_model" falls back to the problem's "tpu" limit.
#: Defaults (docs/model.md, "The limits", has the measurements): "tpu_model" 1.3, the modeled TPU
#: (autograder.tpumodel, deterministic), which decides everywhere but on a real TPU: where jit's
#: program is the answer (ps1) the references model at 1.00, and the cheapest wrong program
#: measured (rolling the gathered global array) at 1.55. "tpu" 1.3: wall-clock on a real TPU, the
#: same bar with room for timing noise. There is no wall-clock limit for CPU or GPU: emulated
#: devices time a TPU program badly, and a program the model cannot price fails the check.
#: the wall-clock limits where the speed case is timed: tight on a TPU, as the book's figures;
#: on GPUs and on emulated CPU devices (timed only as a test of that path) a guard against
#: blow-ups, since the course's overlap lessons are TPU lessons
SPEED_THRESHOLDS = {"tpu": 1.3, "tpu_model": 1.3, "cuda": 2.0, "rocm": 2.0, "cpu": 3.0}


@dataclass(frozen=True)
class Case:
    """One set of inputs. ``args`` are NumPy arrays (sharded by the problem's specs) or ints."""

    args: tuple
    label: str = ""

    def describe(self, names: tuple[str, ...]) -> str:
        parts = []
        for n, a in zip(names, self.args):
            if isinstance(a, np.ndarray):
                parts.append(f"{n}: {a.dtype.name}{list(a.shape)}")
            else:
                parts.append(f"{n}={a!r}")
        return ", ".join(parts) + (f" ({self.label})" if self.label else "")


@dataclass(frozen=True)
class Problem:
    name: str
    assignment: str
    points: float
    statement: str
    arg_names: tuple[str, ...]
    #: PartitionSpec per argument; None marks a static Python int (passed positionally, static).
    in_specs: tuple
    out_spec: Any
    #: (rng, x, y, size) -> tuple of args (or a Case), size in {'small', 'grade', 'speed',
    #: 'memory'}. Defined in autograder/references/<assignment>.py (pure NumPy) so that the
    #: public self-check can bundle it.
    make_case: Callable[[np.random.Generator, int, int, str], tuple]
    #: (case.args, x, y) -> np.ndarray, the NumPy reference
    reference: Callable[..., np.ndarray]
    #: (*args, mesh=mesh) -> jax.Array: the plain global-view computation, jitted by the grader
    baseline: Optional[Callable] = None
    #: structure rules: (program, mesh, problem) -> CheckResult | None (None: not applicable)
    rules: tuple = ()
    #: (case, x, y) -> (bound_bytes, what): compiled temp bytes must stay below the bound
    memory_bound: Optional[Callable] = None
    uses_mesh: bool = True
    #: random shapes per mesh for the numerics check: each is one compiled program
    cases_per_mesh: int = 1
    #: value draws per random shape (:meth:`redraw`), run through that shape's one program
    draws_per_shape: int = 2
    #: the edge cases that must always be run: (rng, x, y) -> list of arg tuples (references
    #: module); their values come from the grading run's secret seed like every other case
    edge_cases: Optional[Callable] = None
    rtol: float = 1e-4
    atol: float = 1e-4
    speed_threshold: dict = field(default_factory=dict)
    weights: dict = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    #: layouts on which numerics run (None: all the course layouts)
    layouts: Optional[tuple] = None
    #: the layout used for the structure/memory/speed checks' big shapes
    speed_layout: tuple = (2, 4)
    #: whether the baseline's code travels with the self-check (``tpu_profile`` models it from a
    #: release folder); False where that code would give an exercise's answer away (ps1)
    baseline_public: bool = True
    #: for a ring: (case.args, got, want, x, y, rtol, atol) -> '; by ring step ...' or '', which
    #: steps of the ring a wrong output's values show to be wrong (references module); called on
    #: public inputs only, as it names blocks and devices
    steps: Optional[Callable] = None
    #: a baseline kept with the grader, as its modeled figures (the self-check's public problem
    #: fills it from the public table; the registry's entries hold the baseline itself: None)
    baseline_model: Optional[dict] = None

    def case(self, rng, x: int, y: int, size: str) -> Case:
        c = self.make_case(rng, x, y, size)
        return c if isinstance(c, Case) else Case(tuple(c))

    def redraw(self, rng, case: Case) -> Case:
        """``case`` with fresh values and the same signature: each float array drawn again from
        a normal distribution of its own spread; integer arrays and static values kept."""
        args = []
        for a in case.args:
            if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating):
                scale = float(a.std()) if a.size else 1.0
                a = (rng.standard_normal(a.shape) * (scale or 1.0)).astype(a.dtype)
            args.append(a)
        return Case(tuple(args), case.label)

    def edges(self, rng, x: int, y: int) -> list[Case]:
        if self.edge_cases is None:
            return []
        return [c if isinstance(c, Case) else Case(tuple(c), "edge case")
                for c in self.edge_cases(rng, x, y)]

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.in_specs) if s is None)

    def threshold(self, platform: str) -> float:
        """The speed limit on ``platform``; the modeled TPU ratio ("tpu_model") is held to the
        problem's TPU limit unless the problem sets one of its own."""
        if platform == "tpu_model" and "tpu_model" not in self.speed_threshold:
            return self.speed_threshold.get("tpu", SPEED_THRESHOLDS["tpu_model"])
        if platform not in SPEED_THRESHOLDS:
            raise KeyError(f"no speed limit for {platform!r}: speed is judged by wall-clock on a "
                           "TPU, by the TPU model anywhere else")
        return self.speed_threshold.get(platform, SPEED_THRESHOLDS[platform])

    @property
    def check_names(self) -> tuple[str, ...]:
        names = ["numerics", "sharding", "structure"]
        if self.memory_bound is not None:
            names.append("memory")
        if self.baseline is not None:
            names.append("speed")
        return tuple(names)
