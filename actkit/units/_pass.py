"""The one streaming pass of a unit report: for every unit (column of the unit activations),
its top-k and bottom-k rows, a uniform sample of its active rows (for the quantile-band
examples), its histogram (by label, when labels are given), its moments and its share of
active rows. A :class:`~actkit.runners.RowPass`: every block's partial result is computed on
its own (``map``, on the thread budget's workers or a Dask worker) and merged exactly, so the
result does not depend on the block size, the thread count or the scheduler.

Memory: O(units x (2 k + SAMPLE + histogram bins)) plus one block of rows and of unit
activations; never the rows x units matrix.
"""

from __future__ import annotations

import numpy as np

from actkit.runners import RowPass
from actkit.units._hist import SLAB, add_hist, add_hist_entries, merge_hist, new_hist
from actkit.units._topk import add_entries, dense_entries, growing_chunks, merge_topk, new_topk

__all__ = ["SAMPLE", "finish", "merge_moments", "priority", "unit_pass"]

#: active rows kept per unit in the uniform sample the quantile-band examples come from
SAMPLE = 256


def priority(rows, random_state=0) -> np.ndarray:
    """A uniform number in [0, 1) per global row (splitmix64 of the row and the seed): the
    sample of a unit's active rows is the ``SAMPLE`` rows of smallest priority, the same
    rows whatever the blocks, threads or workers."""
    with np.errstate(over="ignore"):
        z = np.asarray(rows, np.uint64) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(int(random_state) + 1)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _moments(A):
    """``(n, mean, M2, M3, M4)`` of a block's columns (sums of powers about the mean of each
    slab of :data:`SLAB` values, slabs merged exactly)."""
    rows = max(1, SLAB // max(1, A.shape[1]))
    out = (0, *[np.zeros(A.shape[1])] * 4)
    for s in range(0, A.shape[0], rows):
        S = A[s:s + rows]
        mean = S.sum(axis=0, dtype=np.float64) / S.shape[0]
        d = S - mean.astype(S.dtype)
        d2 = d * d
        out = merge_moments(out, (S.shape[0], mean, d2.sum(axis=0, dtype=np.float64),
                                  np.multiply(d2, d, out=d).sum(axis=0, dtype=np.float64),
                                  np.multiply(d2, d2, out=d2).sum(axis=0, dtype=np.float64)))
    return out


def _active(A):
    """Non-zero rows per column of a block (one count for the whole block when it has no zero)."""
    return np.full(A.shape[1], A.shape[0]) if not (A == 0).any() else np.count_nonzero(A, axis=0)


def merge_moments(a, b):
    """Pébay's exact merge of two ``(n, mean, M2, M3, M4)``."""
    na, ma, m2a, m3a, m4a = a
    nb, mb, m2b, m3b, m4b = b
    if na == 0:
        return b
    if nb == 0:
        return a
    n = na + nb
    delta = mb - ma
    mean = ma + delta * nb / n
    m2 = m2a + m2b + delta ** 2 * na * nb / n
    m3 = m3a + m3b + delta ** 3 * na * nb * (na - nb) / n ** 2 + 3 * delta * (na * m2b - nb * m2a) / n
    m4 = (m4a + m4b + delta ** 4 * na * nb * (na * na - na * nb + nb * nb) / n ** 3
          + 6 * delta ** 2 * (na * na * m2b + nb * nb * m2a) / n ** 2 + 4 * delta * (na * m3b - nb * m3a) / n)
    return n, mean, m2, m3, m4


#: the states of rows ranked per unit: top-k, bottom-k (dense units) and the sample
STATES = ("top", "bottom", "sample")


def _new(basis, k, classes, labels, random_state):
    U = basis.n_units
    z = np.zeros(U)
    return {"moments": (0, z, z, z, z), "top": new_topk(k, U), "bottom": new_topk(k, U),
            "sample": new_topk(SAMPLE, U), "active": np.zeros(U, np.int64), "hist": new_hist(U, classes),
            "seen": 0, "pending": {name: [] for name in STATES}}


def _map(block, first_row, basis, k, classes, labels, random_state):
    """A block's unit activations and everything of them that needs no running state (on the
    thread budget's workers): ``("dense", A, moments, min, max, active)`` with ``A`` (n, U)
    float32, or ``("sparse", n, r, u, v, moments, min, max, active)`` from the non-zero entries
    of mostly-zero codes (:meth:`Basis.entries`)."""
    if basis.sparse:
        n, r, u, v = basis.entries(block, first_row)
        active = np.bincount(u, minlength=basis.n_units)
        zero = np.where(active < n, np.float32(0), np.float32(np.nan))  # 0 is a value of a unit with a zero
        vmin, vmax = zero.copy(), zero.copy()
        np.fmin.at(vmin, u, v)
        np.fmax.at(vmax, u, v)
        if not np.isfinite(v).all():  # fmin / fmax skip NaN: the histogram's check must see it
            vmin[:] = np.nan
        return ("sparse", n, r, u, v, _sparse_moments(n, u, v, active), vmin, vmax, active)
    A = np.ascontiguousarray(basis.activations(block, first_row), dtype=np.float32)
    return ("dense", A, _moments(A), A.min(axis=0), A.max(axis=0), _active(A))


def _sparse_moments(n, u, v, active):
    """``(n, mean, M2, M3, M4)`` of a block's columns from their non-zero entries (the
    ``n - active`` zeros of each column added at once)."""
    U = active.size
    x = v.astype(np.float64)
    mean = np.bincount(u, x, minlength=U) / max(n, 1)
    d = x - mean[u]
    d2 = d * d
    zeros, m = n - active, -mean
    return (n, mean, np.bincount(u, d2, minlength=U) + zeros * m ** 2,
            np.bincount(u, d2 * d, minlength=U) + zeros * m ** 3, np.bincount(u, d2 * d2, minlength=U) + zeros * m ** 4)


def _offer(acc, name, entries):
    """Queue candidate entries for state ``name``; the state is rebuilt once the queue is as
    large as the state (its thresholds are those of the last rebuild: lower, so no candidate is
    lost, and each entry is sorted about twice)."""
    queue = acc["pending"][name]
    if entries[0].size:
        queue.append(entries)
    if sum(e[0].size for e in queue) >= acc[name][0].size:
        _flush(acc, name)


def _flush(acc, name):
    queue = acc["pending"][name]
    if queue:
        parts = [np.concatenate(x) for x in zip(*queue)]
        acc[name] = add_entries(acc[name], *parts)
        acc["pending"][name] = []
    return acc[name]


def finish(acc):
    """The pass's result with every queued candidate folded in (after the last block)."""
    for name in STATES:
        _flush(acc, name)
    return acc


def _warm_chunks(n, acc, k):
    """Row ranges of a block: short ones while the states are still filling (the first rows of
    a pass or of a Dask chunk), one range after."""
    return growing_chunks(n, acc["seen"], max(2 * k, 16384 // max(1, acc["top"][0].shape[1])))


def _fold_dense(acc, item, first_row, k, lab, random_state):
    _, A, moments, vmin, vmax, active = item
    n = A.shape[0]
    acc["moments"] = merge_moments(acc["moments"], moments)
    acc["active"] = acc["active"] + active
    acc["hist"] = add_hist(acc["hist"], A, lab, extremes=(vmin, vmax))
    p = 1.0 - priority(np.arange(first_row, first_row + n), random_state)
    for a, b in _warm_chunks(n, acc, k):
        C = A[a:b]
        _offer(acc, "top", dense_entries(acc["top"], C, first_row + a))
        _offer(acc, "bottom", dense_entries(acc["bottom"], C, first_row + a, lower=True))
        thr = acc["sample"][0][-1]
        rows = np.flatnonzero(p[a:b] > thr.min())  # rows that can enter some unit's sample
        if rows.size:
            r, u = np.nonzero((p[a + rows, None] > thr) & (C[rows] != 0))
            r = rows[r]
            _offer(acc, "sample", (u, p[a + r], r.astype(np.int64) + first_row + a, C[r, u]))
    acc["seen"] += n
    return acc


def _fold_sparse(acc, item, first_row, k, lab, random_state):
    _, n, r, u, v, moments, vmin, vmax, active = item
    acc["moments"] = merge_moments(acc["moments"], moments)
    acc["active"] = acc["active"] + active
    if n == 0:
        return acc
    acc["hist"] = add_hist_entries(acc["hist"], n, r, u, v, lab, extremes=(vmin, vmax))
    p = 1.0 - priority(np.arange(first_row, first_row + n), random_state)
    top_thr = np.maximum(acc["top"][0][-1], 0.0)  # codes: the examples are active rows; no bottom
    for a, b in _warm_chunks(n, acc, k):
        lo, hi = np.searchsorted(r, [a, b])
        cu, cv, cr = u[lo:hi], v[lo:hi], r[lo:hi] + first_row
        keep = cv > top_thr[cu]
        _offer(acc, "top", (cu[keep], cv[keep], cr[keep], cv[keep]))
        ps = p[r[lo:hi]]
        keep = ps > acc["sample"][0][-1][cu]
        _offer(acc, "sample", (cu[keep], ps[keep], cr[keep], cv[keep]))
        top_thr = np.maximum(acc["top"][0][-1], 0.0)
    acc["seen"] += n
    return acc


def _merge(a, b):
    a, b = finish(_copy(a)), finish(_copy(b))
    return {"moments": merge_moments(a["moments"], b["moments"]), "top": merge_topk(a["top"], b["top"]),
            "bottom": merge_topk(a["bottom"], b["bottom"]), "sample": merge_topk(a["sample"], b["sample"]),
            "active": a["active"] + b["active"], "hist": merge_hist(a["hist"], b["hist"]),
            "seen": a["seen"] + b["seen"], "pending": {name: [] for name in STATES}}


def _copy(acc):
    """A shallow copy whose queues can be flushed without touching ``acc`` (merge must not
    modify its arguments)."""
    return {**acc, "pending": {name: list(q) for name, q in acc["pending"].items()}}


def _add(acc, item, first_row, basis, k, classes, labels, random_state):
    lab = None if labels is None else labels[first_row:first_row + (item[1] if item[0] == "sparse" else len(item[1]))]
    fold = _fold_sparse if item[0] == "sparse" else _fold_dense
    return fold(acc, item, first_row, k, lab, random_state)


def unit_pass(basis, k, rows, *, labels=None, classes=1, random_state=0, threads=True) -> RowPass:
    """The pass over the rows that ``basis`` reads (``basis.activations(block, first_row)``
    -> (n, n_units)); ``labels``: (n_rows,) class codes in ``[0, classes)`` or None. The
    runner's result goes through :func:`finish`."""
    return RowPass(_new, _add, _merge, (basis, int(k), int(classes), labels, int(random_state)),
                   int(rows), map=_map, threads=threads, name="units")
