"""Cross-model alignment (Nelson et al., Table 1) and :func:`compare`.

``shared/spec/science.md`` §1 and §3 define every quantity here. Four transform classes map
rows of ``A`` (N x Da) onto the rows of ``B`` (N x Db) that come from the same inputs:

=================  =============================================================  =========
method             map h(a)                                                       fitted on
=================  =============================================================  =========
``permutation``    (a - mu_A) P + mu_B, P a signed permutation (Hungarian)        paired rows
``rigid``          (a - mu_A) R + mu_B, R = U V^T from the SVD of A_c^T B_c       paired rows
``linear``         a W + c, affine least squares (optional ridge)                 paired rows
``ica``            mixing_B P unmixing_A (a - mu_A) + mu_B: whitening + FastICA   each side alone
=================  =============================================================  =========

Every fit is closed form from second moments (accumulated block by block in float64 from
float32 GEMMs), so the data never has to fit in memory; only FastICA sees rows, a bounded
random sample of them (``ica_max_rows``).

:func:`compare` fits all four on a fit split and reports the mean l2 error on held-out rows
divided by the diameter of B's held-out rows, the ICA efficiency, linear CKA (plain and
debiased), mean CCA and the held-out correlations of the ICA-matched sources.
:func:`compare_many` gives a pairwise matrix over several representations, whitening and
ICA-fitting each one once.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from actkit._device import check_device
from actkit.metrics._similarity import PairedMoments, canonical_correlations, single_thread_linalg

__all__ = [
    "align",
    "compare",
    "compare_many",
    "CompareResult",
    "PermutationAlignment",
    "RigidAlignment",
    "LinearAlignment",
    "ICAAlignment",
    "diameter",
    "METHODS",
]

METHODS = ("permutation", "rigid", "linear", "ica")
ICA_AUTO_MIN_ROWS = 20000           # ica_max_rows="auto": at least this many rows ...
ICA_AUTO_MAX_BYTES = 2 ** 30        # ... and at most 1 GiB of float32 sample rows per side


def ica_min_rows(k):
    """Rows FastICA needs for ``k`` components: ``max(50 k, k^2 / 4)``.

    Measured (docs/compare.md, "How many rows ICA needs"): on noisy Laplace mixtures FastICA
    recovered the sources from 50 rows per component at k = 64 and 128 and from 100 at
    k = 256 and 384, but not from 50 at k = 256 nor from 100 at k = 768 (spurious sources);
    with fewer rows than this ``compare`` warns that the ica column is unreliable."""
    return int(max(50 * k, k * k // 4))


DIAMETER_MAX_ROWS = 10000     # exact diam(B_eval) up to this many held-out rows, else sampled

CONVENTIONS = {
    "convention_spec": "shared/spec/science.md sections 1 and 3 (actkit 0.1)",
    "convention_error": "mean_i ||h(a_i) - b_i||_2 / diam(B_eval), on held-out rows only",
    "convention_split": "by input sample (groups): no sample straddles fit and eval; seeded",
    "convention_permutation": "signed permutation + translation; Hungarian on "
                              "|a_i|^2+|b_j|^2-2|a_i.b_j| of centred columns; narrower side "
                              "padded with zero columns",
    "convention_rigid": "orthogonal Procrustes R=UV^T of centred cross-covariance, no "
                        "scaling, + translation (semi-orthogonal if Da != Db)",
    "convention_linear": "affine least squares (normal equations in float64), ridge alpha "
                         "on weights only",
    "convention_ica": "PCA whitening (ddof=1, top k=min(Da,Db)) + FastICA(logcosh) fitted "
                      "separately on each side's fit rows; sources matched by signed "
                      "permutation on fit rows; h(a)=mixing_B P unmixing_A (a-mu_A)+mu_B",
    "convention_ica_efficiency": "(err_permutation - err_ica) / (err_permutation - err_rigid)",
    "convention_cka": "linear CKA on all rows, feature-space; debiased = unbiased HSIC "
                      "(Song et al. 2012)",
    "convention_cca": "mean of the top min(rank A, rank B) canonical correlations, all rows, "
                      "in-sample (closed form of sklearn CCA)",
    "convention_matched_corr": "Pearson correlation of ICA sources paired on fit rows, "
                               "measured on eval rows",
}


# ============================================================================ inputs
def _n_rows(X) -> int:
    from actkit._data import n_rows

    return n_rows(X)


def _n_features(X, name: str) -> int:
    from actkit._data import n_features

    shape = tuple(X.shape)
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D (n_rows, n_features), got shape {shape}")
    return n_features(X)


def _compute_dtype(*sources) -> np.dtype:
    """float32 GEMMs when every source holds at most 32-bit floats, else float64."""
    from actkit._data import source_dtype

    for X in sources:
        dt = source_dtype(X)
        if dt.kind != "f" or dt.itemsize > 4:
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def _as_source(X, name: str):
    """Accept arrays, tensors, h5py datasets and store layers; lists become arrays."""
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if not hasattr(X, "shape"):
        raise ValueError(f"{name} must be an array-like of shape (n_rows, n_features)")
    _n_features(X, name)
    return X


def _blocks(X, block_rows, dtype):
    from actkit._data import iter_blocks

    return iter_blocks(X, block_rows=block_rows, dtype=dtype)


def _check_finite(block, name, start):
    if not np.all(np.isfinite(block)):
        bad = start + int(np.flatnonzero(~np.all(np.isfinite(block), axis=1))[0])
        raise ValueError(f"{name} contains NaN or infinite values (first at row {bad})")


def _default_block_rows(n_features: int) -> int:
    return max(256, int(2**25 // (4 * max(1, n_features))))   # ~32 MiB of float32


def _progress(total, desc, progress):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="row", unit_scale=True, leave=False,
                disable=None if progress is None else not progress)


# ============================================================================ pieces
def signed_permutation(var_a, var_b, cross):
    """Optimal signed permutation between the columns of two centred matrices.

    Minimises ``sum ||a_i - s b_j||^2`` over signed permutations with cost
    ``C_ij = |a_i|^2 + |b_j|^2 - 2 |a_i . b_j|`` (``scipy.optimize.linear_sum_assignment``);
    when ``p != q`` the narrower side is padded with zero columns.

    Parameters
    ----------
    var_a : ndarray of shape (p,)
        Squared norms of the centred columns of A (diagonal of its scatter matrix).
    var_b : ndarray of shape (q,)
    cross : ndarray of shape (p, q)
        Cross scatter ``A_c^T B_c``.

    Returns
    -------
    P : ndarray of shape (p, q)
        Signed (partial) permutation matrix: ``A_c @ P`` approximates ``B_c``.
    rows, cols : ndarray of int
        The matched pairs (``rows[k]`` of A with ``cols[k]`` of B), real columns only.
    """
    from scipy.optimize import linear_sum_assignment

    p, q = cross.shape
    m = max(p, q)
    cost = np.empty((m, m))
    cost[:p, :q] = var_a[:, None] + var_b[None, :] - 2.0 * np.abs(cross)
    cost[p:, :q] = var_b[None, :]          # zero column of A against b_j
    cost[:p, q:] = var_a[:, None]          # a_i against a zero column of B
    cost[p:, q:] = 0.0
    r, c = linear_sum_assignment(cost)
    keep = (r < p) & (c < q)
    r, c = r[keep], c[keep]
    P = np.zeros((p, q))
    signs = np.sign(cross[r, c])
    signs[signs == 0] = 1.0
    P[r, c] = signs
    return P, r, c


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
        idx = np.sort(np.random.default_rng(random_state).choice(n, max_rows, replace=False))
        X = X[idx]
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


def _mean_l2(pred, target):
    diff = pred - target
    return float(np.sqrt(np.einsum("ij,ij->i", diff, diff, dtype=np.float64)).sum())


# ============================================================================ one side
class _Side:
    """One representation with its split-aware moments, whitening and ICA fits (cached)."""

    def __init__(self, X, name, eval_mask, sample_rows, diam_rows, dtype):
        self.X, self.name, self.dtype = X, name, dtype
        self.n, self.d = _n_rows(X), _n_features(X, name)
        self.eval_mask = eval_mask
        self.sample_rows = sample_rows      # sorted global rows kept in memory for FastICA
        self.diam_rows = diam_rows          # sorted global eval rows kept for the diameter
        self.shift = None
        self.n_fit = self.n_eval = 0
        self.s_fit = self.s_eval = None
        self.xx_fit = self.xx_eval = None
        self.sample = []
        self.diam = []
        self._ica = {}
        self.done = False

    def add(self, start, block):
        stop = start + block.shape[0]
        _check_finite(block, self.name, start)
        if self.shift is None:
            self.shift = block.mean(axis=0, dtype=np.float64)
            self.s_fit, self.s_eval = np.zeros(self.d), np.zeros(self.d)
            self.xx_fit, self.xx_eval = np.zeros((self.d, self.d)), np.zeros((self.d, self.d))
        em = self.eval_mask[start:stop]
        xs = block - self.shift.astype(block.dtype)
        for sel, is_eval in ((~em, False), (em, True)):
            if not sel.any():
                continue
            part = xs if sel.all() else xs[sel]
            if is_eval:
                self.n_eval += part.shape[0]
                self.s_eval += part.sum(axis=0, dtype=np.float64)
                self.xx_eval += part.T @ part
            else:
                self.n_fit += part.shape[0]
                self.s_fit += part.sum(axis=0, dtype=np.float64)
                self.xx_fit += part.T @ part
        for rows, out in ((self.sample_rows, self.sample), (self.diam_rows, self.diam)):
            lo, hi = np.searchsorted(rows, [start, stop])
            if hi > lo:
                out.append(np.array(block[rows[lo:hi] - start], dtype=self.dtype))

    def finish(self):
        self.sample = (np.concatenate(self.sample) if self.sample
                       else np.zeros((0, self.d), self.dtype))
        self.diam = (np.concatenate(self.diam) if self.diam
                     else np.zeros((0, self.d), self.dtype))
        self.done = True

    def run(self, block_rows, progress, bar=None):
        start = 0
        for block in _blocks(self.X, block_rows, self.dtype):
            self.add(start, block)
            start += block.shape[0]
            if bar is not None:
                bar.update(block.shape[0])
        self.finish()

    # --- derived
    @property
    def mean_fit(self):
        return self.shift + self.s_fit / self.n_fit

    def scatter_fit(self):
        return self.xx_fit - np.outer(self.s_fit, self.s_fit) / self.n_fit

    def scatter_eval(self):
        return self.xx_eval - np.outer(self.s_eval, self.s_eval) / self.n_eval

    def ica(self, k, random_state, ica_params):
        """(unmixing, mixing, mean, whitening rank, n_iter, converged) fitted on fit rows."""
        key = (k, random_state, tuple(sorted(ica_params.items())))
        if key not in self._ica:
            self._ica[key] = _fit_ica_side(self.sample, self.mean_fit, self.scatter_fit(),
                                           self.n_fit, k, random_state, ica_params)
        return self._ica[key]


def _fit_ica_side(sample, mean, scatter, n, k, random_state, ica_params):
    """PCA whitening from the fit-row covariance, then FastICA on whitened sample rows.

    Uses :func:`actkit.whitening.whitening_from_moments` (eigenvalues below ``1e-6`` x the
    largest are dropped) and :class:`actkit.FastICA` with ``whiten=False``.
    Returns ``(unmixing (k, d), mixing (d, k), mean (d,), rank, n_iter, converged)``.
    """
    from actkit.whitening import whitening_from_moments

    cov = scatter / max(n - 1, 1)
    if not np.max(np.diag(cov), initial=0.0) > 0:
        raise ValueError("a representation has zero variance on the fit rows: nothing to align")
    with single_thread_linalg():
        wp = whitening_from_moments(mean, cov, method="pca", n_components=None, warn=False)
    rank = int(wp["rank"])
    k = min(k, rank)
    if sample.shape[0] < 2 * k:
        raise ValueError(
            f"too few rows for ICA: {sample.shape[0]} fit rows for {k} components "
            f"(need at least {2 * k}); provide more inputs or lower n_components")
    W = wp["whitening"][:k]                           # (k, d)
    W_inv = wp["dewhitening"][:, :k]                  # (d, k)
    Z = ((sample.astype(np.float64) - mean) @ W.T).astype(sample.dtype, copy=False)
    R, n_iter, converged = _fastica_rotation(Z, random_state, ica_params)   # (k, k)
    unmixing = R @ W
    with single_thread_linalg():
        mixing = W_inv @ np.linalg.pinv(R)
    return unmixing, mixing, mean, rank, n_iter, converged


def _fastica_rotation(Z, random_state, ica_params):
    """The (k, k) FastICA unmixing of already-whitened rows Z (n, k), n_iter, converged."""
    from actkit.ica import FastICA

    params = {"fun": "logcosh", "max_iter": 200, "tol": 1e-4, "device": "cpu"}
    params.update(ica_params)
    # random start, never FastICA's data-driven one: the two sides share their rows, so
    # starting each from its largest-norm rows would hand both the same rows' directions
    # and "match" sources even where no independent components exist (Gaussian data)
    est = FastICA(whiten=False, random_state=random_state, init="random",
                  compute_dtype="float32" if Z.dtype == np.float32 else "float64", **params)
    est.fit(Z)
    return (np.asarray(est.components_, dtype=np.float64), int(getattr(est, "n_iter_", -1)),
            bool(getattr(est, "converged_", True)))


# ============================================================================ alignments
class _Alignment:
    """Base of the fitted alignments: an affine map ``h(a) = (a - mean_a_) coef_ + mean_b_``.

    Attributes (after ``fit``)
    --------------------------
    coef_ : ndarray of shape (n_features_a, n_features_b)
    intercept_ : ndarray of shape (n_features_b,)
        ``mean_b_ - mean_a_ @ coef_``, so that ``h(a) = a @ coef_ + intercept_``.
    mean_a_, mean_b_ : ndarray of shape (n_features_a,), (n_features_b,)
    n_features_in_ : int
    """

    method = ""

    def fit(self, A, B, *, block_rows=None, progress=None):
        """Fit the map from ``A`` (n, Da) onto ``B`` (n, Db); any array-like or store layer."""
        A, B = _as_source(A, "A"), _as_source(B, "B")
        k = min(_n_features(A, "A"), _n_features(B, "B"))
        pair = _Pair(A, B, eval_mask=None, sample_rows=self._sample_rows(_n_rows(A), k=k),
                     block_rows=block_rows, progress=progress)
        pair.fit_moments()
        self._fit(pair)
        return self

    def _sample_rows(self, n, fit_rows=None, k=None):
        return np.zeros(0, np.int64)

    def _set(self, coef, mean_a, mean_b):
        self.coef_ = np.asarray(coef, dtype=np.float64)
        self.mean_a_ = np.asarray(mean_a, dtype=np.float64)
        self.mean_b_ = np.asarray(mean_b, dtype=np.float64)
        self.intercept_ = self.mean_b_ - self.mean_a_ @ self.coef_
        self.n_features_in_ = self.coef_.shape[0]
        return self

    def transform(self, A):
        """Map rows of A into B's space.

        Parameters
        ----------
        A : array-like of shape (n_rows, n_features_a)

        Returns
        -------
        ndarray of shape (n_rows, n_features_b), float32 for float32 input else float64.
        """
        if not hasattr(self, "coef_"):
            raise ValueError(f"this {type(self).__name__} is not fitted yet; call fit(A, B)")
        A = _as_source(A, "A")
        if _n_features(A, "A") != self.n_features_in_:
            raise ValueError(f"A has {_n_features(A, 'A')} features, the alignment was fitted "
                             f"on {self.n_features_in_}")
        dt = _compute_dtype(A)
        coef, ma, mb = (x.astype(dt) for x in (self.coef_, self.mean_a_, self.mean_b_))
        out = [(blk - ma) @ coef + mb for blk in _blocks(A, None, dt)]
        return np.concatenate(out) if out else np.zeros((0, coef.shape[1]), dt)

    def error(self, A, B, *, diam=None):
        """Mean l2 distance between ``transform(A)`` and ``B`` divided by ``diam``.

        ``diam`` defaults to the exact :func:`diameter` of ``B``'s rows.
        """
        pred = self.transform(A)
        from actkit._data import as_array

        Bv = as_array(B, pred.dtype)
        if Bv.shape != pred.shape:
            raise ValueError(f"B has shape {Bv.shape}, expected {pred.shape}")
        diam = diameter(Bv) if diam is None else diam
        return _mean_l2(pred, Bv) / Bv.shape[0] / diam


class PermutationAlignment(_Alignment):
    """Signed permutation of columns plus translation (see :func:`signed_permutation`).

    Attributes: ``coef_`` (the signed permutation matrix), ``pairs_`` ((k, 2) int array of
    matched (column of A, column of B)), plus those of the base class.
    """

    method = "permutation"

    def _fit(self, pair):
        m = pair.fit_pm
        P, r, c = signed_permutation(np.diag(m.scatter_xx()), np.diag(m.scatter_yy()),
                                     m.scatter_xy())
        self.pairs_ = np.stack([r, c], axis=1)
        return self._set(P, m.mean_x, m.mean_y)


class RigidAlignment(_Alignment):
    """Orthogonal Procrustes (no scaling) plus translation: R = U V^T, SVD of A_c^T B_c."""

    method = "rigid"

    def _fit(self, pair):
        m = pair.fit_pm
        with single_thread_linalg():
            U, _, Vt = np.linalg.svd(m.scatter_xy(), full_matrices=False)
        return self._set(U @ Vt, m.mean_x, m.mean_y)


class LinearAlignment(_Alignment):
    """Affine least squares ``h(a) = a W + c``, optional ridge penalty ``alpha |W|_F^2``.

    Parameters
    ----------
    alpha : float, default=0.0
        Ridge penalty on the weights (sklearn ``Ridge`` convention: added to A_c^T A_c).
    """

    method = "linear"

    def __init__(self, *, alpha=0.0):
        self.alpha = alpha

    def _fit(self, pair):

        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {self.alpha}")
        m = pair.fit_pm
        G = m.scatter_xx()
        if self.alpha:
            G = G + self.alpha * np.eye(G.shape[0])
        C = m.scatter_xy()
        with single_thread_linalg():
            W = self._solve(G, C)
        return self._set(W, m.mean_x, m.mean_y)

    @staticmethod
    def _solve(G, C):
        import scipy.linalg

        try:
            W = scipy.linalg.solve(G, C, assume_a="pos")
        except (np.linalg.LinAlgError, scipy.linalg.LinAlgError):
            W = np.linalg.lstsq(G, C, rcond=None)[0]
        else:
            if not np.all(np.isfinite(W)):
                W = np.linalg.lstsq(G, C, rcond=None)[0]
        return W


class ICAAlignment(_Alignment):
    """Unsupervised alignment through independent components (spec §1, ``ica`` row).

    Each side is PCA-whitened (top ``k = min(Da, Db)`` components, fit-row covariance,
    ddof=1) and rotated by FastICA **separately**; the two source sets are matched by the
    optimal signed permutation (using the paired fit rows only to match, never to fit a
    map) and ``h(a) = mixing_B P unmixing_A (a - mu_A) + mu_B``.

    Parameters
    ----------
    n_components : int, optional
        Default ``min(Da, Db)``.
    random_state : int, default=0
    max_fit_rows : int or "auto", default="auto"
        FastICA runs on at most this many random fit rows of each side (whitening and
        matching use all fit rows). ``"auto"``: ``max(20000, ica_min_rows(k))`` for ``k``
        components, at most 1 GiB of float32 rows per side (see :func:`ica_rows`).
    fun, max_iter, tol
        Passed to FastICA.
    device : str, default="cpu"
        Torch device of the FastICA passes (e.g. ``"cuda"``); moments, whitening and
        matching stay on the CPU in float64.

    Attributes
    ----------
    unmixing_a_, unmixing_b_ : ndarray of shape (k, Da), (k, Db)
    mixing_a_, mixing_b_ : ndarray of shape (Da, k), (Db, k)
    pairs_ : ndarray of shape (k, 2)
        Matched (source of A, source of B).
    signs_ : ndarray of shape (k,)
    n_iter_ : (int, int)
        FastICA iterations on each side.
    converged_ : bool
        Whether FastICA reached ``tol`` on both sides within ``max_iter``.
    """

    method = "ica"

    def __init__(self, *, n_components=None, random_state=0, max_fit_rows="auto",
                 fun="logcosh", max_iter=200, tol=1e-4, device="cpu"):
        self.n_components = n_components
        self.random_state = random_state
        self.max_fit_rows = max_fit_rows
        self.fun = fun
        self.max_iter = max_iter
        self.tol = tol
        self.device = device

    def _sample_rows(self, n, fit_rows=None, k=None):
        rows = np.arange(n) if fit_rows is None else fit_rows
        if k is not None:
            k = _ica_components(self.n_components, k)
        limit = ica_rows(self.max_fit_rows, k)
        if rows.size > limit:
            rng = np.random.default_rng(self.random_state)
            rows = np.sort(rng.choice(rows, limit, replace=False))
        return rows

    def _fit(self, pair):
        m = pair.fit_pm
        k = _ica_components(self.n_components, min(pair.a.d, pair.b.d))
        params = {"fun": self.fun, "max_iter": self.max_iter, "tol": self.tol,
                  "device": str(self.device)}
        Ua, Ma, mu_a, _, it_a, conv_a = pair.a.ica(k, self.random_state, params)
        Ub, Mb, mu_b, _, it_b, conv_b = pair.b.ica(k, self.random_state, params)
        self.n_iter_ = (it_a, it_b)
        self.converged_ = bool(conv_a and conv_b)
        k = min(Ua.shape[0], Ub.shape[0])
        Ua, Ma, Ub, Mb = Ua[:k], Ma[:, :k], Ub[:k], Mb[:, :k]
        # source moments on fit rows, from the raw moments
        cross = Ua @ m.scatter_xy() @ Ub.T
        va = np.einsum("ij,jk,ik->i", Ua, m.scatter_xx(), Ua)
        vb = np.einsum("ij,jk,ik->i", Ub, m.scatter_yy(), Ub)
        P, r, c = signed_permutation(va, vb, cross)
        self.unmixing_a_, self.mixing_a_ = Ua, Ma
        self.unmixing_b_, self.mixing_b_ = Ub, Mb
        self.pairs_ = np.stack([r, c], axis=1)
        self.signs_ = P[r, c]
        self.n_components_ = k
        # row convention: h(a) = (a - mu_A) Ua^T P Mb^T + mu_B
        return self._set(Ua.T @ P @ Mb.T, m.mean_x, m.mean_y)


def _ica_components(n_components, k_max):
    """ICA components to fit: ``n_components`` (an int in [1, k_max]) or ``k_max``."""
    if n_components is None:
        return int(k_max)
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) \
            or not 1 <= n_components <= k_max:
        raise ValueError(f"n_components must be an int in [1, {k_max}] (min(Da, Db)), "
                         f"got {n_components!r}")
    return int(n_components)


def _source_sd(U, scatter):
    """Root of each source's scatter ``u_i' S u_i``; NaN where it is below the rounding error
    of ``S`` (float32 row blocks: ~1e-6 of its largest eigenvalue times ``|u_i|^2``), i.e. a
    source that (numerically) does not vary on these rows: its correlations are undefined."""
    var = np.einsum("ij,jk,ik->i", U, scatter, U)
    with single_thread_linalg():
        top = float(np.linalg.eigvalsh(scatter)[-1]) if scatter.size else 0.0
    floor = 1e-6 * max(top, 0.0) * np.einsum("ij,ij->i", U, U)
    return np.where(var > floor, np.sqrt(np.maximum(var, 0.0)), np.nan)


def ica_rows(max_rows, k):
    """Rows FastICA sees per side for ``k`` components: ``max_rows``, or for ``"auto"``
    ``max(20000, ica_min_rows(k))`` capped at 1 GiB of float32 rows (``k`` unknown: 20000)."""
    if isinstance(max_rows, str):
        if max_rows != "auto":
            raise ValueError(f"ica_max_rows must be a positive int or 'auto', got {max_rows!r}")
        if not k:
            return ICA_AUTO_MIN_ROWS
        return int(min(max(ICA_AUTO_MIN_ROWS, ica_min_rows(k)), ICA_AUTO_MAX_BYTES // (4 * k)))
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 2:
        raise ValueError(f"ica_max_rows must be an int >= 2 or 'auto', got {max_rows!r}")
    return int(max_rows)


_CLASSES = {"permutation": PermutationAlignment, "rigid": RigidAlignment,
            "linear": LinearAlignment, "ica": ICAAlignment}


def align(A, B, method="rigid", **params):
    """Fit one alignment mapping rows of ``A`` onto the rows of ``B`` from the same inputs.

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        Array, torch tensor, ``h5py.Dataset`` or store layer (streamed in blocks).
    B : array-like of shape (n_rows, n_features_b)
    method : {"permutation", "rigid", "linear", "ica"}, default="rigid"
    **params
        Hyperparameters of the class (``alpha`` for linear; ``n_components``,
        ``random_state``, ``max_fit_rows``, ``fun``, ``max_iter``, ``tol`` for ica).

    Returns
    -------
    alignment : PermutationAlignment, RigidAlignment, LinearAlignment or ICAAlignment
        Fitted; ``alignment.transform(A_new)`` maps new rows of A into B's space.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.random.default_rng(0).normal(size=(200, 4))
    >>> h = align(A, -A[:, ::-1] + 1, method="permutation")
    >>> float(np.abs(h.transform(A) - (-A[:, ::-1] + 1)).max()) < 1e-9
    True
    """
    if method not in _CLASSES:
        raise ValueError(f"unknown alignment method {method!r}; choose one of {', '.join(METHODS)}")
    return _CLASSES[method](**params).fit(A, B)


# ============================================================================ a pair
class _Pair:
    """Two sides plus their cross moments on the fit and eval rows."""

    def __init__(self, A, B, *, eval_mask, sample_rows, block_rows=None, progress=None,
                 diam_rows=None, side_a=None, side_b=None):
        n_a, n_b = _n_rows(A), _n_rows(B)
        if n_a != n_b:
            raise ValueError(f"A and B have different row counts ({n_a} and {n_b}); they must "
                             f"be activations of the same inputs, row for row")
        self.A, self.B = A, B
        self.n = n_a
        if self.n < 2:
            raise ValueError(f"need at least 2 rows, got {self.n}")
        self.dtype = _compute_dtype(A, B)
        self.eval_mask = np.zeros(self.n, bool) if eval_mask is None else eval_mask
        diam_rows = np.zeros(0, np.int64) if diam_rows is None else diam_rows
        self.block_rows = block_rows or _default_block_rows(
            max(_n_features(A, "A"), _n_features(B, "B")))
        self.progress = progress
        self.a = side_a or _Side(A, "A", self.eval_mask, sample_rows, diam_rows, self.dtype)
        self.b = side_b or _Side(B, "B", self.eval_mask, sample_rows, diam_rows, self.dtype)

    def fit_moments(self):
        """One pass: side moments (unless cached) and cross moments, fit and eval rows."""
        a, b, em = self.a, self.b, self.eval_mask
        pm_fit = pm_eval = None
        start = 0
        with _progress(self.n, "compare: moments", self.progress) as bar:
            for xa, xb in zip(_blocks(self.A, self.block_rows, self.dtype),
                              _blocks(self.B, self.block_rows, self.dtype)):
                if not a.done:
                    a.add(start, xa)
                else:
                    _check_finite(xa, "A", start)
                if not b.done:
                    b.add(start, xb)
                else:
                    _check_finite(xb, "B", start)
                if pm_fit is None:
                    kw = dict(compute_xx=False, compute_yy=False, shift_x=a.shift, shift_y=b.shift)
                    pm_fit, pm_eval = PairedMoments(**kw), PairedMoments(**kw)
                stop = start + xa.shape[0]
                sel = em[start:stop]
                if sel.all():
                    pm_eval.add(xa, xb)
                elif not sel.any():
                    pm_fit.add(xa, xb)
                else:
                    pm_fit.add(xa[~sel], xb[~sel])
                    pm_eval.add(xa[sel], xb[sel])
                start = stop
                bar.update(xa.shape[0])
        for side in (a, b):
            if not side.done:
                side.finish()
        pm_fit.xx, pm_fit.yy, pm_fit.compute_xx, pm_fit.compute_yy = a.xx_fit, b.xx_fit, True, True
        self.fit_pm = pm_fit
        if pm_eval.n:
            pm_eval.xx, pm_eval.yy = a.xx_eval, b.xx_eval
            pm_eval.compute_xx = pm_eval.compute_yy = True
        self.eval_pm = pm_eval
        return self

    def eval_errors(self, alignments):
        """Sum over eval rows of ||h(a_i) - b_i|| for each alignment."""
        em = self.eval_mask
        maps = {name: (h.coef_.astype(self.dtype), h.mean_a_.astype(self.dtype),
                       h.mean_b_.astype(self.dtype)) for name, h in alignments.items()}
        sums = dict.fromkeys(alignments, 0.0)
        start = 0
        with _progress(self.n, "compare: held-out errors", self.progress) as bar:
            for xa, xb in zip(_blocks(self.A, self.block_rows, self.dtype),
                              _blocks(self.B, self.block_rows, self.dtype)):
                stop = start + xa.shape[0]
                sel = em[start:stop]
                if sel.any():
                    ya, yb = (xa, xb) if sel.all() else (xa[sel], xb[sel])
                    for name, (coef, ma, mb) in maps.items():
                        h = alignments[name]
                        if isinstance(h, PermutationAlignment):
                            pred = np.broadcast_to(mb, (ya.shape[0], mb.size)).copy()
                            r, c = h.pairs_[:, 0], h.pairs_[:, 1]
                            pred[:, c] += (ya[:, r] - ma[r]) * coef[r, c]
                        else:
                            pred = (ya - ma) @ coef + mb
                        sums[name] += _mean_l2(pred, yb)
                start = stop
                bar.update(xa.shape[0])
        return sums


# ============================================================================ compare
def _split(n, groups, eval_fraction, random_state):
    """Boolean eval mask: whole groups (input samples) go to eval, about ``eval_fraction``."""
    if not 0 < eval_fraction < 1:
        raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    if groups is None:
        groups = np.arange(n)
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"groups must have one entry per row ({n}), got shape {groups.shape}")
    uniq, inv = np.unique(groups, return_inverse=True)
    g = uniq.size
    n_eval = int(round(eval_fraction * g))
    if g < 2 or n_eval < 1 or n_eval > g - 1:
        raise ValueError(
            f"too few input samples ({g}) for a {1 - eval_fraction:.0%}/{eval_fraction:.0%} "
            f"fit/eval split by sample; provide more inputs or change eval_fraction")
    order = np.random.default_rng(random_state).permutation(g)
    is_eval = np.zeros(g, bool)
    is_eval[order[:n_eval]] = True
    return is_eval[inv.ravel()], g


@dataclass
class CompareResult:
    """Everything :func:`compare` measured. ``to_dict()`` is flat and JSON-ready.

    Attributes
    ----------
    errors : dict of method -> float
        Held-out mean l2 error / diam(B_eval) for each alignment.
    ica_efficiency : float
        (err_permutation - err_ica) / (err_permutation - err_rigid); NaN if undefined.
    linear_cka, linear_cka_debiased, mean_cca : float
    matched_correlations : ndarray of shape (k,)
        Held-out Pearson correlation of each pair of ICA-matched sources (sign-corrected);
        NaN for a pair with a source that does not vary (beyond rounding) on the held-out
        rows, counted in ``to_dict()["ica_matched_corr_undefined"]``.
    source_correlation : ndarray of shape (k, k)
        Held-out correlation matrix between A's and B's ICA sources, B's columns ordered
        by the matching (so the matched pairs lie on the diagonal).
    alignments : dict of method -> fitted alignment
    info : dict
        Sizes, diameter, split and timing details (flat scalars).
    """

    errors: dict
    ica_efficiency: float
    linear_cka: float
    linear_cka_debiased: float
    mean_cca: float
    matched_correlations: np.ndarray
    source_correlation: np.ndarray | None
    alignments: dict = field(repr=False)
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-ready dict: one key per method error, metrics, sizes and conventions."""
        out: dict[str, Any] = {}
        for name in METHODS:
            out[name] = _f(self.errors.get(name, float("nan")))
        out["ica_efficiency"] = _f(self.ica_efficiency)
        out["linear_cka"] = _f(self.linear_cka)
        out["linear_cka_debiased"] = _f(self.linear_cka_debiased)
        out["mean_cca"] = _f(self.mean_cca)
        mc = np.abs(self.matched_correlations)
        undefined = int(np.isnan(mc).sum())
        mc = mc[~np.isnan(mc)]          # sources constant on the held-out rows have none
        out["ica_matched_corr_mean"] = _f(mc.mean()) if mc.size else None
        out["ica_matched_corr_median"] = _f(np.median(mc)) if mc.size else None
        out["ica_matched_corr_min"] = _f(mc.min()) if mc.size else None
        out["ica_matched_corr_undefined"] = undefined
        out.update({k: (_f(v) if isinstance(v, float) else v) for k, v in self.info.items()})
        out.update(CONVENTIONS)
        return out

    def __str__(self):
        from actkit.report import format_table

        return format_table([self])


