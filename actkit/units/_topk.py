"""The k largest values of every column of a stream of row blocks, as a mergeable state.

A state is ``(values, rows, payload)``, each of shape (k, U): column ``j``'s largest values so
far in decreasing order, their global row numbers (ties: the earlier row first; unfilled
slots hold ``-inf`` and row -1) and, when rows are ranked by a score other than the value
(a priority), the value itself. Folding blocks in row order and merging partial states left
before right give exactly the top-k of numpy's brute force over the whole matrix (a stable
sort of ``-X`` along the rows).
"""

from __future__ import annotations

import numpy as np

__all__ = ["new_topk", "add_topk", "merge_topk"]


def new_topk(k: int, n_units: int):
    """An empty state for ``n_units`` columns."""
    return (np.full((k, n_units), -np.inf), np.full((k, n_units), -1, dtype=np.int64),
            np.zeros((k, n_units)))


def _select(k, n_units, units, values, rows, payload):
    """The state made of candidate entries ``(unit, value, row, payload)``: per unit the k
    largest values, ties by the lower row."""
    order = np.lexsort((rows, -values, units))
    units, values, rows, payload = units[order], values[order], rows[order], payload[order]
    first = np.searchsorted(units, np.arange(n_units))
    rank = np.arange(units.size) - first[units]
    keep = rank < k
    out = new_topk(k, n_units)
    for arr, src in zip(out, (values, rows, payload)):
        arr[rank[keep], units[keep]] = src[keep]
    return out


def _entries(state):
    values, rows, payload = state
    filled = rows >= 0
    units = np.broadcast_to(np.arange(values.shape[1]), values.shape)
    return units[filled], values[filled], rows[filled], payload[filled]


def add_topk(state, block, first_row: int, score=None):
    """Fold a block (n, U) whose first row is global row ``first_row`` into ``state``.

    ``score`` (n, U), optional: rank rows by it instead of by ``block`` (``-block`` for the k
    smallest, a priority for a sample); ``-inf`` scores are never taken. The payload kept is
    the block's value."""
    s = block if score is None else score
    values = state[0]
    k, n_units = values.shape
    n = s.shape[0]
    if n == 0:
        return state
    cand = (s > values[-1]) & (s > -np.inf)  # a later row must beat the k-th best so far strictly
    if n > k and np.count_nonzero(cand) > 4 * k * n_units:  # many: first drop rows below the block's own k-th
        kth = np.partition(s, n - k, axis=0)[n - k]
        cand &= s >= kth
    r, u = np.nonzero(cand)
    if r.size == 0:
        return state
    su, sv, sr, sp = _entries(state)
    return _select(k, n_units, np.concatenate([su, u]), np.concatenate([sv, s[r, u].astype(np.float64)]),
                   np.concatenate([sr, r.astype(np.int64) + int(first_row)]),
                   np.concatenate([sp, block[r, u].astype(np.float64)]))


def merge_topk(a, b):
    """The state of ``a``'s rows then ``b``'s (neither modified)."""
    k, n_units = a[0].shape
    parts = [np.concatenate(x) for x in zip(_entries(a), _entries(b))]
    return _select(k, n_units, *parts)
