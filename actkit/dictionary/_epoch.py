"""One training epoch (codes, then the sums ``A'A`` and ``A'X``) and the MOD dictionary step
with re-seeding of unused and duplicate atoms."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from actkit._device import is_accelerator
from actkit._threads import small_linalg
from actkit.dictionary._coding import code_sparse
from actkit.dictionary._torch import epoch_torch
from actkit.runners import RowPass

_DUP_COS = 0.95


class Epoch:
    """Accumulates A'A, A'X and the residual over the blocks of one pass (rows from
    ``offset`` on, for the positions of the worst rows)."""

    def __init__(self, D, keep_worst=0):
        n_components, n_features = D.shape
        self.D, self.G, self.keep, self.offset = D, D @ D.T, keep_worst, 0
        self.AtA = np.zeros((n_components, n_components))
        self.AtX = np.zeros((n_components, n_features))
        self.sq_res = 0.0
        self.sq_x = 0.0
        self.n = 0
        self.nnz = 0
        self.worst = None  # (residual norms, residual rows, row positions) of the worst rows seen

    def add(self, X, support, coef, keep_worst):
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
            cand = (rn[idx], R[idx], idx + (self.n - n + self.offset))
            if self.worst is not None:
                cand = tuple(np.concatenate([a, b]) for a, b in zip(self.worst, cand))
            if len(cand[0]) > keep_worst:
                top = np.argpartition(-cand[0], keep_worst - 1)[:keep_worst]
                cand = tuple(c[top] for c in cand)
            order = np.argsort(-cand[0], kind="stable")
            self.worst = tuple(c[order] for c in cand)




    def __getstate__(self):  # the dictionary stays with the caller (a worker's result travels without it)
        return {k: v for k, v in self.__dict__.items() if k not in ("D", "G")} | {"D": None, "G": None}


def epoch_pass(D, p, keep_worst, dtype, rows):
    """One dictionary pass for any runner (:mod:`actkit.runners`): codes with ``D`` for
    blocks of ``rows`` rows, then the MOD sums and the worst rows (an :class:`Epoch`)."""
    return RowPass(_epoch_new, _epoch_add, merge_epochs, (D, p, int(keep_worst), np.dtype(dtype)), int(rows),
                   name="dictionary: pass")


def _epoch_new(D, p, keep_worst, dtype):
    return Epoch(D, keep_worst)


def _epoch_add(ep, block, start, D, p, keep_worst, dtype):
    if ep.n == 0:
        ep.offset = start
    X = np.asarray(block, dtype=dtype)
    support, coef = code_sparse(X, D, ep.G, p)
    ep.add(X, support, coef, keep_worst)
    return ep


def merge_epochs(x, y):
    """The sums of ``x``'s rows then ``y``'s, as one :class:`Epoch` (the keep worst rows, worst first)."""
    out = Epoch.__new__(Epoch)
    out.D = out.G = None
    out.keep, out.offset = x.keep, x.offset
    out.AtA, out.AtX = x.AtA + y.AtA, x.AtX + y.AtX
    out.sq_res, out.sq_x = x.sq_res + y.sq_res, x.sq_x + y.sq_x
    out.n, out.nnz = x.n + y.n, x.nnz + y.nnz
    out.worst = x.worst if y.worst is None else y.worst if x.worst is None else None
    if x.worst is not None and y.worst is not None:  # as Epoch.add
        cand = tuple(np.concatenate([u, v]) for u, v in zip(x.worst, y.worst))
        if len(cand[0]) > x.keep:
            top = np.argpartition(-cand[0], x.keep - 1)[: x.keep]
            cand = tuple(c[top] for c in cand)
        order = np.argsort(-cand[0], kind="stable")
        out.worst = tuple(c[order] for c in cand)
    return out


def epoch(blocks, D, p, keep_worst, device="cpu"):
    """One pass over ``blocks`` in this process (the GPU codes them with torch)."""
    if is_accelerator(device):
        return epoch_torch(blocks, D, p, keep_worst, device)
    ep = Epoch(D, keep_worst)
    for X in blocks:
        _epoch_add(ep, X, ep.n, D, p, keep_worst, X.dtype)
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
