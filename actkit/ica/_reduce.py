"""The fixed reduction of every FastICA pass: row blocks and merge order that do not depend
on threads, workers, read blocks or Dask chunks.

A pass over ``N`` rows cuts them into **reduction blocks** of :func:`pass_rows` rows at fixed
global boundaries (rows ``[i R, (i + 1) R)``; ``R`` depends only on the width of the raw
rows). Each block's statistics are computed with one BLAS thread, in float64 sums
(:func:`whiten_block` whitens a block in float64 arithmetic), and the blocks' statistics
are added in one fixed tree over the block indices (:class:`BlockSum`): node ``(level, j)``
holds the sum of blocks ``[j 2^level, (j + 1) 2^level)`` as ``left + right``, and the
total adds the remaining maximal nodes from left to right. Any grouping of consecutive
blocks -- one process in order, worker threads, Dask chunks merged in a tree -- then
builds the same nodes from the same values, so a pass returns the same bits everywhere and
the solver's iterates are bitwise equal (``docs/definitions.md``, "ICA alignment",
determinism).
"""

from __future__ import annotations

import numpy as np

from actkit._rows import BLOCK_BYTES
from actkit._threads import small_linalg

__all__ = ["pass_rows", "whiten_block", "whiten_rows", "BlockSum"]


def pass_rows(d):
    """Rows of a reduction block for raw rows of width ``d``: a power of two in [256, 4096]
    with at most 32 MiB of float64 rows (a function of ``d`` only)."""
    rows = 4096
    while rows > 256 and rows * 8 * max(int(d), 1) > BLOCK_BYTES:  # the streamed block's bytes (actkit._rows)
        rows //= 2
    return rows


def whiten_block(block, mean, Kt, dtype):
    """``(block - mean) @ Kt`` in float64 (``mean`` (d,), ``Kt`` (d, k) float64), cast to
    ``dtype`` (call it with one BLAS thread, ``small_linalg``)."""
    Z = (np.asarray(block, dtype=np.float64) - mean) @ Kt
    return np.ascontiguousarray(Z, dtype=dtype)


def whiten_rows(X, mean, K, dtype, rows=None):
    """Whitened rows ``(X - mean) @ K'`` (n, k) of an in-memory ``X`` (n, d), computed per
    reduction block (``rows``, default :func:`pass_rows` of ``d``) with one BLAS thread,
    so every row's bits are those :func:`whiten_block` gives its block anywhere."""
    X = np.asarray(X)
    n, d = X.shape
    mean = np.asarray(mean, dtype=np.float64)
    Kt = np.ascontiguousarray(np.asarray(K, dtype=np.float64).T)
    rows = rows or pass_rows(d)
    out = np.empty((n, Kt.shape[1]), dtype=dtype)
    with small_linalg():
        for s in range(0, n, rows):
            out[s : s + rows] = whiten_block(X[s : s + rows], mean, Kt, dtype)
    return out


def _add(a, b):
    return tuple(None if x is None else x + y for x, y in zip(a, b))


class BlockSum:
    """Sum of per-block statistics (tuples of float64 arrays or None) in a fixed binary
    tree over the global block index; :meth:`merge` a sum of the blocks just after.

    Examples
    --------
    >>> import numpy as np
    >>> vals = [(np.array([0.1 * i]),) for i in range(7)]
    >>> one = BlockSum()
    >>> for i, v in enumerate(vals):
    ...     one.add(i, v)
    >>> left, right = BlockSum(), BlockSum()
    >>> for i in range(3):
    ...     left.add(i, vals[i])
    >>> for i in range(3, 7):
    ...     right.add(i, vals[i])
    >>> bool(left.merge(right).total()[0][0] == one.total()[0][0])
    True
    """

    def __init__(self):
        self.nodes = []          # (level, index, values), in row order

    def add(self, index, values):
        """Add block ``index`` (the next block after those added)."""
        self._push(0, int(index), tuple(values))
        return self

    def _push(self, level, index, values):
        nodes = self.nodes
        while index % 2 == 1 and nodes and nodes[-1][0] == level and nodes[-1][1] == index - 1:
            values = _add(nodes.pop()[2], values)
            index //= 2
            level += 1
        nodes.append((level, index, values))

    def merge(self, other):
        """A new sum: these blocks then ``other``'s (which must follow them)."""
        out = BlockSum()
        out.nodes = list(self.nodes)
        for node in other.nodes:
            out._push(*node)
        return out

    def total(self):
        """The sum of all blocks (the remaining nodes added left to right); None if empty."""
        if not self.nodes:
            return None
        acc = self.nodes[0][2]
        for node in self.nodes[1:]:
            acc = _add(acc, node[2])
        return acc
