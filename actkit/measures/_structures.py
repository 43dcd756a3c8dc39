"""Pairwise structures of the row-based measures, computed once on their row sample, and the
measures' values under a permutation or a bootstrap resample of whole input samples.

A permutation re-pairs the input samples of B with those of A: the rows of each side, hence
their RDMs, neighbour lists and distance / kernel matrices, are unchanged; only B's indices
move (``r``: the row of B paired with row ``i`` of A). A bootstrap resample changes only the
multiplicity ``m_s`` of each input sample. Each drawn copy of a sample counts as a distinct
input sample that no row meets through another copy of itself:

* ``rsa``: the RDMs' upper triangles with each pair of rows weighted by how often it occurs
  (``m_s m_t`` for rows of samples ``s != t``, ``m_s`` for two rows of one sample), the
  pairs of a row with its own copies, and of two copies of one sample, left out (as
  rsatoolbox's pattern bootstrap leaves out a pattern's self-pairs); weighted average ranks
  from the order sorted once;
* ``mutual_knn``, ``jaccard_knn``: each row's neighbour list walked in its order computed
  once, taking ``m_t`` copies of a row of another sample and one of a row of its own sample
  (never a row of another copy of its own sample), until ``k``; overlaps count copies
  (a multiset: the copies of a row are tied);
* ``dcor``, ``rbf_cka``: the V-statistics of the resampled rows, duplicates included (their
  definitions; a copy's distance 0 is part of them), from the matrices weighted by the row
  multiplicities; ``rbf_cka`` takes the median bandwidth of the resampled rows anew;
* ``cknna``: its neighbour lists walked as ``mutual_knn``'s (a row's copies taken in copy
  order), the unbiased HSIC of the masked kernels summed over the copies
  (:class:`~actkit.measures._knn_structures.CknnaStructure`).

The neighbour-list structures live in :mod:`actkit.measures._knn_structures`; the rows'
grouping every structure takes (``layout``) is :class:`actkit._groups.SampleGroups`.

Everything here runs in numpy on the CPU at one BLAS thread per task (the structures are
built on the measures' device), so the digits do not depend on the thread count. Used by
:func:`actkit.inference.infer_rows`.
"""

from __future__ import annotations

import numpy as np

from actkit.measures._knn_structures import CknnaStructure, KnnStructure
from actkit.measures._rowtools import pairwise_sq_distances, row_blocks, to_host
from actkit.measures.cka import _median
from actkit.measures.distance_correlation import _centred_sums, _distances
from actkit.measures.rsa import _average_ranks, _rdm_upper

#: the structures of one measure are kept up to this many bytes; above, a resample recomputes
#: the measure from the resampled rows
STRUCTURE_BYTES = 2 << 30


#: rows of one step of :func:`_permuted_dot` (a constant: the same digits at any thread count)
DOT_ROWS = 32


def _permuted_dot(Fa, Fb, r):
    """``sum_ij Fa[i, j] Fb[r_i, r_j]`` of two symmetric matrices, in steps of rows: twice the
    part right of each step's diagonal block plus that block (half the gathers of the full
    sum); each step's gather of ``Fb`` stays in cache for its product (3x faster than
    gathering all of ``Fb[r][:, r]`` first)."""
    off, diag = 0.0, 0.0
    for lo in range(0, r.size, DOT_ROWS):
        hi = min(r.size, lo + DOT_ROWS)
        rows = Fb.take(r[lo:hi], 0)
        diag += np.vdot(Fa[lo:hi, lo:hi], rows.take(r[lo:hi], 1))
        off += np.vdot(Fa[lo:hi, hi:], rows.take(r[hi:], 1))
    return 2.0 * off + diag


