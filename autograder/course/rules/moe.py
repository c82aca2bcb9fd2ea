"""Structure rules for the mixture-of-experts routing (ps2_moe): how the tokens reach their
experts. Small pure functions over a traced :class:`~autograder.core.program.Program`, each a
:class:`~autograder.course.rules.base.Rule`, like :mod:`autograder.course.rules.base`'s."""
from __future__ import annotations

import numpy as np

from ...core.results import failed, passed
from ..added import added_by_xla
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


@rules.structure_rule
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


def _group(o, mesh) -> int:
    """How many devices a collective spans (unknown axes: the whole mesh)."""
    if "?" in o.axes:
        return int(mesh.devices.size)
    n = 1
    for ax in o.axes:
        n *= int(mesh.shape[ax]) if ax in mesh.shape else 1
    return n


def delivered_bytes(o, mesh) -> float:
    """Bytes one run of collective ``o`` brings a device from the other devices of its group:
    what it carries, by kind, not by name (a psum that sums one-hot copies of the tokens
    delivers all of them, as an all_gather would)."""
    n = _group(o, mesh)
    others = (n - 1) / n if n > 1 else 0.0
    if o.kind == "all_gather":
        return o.out_bytes * others
    if o.kind in ("all_to_all", "ragged_all_to_all"):
        return o.in_bytes * others
    if o.kind == "psum_scatter":
        return float(o.out_bytes) if n > 1 else 0.0
    return float(o.in_bytes) if n > 1 else 0.0  # psum, pmax, pmin, ppermute: all of it


def _over_x(o) -> bool:
    return "X" in o.axes or "?" in o.axes


@rules.structure_rule
def no_activation_gather_over_x(prog, mesh, problem):
    """No collective over X but the all_to_all exchange brings a device other groups' tokens in
    bulk: the bytes all of them deliver (loops multiplied out) stay under half of the
    activations, and none of them moves row blocks an unknown number of times."""
    if mesh.shape["X"] == 1:
        return None
    big = _activation_bytes(prog, mesh)
    others = [o for o in prog.collectives() if _over_x(o) and o.count != 0
              and o.kind not in ("all_to_all", "ragged_all_to_all")]
    # and what XLA adds over X (at the shard_map's boundary, in global-view code around it),
    # an all-to-all too: only the program's own exchange is the exchange
    others += [o for o in added_by_xla(prog, mesh) if "X" in o.axes]
    total = sum(delivered_bytes(o, mesh) * o.runs for o in others)
    rows_in_loop = [o for o in others if o.count is None and o.out_shapes
                    and len(o.out_shapes[0]) >= 2]
    if (big is not None and 2 * total >= big) or rows_in_loop:
        # a count the data decided is secret on a secret case: then neither the total nor
        # which op delivers most (both multiply counts out) is quoted
        secret = any(o.data_counted for o in prog.collectives()
                     if _over_x(o) and o.kind not in ("all_to_all", "ragged_all_to_all"))
        worst = max(others, key=lambda o: delivered_bytes(o, mesh) * (1 if secret else o.runs))
        shape = list(worst.out_shapes[0]) if worst.out_shapes else []
        added = f", {worst.prim}" if "added by XLA" in worst.prim else ""
        amount = ("to each device at least half as much as the activations of other X-groups "
                  "copied to it (counting the collectives in loops and branches as often as "
                  "the data made them run)" if secret else
                  f"{total / 2**10:.1f} KiB to each device, as much as the activations of "
                  f"other X-groups copied to it")
        return failed("structure", "tokens must travel to their experts with all_to_all; "
                      f"collectives over 'X' other than all_to_all deliver {amount} "
                      f"(the largest{' per run' if secret else ''}: {worst.kind} over 'X' "
                      f"producing {shape}, {worst.times()}{added}). Send each X-group only the "
                      "tokens routed to its experts, with shard_map's in_specs matching the "
                      "arguments' shardings. " + rules.HOW_TO_LOOK)
    return passed("structure", "no gather of activations over X")


