"""PCA and ZCA whitening from streaming float64 statistics (``docs/definitions.md`` §2).

``mu`` = mean, ``Sigma`` = covariance (ddof=1), ``Sigma = U diag(lambda) U'`` (``eigh`` in
float64, eigenvalues sorted in decreasing order, eigenvector signs fixed so that each
eigenvector's largest entry is positive), keep the top ``k``:

* PCA: ``W = diag(lambda_k)^{-1/2} U_k'``  (k x D),  ``z = W (x - mu)``  (k values)
* ZCA: ``W = U_k diag(lambda_k)^{-1/2} U_k'``  (D x D, symmetric), ``z = W (x - mu)``

Eigenvalues below ``eps * lambda_max`` count as zero: those directions are never kept (the
regularisation), and the number kept is reported as ``rank_`` / ``n_components_``.

Two levels share one implementation: :class:`Whitener` (scikit-learn estimator) and
:func:`whiten` (plain function).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from actkit._data import as_input
from actkit._params import (FloatTransformer, Interval, StrOptions, check_fitted, check_input_array, fit_input,
                            transform_input, validate_params)
from actkit._rows import block_rows as default_block_rows
from actkit._warn import warn_user
from actkit._threads import small_linalg
from actkit.runners import LOCAL, runner_for
from actkit.stats import moments_pass
from actkit.errors import ValidationError

__all__ = ["Whitener", "whiten", "RankDeficientWarning"]


class RankDeficientWarning(UserWarning):
    """The data span fewer dimensions than they have features."""


def accumulate_moments(X, *, block_rows=None, verbose=False, desc="covariance", collect_rows=None,
                       precision="float64", runner=None):
    """One pass over ``X``: float64 :class:`RunningMoments` (and optionally chosen raw rows).

    Parameters
    ----------
    X : ndarray or streaming source of shape (N, D)
    collect_rows : ndarray of int, optional
        Sorted row indices to copy out during the pass (used for subsample fits).
    runner : optional
        Where the pass runs (:func:`actkit.runners.runner_for`; default: this process).

    Returns
    -------
    moments : RunningMoments
    rows : ndarray of shape (len(collect_rows), D) or None
    """
    d = int(X.shape[1])
    if block_rows is None:
        block_rows = default_block_rows(d)
    rowpass = moments_pass(block_rows, precision="auto" if precision == "float32" else "float64",
                           collect_rows=collect_rows, name=desc)
    moments, picked = (runner or LOCAL).run(X, rowpass, progress=None if verbose else False)
    rows = None
    if picked is not None:
        rows = np.concatenate(picked) if picked else np.empty((0, d))
    return moments, rows


def _eigh_desc(cov):
    with small_linalg():
        evals, evecs = np.linalg.eigh(cov)
    order = np.argsort(evals)[::-1]
    evals, evecs = evals[order], evecs[:, order]
    # deterministic signs: each eigenvector's largest-magnitude entry is positive
    idx = np.argmax(np.abs(evecs), axis=0)
    signs = np.sign(evecs[idx, np.arange(evecs.shape[1])])
    signs[signs == 0] = 1.0
    return evals, evecs * signs


def whitening_from_moments(mean, cov, *, method="pca", n_components=None, eps=1e-10, warn=True):
    """Whitening parameters from a mean and a covariance (both float64).

    Returns
    -------
    dict with ``mean`` (D,), ``whitening`` (k x D or D x D), ``dewhitening`` (D x k or D x D),
    ``components`` (k x D), ``explained_variance`` (k,), ``rank`` (int), ``n_components`` (int).
    """
    d = cov.shape[0]
    evals, evecs = _eigh_desc(cov)
    lmax = max(float(evals[0]), 0.0)
    if lmax <= 0.0:
        raise ValidationError("the data have zero variance in every feature; nothing to whiten")
    rank = int(np.sum(evals > eps * lmax))
    if n_components is None:
        k = rank
        if warn and rank < d:
            warn_user(
                f"the data are rank-deficient: rank {rank} < {d} features (eigenvalues below "
                f"eps={eps:g} x the largest were dropped); keeping {rank} components",
                RankDeficientWarning,
            )
    else:
        k = int(n_components)
        if k > rank:
            raise ValidationError(
                f"n_components={k} exceeds the rank of the data ({rank} of {d} features have "
                f"variance above eps={eps:g} x the largest); use n_components<={rank}"
            )
    lam = evals[:k]
    U = evecs[:, :k]
    scale = 1.0 / np.sqrt(lam)
    pca_w = scale[:, None] * U.T  # k x D
    if method == "pca":
        W = pca_w
        Winv = U * np.sqrt(lam)[None, :]  # D x k
    else:  # zca
        W = U @ pca_w
        W = (W + W.T) / 2.0
        Winv = (U * np.sqrt(lam)[None, :]) @ U.T
    return {
        "mean": np.asarray(mean, dtype=np.float64),
        "whitening": W,
        "dewhitening": Winv,
        "components": U.T.copy(),
        "explained_variance": lam.copy(),
        "rank": rank,
        "n_components": k,
    }


def _check_n_components(n_components, n_features):
    if n_components is not None and not int(n_components) <= n_features:
        raise ValidationError(
            f"n_components={n_components} must be between 1 and the number of features ({n_features})"
        )


class Whitener(FloatTransformer):
    """PCA or ZCA whitening fitted from streaming float64 mean and covariance.

    Parameters
    ----------
    method : {"pca", "zca"}, default="pca"
        ``"pca"`` projects on the top ``k`` principal axes and rescales them (output has k
        columns); ``"zca"`` rotates back to the original axes (output has D columns and the
        whitening matrix is symmetric).
    n_components : int, optional
        Number of principal directions kept, ``k``. Default: the numerical rank. Asking for
        more than the rank raises ``ValueError``.
    eps : float, default=1e-10
        Eigenvalues below ``eps`` times the largest count as zero (never kept).
    precision : {"float64", "float32"}, default="float64"
        Precision of each block's cross-product ``Xc.T @ Xc`` (always accumulated in
        float64). ``"float32"`` uses single-precision BLAS ``ssyrk`` on float32 data, about
        twice as fast, but resolves eigenvalues only down to ~1e-7 of the largest.
    block_rows : int, optional
        Rows per block when streaming (default: about 32 MiB per block, ``actkit._rows.block_rows``).
    verbose : bool, default=False
        Show a progress bar over the covariance pass (tqdm; hidden when not on a terminal).
    scheduler : None, str or distributed.Client, optional
        Dask: a dask array ``X`` is always fitted with every pass over the rows as a map
        over its chunks + exact merge on this scheduler (None: the active
        ``distributed.Client``, else Dask's default); with a scheduler, store layers and
        h5py datasets are read by the workers too (``"local:N"``, an address, a ``Client``;
        ``docs/dask.md``). ``transform`` of a dask array returns a lazy dask array.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
    whitening_ : ndarray of shape (n_components_, n_features) for PCA, (n_features, n_features) for ZCA
        ``transform(X) = (X - mean_) @ whitening_.T``.
    dewhitening_ : ndarray of shape (n_features, n_components_) or (n_features, n_features)
        ``inverse_transform(Z) = Z @ dewhitening_.T + mean_``.
    components_ : ndarray of shape (n_components_, n_features)
        Principal axes (unit eigenvectors of the covariance), by decreasing variance.
    explained_variance_ : ndarray of shape (n_components_,)
        Eigenvalues kept (ddof=1).
    n_components_ : int
        Number of directions kept.
    rank_ : int
        Numerical rank of the covariance (eigenvalues above ``eps * max``).
    n_samples_seen_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(500, 4)) @ np.diag([1, 2, 3, 4.0])
    >>> Z = Whitener().fit_transform(X)
    >>> bool(np.allclose(np.cov(Z, rowvar=False), np.eye(4)))
    True
    """

    _parameter_constraints: dict = {
        "method": [StrOptions({"pca", "zca"})],
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "eps": [Interval(Real, 0.0, 1.0, closed="left")],
        "precision": [StrOptions({"float64", "float32"})],
        "block_rows": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": ["verbose"],
        "scheduler": "no_validation",
    }

    def __init__(self, method="pca", n_components=None, *, eps=1e-10, precision="float64", block_rows=None,
                 verbose=False, scheduler=None):
        self.method = method
        self.n_components = n_components
        self.eps = eps
        self.precision = precision
        self.block_rows = block_rows
        self.verbose = verbose
        self.scheduler = scheduler

    def fit(self, X, y=None):
        """Fit the mean and whitening matrix, streaming over row blocks.

        Parameters
        ----------
        X : array-like, torch.Tensor, h5py.Dataset or store Layer of shape (n_samples, n_features)
        y : ignored

        Returns
        -------
        self
        """
        with runner_for(X, self.scheduler, block_rows=self.block_rows) as (X, runner):
            X, _, _, d, dtype = fit_input(self, X, min_rows=2, purpose="to whiten")
            validate_params(self)
            _check_n_components(self.n_components, d)
            moments, _ = accumulate_moments(X, block_rows=self.block_rows, verbose=self.verbose,
                                            precision=self.precision, runner=runner)
        self._set_from_moments(moments.mean_, moments.covariance(ddof=1), moments.n_samples_, dtype)
        return self

    def _set_from_moments(self, mean, cov, n_samples, dtype):
        p = whitening_from_moments(mean, cov, method=self.method, n_components=self.n_components, eps=self.eps)
        self.mean_ = p["mean"].astype(dtype)
        self.whitening_ = p["whitening"].astype(dtype)
        self.dewhitening_ = p["dewhitening"].astype(dtype)
        self.components_ = p["components"].astype(dtype)
        self.explained_variance_ = p["explained_variance"].astype(dtype)
        self.n_components_ = p["n_components"]
        self.rank_ = p["rank"]
        self.n_samples_seen_ = int(n_samples)
        return self

    @property
    def _n_features_out(self):
        return self.whitening_.shape[0]

    def transform(self, X):
        """Whiten rows: ``(X - mean_) @ whitening_.T``.

        Parameters
        ----------
        X : array-like or streaming source of shape (n_samples, n_features)

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components_) for PCA, (n_samples, n_features) for ZCA
            Same float dtype as ``X`` (float32 stays float32).
        """
        X, streamed = transform_input(self, X, self.block_rows, self._n_features_out)
        if streamed is not None:
            return streamed
        W = self.whitening_.astype(X.dtype, copy=False)
        return (X - self.mean_.astype(X.dtype, copy=False)) @ W.T

    def inverse_transform(self, Z):
        """Map whitened rows back: ``Z @ dewhitening_.T + mean_``.

        Parameters
        ----------
        Z : array-like of shape (n_samples, n_components_) (PCA) or (n_samples, n_features) (ZCA)

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            Exact for data in the kept subspace.
        """
        check_fitted(self)
        Z = as_input(Z)

        Z = check_input_array(Z, dtype=[np.float64, np.float32])
        if Z.shape[1] != self.dewhitening_.shape[1]:
            raise ValidationError(f"Z has {Z.shape[1]} columns, expected {self.dewhitening_.shape[1]}")
        Winv = self.dewhitening_.astype(Z.dtype, copy=False)
        return Z @ Winv.T + self.mean_.astype(Z.dtype, copy=False)


def whiten(X, *, method="pca", n_components=None, eps=1e-10, return_params=False, verbose=False):
    """Whiten the rows of ``X`` (the plain-function form of :class:`Whitener`).

    Parameters
    ----------
    X : array-like, torch.Tensor, h5py.Dataset or store Layer of shape (n_samples, n_features)
    method : {"pca", "zca"}, default="pca"
    n_components : int, optional
        Directions kept (default: the numerical rank).
    eps : float, default=1e-10
        Relative eigenvalue threshold below which directions are dropped.
    return_params : bool, default=False
        Also return ``mean`` (n_features,) and ``whitening`` (k x n_features or D x D).

    Returns
    -------
    Z : ndarray of shape (n_samples, k) (PCA) or (n_samples, n_features) (ZCA)
    mean, whitening : ndarray
        Only with ``return_params=True``.
    """
    est = Whitener(method=method, n_components=n_components, eps=eps, verbose=verbose).fit(X)
    Z = est.transform(X)
    if return_params:
        return Z, est.mean_, est.whitening_
    return Z