# ---------------------------------------------------------------------------------------- RSA
class RSAStructure:
    """RSA's RDMs of the row sample: value under ``r`` from the (ranked) RDMs as full
    matrices; bootstrap values from the upper triangles sorted once, each pair's weight read
    from a (G, G) table of sample pairs in that order."""

    def __init__(self, a, b, layout, method="spearman", permutations=True, bootstrap=True):
        self.method, self.layout = method, layout
        n = layout.n
        iu, ju = np.triu_indices(n, 1)
        block = (layout.sid[iu] * layout.G + layout.sid[ju]).astype(np.int32) if bootstrap else None
        self.sides, centred = [], []
        for X in (a, b):
            v = _rdm_upper(X)
            t = to_host(_average_ranks(v) if method == "spearman" else v)
            centred.append(t - t.mean())
            if bootstrap:
                self.sides.append(_Side(to_host(v), block, method))
        self.den = float(np.linalg.norm(centred[0]) * np.linalg.norm(centred[1]))
        if permutations:
            self.full = []
            for tc in centred:
                F = np.zeros((n, n))
                F[iu, ju] = tc
                self.full.append(F + F.T)
        if bootstrap:                 # B's sorted position of each pair, in A's sorted order
            pos_b = np.empty(iu.size, dtype=np.int64)
            pos_b[self.sides[1].order] = np.arange(iu.size)
            self.a_to_b = pos_b[self.sides[0].order].astype(self.sides[0].order.dtype)
            self.counts_i = np.bincount(block, minlength=layout.G ** 2).astype(np.int64)
            self.counts = self.counts_i.astype(np.float64)
            for side in self.sides:
                side.order = None

    @staticmethod
    def nbytes(n, permutations, bootstrap):
        m = n * (n - 1) // 2
        return 16 * n * n * bool(permutations) + 40 * m * bool(bootstrap) + 32 * m

    def permuted(self, r):
        Fa, Fb = self.full
        return float(0.5 * _permuted_dot(Fa, Fb, r) / self.den)

    def resampled(self, m):
        sa, sb = self.sides
        if self.method == "spearman" and not (sa.ties or sb.ties):
            return self._spearman_untied(np.asarray(m, dtype=np.int64))
        m = np.asarray(m, dtype=np.float64)
        M = np.outer(m, m)
        M[np.diag_indices_from(M)] = m          # two rows of one sample: once per drawn copy
        Mf = M.ravel()
        (xa, wa), (xb, wb) = (s.weighted(Mf) for s in self.sides)
        wxa = wa * xa
        num = np.dot(wxa, xb.take(self.a_to_b))
        den = np.sqrt(np.dot(wxa, xa) * np.dot(wb * xb, xb))
        return float(num / den) if den > 0 else float("nan")

    def _spearman_untied(self, m):
        """Spearman without ties, in integers: a pair drawn ``w`` times holds ranks
        ``c - w + 1 .. c`` (``c``: the cumulative weight in its side's order), twice its average
        less twice the mean ``(W + 1) / 2`` is ``2c - w - W``; the spread of the ranks about
        the mean is ``W (W^2 - 1) / 12`` less that within each pair's copies, ``sum (w^3 - w) /
        12``, read from the sample-pair table. A's side in steps of :data:`RANK_STEP` pairs (in
        cache); B's cumulative weights gathered into A's order (int32 where they fit)."""
        M = np.outer(m, m)
        M[np.diag_indices_from(M)] = m
        Mi = M.ravel()
        W = int(self.counts_i @ Mi)
        Mf = Mi.astype(np.float64)
        var = (float(W) * (float(W) * W - 1) - float(self.counts @ (Mf ** 3 - Mf))) / 12
        if not var > 0:
            return float("nan")
        sa, sb = self.sides
        w_a = Mi.take(sa.k)
        ca, cb = _cumsum(w_a), _cumsum(Mi.take(sb.k))
        if W < 2 ** 31:
            cb = cb.astype(np.int32)
        num = 0.0
        for lo in range(0, sa.k.size, RANK_STEP):
            wa = w_a[lo:lo + RANK_STEP]
            x = ca[lo:lo + RANK_STEP] * 2
            x -= wa
            x -= W
            x *= wa                              # 2 w (r_a - mean)
            y = cb.take(self.a_to_b[lo:lo + RANK_STEP]).astype(np.int64)
            y *= 2
            y -= wa                              # 2 r_b
            num += float(np.dot(x.astype(np.float64), y.astype(np.float64)))
        return float(num / 4 / var)


def _cumsum(w):
    """Exact cumulative sums of int64 weights (torch's loop: ~3x numpy's, measured)."""
    import torch  # torch: ~1.2 s at import (measured); only with a row-based measure

    return torch.cumsum(torch.from_numpy(w), 0).numpy()


#: pairs of one step of :meth:`RSAStructure._spearman_untied` (a constant: the same digits at
#: any thread count)
RANK_STEP = 1 << 16


