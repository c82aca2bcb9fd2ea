"""Reading a per-device HLO module and flattening it into a list of array operations.

The text is the module XLA dumps right after SPMD partitioning: one device's program, with the
collectives the student wrote (shard_map) or GSPMD inserted (jit), before any backend pass merges
collectives or makes them asynchronous. :func:`flatten` executes it for one device: scalar
arithmetic that needs no array data is evaluated exactly as XLA does it (:mod:`.scalars`), so loop
trip counts, branch indices and ``axis_index`` arithmetic are what the hardware computes; loops
are unrolled, calls inlined, and every operation that touches an array becomes a :class:`Node`
that depends on the nodes that produced its operands.

What cannot be known is never guessed. A loop whose condition reads array data raises
:class:`DataDependentLoop` (its count is then taken from a run, see :mod:`.loops`). A branch
chosen by array data is costed as if every branch ran, one after another: an upper bound, said
in :attr:`Flattener.bounds`. A control decision that reads the device's own position marks the
program :attr:`Flattener.device_dependent`, and the model then flattens every device.
"""
from __future__ import annotations

from typing import Any, Optional

from .hlo_sources import mark_sources, source_of, source_table
from .hlo_text import (BYTES, Computation, Instr, ModelError, Shape, device_groups,
                       dtype_bytes, parse_module, parse_type, source_target_pairs, split_top)
from .hlo_walk import (ALIAS_OPS, COLLECTIVES, MAX_EVALUATED, MAX_NODES, Budget,
                       DataDependentLoop, Flattener, Leaf, Node, RunDisagrees, Unpriceable,
                       run_device, simple_indexing)

__all__ = ["ALIAS_OPS", "BYTES", "COLLECTIVES", "MAX_EVALUATED", "MAX_NODES", "Budget",
           "Computation", "DataDependentLoop", "Flattener", "Instr", "Leaf", "ModelError", "Node",
           "RunDisagrees", "Shape", "Unpriceable", "device_groups", "dtype_bytes", "flatten",
           "mark_sources", "parse_module", "parse_type", "run_device", "simple_indexing",
           "source_of", "source_table", "source_target_pairs", "split_top"]


def flatten(text: str, device: int = 0,
            max_nodes: Optional[int] = None) -> tuple[list[Node], Any]:
    """Parse ``text`` and return (nodes, output value) of ``device``'s program, each node with
    the source line it was traced from where the module says (:attr:`Node.source`)."""
    comps, entry = parse_module(text)
    fl = run_device(comps, entry, device, max_nodes)
    mark_sources(fl.nodes, source_table(text))
    return fl.nodes, fl.out
