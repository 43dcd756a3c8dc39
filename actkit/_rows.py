"""Rows: the one row-block policy and the one row-sampling rule of actkit.

Every streaming pass (moments, whitening, FastICA, dictionary learning, alignment, store
reads and repacks) sizes its blocks with :func:`block_rows`, and every random subset of
rows (FastICA's warm-up rows, the dictionary's initial atoms, ``compare``'s ICA rows and
diameter rows, the CLI's ``--fit-rows``) is drawn by :func:`sample_rows`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK_BYTES", "MIN_BLOCK_ROWS", "block_rows", "sample_rows"]

BLOCK_BYTES = 32 * 2**20   # a streamed row block holds about 32 MiB
MIN_BLOCK_ROWS = 256       # ... and at least this many rows (very wide rows)


def block_rows(n_features: int, itemsize: int = 4, *, max_rows: int | None = None) -> int:
    """Rows per streamed block: about :data:`BLOCK_BYTES` of ``itemsize``-byte values.

    Parameters
    ----------
    n_features : int
        Width D of a row.
    itemsize : int, default=4
        Bytes per value (4 for float32).
    max_rows : int, optional
        Cap on the rows per block (FastICA's passes cap it so that several blocks can run
        on parallel threads).

    Returns
    -------
    int
        ``max(256, 32 MiB // (D * itemsize))``, at most ``max_rows``.
    """
    rows = max(MIN_BLOCK_ROWS, BLOCK_BYTES // max(1, int(n_features) * int(itemsize)))
    if max_rows is not None:
        rows = min(rows, int(max_rows))
    return int(max(1, rows))


def sample_rows(population, size: int, random_state=0) -> np.ndarray:
    """A sorted random subset of ``size`` distinct rows (the one seeding rule).

    Parameters
    ----------
    population : int or array-like of int
        ``n`` (rows ``0 .. n-1``) or the candidate row indices.
    size : int
        Rows to draw; all of them when ``size >= len(population)``.
    random_state : int, numpy Generator or RandomState, default=0
        An int seeds ``np.random.default_rng(random_state)``; a generator (or a legacy
        ``RandomState``) is drawn from as it is, so a caller that draws more from the same
        stream afterwards keeps its sequence.

    Returns
    -------
    ndarray of int64, shape (min(size, len(population)),), increasing
    """
    rows = np.arange(population) if np.ndim(population) == 0 else np.asarray(population)
    n = rows.size
    if size >= n:
        return np.asarray(rows, dtype=np.int64)
    rng = random_state
    if not hasattr(rng, "choice"):
        rng = np.random.default_rng(random_state)
    picked = rng.choice(int(population) if np.ndim(population) == 0 else rows, size=int(size),
                        replace=False)
    return np.sort(np.asarray(picked, dtype=np.int64))