class _Side:
    """One side's RDM upper triangle in its sorted order: each pair's sample-pair index
    (``k``), its groups of ties, and (Pearson) its values."""

    def __init__(self, v, block, method):
        self.method = method
        order = np.argsort(v, kind="stable")
        idx = np.int32 if v.size < 2 ** 31 else np.int64
        self.order = order.astype(idx)
        self.k = block[order]
        sv = v[order]
        self.v = sv if method != "spearman" else None
        new = np.r_[True, np.diff(sv) != 0]
        self.ties = not new.all()
        if self.ties:
            self.starts = np.flatnonzero(new)
            self.group = (np.cumsum(new) - 1).astype(idx)

    def weighted(self, Mf):
        """``(x, w)`` in sorted order: the centred weighted average ranks (or values) and
        the pairs' weights."""
        w = Mf.take(self.k)
        W = w.sum()
        if self.method != "spearman":
            return self.v - np.dot(w, self.v) / W, w
        if self.ties:
            gw = np.add.reduceat(w, self.starts)
            ranks = (np.cumsum(gw) - (gw - 1) / 2)[self.group]
        else:
            ranks = np.cumsum(w)
            ranks -= 0.5 * w
            ranks += 0.5
        ranks -= (W + 1) / 2                      # the weighted mean of average ranks
        return ranks, w


# ---------------------------------------------------------------------------------------- dcor
class DcorStructure:
    """The two distance matrices ``D``, ``E`` of the row sample (as dcor forms them)."""

    def __init__(self, a, b, layout, unbiased=False, permutations=True, bootstrap=True):
        self.unbiased, self.layout = bool(unbiased), layout
        n = layout.n
        mats = []
        for X in (a - a.mean(0), b - b.mean(0)):
            mats.append(np.concatenate([to_host(_distances(X, s, e)) for s, e in row_blocks(n)]))
        self.D, self.E = mats
        self.r, self.s = self.D.sum(1), self.E.sum(1)
        self.DE, self.DD, self.EE = self.D * self.E, self.D * self.D, self.E * self.E
        self.xx = self._centred(self.DD.sum(), self.r @ self.r, self.r.sum(), self.r.sum(), n)
        self.yy = self._centred(self.EE.sum(), self.s @ self.s, self.s.sum(), self.s.sum(), n)

    @staticmethod
    def nbytes(n, permutations, bootstrap):
        return 5 * 8 * n * n

    def _centred(self, p, rs, rsum, ssum, n):
        return _centred_sums(p, rs, rsum, ssum, n, self.unbiased)

    def _finish(self, xy, xx, yy):
        den = np.sqrt(xx * yy)
        if not den > 0:
            return 0.0
        r2 = xy / den
        return float(r2) if self.unbiased else float(np.sqrt(max(r2, 0.0)))

    def permuted(self, r):
        n = r.size
        xy = self._centred(_permuted_dot(self.D, self.E, r), self.r @ self.s[r], self.r.sum(),
                           self.s.sum(), n)
        return self._finish(xy, self.xx, self.yy)

    def resampled(self, m):
        w = self.layout.row_weights(m)
        N = w.sum()
        Dw, Ew = self.D @ w, self.E @ w
        rs, rsum, ssum = np.dot(w, Dw * Ew), np.dot(w, Dw), np.dot(w, Ew)
        xy = self._centred(w @ (self.DE @ w), rs, rsum, ssum, N)
        xx = self._centred(w @ (self.DD @ w), np.dot(w, Dw * Dw), rsum, rsum, N)
        yy = self._centred(w @ (self.EE @ w), np.dot(w, Ew * Ew), ssum, ssum, N)
        return self._finish(xy, xx, yy)


