"""The fixed-point FastICA iterations: symmetric (sklearn's ``_ica_par``) and one-unit with
Gram-Schmidt deflation (sklearn's ``_ica_def``)."""

from __future__ import annotations

import numpy as np

from actkit.ica import _trace
from actkit.ica._rotations import sym_decorrelation
from actkit.ica._source import data_pass, deflation_pass


def fixed_point(source, W, f, *, tol, max_iter, counter=None, stall=None):
    """Symmetric fixed-point FastICA (sklearn's ``_ica_par``), sharing :func:`_pass`.

    With ``Y = Z W'`` and ``Z = Y W`` (W orthogonal), ``E[g(Y)' Z] = M W``, so the update
    ``W <- sym_decorrelation((M - diag(E[g'(Y)])) W)`` needs only the pass statistics.
    Stops when scikit-learn's criterion ``max | |diag(W_new W')| - 1 | < tol`` holds."""
    lim = np.inf
    it = 0
    for it in range(1, max_iter + 1):
        _, M, Egp = data_pass(source, W, f, need_loss=False)
        if counter:
            counter.tick(lim=f"{lim:.1e}")
        W1 = sym_decorrelation((M - np.diag(Egp)) @ W)
        lim = float(np.max(np.abs(np.abs(np.einsum("ij,ij->i", W1, W)) - 1.0)))
        W = W1
        if _trace.hook is not None:
            _trace.hook(W, it, lim, 0.0, source.n)
        if lim < tol:
            break
        if stall is not None and it >= stall and lim > 0.5:
            break  # still far from any fixed point (many sources, few rows): hand over to Picard-O
    return W, it, lim



def deflation(source, W_init, f, *, tol, max_iter, counter=None):
    """One-unit fixed-point FastICA with Gram-Schmidt deflation (sklearn's ``_ica_def``)."""
    k = W_init.shape[0]
    W = np.zeros((k, k))
    n_iters = []
    for j in range(k):
        w = W_init[j].astype(np.float64).copy()
        w /= np.linalg.norm(w)  # as scikit-learn: the first update is decorrelated, not the start
        it = 0
        for it in range(1, max_iter + 1):
            acc, gp_sum = deflation_pass(source, w, f)
            if counter:
                counter.tick(component=j)
            w1 = acc / source.n - (gp_sum / source.n) * w
            w1 -= W[:j].T @ (W[:j] @ w1)
            w1 /= np.linalg.norm(w1)
            lim = abs(abs(float(w1 @ w)) - 1.0)
            w = w1
            if lim < tol:
                break
        n_iters.append(it)
        W[j] = w
    return W, max(n_iters) if n_iters else 0, None
