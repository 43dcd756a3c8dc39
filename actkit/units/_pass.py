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
from actkit.units._hist import add_hist, merge_hist, new_hist
from actkit.units._topk import add_topk, add_topk_rows, merge_topk, new_topk

__all__ = ["SAMPLE", "merge_moments", "priority", "unit_pass"]

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
    """``(n, mean, M2, M3, M4)`` of a block's columns (sums of powers about the block mean)."""
    n = A.shape[0]
    mean = A.sum(axis=0, dtype=np.float64) / n
    d = A - mean.astype(A.dtype)
    d2 = d * d
    return (n, mean, d2.sum(axis=0, dtype=np.float64), (d2 * d).sum(axis=0, dtype=np.float64),
            (d2 * d2).sum(axis=0, dtype=np.float64))


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


def _new(basis, k, classes, labels, random_state):
    U = basis.n_units
    z = np.zeros(U)
    return {"moments": (0, z, z, z, z), "top": new_topk(k, U), "bottom": new_topk(k, U),
            "sample": new_topk(SAMPLE, U), "active": np.zeros(U, np.int64), "hist": new_hist(U, classes)}


def _map(block, first_row, basis, k, classes, labels, random_state):
    """The unit activations of one block of the layer's rows (on the thread budget's workers)."""
    return np.ascontiguousarray(basis.activations(block, first_row), dtype=np.float32)


def _fold(acc, A, first_row, k, labels, random_state, sparse):
    """Fold the activations ``A`` (n, U) of rows ``first_row...`` into ``acc`` (in row order: the
    running k-th values keep almost every row of a later block out of the top-k sorts)."""
    n = A.shape[0]
    if n == 0:
        return acc
    acc["moments"] = merge_moments(acc["moments"], _moments(A))
    if sparse:  # codes: the examples are active rows; no bottom
        acc["top"] = add_topk(acc["top"], A, first_row, floor=0.0)
    else:
        acc["top"] = add_topk(acc["top"], A, first_row)
        acc["bottom"] = add_topk(acc["bottom"], A, first_row, score=-A)
    active = A != 0
    acc["active"] = acc["active"] + np.count_nonzero(active, axis=0)
    p = 1.0 - priority(np.arange(first_row, first_row + n), random_state)
    keep = np.flatnonzero(p > acc["sample"][0][-1].min())  # rows that can enter some unit's sample
    if keep.size:
        score = np.where(active[keep], p[keep, None], -np.inf)
        acc["sample"] = _add_rows(acc["sample"], A[keep], keep + first_row, score)
    lab = None if labels is None else labels[first_row:first_row + n]
    acc["hist"] = add_hist(acc["hist"], A, lab)
    return acc


def _add_rows(state, A, rows, score):
    """``add_topk`` for rows that are not consecutive (global numbers ``rows``)."""
    return add_topk_rows(state, A, rows, score)


def _merge(a, b):
    return {"moments": merge_moments(a["moments"], b["moments"]), "top": merge_topk(a["top"], b["top"]),
            "bottom": merge_topk(a["bottom"], b["bottom"]), "sample": merge_topk(a["sample"], b["sample"]),
            "active": a["active"] + b["active"], "hist": merge_hist(a["hist"], b["hist"])}


def _add(acc, item, first_row, basis, k, classes, labels, random_state):
    return _fold(acc, item, first_row, k, labels, random_state, basis.sparse)


def unit_pass(basis, k, rows, *, labels=None, classes=1, random_state=0, threads=True) -> RowPass:
    """The pass over the rows that ``basis`` reads (``basis.activations(block, first_row)``
    -> (n, n_units)); ``labels``: (n_rows,) class codes in ``[0, classes)`` or None."""
    return RowPass(_new, _add, _merge, (basis, int(k), int(classes), labels, int(random_state)),
                   int(rows), map=_map, threads=threads, name="units")
