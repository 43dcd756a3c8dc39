"""The rows of a compared pair, grouped by input sample, for resampling: :class:`Samples`.

One streaming pass gathers both sides' rows (float64, in row order: the same bits from a store,
an array or Dask workers), orders them by input sample and centres each side by its exact mean.
Everything the resampling needs derives from these rows in a fixed order at one BLAS thread:

* per-sample row counts ``n_s`` and sums ``u_s = sum_{i in s} a_i``, ``v_s`` (G x D);
* the weighted moments of a bootstrap resample (sample ``s`` taken ``w_s`` times),
  ``N = w.n``, ``S_ab(w) = sum_s w_s A_s^T B_s - u(w) v(w)^T / N``, from the per-sample
  scatter blocks ``A_s^T A_s, B_s^T B_s, A_s^T B_s`` (the symmetric two packed to their upper
  triangles): kept when ``G (Da (Da + 1) / 2 + Db (Db + 1) / 2 + Da Db)`` floats fit
  :data:`BLOCK_BYTES` (one small GEMM per batch of resamples), else formed a few
  samples at a time once per batch of resamples (the rows' products once per batch, not three
  per resample);
* the cross scatter of a permutation ``pi`` of the input samples of B
  (``sum_s A_s^T B_pi(s)`` less the unchanged outer product of the totals): one product of
  the rows, or, for many permutations of few samples, a sum of pair products formed once
  (:mod:`actkit.inference._pairs`); the side scatters do not change.

Memory: the rows, ``n (Da + Db)`` float64 (20,000 x 384 per side: 123 MB), plus the blocks
when kept. A permutation needs B's samples in another order than the file's, hence the rows.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from actkit._data import iter_blocks
from actkit._groups import SampleGroups
from actkit._device import resolve_device
from actkit._threads import current_threads, map_ordered, small_linalg
from actkit.errors import ValidationError
from actkit.measures import Moments

#: per-sample scatter blocks are kept (for the bootstrap) up to this many bytes
BLOCK_BYTES = 1 << 30

#: input samples whose blocks are formed at once where the blocks do not fit (a constant:
#: the same sums, in the same order, at any thread count)
STREAM_SAMPLES = 16

#: fewest input samples a resampling accepts
MIN_SAMPLES = 10

#: bytes of B's gathered rows per step of a permutation's cross product: the gathered rows
#: stay in cache for their product (a constant, never the thread count: the same digits)
PRODUCT_CHUNK_BYTES = 1 << 21


class Samples:
    """Rows of A and B ordered by input sample (float64, each side centred by its mean).

    Parameters
    ----------
    A : ndarray of shape (n_rows, Da)
    B : ndarray of shape (n_rows, Db)
    groups : array-like of shape (n_rows,), SampleGroups or None
        Input-sample id of each row (None: each row its own sample); ``self.groups`` holds them
        as :class:`~actkit._groups.SampleGroups`.
    product_dtype : {float64, float32}, default=float64
        dtype of the permutations' cross products (float32 for float32 sources).
    dtype : str, default="float64"
        The sources' dtype, passed on to the measures (:class:`actkit.measures.Moments`).
    device : str, optional
        Torch device of the permutations' cross products (e.g. ``"cuda"``); None: numpy on
        the CPU.
    norms : bool, default=True
        Also carry the debiased CKA's row-norm terms (``Moments.norms``).
    """

    def __init__(self, A, B, groups=None, *, product_dtype=np.float64, dtype="float64", device=None,
                 norms=True):
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        n = A.shape[0]
        self.groups = g = SampleGroups.of(groups, n)
        order = g.order
        self.sample_of_row, self.n_s, self.G, self.offsets, self.position = g.sid, g.n_s, g.G, g.offsets, g.position
        self.n = n
        self.mean_a, self.mean_b = A.mean(axis=0), B.mean(axis=0)
        self.A = A[order] - self.mean_a
        self.B = B[order] - self.mean_b
        self.da, self.db = A.shape[1], B.shape[1]
        self.u = g.per_sample(self.A)      # (G, Da)
        self.v = g.per_sample(self.B)
        self.dtype = str(np.dtype(dtype))
        # the debiased CKA's row-norm terms (CrossMoments' names), per sample, about the means
        self.dx = np.einsum("ij,ij->i", self.A, self.A)
        self.dy = np.einsum("ij,ij->i", self.B, self.B)
        per = g.per_sample
        self.norms = bool(norms)
        self.raw = {} if not norms else {"sum_dx": per(self.dx), "sum_dy": per(self.dy), "sum_dx2": per(self.dx ** 2),
                    "sum_dy2": per(self.dy ** 2), "sum_dxdy": per(self.dx * self.dy),
                    "x_dx": per(self.A * self.dx[:, None]), "x_dy": per(self.A * self.dy[:, None]),
                    "y_dx": per(self.B * self.dx[:, None]), "y_dy": per(self.B * self.dy[:, None])}
        self._blocks = None
        self._full = None
        # the permutations' cross products: float32 rows give float32 products (2x faster;
        # relative error ~1e-6 of the entries, far below the spread of the null)
        self.product_dtype = np.dtype(product_dtype)
        if self.product_dtype == np.float64:
            self._pa, self._pb = self.A, self.B
        else:
            self._pa, self._pb = self.A.astype(self.product_dtype), self.B.astype(self.product_dtype)
        self._device = None
        self._rows64 = None
        if device is not None:
            import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

            self._device = resolve_device(device)
            self._pa = torch.from_numpy(np.ascontiguousarray(self._pa)).to(self._device)
            self._pb = torch.from_numpy(np.ascontiguousarray(self._pb)).to(self._device)

    def device_rows(self):
        """``(A, B)`` (float64, centred, in sample order) as torch tensors on ``device``, for
        the bootstrap's one-time products (per-sample blocks, Gram matrices); None without a
        device."""
        if self._device is None:
            return None
        if self._rows64 is None:
            import torch  # torch: ~1.2 s at import (measured); only with a device

            self._rows64 = (torch.from_numpy(self.A).to(self._device), torch.from_numpy(self.B).to(self._device))
        return self._rows64

    # ------------------------------------------------------------------ observed
    def _moments(self, n, u, v, aa, bb, ab, raw):
        return Moments.from_sums(n, u, v, aa, bb, ab, shift_a=self.mean_a, shift_b=self.mean_b,
                                 dtype=self.dtype, raw_norms=raw if self.norms else None)

    def moments(self):
        """The :class:`actkit.measures.Moments` of all rows (weights 1)."""
        if self._full is None:
            self._raw_totals = {k: v.sum(axis=0) for k, v in self.raw.items()}
            self._sides = (self.A.T @ self.A, self.B.T @ self.B)
            self._outer_ab = np.outer(self.u.sum(axis=0), self.v.sum(axis=0)) / float(self.n)
            self._full = self._moments(float(self.n), self.u.sum(axis=0), self.v.sum(axis=0),
                                       *self._sides, self.A.T @ self.B,
                                       {k: v.sum(axis=0) for k, v in self.raw.items()})
        return self._full

    def check_resamplable(self):
        if self.G < MIN_SAMPLES:
            raise ValidationError(f"resampling (permutations, bootstrap) needs at least {MIN_SAMPLES} input "
                                  f"samples, got {self.G}")

    # ------------------------------------------------------------------ bootstrap
    def _widths(self):
        """Floats of one sample's three blocks: the symmetric two packed, the cross block whole."""
        return (self.da * (self.da + 1) // 2, self.db * (self.db + 1) // 2, self.da * self.db)

    def blocks_fit(self) -> bool:
        return 8 * self.G * sum(self._widths()) <= BLOCK_BYTES

    def blocks(self):
        """Per-sample scatter blocks about the means: ``A_s^T A_s`` and ``B_s^T B_s`` packed to
        their upper triangles (G, Da (Da + 1) / 2), (G, Db (Db + 1) / 2) (:func:`packed_upper`:
        a third less to re-weight per resample), ``A_s^T B_s`` whole (G, Da*Db)."""
        if self._blocks is None:
            G, o = self.G, self.offsets
            out = [np.empty((G, w)) for w in self._widths()]
            rows = self.device_rows() or (self.A, self.B)
            keep = (packed_upper(self.da), packed_upper(self.db), slice(None))

            def fill(span):         # each block one product at one BLAS thread: any split, the same bits
                for s in range(*span):
                    a, b = (x[o[s]:o[s + 1]] for x in rows)
                    for P, block, k in zip(out, (a.T @ a, b.T @ b, a.T @ b), keep):
                        P[s] = host(block).ravel()[k]

            spans = [(t, min(G, t + STREAM_SAMPLES)) for t in range(0, G, STREAM_SAMPLES)]
            workers = 1 if self._device is not None else current_threads()
            with small_linalg():
                for _ in map_ordered(fill, spans, workers):
                    pass
            self._blocks = out
        return self._blocks

    def _block_rows(self, s0, s1):
        """The per-sample scatter blocks of samples ``s0:s1`` (three arrays, one row each)."""
        o = self.offsets
        out = [np.empty((s1 - s0, w)) for w in self._widths()]
        keep = (packed_upper(self.da), packed_upper(self.db), slice(None))
        for s in range(s0, s1):
            a, b = self.A[o[s]:o[s + 1]], self.B[o[s]:o[s + 1]]
            for P, block, k in zip(out, (a.T @ a, b.T @ b, a.T @ b), keep):
                P[s - s0] = block.ravel()[k]
        return out

    def _streamed_blocks(self, W):
        """``W @ blocks`` (as :meth:`blocks`, k rows) where the blocks do not fit in memory: they are
        formed :data:`STREAM_SAMPLES` samples at a time, once per batch of resamples (the
        batch shares them: 1 / k of the rows' products per resample, not three per resample)."""
        out = [np.zeros((len(W), w)) for w in self._widths()]
        for s0 in range(0, self.G, STREAM_SAMPLES):
            s1 = min(self.G, s0 + STREAM_SAMPLES)
            for acc, P in zip(out, self._block_rows(s0, s1)):
                acc += W[:, s0:s1] @ P
        return out

    def weighted_blocks(self, W):
        """The re-weighted sums of bootstrap resamples ``W`` (k, G) of sample multiplicities:
        ``(N, U, V, Paa, Pbb, Pab)``, the rows (k,), the column sums (k, Da) and (k, Db), and
        the scatter blocks as :meth:`blocks` holds them (the two symmetric ones packed:
        :func:`unpacked` gives the matrix)."""
        W = np.asarray(W, dtype=np.float64)
        N = W @ self.n_s
        U, V = W @ self.u, W @ self.v
        if self.blocks_fit():
            Paa, Pbb, Pab = (W @ P for P in self.blocks())
        else:
            Paa, Pbb, Pab = self._streamed_blocks(W)
        return N, U, V, Paa, Pbb, Pab

    def weighted_moments(self, W):
        """Moments of bootstrap resamples: ``W`` (k, G) sample multiplicities; a list of k
        :class:`actkit.measures.Moments`."""
        W = np.asarray(W, dtype=np.float64)
        N, U, V, Paa, Pbb, Pab = self.weighted_blocks(W)
        raw = {k: W @ v for k, v in self.raw.items()}
        return [self._moments(float(N[k]), U[k], V[k], unpacked(Paa[k], self.da),
                              unpacked(Pbb[k], self.db), Pab[k].reshape(self.da, self.db),
                              {key: val[k] for key, val in raw.items()})
                for k in range(len(W))]

    # ------------------------------------------------------------------ permutations
    def row_order(self, perm):
        """Rows of B paired with A's rows when sample ``s`` of A meets sample ``perm[s]`` of B
        (``perm`` maps samples to samples of the same length): :meth:`SampleGroups.row_order`."""
        return self.groups.row_order(perm)

    def permuted_cross(self, perm):
        """Centred cross scatter (Da, Db) of A against B with its samples permuted: one
        product of the rows (the totals, hence the centring, do not change)."""
        return self._product(self.row_order(perm))

    def _product(self, r, norms=False):
        """``A^T B[r]`` (Da, Db) float64, in the product dtype; ``norms``: also ``(A^T
        dy[r], B[r]^T dx)`` (the debiased CKA's pairing terms, ``x_dy`` and ``y_dx``), from
        the same steps of rows while they are in cache."""
        if self._device is None:
            # in fixed steps of rows: B's gathered rows are multiplied while in cache (8%
            # faster on 2 cores than gathering all of them first)
            pa, pb = self._pa, self._pb
            step = max(256, PRODUCT_CHUNK_BYTES // (pb.itemsize * max(1, pb.shape[1])))
            out, x_dy, y_dx = 0.0, 0.0, 0.0
            for c in range(0, r.size, step):
                a, b = pa[c:c + step], pb[r[c:c + step]]
                out = out + a.T @ b if c else a.T @ b
                if norms:
                    x_dy = x_dy + a.T @ self.dy[r[c:c + step]].astype(a.dtype)
                    y_dx = y_dx + b.T @ self.dx[c:c + step].astype(b.dtype)
            out = np.asarray(out, dtype=np.float64)
            return (out, np.asarray(x_dy, np.float64), np.asarray(y_dx, np.float64)) if norms else out
        import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

        idx = torch.as_tensor(r, device=self._device)
        out = (self._pa.T @ self._pb[idx]).to(torch.float64).cpu().numpy()
        if norms:
            inv = np.empty_like(r)
            inv[r] = np.arange(r.size)      # sum_i b_r(i) dx_i = sum_j b_j dx_inv(j): no gather of B
            return out, self.A.T @ self.dy[r], self.B.T @ self.dx[inv]
        return out

    def permuted_moments(self, perm, products=None):
        """:class:`actkit.measures.Moments` with B's samples permuted: the side scatters and
        means as they are, the cross scatter (and the debiased CKA's pairing terms) anew.
        ``products``: the permutation's ``(A^T B[r], x_dy, y_dx, dx . dy[r])`` already formed
        (the pair route, :mod:`actkit.inference._pairs`; the last three None without norms)."""
        full = self.moments()
        if products is None:
            r = self.row_order(perm)
            if not self.norms:
                products = (self._product(r), None, None, None)
            else:
                # x_dy and y_dx only rebase the norms by the totals' offset (zero up to rounding:
                # the rows are centred), so the product dtype serves them; sum_dxdy enters as it is
                products = (*self._product(r, norms=True), self.dx @ self.dy[r])
        ab, x_dy, y_dx, dxdy = products
        ab = np.asarray(ab, dtype=np.float64)
        if not self.norms:     # only the cross scatter changes (as from_sums centres it)
            return replace(full, Sab=ab - self._outer_ab)
        raw = dict(self._raw_totals)
        raw.update(sum_dxdy=dxdy, x_dy=x_dy, y_dx=y_dx)
        m = self._moments(float(self.n), self.u.sum(axis=0), self.v.sum(axis=0), *self._sides, ab, raw)
        # the side scatters as the same arrays in every permutation (the same bits): a
        # measure's side decompositions are then computed once (measures.reuse_sides)
        return replace(m, Saa=full.Saa, Sbb=full.Sbb)


def gather_pair(A, B, *, block_rows=None, progress=None):
    """Both sources' rows as float64 arrays in row order, read once in paired blocks."""
    parts_a, parts_b = [], []
    for xa in iter_blocks(A, block_rows=block_rows, dtype=np.float64):
        parts_a.append(np.array(xa, dtype=np.float64))
    for xb in iter_blocks(B, block_rows=block_rows, dtype=np.float64):
        parts_b.append(np.array(xb, dtype=np.float64))
    return np.concatenate(parts_a), np.concatenate(parts_b)


@functools.lru_cache(maxsize=8)
def _upper(d):
    iu = np.triu_indices(d)
    return iu, iu[0] * d + iu[1]


def packed_upper(d):
    """Flat indices of the upper triangle of a (d, d) matrix, row by row: a symmetric block
    packed to ``d (d + 1) / 2`` floats."""
    return _upper(d)[1]


def unpacked(p, d):
    """The symmetric (d, d) matrix of its packed upper triangle ``p`` (:func:`packed_upper`)."""
    iu = _upper(d)[0]
    out = np.empty((d, d))
    out[iu] = p
    out[iu[1], iu[0]] = p
    return out


def host(x):
    """A numpy array of ``x`` (a numpy array already, or a torch tensor on any device)."""
    return x if isinstance(x, np.ndarray) else x.cpu().numpy()