def _f(x):
    x = float(x)
    return None if math.isnan(x) else x


def compare(A, B, *, eval_fraction=0.2, groups=None, random_state=0, methods=METHODS,
            alpha=0.0, n_components=None, ica_max_rows="auto", ica_max_iter=200,
            ica_tol=1e-4, diameter_max_rows=DIAMETER_MAX_ROWS, block_rows=None, progress=None,
            device="cpu", _sides=None) -> CompareResult:
    """Fit every alignment on a fit split of the rows and score it on the held-out split.

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        numpy array, torch tensor, ``h5py.Dataset`` or store layer (streamed; never loaded
        whole). Row ``i`` of A and of B must come from the same input (and token).
    B : array-like of shape (n_rows, n_features_b)
    eval_fraction : float, default=0.2
        Share of *input samples* held out for scoring.
    groups : array-like of shape (n_rows,), optional
        Input-sample id of each row: the rows of one sample never straddle the split.
        Default: the store layers' ``groups`` when A is a store layer, else one row = one
        sample.
    random_state : int, default=0
        Seed of the split, of the FastICA initialisation and of any row sampling.
    methods : sequence of str, default all four
    alpha : float, default=0.0
        Ridge penalty of the linear alignment.
    n_components : int, optional
        ICA components; default ``min(Da, Db)``.
    ica_max_rows : int or "auto", default="auto"
        FastICA runs on at most this many random fit rows per side; ``"auto"``:
        ``max(20000, ica_min_rows(k))`` for ``k`` ICA components, at most 1 GiB of float32
        rows per side. With fewer than ``ica_min_rows(k) = max(50 k, k^2 / 4)`` rows
        FastICA's sources are unreliable (measured in docs/compare.md): ``compare`` then
        warns (``UserWarning``); ``to_dict()["ica_rows_per_component"]`` says how many it had.
    ica_max_iter, ica_tol : FastICA stopping rule.
    diameter_max_rows : int or None, default=10000
        diam(B_eval) is exact up to this many eval rows, else the exact diameter of a seeded
        random subset of that size, a lower bound (recorded as ``diameter_method="sampled"``);
        None: always exact (O(n_eval^2 D) without outlying rows).
    block_rows : int, optional
        Rows per streamed block (default about 32 MiB).
    progress : bool, optional
        Show progress bars (default: only on a terminal).
    device : str, default="cpu"
        Torch device of the two FastICA fits (e.g. ``"cuda"``), the only part whose cost
        grows with the square of the width per row; the moments passes, closed-form fits
        and errors run on the CPU.

    Returns
    -------
    CompareResult

    Raises
    ------
    ValueError
        Different row counts, non-finite values, different row indexes or input
        fingerprints of two store layers, or too few samples for the split.
    """
    t0 = time.perf_counter()
    A, B = _as_source(A, "A"), _as_source(B, "B")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")
    if "ica" in methods:
        check_device(device)      # a bad device fails before the passes over the data
    n = _n_rows(A)
    if _n_rows(B) != n:
        raise ValueError(f"A and B have different row counts ({n} and {_n_rows(B)}); they "
                         f"must be activations of the same inputs, row for row")
    groups = _groups_for(A, B, groups)
    eval_mask, n_groups = _split(n, groups, eval_fraction, random_state)
    fit_rows = np.flatnonzero(~eval_mask)
    eval_rows = np.flatnonzero(eval_mask)
    ica = ICAAlignment(n_components=n_components, random_state=random_state,
                       max_fit_rows=ica_max_rows, max_iter=ica_max_iter, tol=ica_tol,
                       device=device)
    k_ica = min(_n_features(A, "A"), _n_features(B, "B"))
    sample_rows = (ica._sample_rows(n, fit_rows, k=k_ica) if "ica" in methods
                   else np.zeros(0, np.int64))
    if diameter_max_rows is not None and eval_rows.size > diameter_max_rows:
        rng = np.random.default_rng(random_state + 1)
        diam_rows = np.sort(rng.choice(eval_rows, diameter_max_rows, replace=False))
        diam_method = "sampled"
    else:
        diam_rows, diam_method = eval_rows, "exact"
    side_a, side_b = _sides if _sides is not None else (None, None)
    pair = _Pair(A, B, eval_mask=eval_mask, sample_rows=sample_rows, block_rows=block_rows,
                 progress=progress, diam_rows=diam_rows, side_a=side_a, side_b=side_b)
    pair.fit_moments()
    t_moments = time.perf_counter()

    alignments = {}
    for name in methods:
        h = ica if name == "ica" else (LinearAlignment(alpha=alpha) if name == "linear"
                                       else _CLASSES[name]())
        alignments[name] = h._fit(pair)
    t_fit = time.perf_counter()
    rows_per_comp = None
    if "ica" in alignments:
        k_used = int(alignments["ica"].n_components_)
        rows_per_comp = sample_rows.size / max(k_used, 1)
        if sample_rows.size < ica_min_rows(k_used):
            warnings.warn(
                f"ICA had {sample_rows.size} fit rows for {k_used} components "
                f"({rows_per_comp:.0f} per component); FastICA needs about "
                f"{ica_min_rows(k_used)} (max(50 k, k^2/4)) or it finds spurious sources, so "
                f"the ica error is unreliable: give it more rows (ica_max_rows, more inputs) or "
                f"fewer components (n_components)", UserWarning, stacklevel=2)

    diam_b = diameter(pair.b.diam)
    if not diam_b > 0:
        raise ValueError("B's held-out rows are all identical (zero diameter): errors are undefined")
    sums = pair.eval_errors(alignments)
    errors = {name: s / eval_rows.size / diam_b for name, s in sums.items()}
    t_err = time.perf_counter()

    eff = float("nan")
    if {"permutation", "rigid", "ica"} <= set(errors):
        den = errors["permutation"] - errors["rigid"]
        if abs(den) > 1e-12:
            eff = (errors["permutation"] - errors["ica"]) / den

    all_pm = pair.fit_pm.merge(pair.eval_pm)
    cka = all_pm.cka()
    cka_d = all_pm.cka(debiased=True) if n >= 4 else float("nan")
    rho = canonical_correlations(all_pm.scatter_xx(), all_pm.scatter_yy(), all_pm.scatter_xy())
    mcca = float(rho.mean()) if rho.size else float("nan")

    matched = np.zeros(0)
    src_corr = None
    if "ica" in alignments and pair.eval_pm.n > 1:
        h = alignments["ica"]
        e = pair.eval_pm
        Ua, Ub = h.unmixing_a_, h.unmixing_b_
        c = Ua @ e.scatter_xy() @ Ub.T
        sa = _source_sd(Ua, e.scatter_xx())
        sb = _source_sd(Ub, e.scatter_yy())
        with np.errstate(invalid="ignore"):
            corr = np.clip(c / sa[:, None] / sb[None, :], -1.0, 1.0)
        r, cc = h.pairs_[:, 0], h.pairs_[:, 1]
        matched = corr[r, cc] * h.signs_
        rest = np.setdiff1d(np.arange(corr.shape[1]), cc)
        order_a = np.concatenate([r, np.setdiff1d(np.arange(corr.shape[0]), r)])
        src_corr = corr[order_a][:, np.concatenate([cc, rest])]
        src_corr[: r.size, : r.size] *= h.signs_[None, :]
    t_end = time.perf_counter()

    info = {
        "n_rows": int(n), "n_fit_rows": int(fit_rows.size), "n_eval_rows": int(eval_rows.size),
        "n_samples": int(n_groups), "n_features_a": int(pair.a.d), "n_features_b": int(pair.b.d),
        "eval_fraction": float(eval_fraction), "random_state": int(random_state),
        "ridge_alpha": float(alpha),
        "ica_n_components": int(alignments["ica"].n_components_) if "ica" in alignments else None,
        "ica_fit_rows": int(sample_rows.size) if "ica" in methods else None,
        "ica_rows_per_component": (round(rows_per_comp, 2) if rows_per_comp is not None
                                   else None),
        "ica_max_iter": int(ica_max_iter), "ica_tol": float(ica_tol),
        "ica_n_iter_a": int(alignments["ica"].n_iter_[0]) if "ica" in alignments else None,
        "ica_n_iter_b": int(alignments["ica"].n_iter_[1]) if "ica" in alignments else None,
        "ica_converged": bool(alignments["ica"].converged_) if "ica" in alignments else None,
        "ica_device": str(device) if "ica" in alignments else None,
        "cca_n_components": int(rho.size),
        "diameter": float(diam_b), "diameter_method": diam_method,
        "diameter_rows": int(diam_rows.size),
        "compute_dtype": str(pair.dtype),
        "seconds_moments": round(t_moments - t0, 3), "seconds_fit": round(t_fit - t_moments, 3),
        "seconds_errors": round(t_err - t_fit, 3), "seconds_total": round(t_end - t0, 3),
    }
    for key, X in (("layer_a", A), ("layer_b", B)):
        if hasattr(X, "name") and isinstance(getattr(X, "name"), str):
            info[key] = X.name
    return CompareResult(errors=errors, ica_efficiency=eff, linear_cka=cka,
                         linear_cka_debiased=cka_d, mean_cca=mcca, matched_correlations=matched,
                         source_correlation=src_corr, alignments=alignments, info=info)


