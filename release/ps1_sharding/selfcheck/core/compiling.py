"""How programs are compiled where the course meshes are emulated on XLA:CPU.

The grader and the public self-check compile the same way: small programs that only run for
their values skip LLVM's heavy passes, the memory check keeps XLA's own passes, the speed case
sits between. On an accelerator every program is compiled as XLA would (:func:`on_cpu` gives
None), so nothing here changes what runs on a TPU.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from .devices import platform

#: XLA:CPU compiles a small program about 3x faster without LLVM's heavy optimisations and
#: with its classic fusion emitters instead of the newer MLIR ones, and a further 15-20% faster
#: in one piece (no parallel codegen split, whose threads cost more than they save on a small
#: program); the numerics runs use this (the program XLA's HLO passes produce is the same;
#: only the machine code differs). Options this XLA does not know are left out (see
#: :func:`cpu_options`).
FAST_CPU_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False,
                    "xla_cpu_parallel_codegen_split_count": 1,
                    "xla_llvm_disable_expensive_passes": True}
#: the memory check's compile: XLA's own passes (fusion, buffer assignment) as in a normal
#: compile, so its temp bytes are the real ones; only LLVM's optimisation level is lowered,
#: and its code is generated in one piece (as :data:`FAST_CPU_COMPILE`'s: the buffers are
#: assigned before codegen, so the temp, argument and output bytes are the same, measured on
#: ps2's and ps3's programs)
MEMORY_CPU_COMPILE = {"xla_backend_optimization_level": 0,
                      "xla_cpu_parallel_codegen_split_count": 1}
#: the speed case's compile on CPU: its program runs once on big arrays (its values are
#: checked), where LLVM's O0 code costs more than the compile saves (moe_jit's buffers: 8.6 s
#: at O0 against 0.3 + 1.8 s here); O1 keeps most of that run at a fraction of O2's compile.
#: The partitioned module the TPU model reads is the same at every level. Its code in one
#: piece too: a ps2 or ps3 grading took 10-15 % less CPU for it on this 2-core machine (the big
#: cases' programs are as many HLO instructions as the small ones'; only their shapes grow).
SPEED_CPU_COMPILE = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False,
                     "xla_cpu_parallel_codegen_split_count": 1}
#: the speed case's program as the TPU model reads it on CPU: its partitioned module, its
#: optimised module (what XLA added) and XLA's FLOP count, never its machine code (the one
#: instrumented run, compiled with :data:`SPEED_CPU_COMPILE`, is what runs). XLA's HLO passes
#: are those of :data:`SPEED_CPU_COMPILE`; only LLVM works less: 0.21 s of CPU against 0.08
#: for the reference moe_topk on JAX 0.10, 0.42 against 0.28 on 0.12
#: (tests/test_compile_ahead.py checks that the three readings are the same)
MODEL_CPU_COMPILE = {**SPEED_CPU_COMPILE, "xla_backend_optimization_level": 0,
                     "xla_llvm_disable_expensive_passes": True}


def _compiles_with(options: dict) -> None:
    from . import devices

    devices.lower(lambda v: v + 1, np.float32(1)).compile(options)


@functools.lru_cache(maxsize=None)
def _known_option(name: str, value) -> bool:
    try:
        _compiles_with({name: value})
        return True
    except Exception:  # noqa: BLE001 - "No such compile option" on an XLA without it
        return False


@functools.lru_cache(maxsize=None)
def _accepted(items: tuple) -> tuple:
    """The ``(name, value)`` pairs of ``items`` this XLA accepts: a tiny program compiled with
    all of them, the one XLA's refusal names left out and the rest tried again (one compile
    where every option is known, as on JAX 0.10: a process probed each option apart, 0.15 s of
    CPU in every judge); option by option where a refusal names none of them."""
    left = list(items)
    while left:
        try:
            _compiles_with(dict(left))
            return tuple(left)
        except Exception as e:  # noqa: BLE001 - "No such compile option: 'name'"
            named = [kv for kv in left if f"'{kv[0]}'" in str(e)]
            if len(named) != 1:
                return tuple(kv for kv in left if _known_option(*kv))
            left.remove(named[0])
    return ()


def cpu_options(options: dict) -> dict:
    """``options`` without those this version of XLA does not accept."""
    return dict(_accepted(tuple(options.items())))


def on_cpu(options: dict) -> Optional[dict]:
    """``options`` (:func:`cpu_options`) where the course meshes are emulated on CPU; None (as
    XLA would compile) on an accelerator."""
    return cpu_options(options) if platform() == "cpu" else None


class Run(Protocol):
    """How a reader runs a program it made (an instrumented copy): ``run(fn, args)`` is
    ``fn``'s outputs on ``args``; ``run.all(fn, arg_sets)`` compiles ``fn`` once and gives its
    outputs on each set of ``arg_sets`` (all of one signature)."""

    def __call__(self, fn: Callable, args: Sequence) -> Any: ...

    def all(self, fn: Callable, arg_sets: Sequence[Sequence]) -> list: ...


@dataclass(frozen=True, eq=False)
class Runner:
    """The :class:`Run` of programs that are read and run once, never timed (the instrumented
    counting copies): compiled with ``cpu``'s options on CPU, as XLA would elsewhere."""

    cpu: dict

    def __call__(self, fn: Callable, args: Sequence) -> Any:
        from . import devices

        lowered = devices.lower(fn, *args)
        return lowered.compile(on_cpu(self.cpu))(*args)

    def all(self, fn: Callable, arg_sets: Sequence[Sequence]) -> list:
        """``fn`` compiled once (on the first set's shapes) and run on each set of ``arg_sets``
        (all of one signature): its outputs per set."""
        from . import devices

        compiled = devices.lower(fn, *arg_sets[0]).compile(on_cpu(self.cpu))
        return [compiled(*args) for args in arg_sets]


def runner(cpu: dict) -> Runner:
    """The :class:`Runner` compiling with ``cpu``'s options on CPU."""
    return Runner(cpu)
