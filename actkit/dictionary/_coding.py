"""The sparse codes on numpy: top-k (batched orthogonal matching pursuit) and L1 (FISTA)."""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg


def topk_code(X, D, G, k, positive):
    """Top-k code by batched orthogonal matching pursuit.

    ``k`` greedy steps for all rows at once: add the atom most correlated with the current
    residual, refit the coefficients on the support by least squares (batched ``j x j``
    solves), update the residual correlations through the Gram matrix ``G = D D'``
    (``c = C - coef @ G[support]``, no pass over the features).

    Returns ``support`` (n, k) int and ``coef`` (n, k) in X's dtype."""
    C = X @ D.T  # (n, n_components) correlations
    n = X.shape[0]
    rows = np.arange(n)[:, None]
    support = np.empty((n, k), dtype=np.int64)
    c = C
    coef = None
    for j in range(k):
        score = c.copy() if positive else np.abs(c)
        if j:
            score[rows, support[:, :j]] = -np.inf
        support[:, j] = score.argmax(axis=1)
        S = support[:, : j + 1]
        b = np.take_along_axis(C, S, axis=1)
        if j == 0:
            coef = b / G[S[:, 0], S[:, 0]][:, None]
        else:
            Gs = G[S[:, :, None], S[:, None, :]]
            Gs += (1e-6 * np.eye(j + 1, dtype=Gs.dtype))[None]
            coef = _batched_spd_solve(Gs, b)
        if positive:
            np.maximum(coef, 0, out=coef)
        if j + 1 < k:  # correlations of the residual: one GEMM beats gathering G[S]
            R = X - np.einsum("nj,njd->nd", coef.astype(X.dtype), D[S])
            c = R @ D.T
    return support, coef.astype(X.dtype, copy=False)


def _batched_spd_solve(A, b):
    """Solve ``A[i] x[i] = b[i]`` for many small SPD systems (n, m, m) at once.

    Gaussian elimination vectorised over the batch (no pivoting: the matrices are Gram
    matrices plus a ridge); for m <= ~16 this is far faster than a LAPACK call per system."""
    A = A.astype(np.float64)
    x = b.astype(np.float64)
    m = A.shape[1]
    for j in range(m):
        piv = A[:, j, j].copy()
        piv[np.abs(piv) < 1e-300] = 1e-300
        f = A[:, j + 1 :, j] / piv[:, None]  # (n, m-j-1)
        A[:, j + 1 :, j:] -= f[:, :, None] * A[:, None, j, j:]
        x[:, j + 1 :] -= f * x[:, j, None]
    for j in range(m - 1, -1, -1):
        x[:, j] = (x[:, j] - np.einsum("ij,ij->i", A[:, j, j + 1 :], x[:, j + 1 :])) / A[:, j, j]
    return x


def l1_code(X, D, G, alpha, positive, n_iter=100):
    """Lasso codes for every row by FISTA. Returns a dense (n, n_components) array."""
    if D.shape[0] <= 512:  # small n_components x n_components products: one BLAS thread is faster
        with small_linalg():
            return _l1_code_inner(X, D, G, alpha, positive, n_iter)
    return _l1_code_inner(X, D, G, alpha, positive, n_iter)


def _l1_code_inner(X, D, G, alpha, positive, n_iter):
    L = float(np.linalg.eigvalsh(G.astype(np.float64))[-1]) or 1.0
    C = X @ D.T
    A = fista(C, G, L, alpha, positive, n_iter, np.zeros_like(C), relu=lambda v: np.maximum(v, 0), sign=np.sign)
    return A.astype(X.dtype, copy=False)


def fista(C, G, L, alpha, positive, n_iter, A, *, relu, sign):
    """FISTA on the lasso codes of rows: ``n_iter`` steps from ``A`` (n, n_components), with
    ``C = X @ D.T``, ``G = D @ D.T`` and ``L`` the largest eigenvalue of ``G``; numpy arrays or
    torch tensors alike (``relu``, ``sign``: the library's)."""
    Y = A
    t = 1.0
    thr = alpha / L
    for _ in range(n_iter):
        V = Y - (Y @ G - C) / L
        A_new = relu(V - thr) if positive else sign(V) * relu(abs(V) - thr)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        Y = A_new + ((t - 1.0) / t_new) * (A_new - A)
        A, t = A_new, t_new
    return A


def dense_codes(support, coef, n_components, dtype):
    A = np.zeros((support.shape[0], n_components), dtype=dtype)
    np.put_along_axis(A, support, coef, axis=1)
    return A


# ----------------------------------------------------------------------------- torch kernels
# The same code and dictionary-statistics steps on torch tensors, for ``device="cuda"`` (and
# any other torch device). The MOD update itself (an n_components x n_components solve) stays on the
# CPU in float64. Tested on CPU tensors against the numpy kernels.




def code_sparse(X, D, G, p):
    """Codes as (support (n, m), coef (n, m)): m = k for top-k, all atoms for L1."""
    if p["code"] == "topk":
        return topk_code(X, D, G, p["k"], p["positive"])
    A = l1_code(X, D, G, p["alpha"], p["positive"])
    support = np.broadcast_to(np.arange(D.shape[0]), A.shape)
    return np.ascontiguousarray(support), A


def code_block(X, D, G, p):
    support, coef = code_sparse(X, D, G, p)
    return dense_codes(support, coef, D.shape[0], X.dtype)
