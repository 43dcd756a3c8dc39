"""diam(B): the exact largest pairwise distance between rows, and the summed l2 error."""

from __future__ import annotations

import math

import numpy as np

from actkit._rows import sample_rows


def diameter(X, *, max_rows=None, random_state=0, block_rows=2048, return_info=False):
    """Largest pairwise Euclidean distance between rows of ``X`` (exact, in chunks).

    Exact algorithm: a double-sweep lower bound ``d``, then only pairs whose radii about the
    centroid can reach ``d`` (``r_i + r_j >= d``) are scanned, chunk by chunk with float32
    (or float64) GEMMs; the winning pair is re-measured in float64. Without outlying rows
    this is the full O(N^2 D) scan, halved by symmetry.

    Parameters
    ----------
    X : array-like of shape (n_rows, n_features)
    max_rows : int, optional
        If ``n_rows > max_rows``, use the exact diameter of ``max_rows`` rows drawn at random
        (a lower bound of the true diameter, recorded as ``"sampled"``).
    random_state : int, default=0
    block_rows : int, default=2048
    return_info : bool, default=False
        Also return ``{"method": "exact"|"sampled", "rows": used, "of_rows": n}``.

    Returns
    -------
    float (and dict)
    """
    X = np.asarray(X)
    n = X.shape[0]
    info = {"method": "exact", "rows": n, "of_rows": n}
    if max_rows is not None and n > max_rows:
        X = X[sample_rows(n, max_rows, random_state)]
        info = {"method": "sampled", "rows": int(max_rows), "of_rows": n}
    d = _exact_diameter(X, block_rows) if X.shape[0] > 1 else 0.0
    return (d, info) if return_info else d


def _exact_diameter(X, block_rows):
    dt = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    c = X.mean(axis=0, dtype=np.float64)
    Xc = (X - c.astype(dt)).astype(dt, copy=False)
    sq = np.einsum("ij,ij->i", Xc, Xc, dtype=np.float64)
    # double sweep lower bound
    i = int(np.argmax(sq))
    best, pair = 0.0, (0, 0)
    for _ in range(3):
        dist = sq - 2.0 * (Xc @ Xc[i]).astype(np.float64) + sq[i]
        j = int(np.argmax(dist))
        if dist[j] <= best:
            break
        best, pair, i = float(dist[j]), (i, j), j
    lb = math.sqrt(best)
    order = np.argsort(-sq)
    r = np.sqrt(sq[order])
    Xs = Xc[order]
    sqs = sq[order].astype(dt)
    n = Xs.shape[0]
    start = 0
    while start < n and r[start] >= lb / 2:
        stop = min(n, start + block_rows)
        # a pair (i <= j in radius order) can beat lb only if r_i + r_j >= lb, and then it
        # is scanned here, in i's chunk: columns j in [start, hi), r_j >= lb - r[start]
        hi = int(np.searchsorted(-r, -(lb - r[start]), side="right"))
        if hi > start:
            D2 = Xs[start:stop] @ Xs[start:hi].T        # Gram, then in place:
            D2 *= -2                                    # |x_i|^2 + |x_j|^2 - 2 x_i.x_j
            D2 += sqs[None, start:hi]
            D2 += sqs[start:stop, None]
            k = int(np.argmax(D2))
            a, b = divmod(k, hi - start)
            if float(D2[a, b]) > best:
                best = float(D2[a, b])
                pair = (int(order[start + a]), int(order[start + b]))
                lb = math.sqrt(best)
        start = stop
    i, j = pair
    diff = X[i].astype(np.float64) - X[j].astype(np.float64)
    return float(np.sqrt(diff @ diff))


def summed_l2(pred, target):
    """Sum over rows of ``||pred_i - target_i||_2`` (float64)."""
    diff = pred - target
    return float(np.sqrt(np.einsum("ij,ij->i", diff, diff, dtype=np.float64)).sum())
