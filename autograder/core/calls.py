"""How a graded function is called: bound to its mesh, split, placed and made abstract, by one rule.

Every side of the package calls a graded function the same way: the sandboxed worker exporting
it (:mod:`autograder.worker.exporting`), the judge compiling and running the artifact and the jit
baseline, the self-check (:mod:`autograder.public.check`, :mod:`autograder.public.measure`), the
structure reader (:mod:`autograder.course.reading`) and the TPU model
(:mod:`autograder.tpumodel.api`, :mod:`autograder.tpumodel.profile`). Each once did it its own
way (static arguments told by declaration in some, by value type in another; ``mesh=`` passed
where the problem said so in some, where a mesh happened to exist in another), and one copy came
to export for JAX's default platform instead of the course's. The rule, for all of them:

1. **Declaration decides, values are checked.** Which arguments are static is what the problem
   declares: an argument whose ``in_specs`` entry is None is a static Python int (passed by
   position, jit-static, bound into the program); every other argument is an array, sharded by
   its spec. A value's type never decides: :meth:`CallShape.check` refuses a value that
   disagrees with the declaration (an array where a static int is declared, or a static where
   an array is), naming the argument. The worker, which never sees the problem, reads the same
   declaration from the grader's request (:meth:`CallShape.of_request`), which was written from
   the problem.
2. **``mesh=`` is bound where the problem uses a mesh.** ``bound`` is
   ``functools.partial(fn, mesh=mesh)`` when the problem's ``uses_mesh`` is true, else ``fn``
   itself; a mesh function without a mesh is an error, never a call without ``mesh=``.
   :meth:`Call.closed` is the bound function of the dynamic arrays alone (static values bound by
   position), carrying ``fn``'s name (:func:`functools.wraps`): what is exported and modeled.
3. **Arrays are placed on the course's devices** (:func:`autograder.core.devices.place`):
   sharded by the argument's spec over the mesh for a mesh function; on the mesh's first device
   (without a mesh: the course's first device) for a single-device function. Static values stay
   as they are.
4. **Abstract arguments carry the sharding placement would give.** For export and for compiling
   ahead of the values: a :class:`jax.ShapeDtypeStruct` per array with ``NamedSharding(mesh,
   spec)`` for a mesh function, ``SingleDeviceSharding`` on the mesh's first device for a
   single-device function given a mesh, and no sharding for a single-device function without
   one (what the worker exports: the artifact names no device, the grader places its inputs);
   static positions keep their value. Exports name the course's platform (or the grader's, in
   the worker) through :func:`autograder.core.devices.export`.

The output is pinned to ``out_spec`` over the mesh only where asked
(:meth:`Call.lower` ``out_sharding=True``: the jit baseline, whose output layout is part of the
problem). ``tests/test_devices.py`` fails on a ``functools.partial(..., mesh=...)`` anywhere in
the package but here, so a second copy of this rule cannot grow back; ``tests/test_calls.py``
holds every registry problem to it.
"""
from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from . import devices


@dataclass(frozen=True)
class CallShape:
    """What a caller must know of a graded function: per argument its ``PartitionSpec`` (None:
    a static int), whether it takes ``mesh=``, and its output's spec (None where unknown)."""

    in_specs: tuple
    uses_mesh: bool
    out_spec: Any = None
    name: str = ""

    @classmethod
    def of(cls, problem) -> "CallShape":
        """The declaration of ``problem``: the registry's
        :class:`~autograder.core.problem.Problem`, the self-check's public one, or a
        :class:`CallShape` already."""
        if isinstance(problem, CallShape):
            return problem
        return cls(tuple(problem.in_specs), bool(problem.uses_mesh),
                   getattr(problem, "out_spec", None), getattr(problem, "name", ""))

    @classmethod
    def of_request(cls, request) -> "CallShape":
        """The declaration an :class:`~autograder.core.records.ExportRequest` carries (the
        grader wrote it from the problem): static where its argument is, a mesh where it names
        a layout."""
        from jax.sharding import PartitionSpec

        return cls(tuple(None if a.is_static else PartitionSpec(*(a.spec or ()))
                         for a in request.args),
                   request.layout is not None, None, request.function)

    @classmethod
    def positional(cls, n: int, static_argnums: Sequence[int] = ()) -> "CallShape":
        """``n`` arguments of a function whose mesh is bound already, those at
        ``static_argnums`` static (the others' specs unknown: for splitting, not placing)."""
        from jax.sharding import PartitionSpec

        return cls(tuple(None if i in static_argnums else PartitionSpec() for i in range(n)),
                   False)

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return tuple(i for i, s in enumerate(self.in_specs) if s is None)

    def _pairs(self, args):
        return zip(args, self.in_specs, strict=True)

    def static(self, args) -> dict:
        """``{position: value}`` of the static arguments."""
        return {i: a for i, (a, s) in enumerate(self._pairs(args)) if s is None}

    def dynamic(self, args) -> list:
        """The array arguments, in order (what a bound program is called with)."""
        return [a for a, s in self._pairs(args) if s is not None]

    def check(self, args) -> None:
        """Raise TypeError where a value disagrees with the declaration: an array declared
        static, or a static value (a number, not an array) declared an array."""
        for i, (a, s) in enumerate(self._pairs(args)):
            arg = f"argument {i} of {self.name or 'the graded function'}"
            if s is None and (hasattr(a, "shape") or not isinstance(a, numbers.Integral)):
                raise TypeError(f"{arg} is declared static (an int) but is "
                                f"{type(a).__name__} {getattr(a, 'shape', a)!r}")
            if s is not None and not (hasattr(a, "shape") and hasattr(a, "dtype")):
                raise TypeError(f"{arg} is declared an array (spec {s}) but is "
                                f"{type(a).__name__} {a!r}")