def _groups_for(A, B, groups):
    """Default groups from store layers; refuse layers whose rows do not correspond."""
    ia, ib = getattr(A, "index", None), getattr(B, "index", None)
    sa, sb = getattr(A, "store", None), getattr(B, "store", None)
    if sa is not None and sb is not None:
        fa, fb = getattr(sa, "inputs_fingerprint", ""), getattr(sb, "inputs_fingerprint", "")
        if fa and fb and fa != fb:
            raise ValueError(f"the stores were extracted from different inputs (inputs "
                             f"fingerprints {fa[:12]} and {fb[:12]} differ)")
    if isinstance(ia, np.ndarray) and isinstance(ib, np.ndarray):
        if ia.shape != ib.shape or not np.array_equal(ia, ib):
            raise ValueError("the two layers have different row indexes ([sample, position] "
                             "per row): rows do not come from the same inputs and tokens")
    if groups is None:
        g = getattr(A, "groups", None)
        if g is None:
            g = getattr(B, "groups", None)
        if isinstance(g, np.ndarray):
            return g
    return groups


def compare_many(sources, *, labels=None, metric="rigid", progress=None, scheduler=None, **kwargs):
    """Compare every pair of several representations of the same inputs.

    Each representation is read for its own moments, whitened and ICA-fitted **once** and
    reused in every pair; each pair then costs one pass for cross moments and one over the
    held-out rows. The split (by sample) is the same for every pair.

    Parameters
    ----------
    sources : list of array-like, each of shape (n_rows, n_features_k)
    labels : list of str, optional
    metric : str, default="rigid"
        Any numeric key of :meth:`CompareResult.to_dict` (e.g. ``"linear_cka"``, ``"ica"``,
        ``"mean_cca"``); the matrix holds it for (row -> column).
    scheduler : None, str or distributed.Client, optional
        Dask (``docs/dask.md``): each representation's statistics (moments, whitening and
        ICA fits) are computed once, in one task per representation, and the K^2 pairs are
        spread over the workers, each task opening the stores itself. ``"local:N"``, an
        address or a ``Client``; sources must then be store layers or arrays.
    **kwargs
        Passed to :func:`compare`.

    Returns
    -------
    matrix : ndarray of shape (K, K)
        ``matrix[i, j]`` = ``metric`` of ``compare(sources[i], sources[j])``; the diagonal
        is the self-comparison's value.
    results : dict of (i, j) -> CompareResult
    """
    if scheduler is not None:
        from actkit._dask_compare import compare_many_dask

        return compare_many_dask(sources, metric=metric, progress=progress, scheduler=scheduler, **kwargs)
    K = len(sources)
    sources, groups, eval_mask, sample_rows, diam_rows, dtype, br = _many_setup(sources, kwargs)
    sides = []
    for i, X in enumerate(sources):
        side = _Side(X, f"source {i}", eval_mask, sample_rows, diam_rows, dtype)
        with _progress(_n_rows(X), f"moments {i + 1}/{K}", progress) as bar:
            side.run(br, progress, bar)
        sides.append(side)
    matrix = np.full((K, K), np.nan)
    results = {}
    for i in range(K):
        for j in range(K):
            res = compare(sources[i], sources[j], groups=groups, progress=progress,
                          _sides=(sides[i], sides[j]), **kwargs)
            matrix[i, j] = _metric_value(res, metric)
            results[(i, j)] = res
    return matrix, results


