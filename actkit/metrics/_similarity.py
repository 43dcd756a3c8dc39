"""Representation similarity: linear CKA (plain and debiased), mean CCA, linear R^2, on
arrays in memory. Each delegates to its measure (:mod:`actkit.measures`: ``linear_cka``,
``linear_cka_debiased``, ``mean_cca``, ``linear_r2``), where it is computed, once.

Formulas follow ``docs/definitions.md`` §3. Everything here works in *feature space*:
CKA and CCA are computed from the (D x D) second moments of the two representations, never
from (N x N) Gram matrices of samples, so they cost O(N D^2) time and O(D^2) memory and can
be accumulated block by block over data that does not fit in memory
(:class:`actkit.stats.CrossMoments`).
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError
from actkit.measures import Moments, canonical_correlations, held_out_mask, rank_cut
from actkit.measures.cca import mean_cca_from_moments
from actkit.measures.cka import debiased_cka_from_moments, linear_cka_from_moments
from actkit.measures.regression import linear_r2_from_moments
from actkit.metrics._inputs import check_pair
from actkit.stats import CrossMoments

__all__ = ["linear_cka", "mean_cca", "linear_r2", "canonical_correlations", "rank_cut"]


def linear_cka(X, Y, *, debiased=False):
    """Linear centred kernel alignment (Kornblith et al. 2019).

    ``CKA = |Xc^T Yc|_F^2 / (|Xc^T Xc|_F |Yc^T Yc|_F)`` with Xc, Yc column-centred; the
    debiased form replaces each HSIC by its unbiased U-statistic estimator (Song et al.
    2012; Kornblith et al.'s ``center_gram(unbiased=True)``), computed from feature moments.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_x)
    Y : array-like of shape (n_samples, n_features_y)
        Two representations of the same rows.
    debiased : bool, default=False
        Use the debiased (unbiased HSIC) estimator; needs at least 4 rows.

    Returns
    -------
    float
        In [0, 1] (the debiased value can be slightly negative). Invariant to orthogonal
        transforms, isotropic scaling and shifts of either side.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> round(linear_cka(X, 3 * X + 1), 6)
    1.0
    """
    X, Y = check_pair(X, Y)
    if debiased and X.shape[0] < 4:
        raise ValidationError("debiased CKA needs at least 4 rows")
    m = Moments.from_cross(CrossMoments(debiased_terms=debiased).add(X, Y))
    return debiased_cka_from_moments(m) if debiased else linear_cka_from_moments(m)


def mean_cca(X, Y, *, n_components=None, eps=None):
    """Mean canonical correlation of two representations (in-sample).

    The mean of the top ``n_components`` canonical correlations, i.e. the mean Pearson
    correlation of the paired canonical variates, as ``sklearn.cross_decomposition.CCA``
    computes them (at convergence) -- but in closed form: the singular values of
    ``Sxx^{-1/2} Sxy Syy^{-1/2}``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_x)
    Y : array-like of shape (n_samples, n_features_y)
    n_components : int, optional
        Number of canonical pairs; default ``min(rank(X), rank(Y))``.
    eps : float, optional
        Eigen-directions with variance below ``eps * largest`` are dropped (rank deficiency);
        default :func:`rank_cut` of the inputs' dtype (1e-6 float32, 1e-10 float64), as
        ``compare``. The moments are float64 sums of products whatever the dtype.

    Returns
    -------
    float
        In [0, 1]; 1 when Y is an invertible affine function of X.
    """
    X, Y = check_pair(X, Y)
    if eps is None:
        eps = rank_cut(np.result_type(X.dtype, Y.dtype))
    m = CrossMoments(debiased_terms=False).add(X.astype(np.float64, copy=False),
                                               Y.astype(np.float64, copy=False))
    return mean_cca_from_moments(Moments.from_cross(m), n_components=n_components, eps=eps)


def linear_r2(Z, S, *, alpha=0.0, test_fraction=0.5, random_state=0, per_latent=False):
    """Linear identifiability: R^2 of an affine map Z -> S fitted on one half, scored on the other.

    Parameters
    ----------
    Z : array-like of shape (n_samples, n_features)
        The representation.
    S : array-like of shape (n_samples, n_latents)
        The (true) latents.
    alpha : float, default=0.0
        Ridge penalty on the weights (not the intercept).
    test_fraction : float, default=0.5
        Share of rows held out for scoring.
    random_state : int, default=0
        Seed of the random split.
    per_latent : bool, default=False
        Also return the R^2 of each latent.

    Returns
    -------
    float or (float, ndarray of shape (n_latents,))
        Mean over latents of ``1 - SSE / SST`` on the held-out rows (sklearn's ``r2_score``
        with ``multioutput='uniform_average'``).
    """
    Z, S = check_pair(Z, S, "Z", "S")
    n = Z.shape[0]
    if not 0 < test_fraction < 1:
        raise ValidationError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < 2 or n - n_test < 2:
        raise ValidationError(f"too few rows ({n}) for a fit/test split")
    test = held_out_mask(n, None, test_fraction, random_state)

    def moments(rows):
        return Moments.from_cross(CrossMoments(debiased_terms=False).add(
            Z[rows].astype(np.float64), S[rows].astype(np.float64)))

    m = moments(~test)
    m = m.with_parts(m, moments(test))
    return linear_r2_from_moments(m, alpha=alpha, per_latent=per_latent)
