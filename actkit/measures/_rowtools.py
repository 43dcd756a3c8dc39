"""Helpers of the row-based measures: the seeded sample of whole input samples, pairwise
distances and blocks (torch, on the measure's device)."""

from __future__ import annotations

import numpy as np

from actkit._groups import SampleGroups
from actkit._rows import sample_rows
from actkit.errors import ValidationError

__all__ = ["sample_by_groups", "check_max_rows", "pairwise_sq_distances", "row_blocks", "check_k", "to_host"]

#: rows of one block of an (n x n) computation
BLOCK = 1024


def check_max_rows(max_rows):
    """``max_rows`` is None or an integer of at least 2 (one line otherwise)."""
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer))
                                 or max_rows < 2):
        raise ValidationError(f"max_rows must be an integer >= 2, got {max_rows!r}")


def sample_by_groups(n, groups, max_rows, random_state):
    """Sorted row indices of a seeded sample of input samples, at most ``max_rows`` rows.

    All rows when they all fit. Without ``groups`` (one row each), the first ``max_rows`` of
    ``np.random.default_rng(random_state).permutation(n)``. With ``groups``: an equal number ``r`` of
    rows from each of ``g`` input samples, ``r`` and ``g`` chosen for the most rows
    ``r g <= max_rows`` (ties: the smaller ``r``, more samples), ``g`` the samples with at
    least ``r`` rows, as many as fit: the samples, then ``r`` rows of each (in row order),
    drawn by :func:`actkit._rows.sample_rows` from one generator. Every sampled input sample
    then has as many rows as the others, so a permutation of whole input samples can move all
    of them (whole texts of varied length could only be re-paired with those of equal length).
    """
    if max_rows is None or (not isinstance(max_rows, bool) and isinstance(max_rows, (int, np.integer))
                            and max_rows >= n):
        check_max_rows(max_rows)
        return np.arange(n)
    check_max_rows(max_rows)
    rng = np.random.default_rng(random_state)
    if groups is None:
        return np.sort(rng.permutation(n)[:max_rows])
    samples = SampleGroups(groups, n)
    counts = samples.n_s
    r_all = np.arange(1, counts.max() + 1)
    at_least = np.searchsorted(np.sort(counts), r_all, side="left")
    g_all = np.minimum(counts.size - at_least, int(max_rows) // r_all)
    r = int(r_all[np.argmax(r_all * g_all)])          # argmax: the first, the smallest r
    eligible = np.flatnonzero(counts >= r)
    chosen = sample_rows(eligible, int(g_all[r - 1]), rng)
    by_sample, starts = samples.order, samples.offsets
    rows = [sample_rows(by_sample[starts[s]:starts[s + 1]], r, rng) for s in chosen]
    return np.sort(np.concatenate(rows))


def to_host(t):
    """A torch tensor as a float64 numpy array on the CPU (no copy where it is one already)."""
    return t.detach().cpu().numpy().astype(np.float64, copy=False)


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
