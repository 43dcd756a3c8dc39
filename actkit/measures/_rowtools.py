"""Helpers of the row-based measures: the seeded sample of whole input samples, pairwise
distances and blocks (torch, on the measure's device)."""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = ["sample_by_groups", "pairwise_sq_distances", "row_blocks", "check_k"]

#: rows of one block of an (n x n) computation
BLOCK = 1024


def sample_by_groups(n, groups, max_rows, random_state):
    """Sorted row indices of a seeded sample of whole input samples, at most ``max_rows`` rows.

    The samples (``groups``; None: one row each) are taken in the order of
    ``np.random.default_rng(random_state).permutation`` while their rows fit in
    ``max_rows``; all rows when they all fit. When even the first drawn sample has more rows
    than ``max_rows``, its first ``max_rows`` rows.
    """
    if max_rows is None or (not isinstance(max_rows, bool) and isinstance(max_rows, (int, np.integer))
                            and max_rows >= n):
        if max_rows is not None and max_rows < 2:
            raise ValidationError(f"max_rows must be an integer >= 2, got {max_rows!r}")
        return np.arange(n)
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 2:
        raise ValidationError(f"max_rows must be an integer >= 2, got {max_rows!r}")
    rng = np.random.default_rng(random_state)
    if groups is None:
        return np.sort(rng.permutation(n)[:max_rows])
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValidationError(f"groups must have one entry per row ({n}), got shape {groups.shape}")
    uniq, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    order = rng.permutation(uniq.size)
    total = np.cumsum(counts[order])
    take = order[total <= max_rows]
    if take.size == 0:
        return np.flatnonzero(inv.ravel() == order[0])[:max_rows]
    return np.flatnonzero(np.isin(inv.ravel(), take))


def pairwise_sq_distances(X):
    """Squared Euclidean distances between the rows of ``X`` (n, d), shape (n, n), as
    Kornblith et al. form them (``|x|^2 + |y|^2 - 2 x.y``)."""
    d = X @ X.T
    sq = d.diagonal().clone()
    return d.mul_(-2).add_(sq[:, None]).add_(sq[None, :])


def row_blocks(n, size=BLOCK):
    """``(start, stop)`` of consecutive blocks of ``size`` rows."""
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def check_k(params, widths, n_rows):
    """``k`` must be below the rows used (a row's neighbours exclude itself)."""
    k = params["k"]
    if n_rows is not None and k >= n_rows:
        raise ValidationError(f"k={k} must be below the rows used ({n_rows}); choose k in "
                              f"[1, {n_rows - 1}] or more rows (max_rows)")
