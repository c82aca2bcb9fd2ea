"""What one function is graded on: its cases, drawn from a secret seed, and the requests that tell
the untrusted side their shapes (never their values)."""
from __future__ import annotations

import secrets
import threading
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..core.devices import platform as current_platform
from ..core.meshes import layouts as all_layouts
from ..core.problem import Case, Problem
from ..core.records import ArgSpec, ExportRequest, spec_of
from .bigcases import BigCase, BigCaseStore, big_case


def signature_of(problem: Problem, case: Case) -> tuple:
    """What a compiled executable depends on: array shapes and dtypes, static values."""
    return tuple((a.shape, a.dtype.str) if s is not None else ("static", a)
                 for a, s in zip(case.args, problem.in_specs, strict=True))


def request_for(problem: Problem, case: Case, layout, rid: int, platform: str) -> ExportRequest:
    """What the untrusted side is told about a case: shapes, dtypes, shardings, static values
    (never the array values)."""
    args = []
    for a, spec in zip(case.args, problem.in_specs, strict=True):
        if spec is None:
            args.append(ArgSpec(static=int(a)))
        else:
            args.append(ArgSpec(shape=tuple(int(d) for d in a.shape), dtype=a.dtype.name,
                                spec=spec_of(spec) if problem.uses_mesh else None))
    return ExportRequest(rid, problem.name, tuple(layout) if problem.uses_mesh else None,
                         tuple(args), platform)


@dataclass(kw_only=True)
class Plan:
    """Every case one function is graded on, as shapes: the inputs themselves are made from
    the secret seed only after the programs have arrived. Built by keyword
    (:func:`plan_for` fills them from a problem's options)."""

    problem: Problem
    seed: int
    #: two mesh layouts and one case of each, without the edge cases (the self-check's pace)
    quick: bool
    #: the memory and speed cases are planned too
    with_big: bool
    #: the platform the requests name (``jax.export``'s naming)
    platform: str
    #: request ids start here (one exporter serves every function of a submission)
    id_base: int = 0
    #: (layout, signature) -> its ExportRequest; the cases themselves are rebuilt from the seed
    #: by :meth:`cases` and :meth:`big` whenever they are needed
    requests: dict = field(default_factory=dict)
    #: "memory" / "speed" -> the big case's ExportRequest (:meth:`big_request`)
    big_requests: dict = field(default_factory=dict)
    #: where the big cases of a seed shared by a class are kept (:meth:`big_case`); None:
    #: drawn for this plan alone
    big_cases: Optional[BigCaseStore] = None
    #: "memory" / "speed" -> the big case :meth:`big_request` drew to read its shapes, until
    #: :meth:`big_case` takes it (the check's case is that one, not a second draw of it)
    _drawn: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def _rng(self, which: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(self.problem.name.encode()), which])

    def layouts(self):
        lays = self.problem.layouts or all_layouts()
        return lays[:2] if self.quick else lays

    def randomized_per_mesh(self) -> int:
        """How many of a mesh's cases (:meth:`cases`) are randomized; the edge cases follow."""
        return 1 if self.quick else self.problem.cases_per_mesh * self.problem.draws_per_shape

    def cases(self):
        """[(layout, [Case, ...])] for the numerics, rebuilt identically on every call."""
        out = []
        for i, layout in enumerate(self.layouts()):
            rng = self._rng(i)
            n = 1 if self.quick else self.problem.cases_per_mesh
            draws = 1 if self.quick else self.problem.draws_per_shape
            cases = []
            for _ in range(n):
                first = self.problem.case(rng, *layout, "grade")
                cases += [first] + [self.problem.redraw(rng, first) for _ in range(draws - 1)]
            if not self.quick:
                cases += self.problem.edges(rng, *layout)
            out.append((layout, cases))
        return out

    def public_twin(self, layout, case: Case, edge: Optional[int] = None) -> Optional[Case]:
        """A case of ``case``'s shapes and static values whose inputs are public: drawn from
        :data:`PUBLIC_SEED`, never from the secret seed, so whatever a message quotes of the
        student's program on it is the same in every grading run. ``edge``: ``case`` is the
        problem's edge case of that number, and its public draw is tried first (the same kind
        of input: all tokens to one expert, a negative shift); then the edge cases and the
        randomized cases of a public stream, the first with the same signature. None where
        :data:`PUBLIC_DRAWS` draws find none."""
        problem = self.problem
        want = signature_of(problem, case)
        rng = np.random.default_rng([PUBLIC_SEED, zlib.crc32(problem.name.encode()),
                                     *(int(v) for v in layout)])
        edges = problem.edges(rng, *layout)
        if edge is not None and edge < len(edges) and signature_of(problem, edges[edge]) == want:
            return edges[edge]
        for c in edges:
            if signature_of(problem, c) == want:
                return c
        for _ in range(PUBLIC_DRAWS):
            c = problem.case(rng, *layout, "grade")
            if signature_of(problem, c) == want:
                return c
        return None

    def public_big(self, size: str) -> Optional[Case]:
        """A memory or speed case of the secret one's shapes and static values whose inputs are
        public (drawn from :data:`PUBLIC_SEED`, the same in every grading run, its static
        values the secret case's, which its request tells the worker anyway): what a speed
        message quotes figures from where the secret case's own follow its values. None where
        :data:`PUBLIC_BIG_DRAWS` draws find none. Kept in :attr:`big_cases` where given (the
        same twin for every submission of a class: drawing one costs a fifth of a second), read
        back where its arguments are the request's, static values included."""
        problem, layout = self.problem, self.problem.speed_layout
        request = self.big_request(size)
        want = request.args
        store, key = self.big_cases, None
        if store is not None:
            key = store.key(problem.name, PUBLIC_SEED, f"public {size}", layout)
            kept = store.get(key, request)
            if kept is not None:
                return kept[0]
        rng = np.random.default_rng([PUBLIC_SEED, zlib.crc32(problem.name.encode()),
                                     1000 + ("memory", "speed").index(size)])
        for _ in range(PUBLIC_BIG_DRAWS):
            c = problem.case(rng, *layout, size)
            c = Case(tuple(w.static if w.is_static else a for a, w in zip(c.args, want,
                                                                           strict=True)),
                     c.label)
            if request_for(problem, c, layout, 0, self.platform).args == want:
                if store is not None:  # no answer is kept: a twin's values are never checked
                    store.put(key, c, np.zeros(0, np.float32))
                return c
        return None

    def big(self, size: str) -> tuple:
        """(layout, Case) of the memory or speed check."""
        layout = self.problem.speed_layout
        rng = self._rng(1000 + ("memory", "speed").index(size))
        return layout, self.problem.case(rng, *layout, size)

    def big_case(self, size: str) -> BigCase:
        """The memory or speed case with its NumPy answer: read from :attr:`big_cases` where
        it is kept there, else drawn (:meth:`big`; the case :meth:`big_request` drew, where
        this plan drew one) and answered now."""
        request = self.big_request(size)
        drawn = self._drawn.pop(size, None)
        return big_case(self.problem, self.problem.speed_layout,
                        lambda: drawn if drawn is not None else self.big(size)[1], request,
                        seed=self.seed, size=size, store=self.big_cases)

    def big_request(self, size: str) -> ExportRequest:
        """The request of the memory or speed case: its case drawn once to read its shapes,
        and kept for :meth:`big_case` (a plan whose requests a plan before it made draws
        nothing here)."""
        if size not in self.big_requests:
            layout, case = self.big(size)
            self.big_requests[size] = self.request(layout, case)
            self._drawn[size] = case
        return self.big_requests[size]

    def big_sizes(self) -> list[str]:
        """The big cases this plan grades: "memory" and "speed", where the problem has them."""
        if not self.with_big:
            return []
        return (["memory"] if self.problem.memory_bound is not None else []) + (
            ["speed"] if self.problem.baseline is not None else [])

    def request(self, layout, case: Case) -> ExportRequest:
        key = (tuple(layout), signature_of(self.problem, case))
        if key not in self.requests:
            self.requests[key] = request_for(self.problem, case, layout,
                                             self.id_base + len(self.requests), self.platform)
        return self.requests[key]

    def all_requests(self) -> list[ExportRequest]:
        """Every request of this function, planned once (the cases are made only to read
        their shapes, then dropped). A plan made before in this process with the same
        problem, seed and options has the same requests: they are taken from it (a warm
        grader grades a class on one seed; drawing the big cases again only to read their
        shapes would cost more than a second per submission)."""
        if self.requests:
            return list(self.requests.values())
        key = (id(self.problem), self.seed, self.quick, self.with_big, self.platform,
               self.id_base)
        with _planned_lock:
            earlier = _PLANNED.get(key)
        if earlier is not None and earlier[0] is self.problem:
            self.requests, self.big_requests = dict(earlier[1]), dict(earlier[2])
            return list(self.requests.values())
        for layout, cases in self.cases():
            for c in cases:
                self.request(layout, c)
        for size in self.big_sizes():
            self.big_request(size)
        with _planned_lock:
            _PLANNED[key] = (self.problem, dict(self.requests), dict(self.big_requests))
            while len(_PLANNED) > PLANS_KEPT:
                _PLANNED.popitem(last=False)
        return list(self.requests.values())


