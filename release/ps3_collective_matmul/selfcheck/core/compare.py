"""Comparing an answer with the reference: values and layout.

Pure functions of NumPy/JAX values, with messages a student can act on. Used by the grader's
numerics and sharding checks and bundled into each assignment's public self-check.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def describe_spec(spec) -> str:
    return "P(" + ", ".join(repr(s) for s in tuple(spec)) + ")"


def genuine_array(out):
    """Return ``out`` if it is a real jax.Array, else raise TypeError with the type found."""
    import jax

    if isinstance(out, (tuple, list)) and len(out) == 1:
        out = out[0]
    if type(out).__module__.startswith("jax") and isinstance(out, jax.Array):
        return out
    raise TypeError(f"expected a jax.Array, found {type(out).__module__}.{type(out).__name__}")


def compare_values(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, *,
                   names: tuple[str, str] = ("expected", "found"),
                   tiles: Optional[tuple] = None) -> str | None:
    """None if ``got`` matches ``want``; otherwise what differs, in one sentence (``names``: what
    to call ``want`` and ``got`` in it). ``tiles``: ``(spec, {axis: size})``, the output's
    PartitionSpec and the mesh's axis sizes; the sentence then also says which of the blocks
    the spec cuts the output into are wrong, and where a wrong one's values belong (a wrong
    ring index shows as a few wrong blocks, or right blocks on the wrong devices)."""
    if tuple(got.shape) != tuple(want.shape):
        return f"expected shape {tuple(want.shape)}, found {tuple(got.shape)}"
    if got.dtype != want.dtype and not (np.issubdtype(got.dtype, np.floating)
                                         and np.issubdtype(want.dtype, np.floating)):
        return f"expected dtype {want.dtype}, found {got.dtype}"
    if _close(np.asarray(got), np.asarray(want), rtol, atol):
        return None
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if not np.all(np.isfinite(g)):
        bad = int(np.sum(~np.isfinite(g)))
        return f"the output has {bad} NaN/inf value(s) out of {g.size}"
    scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
    err = np.abs(g - w)
    tol = atol * scale + rtol * np.abs(w)
    if np.all(err <= tol):
        return None
    idx = np.unravel_index(int(np.argmax(err - tol)), err.shape)
    nbad = int(np.sum(err > tol))
    where = "" if tiles is None else wrong_blocks(err > tol, *tiles, got=g, want=w,
                                                  tol=(atol * scale, rtol))
    return (f"{nbad} of {g.size} values differ; worst at index {tuple(int(i) for i in idx)}: "
            f"{names[0]} {w[idx]:.6g}, {names[1]} {g[idx]:.6g}{where}")


def secret_difference(got: np.ndarray, want: np.ndarray, rtol: float,
                      atol: float) -> str | None:
    """What :func:`compare_values` finds wrong, said without a value, an index or a count: for
    a case whose inputs come from the grading run's secret seed. The student's program chooses
    its output, so anything read off it there (a value, where the worst one is, how many are
    wrong, the size of the error) could carry a secret input back to its author; what kind of
    wrong it is (a shape, a dtype, NaN, values) is all that is said. None if right."""
    if tuple(got.shape) != tuple(want.shape) or (
            got.dtype != want.dtype and not (np.issubdtype(got.dtype, np.floating)
                                             and np.issubdtype(want.dtype, np.floating))):
        return compare_values(got, want, rtol, atol)  # shapes and dtypes: the program's own
    msg = compare_values(got, want, rtol, atol)
    if msg is None:
        return None
    if not np.all(np.isfinite(np.asarray(got, dtype=np.float64))):
        return "the output holds NaN or inf values"
    return "values differ from the NumPy reference beyond the tolerance"


#: elements compared at once by :func:`_close` (its float64 temporaries stay in cache)
CHUNK = 1 << 16


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether :func:`compare_values` finds nothing wrong (same shapes assumed), decided a chunk
    at a time: a big output's float64 copies are never made whole, which on freshly allocated
    arrays of millions of values costs far more than the arithmetic. Same rule, same result."""
    g, w = got.reshape(-1), want.reshape(-1)
    scale = 1.0
    for i in range(0, w.size, CHUNK):
        m = float(np.max(np.abs(w[i:i + CHUNK].astype(np.float64))))
        if m != m:  # a NaN in the reference: the whole comparison decides (it fails)
            return False
        scale = max(scale, m)
    for i in range(0, g.size, CHUNK):
        gi = g[i:i + CHUNK].astype(np.float64)
        wi = w[i:i + CHUNK].astype(np.float64)
        if not (np.all(np.isfinite(gi)) and np.all(np.abs(gi - wi) <= atol * scale
                                                     + rtol * np.abs(wi))):
            return False
    return True