def _metric_value(res, metric):
    d = res.to_dict()
    if metric not in d or not isinstance(d[metric], (int, float, type(None))):
        raise ValueError(f"unknown metric {metric!r}; use a numeric key of "
                         f"CompareResult.to_dict(), e.g. linear_cka, rigid, ica")
    return np.nan if d[metric] is None else d[metric]


def _many_setup(sources, kwargs):
    """What every pair of :func:`compare_many` shares: the sources, groups, the split, the
    ICA and diameter rows, the compute dtype and the block size. ``kwargs`` loses
    ``groups``."""
    K = len(sources)
    if K < 2:
        raise ValueError("compare_many needs at least two representations")
    sources = [_as_source(X, f"source {i}") for i, X in enumerate(sources)]
    n = _n_rows(sources[0])
    for i, X in enumerate(sources):
        if _n_rows(X) != n:
            raise ValueError(f"representation {i} has {_n_rows(X)} rows, the first has {n}")
        _groups_for(sources[0], X, None)
    groups = _groups_for(sources[0], sources[1], kwargs.pop("groups", None))
    eval_fraction = kwargs.get("eval_fraction", 0.2)
    random_state = kwargs.get("random_state", 0)
    eval_mask, _ = _split(n, groups, eval_fraction, random_state)
    eval_rows = np.flatnonzero(eval_mask)
    ica = ICAAlignment(n_components=kwargs.get("n_components"), random_state=random_state,
                       max_fit_rows=kwargs.get("ica_max_rows", "auto"))
    widths = sorted(_n_features(X, "X") for X in sources)
    sample_rows = ica._sample_rows(n, np.flatnonzero(~eval_mask), k=widths[-2])
    dmax = kwargs.get("diameter_max_rows", DIAMETER_MAX_ROWS)
    if dmax is not None and eval_rows.size > dmax:
        diam_rows = np.sort(np.random.default_rng(random_state + 1).choice(eval_rows, dmax, replace=False))
    else:
        diam_rows = eval_rows
    dtype = _compute_dtype(*sources)
    br = kwargs.get("block_rows") or _default_block_rows(max(_n_features(X, "X") for X in sources))
    return sources, groups, eval_mask, sample_rows, diam_rows, dtype, br


# ``actkit.align`` names both this module and the function :func:`align`. Importing the
# module binds the package attribute ``actkit.align`` to the module, so make the module
# callable: ``actkit.align(A, B, method=...)`` then works either way.
def _make_module_callable():
    import sys
    import types

    class _CallableModule(types.ModuleType):
        def __call__(self, A, B, method="rigid", **params):
            return align(A, B, method, **params)

    sys.modules[__name__].__class__ = _CallableModule


_make_module_callable()
