"""The neighbour-list structures of the kNN measures (``mutual_knn``, ``jaccard_knn``, ``cknna``):
each side's neighbour lists computed once on the row sample, then re-indexed under a
permutation of the input samples or walked with the multiplicities of a bootstrap resample
(the rules: :mod:`actkit.measures._structures`). numpy on the CPU, one BLAS thread per task.
"""

from __future__ import annotations

import numpy as np

from actkit.measures._rowtools import to_host
from actkit.measures.knn import _neighbours, _normalised, cknna_from_lists

__all__ = ["KnnStructure", "CknnaStructure"]


class KnnStructure:
    """Both sides' neighbour lists (each row's ``depth`` nearest, cosine, self excluded)."""

    def __init__(self, a, b, layout, k=10, kind="mutual_knn", permutations=True, bootstrap=True):
        self.k, self.kind, self.layout = int(k), kind, layout
        n = layout.n
        self.depth = min(n - 1, max(4 * self.k, self.k + 32)) if bootstrap else self.k
        X, Y = _normalised(a), _normalised(b)
        self.lists = [_neighbours(Z, self.depth)[1].cpu().numpy() for Z in (X, Y)]
        if bootstrap:
            self.rows = [to_host(X), to_host(Y)]
            sid = layout.sid
            self.same = [sid[L] == sid[:, None] for L in self.lists]
            self.match = _positions(self.lists[0], self.lists[1])
            self._deep = {}

    @staticmethod
    def nbytes(n, permutations, bootstrap):
        return n * 64 * 40 + (16 * n * 2 if bootstrap else 0)

    def _score(self, overlap, weights):
        c = overlap.astype(np.float64)
        per = c / self.k if self.kind == "mutual_knn" else c / (2 * self.k - c)
        return float(np.dot(weights, per) / weights.sum())

    def permuted(self, r):
        k = self.k
        inv = np.empty_like(r)
        inv[r] = np.arange(r.size)
        la = self.lists[0][:, :k]
        lb = inv[self.lists[1][r, :k]]
        overlap = (la[:, :, None] == lb[:, None, :]).any(-1).sum(1)
        return self._score(overlap, np.ones(r.size))

    def _taken(self, side, wr, rows=slice(None)):
        L, same = self.lists[side][rows], self.same[side][rows]
        c = np.where(same, 1.0, wr[L])
        cum = np.cumsum(c, axis=1)
        return np.clip(self.k - (cum - c), 0.0, c), cum[:, -1]

    def resampled(self, m):
        wr = self.layout.row_weights(m)
        ta, da = self._taken(0, wr)
        tb, db = self._taken(1, wr)
        at_b = np.where(self.match >= 0, np.take_along_axis(tb, np.maximum(self.match, 0), axis=1), 0.0)
        overlap = np.minimum(ta, at_b).sum(1)
        short = np.flatnonzero((wr > 0) & ((da < self.k) | (db < self.k)))
        for i in short:                  # lists too short for this resample: the full order
            overlap[i] = self._deep_overlap(i, wr)
        return self._score(overlap, wr)

    def _deep_overlap(self, i, wr):
        sid = self.layout.sid
        taken = []
        for side in (0, 1):
            order = self._deep.get((side, i))
            if order is None:
                X = self.rows[side]
                sim = X @ X[i]
                sim[i] = -np.inf
                order = self._deep[(side, i)] = np.argsort(-sim, kind="stable")[:-1]
            c = np.where(sid[order] == sid[i], 1.0, wr[order])
            cum = np.cumsum(c)
            t = np.zeros(wr.size)
            t[order] = np.clip(self.k - (cum - c), 0.0, c)
            taken.append(t)
        return np.minimum(taken[0], taken[1]).sum()


def _positions(la, lb, block=256):
    """``(n, K)``: where row ``i``'s ``s``-th neighbour of A stands in its list of B (-1: not
    there)."""
    out = np.full(la.shape, -1, dtype=np.int64)
    for s in range(0, la.shape[0], block):
        eq = la[s:s + block, :, None] == lb[s:s + block, None, :]
        hit = eq.any(-1)
        out[s:s + block][hit] = eq.argmax(-1)[hit]
    return out