@dataclass(frozen=True)
class Call:
    """``fn`` called as its :class:`CallShape` says, on ``mesh`` (None for a single-device
    function, or to place on the course's first device). ``fn`` may be None where only the
    arguments are wanted (:meth:`place`, :meth:`abstract`, :meth:`dynamic`)."""

    shape: CallShape
    fn: Optional[Callable] = None
    mesh: Any = None

    @classmethod
    def of(cls, problem, fn: Optional[Callable] = None, mesh=None) -> "Call":
        return cls(CallShape.of(problem), fn, mesh)

    @property
    def static_argnums(self) -> tuple[int, ...]:
        return self.shape.static_argnums

    def static(self, args) -> dict:
        return self.shape.static(args)

    def dynamic(self, args) -> list:
        return self.shape.dynamic(args)

    @property
    def bound(self) -> Callable:
        """``fn`` with ``mesh=`` bound where the problem uses a mesh (rule 2)."""
        if self.fn is None:
            raise ValueError("no function to bind: Call(shape, fn, mesh)")
        if not self.shape.uses_mesh:
            return self.fn
        if self.mesh is None:
            raise ValueError(f"{self.shape.name or 'the graded function'} takes mesh=, and no "
                             "mesh was given")
        return functools.partial(self.fn, mesh=self.mesh)

    def closed(self, args) -> Callable:
        """The bound function of the array arguments alone, the static values of ``args``
        bound by position: what is exported and modeled. It carries ``fn``'s name."""
        fn, static, n = self.bound, self.static(args), len(args)

        def bound(*dyn):
            it = iter(dyn)
            return fn(*[static[i] if i in static else next(it) for i in range(n)])

        return functools.wraps(self.fn)(bound) if callable(self.fn) else bound

    @property
    def out_sharding(self):
        """``NamedSharding(mesh, out_spec)`` for a mesh function, else None."""
        if not self.shape.uses_mesh:
            return None
        from jax.sharding import NamedSharding

        return NamedSharding(self.mesh, self.shape.out_spec)

    def place(self, args) -> list:
        """``args`` on the course's devices (rule 3), after :meth:`CallShape.check`."""
        self.shape.check(args)
        return [a if s is None else
                devices.place(a, self.mesh, s if self.shape.uses_mesh else None)
                for a, s in self.shape._pairs(args)]

    def _sharding(self, spec):
        if self.shape.uses_mesh:
            from jax.sharding import NamedSharding

            return NamedSharding(self.mesh, spec)
        if self.mesh is None:
            return None
        from jax.sharding import SingleDeviceSharding

        return SingleDeviceSharding(self.mesh.devices.flat[0])

    def abstract(self, args) -> list:
        """Per argument: a static value as it is, an array (or anything with ``shape`` and
        ``dtype``: an :class:`~autograder.core.records.ArgSpec`, whose static value is its
        ``static``) as a :class:`jax.ShapeDtypeStruct` with the sharding :meth:`place` would
        give it (rule 4)."""
        import jax
        import jax.numpy as jnp

        out = []
        for i, (a, s) in enumerate(self.shape._pairs(args)):
            is_static = getattr(a, "is_static", None)
            if is_static is not None and is_static != (s is None):
                raise TypeError(f"argument {i} of {self.shape.name or 'the graded function'} "
                                f"is declared {'static' if s is None else 'an array'} but the "
                                f"request says {'static' if is_static else 'an array'}")
            if s is None:
                out.append(a.static if is_static else a)
            else:
                out.append(jax.ShapeDtypeStruct(tuple(a.shape), jnp.dtype(a.dtype),
                                                sharding=self._sharding(s)))
        return out

    def lower(self, args, *, out_sharding: bool = False, **kw):
        """``jax.jit(bound, static_argnums=...).lower(*args)`` on the course's devices;
        ``out_sharding``: the output pinned to :attr:`out_sharding` (the jit baseline)."""
        if out_sharding and self.out_sharding is not None:
            kw["out_shardings"] = self.out_sharding
        return devices.lower(self.bound, *args, static_argnums=self.static_argnums, **kw)

    def export(self, args, **kw):
        """``(exported, dynamic args)``: :meth:`closed` exported on the arrays of ``args``
        (placed or abstract) for the course's platform (``for_platform=`` names another)."""
        dynamic = self.dynamic(args)
        return devices.export(self.closed(args), *dynamic, **kw), dynamic


__all__ = ["Call", "CallShape"]
