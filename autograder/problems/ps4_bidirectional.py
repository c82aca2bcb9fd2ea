"""Registry entries for ps4_bidirectional: the collective matmuls on both ring directions
(Problem 4)."""
from __future__ import annotations

from jax.sharding import PartitionSpec as P

from ..references import ps4_bidirectional as ref
from ..registry import Problem, register
from ..rules_ring import ring_rule
from .ps3_collective_matmul import SPEED, matmul_baseline

ASSIGNMENT = "ps4_bidirectional"

register(Problem(
    name="matmul_allgather_bidirectional",
    assignment=ASSIGNMENT,
    points=5,
    statement="matmul_allgather with both ring directions: about half of A's data travels "
              "with shift +1 and half with shift -1 (ppermute), each piece multiplied as it "
              "arrives.",
    arg_names=("A", "W"),
    in_specs=(P("X", "Y"), P(None, "Y")),
    out_spec=P("X", "Y"),
    make_case=ref.allgather_case,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allgather", bidirectional=True),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=SPEED["allgather"],
))

register(Problem(
    name="matmul_allreduce_bidirectional",
    assignment=ASSIGNMENT,
    points=5,
    statement="matmul_allreduce with both ring directions: reduce and share the output tiles "
              "with ppermutes of shift +1 and -1, about half of the data each way (psum has no "
              "direction, so it is not used here).",
    arg_names=("A", "W"),
    in_specs=(P("X", "Y"), P("Y", None)),
    out_spec=P("X", None),
    make_case=ref.allreduce_case,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allreduce", bidirectional=True),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=SPEED["allreduce"],
))

register(Problem(
    name="matmul_reducescatter_bidirectional",
    assignment=ASSIGNMENT,
    points=5,
    statement="matmul_reducescatter with both ring directions: output-block partial sums "
              "travel both ways (shift +1 and -1), about half each way, Y-1 blocks sent per "
              "device in all.",
    arg_names=("T", "W2"),
    in_specs=(P("X", "Y"), P("Y", None)),
    out_spec=P("X", "Y"),
    make_case=ref.reducescatter_case,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("reducescatter", bidirectional=True),),
    edge_cases=ref.reducescatter_edge_cases,
    speed_threshold=SPEED["reducescatter"],
))