# ---------------------------------------------------------------------------------------- rbf_cka
class RbfCkaStructure:
    """The squared distances and Gaussian kernels of the row sample (Kornblith et al.'s
    ``gram_rbf``, median bandwidth)."""

    def __init__(self, a, b, layout, sigma=0.8, permutations=True, bootstrap=True):
        self.sigma, self.layout = float(sigma), layout
        self.d2 = [to_host(pairwise_sq_distances(X)) for X in (a, b)]
        self.K = [np.exp(d * (-1.0 / (2.0 * self.sigma ** 2 * _median(_t(d))))) for d in self.d2]
        n = layout.n
        self.rk = [K.sum(1) for K in self.K]
        self.kk = [self._dot(K, K, rk, rk, n) for K, rk in zip(self.K, self.rk)]
        if bootstrap:
            iu, ju = np.triu_indices(n, 1)
            self.sorted = []
            for d in self.d2:
                v = d[iu, ju]
                order = np.argsort(v, kind="stable")
                self.sorted.append((v[order], iu[order].astype(np.int32), ju[order].astype(np.int32)))
        if not permutations:
            self.K = None

    @staticmethod
    def nbytes(n, permutations, bootstrap):
        return 4 * 8 * n * n + (2 * 8 * n * n if bootstrap else 0)

    def _permuted_kl(self, r):
        (K, L), (rk, rl), n = self.K, self.rk, r.size
        return _permuted_dot(K, L, r) - 2.0 / n * (rk @ rl[r]) + rk.sum() * rl.sum() / n ** 2

    @staticmethod
    def _dot(K, L, rk, rl, n):
        return np.vdot(K, L) - 2.0 / n * (rk @ rl) + rk.sum() * rl.sum() / n ** 2

    def permuted(self, r):
        kl = self._permuted_kl(r)
        return float(kl / (np.sqrt(self.kk[0]) * np.sqrt(self.kk[1])))

    def resampled(self, m):
        w = self.layout.row_weights(m)
        N = w.sum()
        Ks = [np.exp(d * (-1.0 / (2.0 * self.sigma ** 2 * _weighted_median(s, w))))
              for d, s in zip(self.d2, self.sorted)]
        Kw = [K @ w for K in Ks]

        def dot(K, L, kw, lw):
            return w @ ((K * L) @ w) - 2.0 / N * np.dot(w, kw * lw) + np.dot(w, kw) * np.dot(w, lw) / N ** 2

        kl = dot(Ks[0], Ks[1], Kw[0], Kw[1])
        kk, ll = dot(Ks[0], Ks[0], Kw[0], Kw[0]), dot(Ks[1], Ks[1], Kw[1], Kw[1])
        return float(kl / (np.sqrt(kk) * np.sqrt(ll)))


def _t(x):
    import torch  # torch: ~1.2 s at import (measured); only with a row-based measure

    return torch.from_numpy(x)


def _weighted_median(sorted_pairs, w):
    """``np.median`` of the ``N^2`` squared distances of the resampled rows (``N = sum w``):
    each pair ``i < j`` twice, ``w_i w_j`` times; ``sum w_i^2`` zeros (a row against itself
    or a copy)."""
    v, i, j = sorted_pairs
    cw = np.cumsum(2.0 * w[i] * w[j])
    Z = float(np.dot(w, w))
    zpos = int(np.searchsorted(v, 0.0, side="left"))
    before = cw[zpos - 1] if zpos else 0.0
    T = float(w.sum()) ** 2

    def at(q):
        if q < before:
            return v[np.searchsorted(cw, q, side="right")]
        if q < before + Z:
            return 0.0
        return v[min(np.searchsorted(cw, q - Z, side="right"), v.size - 1)]

    if int(T) % 2:
        return float(at(T // 2))
    return float((at(T / 2 - 1) + at(T / 2)) / 2)


#: measure name -> (structure class, its parameter names)
STRUCTURES = {"rsa": RSAStructure, "mutual_knn": KnnStructure, "jaccard_knn": KnnStructure,
              "cknna": CknnaStructure, "dcor": DcorStructure, "rbf_cka": RbfCkaStructure}


def structure_for(name, params, a, b, layout, *, permutations, bootstrap):
    """The pairwise structure of measure ``name`` on rows ``a``, ``b`` (torch, in sample
    order: ``layout``, the rows' :class:`~actkit._groups.SampleGroups`), or None where it has
    none or it would exceed :data:`STRUCTURE_BYTES`."""
    cls = STRUCTURES.get(name)
    if cls is None or cls.nbytes(layout.n, permutations, bootstrap) > STRUCTURE_BYTES:
        return None
    kw = dict(params)
    if cls is KnnStructure:
        kw["kind"] = name
    return cls(a, b, layout, permutations=bool(permutations), bootstrap=bool(bootstrap), **kw)
