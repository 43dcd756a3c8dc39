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

__all__ = ["new_topk", "add_topk", "add_topk_rows", "merge_topk"]


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


def add_topk(state, block, first_row: int, score=None, floor=-np.inf):
    """Fold a block (n, U) of consecutive rows from global row ``first_row`` (see :func:`add_topk_rows`)."""
    return add_topk_rows(state, block, None, score, first_row, floor)


def add_topk_rows(state, block, rows, score=None, first_row=0, floor=-np.inf):
    """Fold a block (n, U) whose row ``i`` is global row ``rows[i]`` (increasing; None:
    ``first_row + i``) into ``state``.

    ``score`` (n, U), optional: rank rows by it instead of by ``block`` (``-block`` for the k
    smallest, a priority for a sample); scores not above ``floor`` (``-inf``; 0 for sparse codes,
    whose zeros are no examples) are never taken. The payload kept is the block's value."""
    s = block if score is None else score
    values = state[0]
    k, n_units = values.shape
    n = s.shape[0]
    if n == 0:
        return state
    cand = s > np.maximum(values[-1], floor)  # a later row must beat the k-th best so far strictly
    if n > k and np.count_nonzero(cand) > 4 * k * n_units:  # many: first drop rows below the block's own k-th
        kth = np.partition(s, n - k, axis=0)[n - k]
        cand &= s >= kth
    hit = np.flatnonzero(cand.any(axis=1))  # rows with a candidate: few after the first blocks
    if hit.size == 0:
        return state
    r, u = np.nonzero(cand[hit])
    r = hit[r]
    su, sv, sr, sp = _entries(state)
    return _select(k, n_units, np.concatenate([su, u]), np.concatenate([sv, s[r, u].astype(np.float64)]),
                   np.concatenate([sr, r.astype(np.int64) + int(first_row) if rows is None else rows[r]]),
                   np.concatenate([sp, block[r, u].astype(np.float64)]))


def merge_topk(a, b):
    """The state of ``a``'s rows then ``b``'s (neither modified)."""
    k, n_units = a[0].shape
    parts = [np.concatenate(x) for x in zip(_entries(a), _entries(b))]
    return _select(k, n_units, *parts)
