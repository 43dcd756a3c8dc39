"""The k largest values of every column of a stream of row blocks, as a mergeable state.

A state is ``(values, rows, payload)``, each of shape (k, U): column ``j``'s largest values so
far in decreasing order, their global row numbers (ties: the earlier row first; unfilled
slots hold ``-inf`` and row -1) and, when rows are ranked by a score other than the value
(a priority), the value itself. Folding blocks in row order and merging partial states left
before right give exactly the top-k of numpy's brute force over the whole matrix (a stable
sort of ``-X`` along the rows).

A block is folded as *candidate entries* ``(unit, score, row, payload)``: only entries whose
score beats their column's k-th best so far strictly (a later row loses a tie) can enter, so
after the first rows almost every entry is rejected by one comparison, and only the few
candidates are sorted (:func:`add_entries`). :func:`growing_chunks` cuts the first rows of a
state into chunks no longer than the rows before them, so the thresholds are set early and a
chunk brings about k candidates per column.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Ranked", "new_topk", "add_entries", "dense_entries", "growing_chunks", "merge_topk"]


def new_topk(k: int, n_units: int):
    """An empty state for ``n_units`` columns."""
    return (np.full((k, n_units), -np.inf), np.full((k, n_units), -1, dtype=np.int64),
            np.zeros((k, n_units)))


def _select(k, n_units, units, values, rows, payload):
    """The state made of candidate entries ``(unit, value, row, payload)``: per unit the k
    largest values, ties by the lower row."""
    order = _order(n_units, units, values, rows)
    units, values, rows, payload = units[order], values[order], rows[order], payload[order]
    first = np.searchsorted(units, np.arange(n_units))
    rank = np.arange(units.size) - first[units]
    keep = rank < k
    out = new_topk(k, n_units)
    for arr, src in zip(out, (values, rows, payload)):
        arr[rank[keep], units[keep]] = src[keep]
    return out


def _order(n_units, units, values, rows):
    """The entries' order by unit, value decreasing, then row: an unstable sort by value then a
    stable (radix) sort by unit, which is that order whenever no unit has two equal values;
    otherwise the three-key ``lexsort``."""
    o = np.argsort(-values)
    o = o[np.argsort(units[o].astype(np.int16 if n_units <= 1 << 15 else np.int64), kind="stable")]
    u, v = units[o], values[o]
    if np.any((u[1:] == u[:-1]) & (v[1:] == v[:-1])):
        return np.lexsort((rows, -values, units))
    return o


def _entries(state):
    values, rows, payload = state
    filled = rows >= 0
    units = np.broadcast_to(np.arange(values.shape[1]), values.shape)
    return units[filled], values[filled], rows[filled], payload[filled]


def growing_chunks(n: int, seen: int, first: int):
    """Row ranges ``[(a, b), ...]`` covering a block of ``n`` rows folded after ``seen`` rows:
    each chunk at most as long as the rows folded before it (at least ``first`` rows), so a
    state that is still filling sets its thresholds on few rows; one chunk once ``seen >= n``."""
    out, a = [], 0
    while a < n:
        b = min(n, a + max(int(first), seen + a))
        out.append((a, b))
        a = b
    return out


def add_entries(state, units, score, rows, payload, floor=-np.inf):
    """Fold candidate entries of rows later than every row of ``state``: ``units``, ``score``,
    ``rows`` (global) and ``payload`` (the value kept), each (m,). An entry is kept when its
    score beats its column's k-th best strictly and ``floor`` (0 for sparse codes: zeros are no
    examples)."""
    values = state[0]
    k, n_units = values.shape
    if units.size == 0:
        return state
    keep = score > np.maximum(values[-1], floor)[units]
    if not keep.any():
        return state
    su, sv, sr, sp = _entries(state)
    return _select(k, n_units, np.concatenate([su, units[keep]]),
                   np.concatenate([sv, score[keep].astype(np.float64)]),
                   np.concatenate([sr, rows[keep].astype(np.int64)]),
                   np.concatenate([sp, payload[keep].astype(np.float64)]))


def dense_entries(state, block, first_row: int, lower=False, floor=-np.inf):
    """The candidate entries ``(units, score, rows, payload)`` of a dense block (n, U) of
    consecutive rows from global row ``first_row``: values above the column's k-th best (or,
    ``lower``, below minus it: the state then ranks ``-value``), found with one comparison of
    the block against the thresholds (in the block's float type: a threshold is a value of
    the block's type, or +-inf)."""
    thr = np.maximum(state[0][-1], floor).astype(block.dtype)
    cand = (block < -thr if lower else block > thr).reshape(-1)
    r, u = np.divmod(np.flatnonzero(cand), block.shape[1])
    v = block[r, u]
    return u, (-v if lower else v), r + int(first_row), v


def merge_topk(a, b):
    """The state of ``a``'s rows then ``b``'s (neither modified)."""
    k, n_units = a[0].shape
    parts = [np.concatenate(x) for x in zip(_entries(a), _entries(b))]
    return _select(k, n_units, *parts)


class Ranked:
    """A top-k state being folded: the state, its queue of candidate entries and the rows
    folded so far. Candidates are queued (:meth:`offer`) and the state rebuilt once the queue
    is as large as the state (its thresholds are those of the last rebuild: lower, so no
    candidate is lost, and each entry is sorted about twice). Picklable: it travels between
    Dask workers."""

    __slots__ = ("state", "pending", "seen")

    def __init__(self, k: int, n_units: int):
        self.state, self.pending, self.seen = new_topk(k, n_units), [], 0

    @property
    def threshold(self) -> np.ndarray:
        """(U,) each column's k-th best score at the last rebuild (-inf while not filled)."""
        return self.state[0][-1]

    def chunks(self, n: int, warm: int):
        """:func:`growing_chunks` of a block of ``n`` rows folded after :attr:`seen`."""
        return growing_chunks(n, self.seen, warm)

    def offer(self, entries) -> None:
        """Queue candidate entries ``(units, score, rows, payload)``."""
        if entries[0].size:
            self.pending.append(entries)
        if sum(e[0].size for e in self.pending) >= 2 * self.state[0].size:
            self.flush()

    def flush(self) -> tuple:
        """Fold the queue into the state; the state ``(values, rows, payload)``."""
        if self.pending:
            self.state = add_entries(self.state, *[np.concatenate(x) for x in zip(*self.pending)])
            self.pending = []
        return self.state

    def final(self) -> tuple:
        """The state with the queue folded in, this object unchanged."""
        if not self.pending:
            return self.state
        return add_entries(self.state, *[np.concatenate(x) for x in zip(*self.pending)])

    @staticmethod
    def merged(a: "Ranked", b: "Ranked") -> "Ranked":
        """The ranked state of ``a``'s rows then ``b``'s (neither modified)."""
        out = Ranked.__new__(Ranked)
        out.state, out.pending, out.seen = merge_topk(a.final(), b.final()), [], a.seen + b.seen
        return out