class CknnaStructure(KnnStructure):
    """CKNNA's neighbour lists with their kernel values. A permutation re-indexes the ``k``
    nearest of each side. A bootstrap resample walks each row's list as ``mutual_knn`` does
    (copies of another sample's row taken in copy order, never a row of another copy of its
    own sample), so each list entry ``i -> j`` holds ``t_ij`` copies of ``j``; the unbiased
    HSIC of the masked kernels over the ``N = sum m_s n_s`` resampled rows then reads
    (per copy of ``i``, summed over its ``w_i`` copies):

    * the sums ``sum K~ = sum_ij w_i t_ij K_ij``, the column sums of ``K~`` against the row
      sums of ``L~``: ``sum_j (sum_i w_i t_ij K_ij) (sum_l t_jl L_jl)``;
    * ``sum K~ * L~^T``: entry ``i -> j`` with its transpose ``j -> i``, ``t_ij t_ji`` copy
      pairs across samples, ``w_i t_ij t_ji`` within one (only a copy with itself).

    Where no sample is drawn twice this is CKNNA recomputed on the drawn rows."""

    def __init__(self, a, b, layout, k=10, permutations=True, bootstrap=True):
        self.top = [_neighbours(_normalised(X), int(k)) for X in (a, b)] if permutations else None
        self.k, self.kind, self.layout = int(k), "cknna", layout
        if bootstrap:
            self.rows = [_normalised(X) for X in (a, b)]
            self._lists(min(layout.n - 1, max(4 * self.k, self.k + 32)))

    def _lists(self, depth):
        """Both sides' lists at ``depth``, their kernel values, and the transposed entries."""
        self.depth = depth
        found = [_neighbours(Z, depth) for Z in self.rows]
        self.lists = [i.cpu().numpy() for _, i in found]
        self.kv = [to_host(v) for v, _ in found]                 # K at A's entries, L at B's
        sid = self.layout.sid
        self.same = [sid[L] == sid[:, None] for L in self.lists]
        self.match = _positions(self.lists[0], self.lists[1])
        self.l_at_a = np.where(self.match >= 0, np.take_along_axis(self.kv[1], np.maximum(self.match, 0), 1), 0.0)
        self.trans = [_transposed(L) for L in self.lists]

    @staticmethod
    def nbytes(n, permutations, bootstrap):
        return n * 16 * 40 + (n * 64 * 8 * 8 if bootstrap else 0)

    def permuted(self, r):
        import torch  # torch: ~1.2 s at import (measured); only with a row-based measure

        (ka, ia), (lb, ib) = self.top
        rt = torch.as_tensor(r, device=ia.device)
        inv = torch.empty_like(rt)
        inv[rt] = torch.arange(rt.numel(), device=ia.device)
        return cknna_from_lists(ka, ia, lb[rt], inv[ib[rt]])

    def resampled(self, m):
        wr = self.layout.row_weights(m)
        while True:
            (ta, da), (tb, db) = self._taken(0, wr), self._taken(1, wr)
            if self.depth >= self.layout.n - 1 or not np.any((wr > 0) & ((da < self.k) | (db < self.k))):
                break
            self._lists(min(self.layout.n - 1, 2 * self.depth))    # a list ran short: deeper
        tb_at_a = np.where(self.match >= 0, np.take_along_axis(tb, np.maximum(self.match, 0), axis=1), 0.0)
        mutual = np.minimum(ta, tb_at_a)
        N = wr.sum()
        kl = self._hsic(0, mutual, self.kv[0], self.l_at_a, wr, N)
        kk = self._hsic(0, ta, self.kv[0], self.kv[0], wr, N)
        ll = self._hsic(1, tb, self.kv[1], self.kv[1], wr, N)
        return float(kl / (np.sqrt(kk * ll) + 1e-6))

    def _hsic(self, side, t, kv, lv, wr, N):
        """platonic-rep's ``hsic_unbiased(K~, L~)`` of the resampled rows' masked kernels:
        entries of ``side``'s lists holding ``t`` copies, values ``kv`` (K) and ``lv`` (L)."""
        L, same, tr = self.lists[side], self.same[side], self.trans[side]
        wt = wr[:, None] * t
        s_k, s_l = np.sum(wt * kv), np.sum(wt * lv)
        col_k = np.bincount(L.ravel(), weights=(wt * kv).ravel(), minlength=wr.size)
        row_l = np.sum(t * lv, axis=1)
        t_back = np.where(tr >= 0, t.ravel()[np.maximum(tr, 0)], 0.0)
        pairs = t * t_back * np.where(same, wr[:, None], 1.0)
        trans = np.sum(pairs * kv * lv)
        value = trans + s_k * s_l / ((N - 1) * (N - 2)) - 2 * np.dot(col_k, row_l) / (N - 2)
        return value / (N * (N - 3))


def _transposed(L):
    """``(n, K)``: the flat index in ``L`` of entry ``j -> i`` for each entry ``i -> j``
    (-1: ``i`` is not in ``j``'s list)."""
    n, K = L.shape
    key = L.astype(np.int64) * n + np.arange(n)[:, None]          # (j, i) of entry i -> j
    own = np.arange(n)[:, None] * n + L.astype(np.int64)          # (i, j) of each entry
    order = np.argsort(own.ravel(), kind="stable")
    sorted_own = own.ravel()[order]
    pos = np.clip(np.searchsorted(sorted_own, key.ravel()), 0, sorted_own.size - 1)
    hit = sorted_own[pos] == key.ravel()
    return np.where(hit, order[pos], -1).reshape(n, K)