#: how many wrong blocks a message names
BLOCKS_NAMED = 4


def wrong_blocks(bad: np.ndarray, spec, sizes: dict, got: Optional[np.ndarray] = None,
                 want: Optional[np.ndarray] = None, tol: Optional[tuple] = None) -> str:
    """'; wrong in k of n blocks ...' for the mask ``bad`` of wrong values, with the blocks as
    ``spec`` cuts the output over a mesh of axis ``sizes``, each named by its slice and the
    mesh position that holds it, and, given ``got``, ``want`` and ``tol`` (``(abs, rel)``), the
    other block of the reference whose values a wrong block holds (a ring index off by one puts
    a right block on the wrong device); also when every block is wrong, which then says so
    (one mistake every device makes alike). '' with only one block, or none wrong."""
    entries = list(spec) + [None] * (bad.ndim - len(tuple(spec)))
    parts, names = [], []
    for entry, n in zip(entries, bad.shape, strict=True):
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        k = int(np.prod([sizes.get(a, 1) for a in axes])) if axes else 1
        if k < 1 or n % k:
            return ""
        parts.append(k)
        names.append(axes[0] if len(axes) == 1 else None)
    total = int(np.prod(parts))
    if total <= 1:
        return ""
    blocks = [(block, tuple(slice(b * (n // k), (b + 1) * (n // k))
                            for b, n, k in zip(block, bad.shape, parts, strict=True)))
              for block in np.ndindex(*parts)]
    wrong = [(block, sl) for block, sl in blocks if bad[sl].any()]
    if not wrong:
        return ""

    def named(block, sl) -> str:
        held = ", ".join(f"{a}={b}" for a, b, k in zip(names, block, parts, strict=True)
                         if a is not None and k > 1)
        text = "[" + ", ".join(f"{s.start}:{s.stop}" if k > 1 else ":"
                               for s, k in zip(sl, parts, strict=True)) + "]"
        return f"{text}{f' ({held})' if held else ''}"

    def match(g, sl, piece=Ellipsis):
        """The other block whose ``piece`` of the reference ``g`` equals, or None."""
        for other, osl in blocks:
            w = np.asarray(want[osl], np.float64)[piece]
            if osl != sl and np.all(np.abs(g - w) <= tol[0] + tol[1] * np.abs(w)):
                return other, osl
        return None

    def belongs(sl) -> str:
        """' holds the values of <block>' where the reference has got[sl] elsewhere; else the
        same for each half of its last dimension (the two rings of a two-way ring each carry
        one half of every block)."""
        if got is None or want is None or tol is None:
            return ""
        g = np.asarray(got[sl], np.float64)
        found = match(g, sl)
        if found is not None:
            return f" holds the values of {named(*found)}"
        n = g.shape[-1] if g.ndim else 0
        if n < 2 or n % 2:
            return ""
        said = []
        for name, cut in (("first", slice(0, n // 2)), ("second", slice(n // 2, n))):
            piece = (Ellipsis, cut)
            found = match(g[piece], sl, piece)
            if found is not None:
                said.append(f"its {name} half of columns holds that of {named(*found)}")
            elif not bad[sl][piece].any():
                said.append(f"its {name} half of columns is right")
        return f" ({'; '.join(said)})" if said else ""

    shown = [named(block, sl) + belongs(sl) for block, sl in wrong[:BLOCKS_NAMED]]
    more = f" and {len(wrong) - BLOCKS_NAMED} more" if len(wrong) > BLOCKS_NAMED else ""
    axes = " x ".join(f"{k} along {a}" for a, k in zip(names, parts, strict=True)
                      if a is not None and k > 1)
    if len(wrong) == total:
        if not any(" holds " in s for s in shown):
            return (f"; wrong in every one of the {total} blocks the output spec cuts it into "
                    f"({axes}; each device's block): a mistake every device makes alike, such "
                    "as a wrong block index or ring shift at some step, or the wrong rows of "
                    "a weight")
        return (f"; wrong in every one of the {total} blocks the output spec cuts it into "
                f"({axes}): {', '.join(shown)}{more}")
    return (f"; wrong in {len(wrong)} of the {total} blocks the output spec cuts it into: "
            f"{', '.join(shown)}{more}; the others are right")


def _position(mesh, device) -> str:
    where = np.argwhere(np.vectorize(lambda d: d.id)(mesh.devices) == device.id)
    if not len(where):
        return f"device {device.id}"
    return ", ".join(f"{a}={int(i)}" for a, i in zip(mesh.axis_names, where[0], strict=True))


def _block(index, shape) -> str:
    parts = []
    for sl, n in zip(index, shape, strict=True):
        start, stop, _ = sl.indices(n)
        parts.append(":" if (start, stop) == (0, n) else f"{start}:{stop}")
    return "[" + ", ".join(parts) + "]"


def copies_disagree(out, mesh, rtol: float, atol: float, *, secret: bool = False) -> str | None:
    """None if every device holding a copy of the same block of ``out`` holds the same values
    (within the tolerance); otherwise which copies differ. The host reads one copy of each
    block, so a result replicated over a mesh axis that is right on one device and wrong on the
    others would otherwise pass; with ``check_vma=False`` JAX itself does not check it.
    ``secret``: the inputs come from a secret seed, so neither the block, the devices nor the
    values are named (see :func:`secret_difference`)."""
    groups: dict = {}
    for shard in out.addressable_shards:
        key = tuple(sl.indices(n)[:2] for sl, n in zip(shard.index, out.shape, strict=True))
        groups.setdefault(key, []).append(shard)
    for shards in groups.values():
        first = np.asarray(shards[0].data)
        for other in shards[1:]:
            msg = compare_values(np.asarray(other.data), first, rtol, atol,
                                 names=("first copy", "this copy"))
            if msg is not None and secret:
                return ("the devices holding copies of the same output block disagree (a "
                        "result replicated over a mesh axis must be the same on every device "
                        "along it)")
            if msg is not None:
                return (f"the devices holding copies of the output block "
                        f"{_block(shards[0].index, out.shape)} disagree: the one at "
                        f"{_position(mesh, other.device)} differs from the one at "
                        f"{_position(mesh, shards[0].device)} ({msg}). "
                        "A result replicated over a mesh axis must be the same on every device "
                        "along it (with check_vma=False JAX does not check this); compare the "
                        "pieces of out.addressable_shards")
    return None


def sharding_problem(out, mesh, spec) -> str | None:
    """None if ``out`` is laid out as ``NamedSharding(mesh, spec)``; otherwise what was found."""
    from jax.sharding import NamedSharding

    want = NamedSharding(mesh, spec)
    got = out.sharding
    try:
        if got.is_equivalent_to(want, out.ndim):
            return None
    except Exception:
        pass
    found = getattr(got, "spec", None)
    found_s = describe_spec(found) if found is not None else repr(got)
    return (f"expected the output sharded as {describe_spec(spec)}, found {found_s}. "
            "Look with: print(out.sharding); jax.debug.visualize_array_sharding(out)")


def values_message(differ: Optional[str], copies: Optional[str]) -> Optional[str]:
    """What is wrong with an output: devices holding different copies of one block is said
    first (a missing sharing phase, say), with the host's copy's difference after it."""
    if copies and differ:
        return f"{copies}; the copy the host reads: {differ}"
    return copies or differ
