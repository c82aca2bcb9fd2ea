"""Structure rules for the mixture-of-experts routing (ps2_moe): how the tokens reach their
experts. Small pure functions over a traced :class:`~autograder.core.program.Program`, like
:mod:`autograder.course.rules.base`."""
from __future__ import annotations

from ...core.results import failed, passed
from . import base as rules


def input_shapes(prog) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, shape) of the traced function's array arguments (global view), from the
    program's argument list (a jaxpr's binders or a StableHLO module's ``@main``)."""
    return [(dt, tuple(int(d) for d in shape))
            for dt, (shape, _) in zip(prog.arg_dtypes, prog.arg_info)]


def _activation_bytes(prog, mesh):
    """Bytes of the activations A[S, D] gathered over X but still split over Y: S * D/Y * 4."""
    shapes = input_shapes(prog)
    if not shapes or len(shapes[0][1]) != 2:
        return None
    s, d = shapes[0][1]
    return s * (d // mesh.shape["Y"]) * 4


def _gathers_over_x(prog):
    return [o for o in prog.collectives("all_gather", axis="X")]


def gathers_activations_over_x(prog, mesh, problem):
    """moe_allgather: an explicit all_gather over X of the activations."""
    if mesh.shape["X"] == 1:
        return None
    big = _activation_bytes(prog, mesh)
    found = [o for o in _gathers_over_x(prog) if big is None or o.out_bytes * 2 >= big]
    if found:
        return passed("structure", "all-gathers the activations over X")
    return failed("structure", "expected an explicit jax.lax.all_gather of the activations A "
                  "over 'X' (every device then holds every token and applies its own experts); "
                  f"found: {prog.summary()}. " + rules.HOW_TO_LOOK)


def no_activation_gather_over_x(prog, mesh, problem):
    """No all_gather over X that carries activations: [S, D]-sized per call or in total, or
    any row-gather inside a loop whose trip count is unknown."""
    if mesh.shape["X"] == 1:
        return None
    big = _activation_bytes(prog, mesh)
    for o in _gathers_over_x(prog):
        total = o.out_bytes * (o.count or 1)
        rows_in_loop = o.count is None and len(o.out_shapes[0]) >= 2
        if (big is not None and 2 * total >= big) or rows_in_loop:
            shape = list(o.out_shapes[0]) if o.out_shapes else []
            return failed("structure", "tokens must travel to their experts with all_to_all; "
                          "found an all_gather over 'X' producing "
                          f"{shape} ({total / 2**10:.1f} KiB"
                          f"{' per round' if o.count is None else ''}), i.e. the activations "
                          "of other X-groups copied to every device. Send each X-group only "
                          "the tokens routed to its experts. " + rules.HOW_TO_LOOK)
    return passed("structure", "no all-gather of activations over X")


def tokens_travel_all_to_all(prog, mesh, problem):
    if mesh.shape["X"] == 1:
        return None
    if prog.collectives("all_to_all", axis="X"):
        return passed("structure", "tokens travel with all_to_all over X")
    return failed("structure", "expected the tokens to travel to the X-group owning their "
                  f"expert with jax.lax.all_to_all over 'X'; found: {prog.summary()}. "
                  + rules.HOW_TO_LOOK)