#: the seed of the public cases a numerics message quotes values from (:meth:`Plan.public_twin`):
#: public by design, the same in every grading run
PUBLIC_SEED = 20250101


#: randomized cases drawn, at most, to find one of a given signature (each costs microseconds)
PUBLIC_DRAWS = 4000


#: big cases drawn, at most, to find a public one of the secret one's signature (the course's
#: big cases have fixed shapes: the first fits)
PUBLIC_BIG_DRAWS = 4


#: how many functions' planned requests this process keeps (:meth:`Plan.all_requests`): every
#: graded function of the course, a few times over
PLANS_KEPT = 64


_PLANNED: "OrderedDict[tuple, tuple]" = OrderedDict()


_planned_lock = threading.Lock()


def fresh_seed() -> int:
    """A secret seed for one grading run: nothing a student can predict or memorise."""
    return secrets.randbits(63)


def plan_for(problem: Problem, *, seed: int | None = None, quick: bool = False,
             with_speed: bool = True, id_base: int = 0,
             big_cases: Optional[BigCaseStore] = None) -> Plan:
    """The cases ``problem`` is graded on, from ``seed`` (None: a fresh secret one);
    ``big_cases``: where a class graded on ``seed`` keeps its big cases (only with a seed)."""
    if seed is None and big_cases is not None:
        raise ValueError("big cases are kept for a seed shared by a class, not a fresh one")
    return Plan(problem=problem, seed=fresh_seed() if seed is None else seed, quick=quick,
                with_big=problem.memory_bound is not None or (
                    with_speed and problem.baseline is not None),
                platform=current_platform(), id_base=id_base, big_cases=big_cases)
