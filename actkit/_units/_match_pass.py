"""The one pass of :func:`actkit.match_units`: both stores' unit activations streamed side by
side into cross moments (:class:`actkit.stats.CrossMoments`), the rows of the null copied out
on the way. A :class:`~actkit.runners.RowPass` over :class:`PairedRows`, so it runs here (row
blocks mapped on the thread budget's workers) or on Dask (``scheduler=``) with the same
result: every partial shares the shifts taken from the first rows, so they merge exactly.
"""

from __future__ import annotations

import numpy as np

from actkit.runners import RowPass
from actkit.stats import CrossMoments, first_block_shift

__all__ = ["PairedRows", "match_pass"]


class PairedRows:
    """The rows of two row sources side by side, ``(n, Da + Db)``: a stream for the runners
    (each block read from both sources), a chunked array on Dask (:meth:`to_dask`)."""

    ndim = 2
    actkit_streaming = True

    def __init__(self, a, b):
        self.a, self.b = a, b
        self.split = int(a.shape[1])
        self.shape = (int(a.shape[0]), self.split + int(b.shape[1]))
        self.dtype = np.result_type(a.dtype, b.dtype)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("PairedRows reads slices of rows")
        return np.concatenate([np.asarray(self.a[key], self.dtype), np.asarray(self.b[key], self.dtype)], axis=1)

    def to_dask(self, block_rows=None):
        """Both sources as one chunked array (columns side by side, the same row chunks)."""
        import dask.array as da  # optional dependency (actkit[dask]): only on a scheduler

        from actkit.runners import chunked_rows  # a source without its own chunked form (a codes file)

        parts = [x.to_dask(block_rows) if hasattr(x, "to_dask") else chunked_rows(x, block_rows)
                 for x in (self.a, self.b)]
        return da.concatenate([p.astype(self.dtype) for p in parts], axis=1)


def _activations(block, first_row, ba, bb, split):
    xa, xb = block[:, :split], block[:, split:]
    return (np.asarray(ba.activations(xa, first_row), np.float64),
            np.asarray(bb.activations(xb, first_row), np.float64))


def _new(ba, bb, split, shifts, keep, picks):
    return CrossMoments(debiased_terms=False, shift_x=shifts[0], shift_y=shifts[1]), [], []


def _map(block, first_row, ba, bb, split, shifts, keep, picks):
    return _activations(block, first_row, ba, bb, split)


def _add(acc, item, first_row, ba, bb, split, shifts, keep, picks):
    a, b = item
    cm, got_a, got_b = acc
    if keep is None:
        cm.add(a, b)
    else:
        lo, hi = np.searchsorted(keep, [first_row, first_row + len(a)])
        if hi > lo:
            cm.add(a[keep[lo:hi] - first_row], b[keep[lo:hi] - first_row])
    lo, hi = np.searchsorted(picks, [first_row, first_row + len(a)])
    if hi > lo:
        got_a.append(a[picks[lo:hi] - first_row])
        got_b.append(b[picks[lo:hi] - first_row])
    return acc


def _merge(x, y):
    return x[0].copy().merge(y[0]), [*x[1], *y[1]], [*x[2], *y[2]]


def shifts(ba, bb, rows):
    """Each side's shift (:func:`actkit.stats.first_block_shift` of its first rows' unit
    activations): one for every partial of the pass."""
    n = int(ba.rows.shape[0])
    a, b = _activations(PairedRows(ba.rows, bb.rows)[0:min(n, rows)], 0, ba, bb, int(ba.rows.shape[1]))
    return first_block_shift(a), first_block_shift(b)


def match_pass(ba, bb, rows, keep, picks, *, threads=True) -> RowPass:
    """The pass over :class:`PairedRows` of ``ba.rows`` and ``bb.rows``: cross moments of the
    unit activations over ``keep`` (sorted row numbers; None: every row) and the rows
    ``picks`` of each side. Result: ``(CrossMoments, [A blocks], [B blocks])``."""
    args = (ba, bb, int(ba.rows.shape[1]), shifts(ba, bb, rows), keep, np.asarray(picks, np.int64))
    return RowPass(_new, _add, _merge, args, int(rows), map=_map, threads=threads, name="match units")
