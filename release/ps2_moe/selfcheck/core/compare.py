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


#: elements compared at once by :func:`_close` (its float64 temporaries stay in cache; so do the
#: float32 ones of the first pass, whose whole-output copies a judge's memory bound would feel)
CHUNK = 1 << 16

#: outputs of at least this many float32 values take :func:`_close`'s float32 first pass
FAST_MIN = 1 << 16

#: the float32 pass's relative margin on the tolerance (see :func:`_close_f32`)
_MARGIN = 2.0 ** -20
#: below this, a float32 tolerance is not trusted (its rounding is absolute, not relative, there)
_FLOOR = np.float32(2.0 ** -100)
#: a denormal float32: subtracting zero leaves it unless the FPU flushes denormals to zero
_DENORMAL = np.array([2.0 ** -149], np.float32)


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> bool:
    """Whether :func:`compare_values` finds nothing wrong (same shapes assumed): every ``got``
    finite and ``|got - want| <= atol * scale + rtol * |want|`` in float64, with ``scale =
    max(1, max |want|)``; a NaN in ``want`` fails. Decided a chunk at a time (a big output's
    float64 copies are never made whole, which on freshly allocated arrays of millions of values
    costs far more than the arithmetic); big float32 outputs first in float32, with a margin
    (:func:`_close_f32`). Same rule, same result, whichever way."""
    g, w = got.reshape(-1), want.reshape(-1)
    if (g.dtype == np.float32 and w.dtype == np.float32 and g.size >= FAST_MIN
            and all(isinstance(x, (int, float)) for x in (rtol, atol))):
        return _close_f32(g, w, rtol, atol)
    return _close_exact(g, w, rtol, atol)


def _close_exact(g: np.ndarray, w: np.ndarray, rtol: float, atol: float) -> bool:
    """:func:`_close`'s rule in float64, on flat arrays."""
    scale = 1.0
    for i in range(0, w.size, CHUNK):
        m = float(np.max(np.abs(w[i:i + CHUNK].astype(np.float64))))
        if m != m:  # a NaN in the reference: the whole comparison decides (it fails)
            return False
        scale = max(scale, m)
    return _within(g, w, scale, rtol, atol)


def _within(g: np.ndarray, w: np.ndarray, scale: float, rtol: float, atol: float) -> bool:
    """Every ``g`` finite and within ``atol * scale + rtol * |w|`` of ``w``, in float64."""
    for i in range(0, g.size, CHUNK):
        gi = g[i:i + CHUNK].astype(np.float64)
        wi = w[i:i + CHUNK].astype(np.float64)
        if not (np.all(np.isfinite(gi)) and np.all(np.abs(gi - wi) <= atol * scale
                                                     + rtol * np.abs(wi))):
            return False
    return True


def _f32_at_most(x: float) -> np.float32:
    """A float32 no greater than ``x`` (a float64 >= 0, at most float32's largest), within one
    float32 step of it."""
    v = np.float32(x)
    return np.nextafter(v, np.float32(0)) if float(v) > x else v


