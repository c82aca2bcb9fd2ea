"""ps3_collective_matmul: matmuls whose communication overlaps the compute. Pure NumPy.

Shapes: every per-device dimension is even, so answers that split a chunk in two (for instance
to send half of it each way round the ring) always divide evenly.
"""
import numpy as np


def _dims(rng, x, y, size):
    """(b, d, f): per-device rows of the batch, and per-Y-shard widths of D and F."""
    if size == "speed_bidirectional":
        # ps4's speed shape (global B=D=F=1024): each ring step's transfer outlasts its partial
        # matmul on a v5e, so sending half of every step each way shows in the time.
        return 1024 // x, 1024 // y, 1024 // y
    if size == "small":
        return 2, 2 * int(rng.integers(1, 3)), 2
    if size == "grade":
        return tuple(2 * int(v) for v in rng.integers(1, 4, size=3))
    # speed / memory: a realistic layer on the speed layout (global B=1024, D=1024, F=4096)
    return 1024 // x, 1024 // y, 4096 // y


def _normal(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def allgather_case(rng, x, y, size):
    """A[B, D] (P('X','Y')), W[D, F] (P(None,'Y'))."""
    b, d, f = _dims(rng, x, y, size)
    return _normal(rng, (x * b, y * d)), _normal(rng, (y * d, y * f), 1 / np.sqrt(y * d))


def allreduce_case(rng, x, y, size):
    """A[B, D] (P('X','Y')), W[D, F] (P('Y', None))."""
    return allgather_case(rng, x, y, size)


def reducescatter_case(rng, x, y, size):
    """T[B, F] (P('X','Y')), W2[F, D] (P('Y', None))."""
    b, d, f = _dims(rng, x, y, size)
    return _normal(rng, (x * b, y * f)), _normal(rng, (y * f, y * d), 1 / np.sqrt(y * f))


def mlp_case(rng, x, y, size):
    """In[B, D] (P('X','Y')), Win[D, F] (P(None,'Y')), Wout[F, D] (P('Y', None))."""
    b, d, f = _dims(rng, x, y, size)
    return (_normal(rng, (x * b, y * d)), _normal(rng, (y * d, y * f), 1 / np.sqrt(y * d)),
            _normal(rng, (y * f, y * d), 1 / np.sqrt(y * f)))


def _mm(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)


def matmul_reference(args, x, y):
    """A @ W (serves the all-gather, all-reduce and reduce-scatter variants alike)."""
    a, w = args
    return _mm(a, w)


def mlp_reference(args, x, y):
    inp, w_in, w_out = args
    hidden = np.maximum(inp.astype(np.float64) @ w_in.astype(np.float64), 0.0)
    return (hidden @ w_out.astype(np.float64)).astype(np.float32)


def _smallest(rng, x, y, n_args):
    """The smallest even per-device shapes, and a lopsided one (wide D, narrow F)."""
    out = []
    for b, d, f in ((2, 2, 2), (2, 6, 2)):
        a = _normal(rng, (x * b, y * d))
        w_in = _normal(rng, (y * d, y * f))
        if n_args == 2:
            out.append((a, w_in))
        else:
            out.append((a, w_in, _normal(rng, (y * f, y * d))))
    return out


def matmul_edge_cases(rng, x, y):
    return _smallest(rng, x, y, 2)


def reducescatter_edge_cases(rng, x, y):
    return [(_normal(rng, (x * b, y * f)), _normal(rng, (y * f, y * d)))
            for b, d, f in ((2, 2, 2), (2, 2, 6))]


def mlp_edge_cases(rng, x, y):
    return _smallest(rng, x, y, 3)


def bidirectional(make_case):
    """``make_case`` with ps4's communication-bound speed shape in place of ps3's."""
    def case(rng, x, y, size):
        return make_case(rng, x, y, "speed_bidirectional" if size == "speed" else size)

    case.__name__ = f"{make_case.__name__}_bidirectional"
    case.__qualname__ = case.__name__
    return case


allgather_case_bidirectional = bidirectional(allgather_case)
allreduce_case_bidirectional = bidirectional(allreduce_case)
reducescatter_case_bidirectional = bidirectional(reducescatter_case)


# --- Which ring step is wrong -------------------------------------------------------------------
# A wrong numerics result of a ring, told in the ring's own steps. Output block y (device Y=y)
# is a sum of products, one per ring step; a wrong index pairs a piece of one input with the
# wrong piece of the other at some steps. Each function below rebuilds, from a public case's
# inputs, the products a ring could have added and finds the fewest wrong pairings (or missing
# products) whose sum is the output: a few single or paired mistakes, or one index rule off
# in the same way at every step (an index written as me - step where me + step was meant, a
# block index one ahead). It says nothing where no such story fits the values exactly. Steps are
# counted as the notebooks' rings count them. Only ever called on public inputs: the sentence
# names steps, blocks and devices, never values.


def _fits(resid, delta, tol):
    return bool(np.all(np.abs(resid - delta) <= tol))


def _explain_block(resid, tol, streams, n):
    """The smallest set of wrong pairings explaining ``resid`` (output minus reference, one
    device's block): ``streams`` is a list of (pieces, correct, term) with ``term(k, m)`` the
    product piece ``k`` adds when paired with ``m`` (None: not added) and ``correct(k)`` the
    right ``m``. Returns [(stream, k, m)] or None."""
    table = [{(k, m): term(k, m) for k in pieces for m in range(n)}
             for pieces, correct, term in streams]
    streams = [(pieces, correct, lambda k, m, t=t: t[k, m])
               for (pieces, correct, _), t in zip(streams, table)]
    deltas = []  # (stream, k, m, term(k, m) - term(k, correct(k)))
    for si, (pieces, correct, term) in enumerate(streams):
        for k in pieces:
            right = term(k, correct(k))
            for m in list(range(n)) + [None]:
                if m != correct(k):
                    deltas.append((si, k, m, (0.0 if m is None else term(k, m)) - right))
    for d in deltas:
        if _fits(resid, d[3], tol):
            return [d[:3]]
    for i, d in enumerate(deltas):
        for e in deltas[i + 1:]:
            if (d[0], d[1]) != (e[0], e[1]) and _fits(resid, d[3] + e[3], tol):
                return [d[:3], e[:3]]
    # one index rule, off alike at every step: m = a*k + c (mod n), per stream
    rules = []
    for pieces, correct, term in streams:
        options = [{}]  # this stream right
        for a in (0, 1, -1, 2):
            for c in range(n):
                wrong = {k: (a * k + c) % n for k in pieces if (a * k + c) % n != correct(k)}
                if wrong and wrong not in options:
                    options.append(wrong)
        rules.append(options)
    best = None
    for combo in _product(rules):
        if not any(combo):
            continue
        total, story = 0.0, []
        for si, wrong in enumerate(combo):
            pieces, correct, term = streams[si]
            for k, m in wrong.items():
                total = total + term(k, m) - term(k, correct(k))
                story.append((si, k, m))
        if _fits(resid, total, tol) and (best is None or len(story) < len(best)):
            best = story
    return best


def _product(options):
    if not options:
        yield ()
        return
    for first in options[0]:
        for rest in _product(options[1:]):
            yield (first,) + rest


#: how many wrong steps a sentence names on one device
STEPS_NAMED = 3


def _steps_sentence(stories, n, convention):
    """'; by ring step (...): ...' from {device: [(step, text)]}, or ''. Where the same steps
    are wrong on every wrong device, one device's are spelt out."""
    if not stories:
        return ""
    devices = sorted(stories)
    per = {y: sorted(stories[y]) for y in devices}

    def listed(y):
        said = [f"step {s} {t}" for s, t in per[y]]
        more = len(said) - STEPS_NAMED
        return ", ".join(said[:STEPS_NAMED]) + (f" and {more} more" if more > 0 else "")

    steps = {tuple(s for s, _ in per[y]) for y in devices}
    if len(steps) == 1 and len(devices) > 1:
        which = [s for s, _ in per[devices[0]]]
        every = "every device" if len(devices) == n else f"{len(devices)} devices"
        head = (f"{'every step' if len(which) == n else 'step' + 's' * (len(which) > 1)}"
                f"{'' if len(which) == n else ' ' + _and(which)} "
                f"{'is' if len(which) in (1, n) else 'are'} wrong on {every}, "
                f"on Y={devices[0]}: {listed(devices[0])}")
        return f"; by ring step ({convention}): {head}"
    shown = [f"on Y={y}: {listed(y)}" for y in devices[:2]]
    more = f"; and {len(devices) - 2} more devices" if len(devices) > 2 else ""
    return f"; by ring step ({convention}): {'; '.join(shown)}{more}"


def _and(items):
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _ring_steps(got, want, rtol, atol, n, cols, streams_for, describe, convention):
    """Shared body: ``cols(y)`` the output columns of device y's block (or a list of column
    slices, one per separately summed part), ``streams_for(y, part)`` its streams,
    ``describe(y, part, stream, k, m)`` -> (step, text)."""
    g = np.asarray(got, np.float64)
    w = np.asarray(want, np.float64)
    if g.shape != w.shape or n < 2:
        return ""
    scale = max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
    stories = {}
    for y in range(n):
        said = []
        for part, sl in enumerate(cols(y)):
            resid = g[:, sl] - w[:, sl]
            tol = atol * scale + rtol * np.abs(w[:, sl])
            if np.all(np.abs(resid) <= tol):
                continue
            found = _explain_block(resid, tol, streams_for(y, part), n)
            if found is None:
                return ""  # a story for some devices only would mislead
            said += [describe(y, part, si, k, m) for si, k, m in found]
        if said:
            stories[y] = said
    return _steps_sentence(stories, n, convention)


def _mm64(a, b):
    return np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def allgather_steps(args, got, want, x, y, rtol, atol, *, halves=False):
    """Which steps of an all-gather ring (A's blocks moving j -> j-1, so device d holds A's
    block d+s at step s; with ``halves``, ps4's: left halves so, right halves j -> j+1) pair a
    block of A with the wrong rows of W, or leave one out. '' where no such story fits."""
    a, w = (np.asarray(v, np.float64) for v in args[:2])
    n = y
    d, f = a.shape[1] // n, w.shape[1] // n
    if d * n != a.shape[1] or f * n != w.shape[1] or (halves and d % 2):
        return ""
    cuts = [(0, d // 2), (d // 2, d)] if halves else [(0, d)]

    def streams_for(dev, part):
        cols = slice(dev * f, (dev + 1) * f)
        out = []
        for lo, hi in cuts:
            def term(k, m, lo=lo, hi=hi):
                return _mm64(a[:, k * d + lo:k * d + hi], w[m * d + lo:m * d + hi, cols])
            out.append((range(n), lambda k: k, term))
        return out

    def describe(dev, part, si, k, m):
        step = (k - dev) % n if si == 0 else (dev - k) % n
        piece = (f"A's block {k}" if not halves
                 else f"the {'left' if si == 0 else 'right'} half of A's block {k}")
        if m is None:
            return step, f"leaves out {piece}"
        return step, f"multiplies {piece} by W's rows of block {m} (not {k})"

    convention = ("A's blocks move j -> j-1, so device d holds A's block d+s at step s"
                  if not halves else "left halves move j -> j-1 and right halves j -> j+1, "
                  "so at step s device d holds the left half of A's block d+s and the right "
                  "half of block d-s")
    return _ring_steps(got, want, rtol, atol, n, lambda dev: [slice(dev * f, (dev + 1) * f)],
                       streams_for, describe, convention)


def reducescatter_steps(args, got, want, x, y, rtol, atol, *, halves=False):
    """Which steps of a reduce-scatter ring (running sums moving j -> j+1, so device i adds
    to block i-1-s at step s; with ``halves``, ps4's: left halves so, right halves turning
    left, device i adding to block i+1+s) add a device's share for the wrong block, or leave
    it out. '' where no such story fits."""
    t, w2 = (np.asarray(v, np.float64) for v in args[:2])
    n = y
    f, d = t.shape[1] // n, w2.shape[1] // n
    if f * n != t.shape[1] or d * n != w2.shape[1] or (halves and d % 2):
        return ""
    cuts = [(0, d // 2), (d // 2, d)] if halves else [(0, d)]

    def cols(dev):
        return [slice(dev * d + lo, dev * d + hi) for lo, hi in cuts]

    def streams_for(dev, part):
        lo, hi = cuts[part]

        def term(k, m):
            return _mm64(t[:, k * f:(k + 1) * f], w2[k * f:(k + 1) * f, m * d + lo:m * d + hi])
        return [(range(n), lambda k: dev, term)]

    def describe(dev, part, si, k, m):
        step = (k - 1 - dev) % n if part == 0 else (dev - 1 - k) % n
        what = "" if not halves else f"'s {'left' if part == 0 else 'right'} half"
        if m is None:
            return step, f"leaves out device Y={k}'s share"
        return step, f"adds device Y={k}'s share of block {m}{what} (not of block {dev})"

    convention = ("running sums move j -> j+1, so device i adds to block i-1-s at step s "
                  "and the sum that ends on Y=k is block k's"
                  if not halves else "left halves' sums move j -> j+1 and right halves' j -> "
                  "j-1, so at step s device i adds to the left half of block i-1-s and the "
                  "right half of block i+1+s")
    return _ring_steps(got, want, rtol, atol, n, cols, streams_for, describe, convention)


def allgather_steps_bidirectional(args, got, want, x, y, rtol, atol):
    return allgather_steps(args, got, want, x, y, rtol, atol, halves=True)


def reducescatter_steps_bidirectional(args, got, want, x, y, rtol, atol):
    return reducescatter_steps(args, got, want, x, y, rtol, atol, halves=True)
