"""Registry entries for ps4_bidirectional: the collective matmuls on both ring directions
(Problem 4)."""
from __future__ import annotations

from jax.sharding import PartitionSpec as P

from ...core.problem import Problem
from ..baselines.ps3_collective_matmul import matmul_baseline
from ..references import (
    ps3_collective_matmul as ref,  # same inputs and references as ps3
)
from ..rules.ring import ring_rule
from . import register

ASSIGNMENT = "ps4_bidirectional"

#: Timed at ps4's own speed shape (global B=D=F=1024, references module): there every ring step's
#: transfer outlasts its partial matmul on a v5e, so a ring that uses one direction of each link
#: is bound by its transfers and one that uses both is not. Each limit sits between the two-way
#: rings written for the tests and the ps3 one-way ring handed in here (modeled ratios to jit at
#: mesh 2x4, one MXU pass at the fitted 0.58 of the bf16 peak), a limit per kind because their
#: spreads differ: an all-gather two-way 0.60-0.66, one-way 0.95; an all-reduce two-way
#: 0.66-0.70, 0.77 with whole tiles half way round each side (the longer side one hop longer),
#: one-way 1.26; a reduce-scatter two-way 0.67-0.75, one-way 1.06 (and two-way rings that send
#: one block too many, which fail the structure check, 0.88). A real TPU gets room for timing
#: noise.
ALLGATHER_SPEED = {"tpu": 0.85, "tpu_model": 0.8}
ALLREDUCE_SPEED = {"tpu": 0.95, "tpu_model": 0.9}
REDUCESCATTER_SPEED = {"tpu": 0.9, "tpu_model": 0.85}

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
    make_case=ref.allgather_case_bidirectional,
    steps=ref.allgather_steps_bidirectional,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allgather", bidirectional=True),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=ALLGATHER_SPEED,
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
    make_case=ref.allreduce_case_bidirectional,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("allreduce", bidirectional=True),),
    edge_cases=ref.matmul_edge_cases,
    speed_threshold=ALLREDUCE_SPEED,
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
    make_case=ref.reducescatter_case_bidirectional,
    steps=ref.reducescatter_steps_bidirectional,
    reference=ref.matmul_reference,
    baseline=matmul_baseline,
    rules=(ring_rule("reducescatter", bidirectional=True),),
    edge_cases=ref.reducescatter_edge_cases,
    speed_threshold=REDUCESCATTER_SPEED,
))
