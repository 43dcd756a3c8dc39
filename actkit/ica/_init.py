"""Starting rotations: from the data (largest-norm whitened rows) and the warm start on a
row subsample."""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from actkit.ica._fixed_point import fixed_point
from actkit.ica._picard import picard_o
from actkit.ica._rotations import sym_decorrelation
from actkit._threads import small_linalg
from actkit.ica._reduce import whiten_rows
from actkit.ica._source import WhitenedSource, on_device


def data_init(source, rng, *, n_candidates=None, max_cos=0.5, chunk=256):
    """Initial rotation (k x k, orthogonal) from the whitened rows of largest norm.

    In a random rotation of many independent sources every estimated source is nearly
    Gaussian (central limit), the contrast is flat and the first tens of solver passes are
    spent leaving that flat region. A whitened row of unusually large norm is usually
    dominated by one large source value, so its direction overlaps that source far more
    than a random direction does (100,000 x 512 Laplace mixtures: Amari distance 0.16
    instead of 0.24 at the start, and half the passes to converge). The ``2k`` rows of
    largest norm are visited in decreasing norm; a row is kept when its |cos| with every
    row kept so far is below ``max_cos`` (repeated or near-repeated rows, common in
    activations, are skipped); missing rows are filled with Gaussian rows from ``rng``;
    the result is symmetrically decorrelated. One pass over the data (norms only)."""
    k, n = source.k, source.n
    rng = check_random_state(rng)
    m = min(n, n_candidates or 2 * k)
    best_rows, best_norms, _ = source.run(_norms_block, m, k, new=_no_rows, add=_add_rows, merge=_merge_rows,
                                       name="ica: start")
    order = np.argsort(-best_norms, kind="stable")
    V = best_rows[order]
    V = V[best_norms[order] > 0]
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    chosen = np.zeros((0, k))
    for s in range(0, V.shape[0], chunk):
        if chosen.shape[0] >= k:
            break
        C = V[s : s + chunk]
        if chosen.shape[0]:
            C = C[np.abs(C @ chosen.T).max(axis=1) < max_cos]
        G = np.abs(C @ C.T)
        picked = []
        for i in range(C.shape[0]):
            if all(G[i, j] < max_cos for j in picked):
                picked.append(i)
                if chosen.shape[0] + len(picked) >= k:
                    break
        chosen = np.concatenate([chosen, C[picked]])
    if chosen.shape[0] < k:
        chosen = np.concatenate([chosen, rng.normal(size=(k - chosen.shape[0], k))])
    return sym_decorrelation(chosen)


def warm_start(Zs, W, f, *, tol, max_iter, dtype, device, counter, rng=None):
    """Solve on a row subsample ``Zs`` (n_sub x k) and return a rotation for the full data.

    The subsample is re-whitened exactly (``C_s^{-1/2}``, symmetric) first: both the
    fixed-point and the orthogonal-group solver assume an identity covariance, and a
    subsample whitened with the full-data statistics is off by O(1/sqrt(n_sub)), enough to
    make the symmetric fixed point oscillate. The fixed point (cheap and fast on exactly
    white data) runs first; Picard-O takes over if it has not converged in 50 passes, or
    is still far from a fixed point after 10. ``W=None``: start from :func:`_data_init` of
    the re-whitened subsample."""
    Zs = np.asarray(Zs, dtype=np.float64)
    with small_linalg():     # one thread: the same bits whatever the thread count
        C = Zs.T @ Zs / Zs.shape[0]
        evals, evecs = np.linalg.eigh(C)
        R = (evecs * (1.0 / np.sqrt(np.clip(evals, 1e-12, None)))) @ evecs.T  # C_s^{-1/2}
    sub = WhitenedSource(Z=on_device(whiten_rows(Zs, np.zeros(Zs.shape[1]), R.T, dtype), device),
                         dtype=dtype, device=device)
    if W is None:
        W = data_init(sub, rng)
    W, n_fp, crit = fixed_point(sub, W, f, tol=tol, max_iter=min(50, max_iter), counter=counter, stall=10)
    n_pi = 0
    if not crit < tol:
        W, n_pi, _ = picard_o(sub, W, f, tol=tol, max_iter=max_iter, counter=counter)
    # sources Zs R W' -> unmixing of the full-data whitened rows is W R, made orthogonal
    return sym_decorrelation(W @ R), n_fp + n_pi


# the norms pass (stated once, run by the source's runner): the m whitened rows of largest norm
def _norms_block(Zb, use_torch, m, k):
    Zb = np.asarray(Zb.cpu().numpy() if use_torch else Zb, dtype=np.float64)
    return Zb, np.einsum("ij,ij->i", Zb, Zb)


def _top(a, b, m):
    rows, norms = np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])
    if norms.size > m:
        keep = np.argpartition(-norms, m - 1)[:m]
        rows, norms = rows[keep], norms[keep]
    return rows, norms


def _no_rows(rows, mean, Kt, dtype, use_torch, stat, m, k):
    return np.zeros((0, k), np.float64), np.zeros(0), m


def _add_rows(acc, item, first_row, *args):
    return (*_top(acc, item[1], acc[2]), acc[2])


def _merge_rows(a, b):
    return (*_top(a, b, a[2]), a[2])
