"""Histograms of every column of a stream of row blocks, mergeable without knowing the range.

Column ``j`` is counted in ``bins`` bins of width ``2**e[j]`` that start at multiples of the
width (bin ``i`` holds ``[(lo[j] + i) * w, (lo[j] + i + 1) * w)``). When a block falls outside
the bins, the width doubles (pairs of bins merge) until everything seen fits: the counts stay
exact, the bins never overlap, and two partial histograms merge exactly (the finer one is
coarsened to the other's width). Every histogram is therefore numpy's
``np.histogram(column, edges)`` for its own edges (:func:`trimmed`). With ``classes`` > 1 the
counts are split by a label per row, shape (U, classes, bins).

A histogram made with ``edges=True`` also counts the values lying exactly on each bin's left
edge, so that :func:`flipped` gives the histogram of the negated column exactly (a value on
an edge belongs to the bin above it, in both orientations, as ``np.histogram`` counts it).
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = ["new_hist", "add_hist", "add_hist_entries", "flipped", "merge_hist", "trimmed"]

#: bins per column while counting (a histogram shows between half and all of them)
BINS = 256
#: values per slab of a block that the per-block statistics loop over (its temporaries fit a core's cache)
SLAB = 1 << 18


def new_hist(n_units: int, classes: int = 1, bins: int = BINS, edges: bool = False):
    """An empty state: ``{"e", "lo", "counts", "set", "edges"}`` (``edges``: None, or the
    counts of values on each bin's left edge, shaped as ``counts``)."""
    return {"e": np.zeros(n_units, np.int64), "lo": np.zeros(n_units, np.int64),
            "counts": np.zeros((n_units, classes, bins), np.int64), "set": np.zeros(n_units, bool),
            "edges": np.zeros((n_units, classes, bins), np.int64) if edges else None}


def _remap(dst, src, lo, d, mn, used):
    """Add bins ``used`` of ``src`` (classes, bins), whose bin i starts at ``(lo + i) * w``, into
    ``dst`` with bins ``2**d`` times wider starting at ``mn * 2**d * w``."""
    np.add.at(dst, (slice(None), ((lo + used) >> d) - mn), src[:, used])


def _remap_edges(dst, src, lo, d, mn, used):
    """As :func:`_remap` for edge counts: only the edges that stay edges (multiples of the new width)."""
    used = used[((lo + used) & ((1 << d) - 1)) == 0]
    np.add.at(dst, (slice(None), ((lo + used) >> d) - mn), src[:, used])


def _occupied(counts_j):
    nz = np.flatnonzero(counts_j.sum(axis=0))
    return (int(nz[0]), int(nz[-1])) if nz.size else None


def _refit(state, j, vmin, vmax, min_e=None):
    """Widen column ``j``'s bins (and move their start) so ``[vmin, vmax]`` and all it holds fit,
    with a width of at least ``2**min_e``."""
    bins = state["counts"].shape[2]
    occ = _occupied(state["counts"][j]) if state["set"][j] else None
    if state["set"][j]:
        e = int(state["e"][j])
    else:
        span = float(vmax) - float(vmin)
        ref = span if span > 0 else (abs(float(vmax)) or 1.0)
        e = int(np.floor(np.log2(ref / (bins // 2)))) if span > 0 else int(np.floor(np.log2(ref))) - 20
    lo = int(state["lo"][j])
    d = 0 if min_e is None or not state["set"][j] else max(0, int(min_e) - e)
    if min_e is not None and not state["set"][j]:
        e = max(e, int(min_e))
    while True:
        w = 2.0 ** (e + d)
        mn, mx = int(np.floor(vmin / w)), int(np.floor(vmax / w))
        if occ is not None:
            mn, mx = min(mn, (lo + occ[0]) >> d), max(mx, (lo + occ[1]) >> d)
        if mx - mn + 1 <= bins:
            break
        d += 1
    new = np.zeros_like(state["counts"][j])
    edges = None if state["edges"] is None else np.zeros_like(new)
    if occ is not None:
        used = np.arange(occ[0], occ[1] + 1)
        _remap(new, state["counts"][j], lo, d, mn, used)
        if edges is not None:
            _remap_edges(edges, state["edges"][j], lo, d, mn, used)
    state["counts"][j], state["e"][j], state["lo"][j], state["set"][j] = new, e + d, mn, True
    if edges is not None:
        state["edges"][j] = edges


def _fit(state, vmin, vmax):
    """Widen the bins of every column whose ``[vmin, vmax]`` (U,) falls outside them."""
    if not (np.isfinite(vmin).all() and np.isfinite(vmax).all()):
        raise ValidationError("the unit activations hold NaN or infinite values; check the store and the basis")
    B = state["counts"].shape[2]
    scale = np.ldexp(1.0, -state["e"])
    ok = state["set"] & (np.floor(vmin * scale) >= state["lo"]) & (np.floor(vmax * scale) < state["lo"] + B)
    for j in np.flatnonzero(~ok):
        _refit(state, j, vmin[j], vmax[j])


def add_hist_entries(state, n, r, u, v, labels=None, extremes=None):
    """Count a mostly-zero block of ``n`` rows from its non-zero entries: block rows ``r``,
    units ``u`` and values ``v`` (m,); the zeros are counted per unit at once. ``labels``:
    the block's (n,) class codes; ``extremes``: the block's column minima and maxima (zeros
    included)."""
    U, C, B = state["counts"].shape
    if state["edges"] is not None:
        raise ValueError("edge counts are kept for dense units only (codes are never flipped)")
    if n == 0:
        return state
    _fit(state, *extremes)
    lab = None if labels is None or C == 1 else np.asarray(labels, np.int64)
    scale, offset = np.ldexp(1.0, -state["e"]), np.arange(U) * (C * B) - state["lo"]
    flat = np.floor(v * scale[u]).astype(np.int64) + offset[u]  # v * scale: float64, exact
    slot = u if lab is None else u * C + lab[r]
    if lab is not None:
        flat += lab[r] * B
    out = np.bincount(flat, minlength=U * C * B).reshape(U, C, B)
    per_class = np.full(C, n) if lab is None else np.bincount(lab, minlength=C)
    zeros = per_class[None, :] - np.bincount(slot, minlength=U * C).reshape(U, C)
    uu, cc = np.nonzero(zeros > 0)
    out[uu, cc, -state["lo"][uu]] += zeros[uu, cc]  # bin of 0: floor(0 / w) - lo
    state["counts"] += out
    return state


def add_hist(state, block, labels=None, extremes=None):
    """Count a block (n, U) (``labels``: (n,) class codes, when counting by class;
    ``extremes``: the block's column minima and maxima, when already known)."""
    if block.shape[0] == 0:
        return state
    _fit(state, *((block.min(axis=0), block.max(axis=0)) if extremes is None else extremes))
    U, C, B = state["counts"].shape
    lab = None if labels is None or C == 1 else np.asarray(labels, np.int64)
    # bin of every value as one flat index (unit, class, bin), formed in the block's float type
    # while it holds integers exactly (2**24 for float32), else in float64; in place: one temporary
    ft = block.dtype if U * C * B < 2 ** 24 and block.dtype == np.float32 else np.float64
    scale, offset = np.ldexp(1.0, -state["e"]).astype(ft), (np.arange(U) * (C * B) - state["lo"]).astype(ft)
    rows = max(1, max(SLAB, U * C * B) // U)  # a slab at a time: its temporaries stay in cache
    for s in range(0, block.shape[0], rows):
        idx = np.multiply(block[s:s + rows], scale, dtype=ft)
        if state["edges"] is None:
            np.floor(idx, out=idx)
        else:  # values on an edge: their bin's left edge (x * 2**-e exact, so floor(x) == x exactly there)
            on = np.floor(idx)
            on, idx = np.flatnonzero(on == idx), on
        idx += offset
        if lab is not None:
            idx += (lab[s:s + rows] * B).astype(ft)[:, None]
        flat = idx.astype(np.intp).ravel()
        state["counts"] += np.bincount(flat, minlength=U * C * B).reshape(U, C, B)
        if state["edges"] is not None and on.size:
            np.add.at(state["edges"].reshape(-1), flat[on], 1)
    return state


def merge_hist(a, b):
    """The histogram of ``a``'s rows and ``b``'s (neither modified)."""
    out = {k: None if v is None else v.copy() for k, v in a.items()}
    for j in np.flatnonzero(b["set"]):
        occ = _occupied(b["counts"][j])
        if occ is None:
            continue
        w = 2.0 ** int(b["e"][j])
        lo_b = int(b["lo"][j])
        _refit(out, j, (lo_b + occ[0]) * w, (lo_b + occ[1]) * w, min_e=int(b["e"][j]))
        d, mn = int(out["e"][j] - b["e"][j]), int(out["lo"][j])
        used = np.arange(occ[0], occ[1] + 1)
        _remap(out["counts"][j], b["counts"][j], lo_b, d, mn, used)
        if out["edges"] is not None:
            _remap_edges(out["edges"][j], b["edges"][j], lo_b, d, mn, used)
    return out


def flipped(state, flip):
    """The histogram state of the columns with ``flip`` (U,) bool negated, the others as they
    are (a new state, one bin more, without edge counts): a negated value off an edge lands
    in the mirrored bin, one on a bin's left edge in the bin above the mirrored one, as
    ``np.histogram`` of the negated column counts it. Needs a state made with ``edges=True``
    where any column is flipped."""
    if np.any(flip) and state["edges"] is None:
        raise ValueError("flipping a histogram needs its edge counts (new_hist(..., edges=True))")
    counts = np.concatenate([state["counts"], np.zeros_like(state["counts"][..., :1])], axis=-1)
    lo = state["lo"].copy()
    for j in np.flatnonzero(flip):
        c, on = state["counts"][j], state["edges"][j]
        out = np.zeros_like(counts[j])
        out[:, :-1] = (c - on)[:, ::-1]  # bin i -> B - 1 - i
        out[:, 1:] += on[:, ::-1]  # its left edge -> bin B - i
        counts[j], lo[j] = out, -(lo[j] + c.shape[-1])
    return {"e": state["e"].copy(), "lo": lo, "counts": counts, "set": state["set"].copy(), "edges": None}


def trimmed(state, j):
    """``(counts, edges)`` of column ``j`` over the bins from its first to its last non-empty
    one: ``counts`` (classes, m) int64, ``edges`` (m + 1,) float64."""
    occ = _occupied(state["counts"][j])
    if occ is None:
        return np.zeros((state["counts"].shape[1], 0), np.int64), np.zeros(1)
    w = 2.0 ** int(state["e"][j])
    lo = int(state["lo"][j])
    return state["counts"][j][:, occ[0]:occ[1] + 1], (lo + np.arange(occ[0], occ[1] + 2)) * w