def _close_f32(g: np.ndarray, w: np.ndarray, rtol: float, atol: float) -> bool:
    """:func:`_close` for flat float32 arrays: a chunk whose every value is certainly within the
    tolerance, decided in float32, passes; any other chunk is decided by :func:`_within` (the
    float64 rule), so the result is the rule's. About ten times faster on outputs that pass.

    Why a float32 pass means the float64 rule passes. Write A = atol, R = rtol (float64, >= 0),
    S = scale, W and G the float32 values (exact reals), D = |G - W| and T = A*S + R*|W| (exact
    reals), u = 2**-53, e = 2**-24, and m = 2**-21. The rule computes D64 = fl64(|G - W|) and
    T64 = fl64(fl64(A*S) + fl64(R*|W|)); the pass computes, in float32,
    d = fl32(|G - W|) and t = fl32(a + fl32(r*|W|)), with a <= (1 - m)*A*S and r <= (1 - m)*R
    (below), and accepts a value when d <= t and (t >= F = 2**-100 or d == 0).

    * d == 0: then G == W (a nonzero difference of float32 values is at least 2**-149, and
      float32 has denormals, checked below), so D64 = 0 <= T64 (A, R >= 0, S finite).
    * Else: a difference of float32 values is a multiple of 2**-149, exact when it is
      denormal, so d = D*(1 + x) with |x| <= e, and D64 <= D*(1 + u) (float64 never underflows
      here): D64 <= d*(1 + u)/(1 - e). Rounding to nearest in float32 gives fl32(r*|W|) <=
      r*|W|*(1 + e) + 2**-150 (2**-150: a denormal product's absolute error) and the sum of two
      floats >= 0 at most (1 + e) times the exact sum (exact when denormal); no overflow (a <=
      2**126 and r <= 1/2 below keep t < 2**127 * 3/2). So t <= (1 - m)*T*(1 + e)**2 +
      2**-149, and t >= F makes 2**-149 <= 2**-49 * t: t <= (1 - m)*(1 + e)**2 * T / (1 -
      2**-49). Hence D64 <= T * (1 - m)*(1 + e)**2*(1 + u) / ((1 - e)*(1 - 2**-49)) <
      T * (1 - 5*e + 2**-40) < T * (1 - 2**-22). On the other side each of T64's three
      roundings to nearest loses at most a factor (1 - u) or an absolute 2**-1075, and T >= t/2 >=
      2**-101, so T64 >= T*(1 - u)**2 - 3*2**-1075 > T*(1 - 2**-51) > D64.
    * d finite (it is <= t) with W finite makes G finite; a NaN or inf in got, or an overflow
      of G - W to inf, is never accepted, so falls to the float64 rule.

    a and r: a float32 at most fl64(fl64(A*S)*(1 - 2**-20)), resp. fl64(R*(1 - 2**-20)),
    which is at most (1 - 2**-20)*(1 + u)**2 times A*S (resp. R), so under (1 - m) times it;
    when a > 0 it is >= 2**-149, so A*S is far above float64's denormals and those roundings are
    relative. Lowering a or r only makes the pass stricter, so both are capped (2**126, 1/2) to
    keep t finite. When a >= F, t >= a >= F always (rounding is monotone), so only tolerances
    under F need the test of t. The whole argument needs float32 denormals (gradual
    underflow): where the FPU flushes them to zero (a library built with -ffast-math can set
    that), the float64 rule decides alone.
    """
    hi, lo = w.max(), w.min()
    if hi != hi or lo != lo:  # a NaN in the reference (max and min propagate it): fails
        return False
    scale = max(1.0, float(hi), -float(lo))  # max |w|, exact: as the float64 rule finds it
    try:
        A, R = float(atol), float(rtol)
    except OverflowError:
        A = R = -1.0
    if not (np.isfinite(scale) and 0.0 <= A < np.inf and 0.0 <= R < np.inf
            and np.subtract(_DENORMAL, np.float32(0))[0] != 0):
        return _within(g, w, scale, rtol, atol)
    a = _f32_at_most(min(A * scale * (1.0 - _MARGIN), 2.0 ** 126))
    r = _f32_at_most(min(R * (1.0 - _MARGIN), 0.5))
    d = np.empty(min(CHUNK, g.size), np.float32)
    t = np.empty_like(d)
    ok = np.empty(d.size, bool)
    for i in range(0, g.size, CHUNK):
        gi, wi = g[i:i + CHUNK], w[i:i + CHUNK]
        n = gi.size
        di, ti, oki = d[:n], t[:n], ok[:n]
        np.subtract(gi, wi, out=di)
        np.abs(di, out=di)
        np.abs(wi, out=ti)
        np.multiply(ti, r, out=ti)
        np.add(ti, a, out=ti)
        np.less_equal(di, ti, out=oki)
        if a < _FLOOR:  # a tolerance that small: t < F is no proof unless d == 0
            oki &= (ti >= _FLOOR) | (di == 0)
        if not oki.all() and not _within(gi, wi, scale, rtol, atol):
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
