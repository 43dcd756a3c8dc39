"""One training epoch (codes, then the sums ``A'A`` and ``A'X``) and the MOD dictionary step
with re-seeding of unused and duplicate atoms."""

from __future__ import annotations

import numpy as np

from actkit._device import is_accelerator
from actkit._threads import small_linalg
from actkit.dictionary._coding import code_sparse
from actkit.dictionary._torch import epoch_torch

_DUP_COS = 0.95


class Epoch:
    """Accumulates A'A, A'X and the residual over the blocks of one pass."""

    def __init__(self, D):
        n_components, n_features = D.shape
        self.D = D
        self.AtA = np.zeros((n_components, n_components))
        self.AtX = np.zeros((n_components, n_features))
        self.sq_res = 0.0
        self.sq_x = 0.0
        self.n = 0
        self.nnz = 0
        self.worst = None  # (residual norms, residual rows, row positions) of the worst rows seen

    def add(self, X, support, coef, keep_worst):
        from scipy import sparse

        K = self.D.shape[0]
        n, k = support.shape
        A = sparse.csr_matrix((coef.ravel(), support.ravel(), np.arange(0, n * k + 1, k)), shape=(n, K))
        R = X - A @ self.D  # sparse (n x K) @ dense: only the k active atoms per row
        rn = np.einsum("ij,ij->i", R, R)
        At = A.T.tocsr()
        self.AtA += (At @ A).toarray()
        self.AtX += At @ X
        self.sq_res += float(rn.sum(dtype=np.float64))
        self.sq_x += float(np.einsum("ij,ij->", X, X, dtype=np.float64))
        self.n += n
        self.nnz += int(np.count_nonzero(coef))
        if keep_worst:
            # the keep_worst worst-reconstructed rows so far (worst first; re-seeding samples them)
            m = min(keep_worst, len(rn))
            idx = np.argpartition(-rn, m - 1)[:m] if m < len(rn) else np.arange(len(rn))
            cand = (rn[idx], R[idx], idx + (self.n - n))
            if self.worst is not None:
                cand = tuple(np.concatenate([a, b]) for a, b in zip(self.worst, cand))
            if len(cand[0]) > keep_worst:
                top = np.argpartition(-cand[0], keep_worst - 1)[:keep_worst]
                cand = tuple(c[top] for c in cand)
            order = np.argsort(-cand[0], kind="stable")
            self.worst = tuple(c[order] for c in cand)




def epoch(blocks, D, p, keep_worst, device="cpu"):
    if is_accelerator(device):
        return epoch_torch(blocks, D, p, keep_worst, device)
    G = D @ D.T
    ep = Epoch(D)
    for X in blocks:
        support, coef = code_sparse(X, D, G, p)
        ep.add(X, support, coef, keep_worst)
    return ep


def update(D, ep, rng):
    """MOD step + re-seeding of unused and duplicate atoms. Returns (D_new, n_reseeded)."""
    with small_linalg():
        return _update_inner(D, ep, rng)


def _update_inner(D, ep, rng):
    K = D.shape[0]
    AtA = ep.AtA
    used = np.diag(AtA) > 1e-10 * max(1.0, np.trace(AtA) / K)
    ridge = 1e-6 * max(np.trace(AtA) / K, 1e-12)
    D_new = np.linalg.solve(AtA + ridge * np.eye(K), ep.AtX)
    D_new[~used] = D[~used]
    norms = np.linalg.norm(D_new, axis=1)
    bad = norms < 1e-12
    D_new[bad] = D[bad]
    D_new /= np.linalg.norm(D_new, axis=1, keepdims=True)
    cos = np.abs(D_new @ D_new.T)
    np.fill_diagonal(cos, 0)
    upper = np.triu(cos > _DUP_COS, 1)
    dup = upper.any(axis=0)  # the later atom of a near-duplicate pair
    reseed = np.flatnonzero((~used) | dup | bad)
    if len(reseed) and ep.worst is not None:
        # a random sample of the worst-reconstructed rows (not the very worst few: those often
        # share one missing atom, and atoms seeded from alike rows collide again)
        pool = ep.worst[1][: max(4 * len(reseed), K // 2)]
        R = pool[rng.permutation(len(pool))]
        rn = np.linalg.norm(R, axis=1)
        ok = rn > 1e-12
        take = reseed[: int(ok.sum())]
        D_new[take] = R[ok][: len(take)] / rn[ok][: len(take), None]
    return D_new.astype(D.dtype, copy=False), len(reseed)