def routed_away_bytes(prog, mesh):
    """The most bytes of activations any device must send to other X-groups on the program's
    input: its tokens (each choice, for top-k) whose expert another group owns, times the
    device's [D/Y] slice of a row. None without the input."""
    if prog.inputs is None or len(prog.inputs) < 3:
        return None
    a, b, w = (np.asarray(v) for v in prog.inputs[:3])
    nx, ny = int(mesh.shape["X"]), int(mesh.shape["Y"])
    if a.ndim != 2 or w.ndim < 1 or w.shape[0] % nx or a.shape[0] % nx:
        return None
    owner = b.reshape(b.shape[0], -1) // (w.shape[0] // nx)  # [S, k]
    group = (np.arange(a.shape[0]) // (a.shape[0] // nx))[:, None]
    away = max(int(np.sum(owner[group[:, 0] == g] != g)) for g in range(nx))
    return away * (a.shape[1] // ny) * a.dtype.itemsize


@rules.structure_rule
def tokens_travel_all_to_all(prog, mesh, problem):
    """The tokens routed to other X-groups travel by all_to_all over X: its runs deliver at
    least half of their bytes (the measured runs, on the input the program was read on)."""
    if mesh.shape["X"] == 1:
        return None
    a2a = [o for o in prog.collectives() if _over_x(o) and o.count != 0
           and o.kind in ("all_to_all", "ragged_all_to_all")]
    if not a2a:
        return failed("structure", "expected the tokens to travel to the X-group owning their "
                      f"expert with jax.lax.all_to_all over 'X'; found: {prog.summary()}. "
                      + rules.HOW_TO_LOOK)
    need = routed_away_bytes(prog, mesh)
    if need is None:
        return passed("structure", "tokens travel with all_to_all over X (its bytes not "
                      "weighed: the input is not known here)")
    got = sum(delivered_bytes(o, mesh) * o.runs for o in a2a)
    if 2 * got < need:
        # how many tokens are routed away is the input's routing, secret on a secret case:
        # the message says how the two compare, and quotes what the all_to_alls deliver only
        # where the program fixes their counts
        delivered = ("" if any(o.data_counted for o in prog.collectives()
                               if o.kind in ("all_to_all", "ragged_all_to_all"))
                     else f" {got / 2**10:.1f} KiB,")
        return failed("structure", f"the tokens routed to other X-groups must travel with "
                      f"all_to_all: on the grading input its all_to_alls deliver only"
                      f"{delivered} less than half of the activations a device sends to other groups "
                      f"(the tokens whose expert another X-group owns, each a [D/Y] slice of a "
                      f"row) ({prog.summary()}). " + rules.HOW_TO_LOOK)
    return passed("structure", "tokens travel with all_to_all over X")


def unrouted_perturbations(inputs, mesh_shape) -> list[tuple[tuple[int, ...], dict]]:
    """The inputs that must not change what X-group g receives by all_to_all, one per group g
    that has such tokens: ``(g's device ids (row-major over (X, Y)), {0: A'})``, A' being A with
    the rows of every token that lives outside g and has none of its k choices among g's
    experts drawn afresh (a generator seeded from the case). An exchange that sends each group
    only the tokens routed to it delivers g the same bits on A' as on A."""
    import zlib

    a, b, w = (np.asarray(v) for v in inputs[:3])
    nx, ny = (int(s) for s in mesh_shape)
    s = a.shape[0]
    if nx == 1 or a.ndim != 2 or s % nx or w.shape[0] % nx:
        return []
    owner = b.reshape(s, -1) // (w.shape[0] // nx)  # [S, k] the X-group of each choice
    home = np.arange(s) // (s // nx)
    rng = np.random.default_rng(zlib.crc32(a.tobytes() + b.tobytes()))
    out = []
    for g in range(nx):
        away = (home != g) & ~np.any(owner == g, axis=1)
        if not away.any():
            continue
        a2 = a.copy()
        a2[away] = rng.standard_normal((int(away.sum()), a.shape[1])).astype(a.dtype)
        out.append((tuple(range(g * ny, (g + 1) * ny)), {0: a2}))
    return out


# the reader measures, for this rule, what each group receives on the perturbed inputs
@rules.structure_rule(reads={rules.RECEIVED_CHANGED}, perturbations=unrouted_perturbations)
def all_to_all_carries_only_routed_tokens(prog, mesh, problem):
    """Each X-group receives by all_to_all only what its own tokens and the tokens routed to its
    experts decide: the reader ran the program again with the rows of every other token drawn
    afresh (:func:`unrouted_perturbations`), and no device of the group received different
    bits from any all_to_all (``prog.received_changed``, set where the reader measured it).

    It fails the all-gather in all_to_all's clothing (tests/fixtures/attacks/moe_a2a_gather.py)
    and holds for every honest exchange of the course's tests that zeroes its padding; an
    exchange that leaves copies of other rows in its unused slots (an index clipped to the last
    token) sends groups tokens they do not need too, so the statement asks for zeroed padding.
    Read on the numerics cases only (the memory and speed cases are held by bytes)."""
    if mesh.shape["X"] == 1 or prog.received_changed is None:
        return None
    if prog.received_changed:
        return failed("structure", "each X-group must receive by all_to_all only the tokens "
                      "routed to its experts (and what its own tokens decide); but when the "
                      "grader changed the activations of tokens that neither live in some "
                      "X-group nor are routed to its experts, what that group's devices "
                      "received from an all_to_all changed: the exchange sends groups tokens "
                      "they do not need (as an all-gather would). Send each group only the "
                      "rows of the tokens routed to it, and fill the unused slots of a chunk "
                      "with zeros (not with copies of other rows). " + rules.HOW_TO_LOOK)
    return passed("structure", "all_to_all delivers each X-group only its routed tokens")
