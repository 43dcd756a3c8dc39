"""The three closed-form alignments: signed permutation, rigid (Procrustes), affine linear.

Each is a scikit-learn ``BaseEstimator`` fitted on paired rows, ``fit(A, B)``, with
``transform(A)`` (rows of A in B's space) and ``score(A, B)`` (the normalised error of
``docs/definitions.md`` §1: mean l2 distance over the rows / diam(B)). Every fit is
closed form from second moments accumulated block by block (:class:`~actkit.stats.CrossMoments`),
so the data never has to fit in memory.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator

from actkit._data import as_array
from actkit._params import Interval, StrOptions, validate_params
from actkit._threads import current_threads, map_ordered, small_linalg
from actkit.alignment._assignment import signed_permutation
from actkit.alignment._diameter import diameter, summed_l2
from actkit.alignment._inputs import as_source, blocks, compute_dtype, n_features, n_rows
from actkit.alignment._sides import Pair
from actkit.errors import NotFittedError, ValidationError
from actkit.metrics import rank_cut


class Alignment(BaseEstimator, metaclass=ABCMeta):
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
        """Fit the map from ``A`` onto ``B``.

        Parameters
        ----------
        A : array-like of shape (n_rows, n_features_a)
            Array, torch tensor, ``h5py.Dataset`` or store layer (streamed in blocks).
        B : array-like of shape (n_rows, n_features_b)
            Row ``i`` comes from the same input as row ``i`` of A.
        block_rows : int, optional
            Rows per streamed block (default about 32 MiB).
        progress : bool, optional
            Progress bars (default: only on a terminal).

        Returns
        -------
        self
        """
        A, B = as_source(A, "A"), as_source(B, "B")
        self._validate()
        k = min(n_features(A, "A"), n_features(B, "B"))
        pair = Pair(A, B, eval_mask=None, sample_rows=self.sample_rows_for(n_rows(A), k=k),
                    block_rows=block_rows, progress=progress)
        pair.fit_moments()
        return self.fit_pair(pair)

    def _validate(self):
        """Check the hyperparameters (scikit-learn's ``_parameter_constraints``)."""
        validate_params(self)

    def sample_rows_for(self, n, fit_rows=None, k=None):
        """Rows this alignment needs in memory besides the moments (none: closed form)."""
        return np.zeros(0, np.int64)

    @abstractmethod
    def fit_pair(self, pair):
        """Fit from the moments of a :class:`~actkit.alignment._sides.Pair`. Returns self.

        Each alignment (permutation, rigid, linear, ica) implements it; the base class
        cannot be instantiated."""

    def _set(self, coef, mean_a, mean_b):
        self.coef_ = np.asarray(coef, dtype=np.float64)
        self.mean_a_ = np.asarray(mean_a, dtype=np.float64)
        self.mean_b_ = np.asarray(mean_b, dtype=np.float64)
        self.intercept_ = self.mean_b_ - self.mean_a_ @ self.coef_
        self.n_features_in_ = self.coef_.shape[0]
        self._cast = {}
        return self

    def _check_fitted(self):
        if not hasattr(self, "coef_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(A, B)")

    def _cast_params(self, dtype):
        dtype = np.dtype(dtype)
        if dtype not in self._cast:
            self._cast[dtype] = tuple(x.astype(dtype) for x in (self.coef_, self.mean_a_,
                                                                 self.mean_b_))
        return self._cast[dtype]

    def predict_block(self, block, dtype):
        """``h`` of one block of rows, computed in ``dtype``."""
        coef, ma, mb = self._cast_params(dtype)
        return (block - ma) @ coef + mb

    def transform(self, A):
        """Map rows of A into B's space.

        Parameters
        ----------
        A : array-like of shape (n_rows, n_features_a)

        Returns
        -------
        ndarray of shape (n_rows, n_features_b), float32 for float32 input else float64.
        """
        self._check_fitted()
        A = as_source(A, "A")
        if n_features(A, "A") != self.n_features_in_:
            raise ValidationError(f"A has {n_features(A, 'A')} features, the alignment was fitted "
                             f"on {self.n_features_in_}")
        dt = compute_dtype(A)
        return self.predict_rows(A, dt)

    def predict_rows(self, X, dtype):
        """``h`` of every row of ``X`` (array or streamed source), computed in ``dtype``, the
        same bits at any thread count: one fixed block of rows
        (:func:`~actkit.alignment._inputs.blocks`) at a time at one BLAS thread, the blocks
        on the budget's threads (OpenBLAS's 2-thread float32 GEMM gives other bits).

        Returns
        -------
        ndarray of shape (n_rows, n_features_b)
        """
        with small_linalg():
            out = list(map_ordered(lambda blk: self.predict_block(blk, dtype),
                                   blocks(X, None, dtype), current_threads()))
        return np.concatenate(out) if out else np.zeros((0, self.coef_.shape[1]), dtype)

    def score(self, A, B, *, diam=None):
        """The normalised error: mean l2 distance between ``transform(A)`` and ``B`` / ``diam``.

        Lower is better (0 is a perfect map); on held-out rows this is the error
        :func:`~actkit.compare` reports.

        Parameters
        ----------
        A : array-like of shape (n_rows, n_features_a)
        B : array-like of shape (n_rows, n_features_b)
        diam : float, optional
            Default: the exact :func:`~actkit.alignment.diameter` of ``B``'s rows.

        Returns
        -------
        float
        """
        pred = self.transform(A)
        Bv = as_array(B, pred.dtype)
        if Bv.shape != pred.shape:
            raise ValidationError(f"B has shape {Bv.shape}, expected {pred.shape}")
        diam = diameter(Bv) if diam is None else diam
        return summed_l2(pred, Bv) / Bv.shape[0] / diam


class PermutationAlignment(Alignment):
    """Signed permutation of columns plus translation (see :func:`signed_permutation`).

    Attributes: ``coef_`` (the signed permutation matrix), ``pairs_`` ((k, 2) int array of
    matched (column of A, column of B)), plus those of the base class.
    """

    method = "permutation"
    _parameter_constraints: dict = {}

    def fit_pair(self, pair):
        m = pair.fit_pm
        P, r, c = signed_permutation(np.diag(m.scatter_xx()), np.diag(m.scatter_yy()),
                                     m.scatter_xy())
        self.pairs_ = np.stack([r, c], axis=1)
        return self._set(P, m.mean_x, m.mean_y)

    def predict_block(self, block, dtype):
        # a permutation needs no GEMM: copy the matched columns, signed, onto B's mean
        coef, ma, mb = self._cast_params(dtype)
        pred = np.broadcast_to(mb, (block.shape[0], mb.size)).copy()
        r, c = self.pairs_[:, 0], self.pairs_[:, 1]
        pred[:, c] += (block[:, r] - ma[r]) * coef[r, c]
        return pred


class RigidAlignment(Alignment):
    """Orthogonal Procrustes (no scaling) plus translation: R = U V^T, SVD of A_c^T B_c."""

    method = "rigid"
    _parameter_constraints: dict = {}

    def fit_pair(self, pair):
        m = pair.fit_pm
        with small_linalg():
            U, _, Vt = np.linalg.svd(m.scatter_xy(), full_matrices=False)
        return self._set(U @ Vt, m.mean_x, m.mean_y)


#: Fit rows a closed-form map needs (docs/definitions.md, "Too few fit rows"): below these,
#: a planted Gaussian case (D = 64, ``benchmarks/bench_closed_form_rows.py``) has a held-out error
#: more than about 5% above the true map's.
RIGID_ROWS_PER_FEATURE = 5
LINEAR_ROWS_PER_FEATURE = 10


def closed_form_min_rows(method, d_a, d_b):
    """Fit rows the rigid (``5 max(Da, Db)``) or linear (``10 Da``) map needs; 0 otherwise."""
    if method == "rigid":
        return RIGID_ROWS_PER_FEATURE * max(int(d_a), int(d_b))
    if method == "linear":
        return LINEAR_ROWS_PER_FEATURE * int(d_a)
    return 0


class LinearAlignment(Alignment):
    """Affine least squares ``h(a) = a W + c``, optional ridge penalty ``alpha |W|_F^2``.

    Parameters
    ----------
    alpha : float or "gcv", default=0.0
        Ridge penalty on the weights (sklearn ``Ridge`` convention: added to A_c^T A_c).
        ``"gcv"``: the penalty that minimises the generalised cross-validation error of the
        fit rows (:func:`gcv_alpha`, docs/definitions.md), chosen from the moments alone.

    Attributes
    ----------
    alpha_ : float
        The penalty used.
    """

    method = "linear"
    _parameter_constraints: dict = {"alpha": [Interval(Real, 0.0, None, closed="left"),
                                              StrOptions({"gcv"})]}

    def __init__(self, *, alpha=0.0):
        self.alpha = alpha

    def fit_pair(self, pair):
        self._validate()
        m = pair.fit_pm
        G = m.scatter_xx()
        C = m.scatter_xy()
        with small_linalg():
            if isinstance(self.alpha, str):
                self.alpha_ = gcv_alpha(G, C, m.scatter_yy(), m.n)
            else:
                self.alpha_ = float(self.alpha)
            if self.alpha_:
                G = G + self.alpha_ * np.eye(G.shape[0])
            W = self._solve(G, C, rank_cut(pair.dtype))
        return self._set(W, m.mean_x, m.mean_y)

    @staticmethod
    def _solve(G, C, cut):
        """``G^+ C`` over the eigen-directions of G above ``cut`` x its largest eigenvalue."""
        lam, V = np.linalg.eigh(G)
        top = float(lam[-1]) if lam.size else 0.0
        keep = lam > cut * top if top > 0 else np.zeros(lam.size, bool)
        Vk = V[:, keep]
        return Vk @ ((Vk.T @ C) / lam[keep][:, None])


#: ``gcv_alpha`` searches ``alpha = lambda_max x 10^e`` for e on this grid (and alpha = 0).
GCV_EXPONENTS = np.linspace(-12.0, 2.0, 57)


def gcv_alpha(G, C, Syy, n):
    """The ridge penalty minimising generalised cross-validation on the fit rows.

    ``GCV(alpha) = (RSS(alpha) / n) / (1 - df(alpha) / n)^2`` (Golub, Heath and Wahba 1979)
    with ``df = 1 + sum_i lambda_i / (lambda_i + alpha)`` (the intercept counts one) and
    the residual sum of squares over every output column, all from the centred scatters
    ``G = A_c^T A_c`` (D_a x D_a), ``C = A_c^T B_c`` and ``Syy = B_c^T B_c`` of ``n`` rows:
    ``RSS = tr Syy - sum_i |q_i|^2 (2 / (lambda_i + alpha) - lambda_i / (lambda_i + alpha)^2)``
    with ``G = V diag(lambda) V^T`` and ``q_i`` the rows of ``V^T C``. Searched on
    ``alpha = 0`` and ``lambda_max x 10^e``, e in -12..2 (57 points); the first minimum wins.

    Returns
    -------
    float
    """
    lam, V = np.linalg.eigh(G)
    lam = np.clip(lam, 0.0, None)
    q2 = np.sum((V.T @ C) ** 2, axis=1)
    top = float(lam[-1]) if lam.size else 0.0
    if not top > 0:
        return 0.0
    tyy = float(np.trace(Syy))
    best = (np.inf, 0.0)
    for a in [0.0, *(top * 10.0 ** GCV_EXPONENTS)]:
        d = lam + a
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(d > 0, 1.0 / d, 0.0)
        df = 1.0 + float(np.sum(lam * inv))
        if df >= n:
            continue
        rss = max(tyy - float(np.sum(q2 * (2.0 * inv - lam * inv ** 2))), 0.0)
        g = (rss / n) / (1.0 - df / n) ** 2
        if g < best[0]:
            best = (g, float(a))
    return best[1]


def closed_form_rows(alignments, pair):
    """Each of rigid and linear fitted on fewer rows than it needs (:func:`closed_form_min_rows`;
    ``pair``: the :class:`Pair` they were fitted on): returns the JSON keys
    ``<method>_min_fit_rows`` and ``<method>_fit_rows_ok``, and the notes."""
    n_fit = int(pair.fit_pm.n)
    out, notes = {}, []
    for name in ("rigid", "linear"):
        if name not in alignments:
            continue
        need = closed_form_min_rows(name, pair.a.d, pair.b.d)
        out[f"{name}_min_fit_rows"] = int(need)
        out[f"{name}_fit_rows_ok"] = bool(n_fit >= need)
        if n_fit < need:
            rule = "5 max(Da, Db)" if name == "rigid" else "10 Da"
            hint = (" or a ridge the data choose (alpha='gcv', --alpha gcv)"
                    if name == "linear" and not alignments[name].alpha_ else "")
            notes.append((f"the {name} map had {n_fit} fit rows for {pair.a.d} -> {pair.b.d} features; it needs "
                          f"about {need} ({rule}) or its held-out error is inflated by overfitting, so the {name} "
                          f"error is unreliable: give it more rows{hint}", UserWarning))
    return out, notes
