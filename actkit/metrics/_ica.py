"""Identifiability metrics for ICA and sparse codes (``docs/definitions.md`` §2-3).

``amari_distance(W, A)``   unmixing vs true mixing, 0 = perfect up to scale and permutation
``mcc(Z_true, Z_est)``     mean Hungarian-matched |Pearson| correlation of latents
``hoyer_sparsity(X)``      (sqrt(n) - |x|_1/|x|_2) / (sqrt(n) - 1), per row or averaged
"""

from __future__ import annotations

import numpy as np

from actkit._matching import match_columns
from actkit.errors import ValidationError

__all__ = ["amari_distance", "mcc", "hoyer_sparsity"]


def _as_2d_float(X, name: str) -> np.ndarray:
    if hasattr(X, "detach"):  # torch tensor
        X = X.detach().cpu().numpy()
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValidationError(f"{name} must be a 2-D array, got shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValidationError(f"{name} contains NaN or infinite values")
    return X


def amari_distance(W, A) -> float:
    """Amari distance between an estimated unmixing ``W`` and a true mixing ``A``.

    With ``P = W @ A`` (n x n)::

        d = 1/(2n(n-1)) * [ sum_i (sum_j |P_ij| / max_j |P_ij| - 1)
                          + sum_j (sum_i |P_ij| / max_i |P_ij| - 1) ]

    Parameters
    ----------
    W : array-like of shape (n_components, n_features)
        Estimated unmixing matrix (e.g. ``FastICA().components_``).
    A : array-like of shape (n_features, n_components)
        True mixing matrix (sources -> observations).

    Returns
    -------
    float
        In [0, 1]; 0 means ``W @ A`` is a scaled permutation (perfect recovery).

    Examples
    --------
    >>> import numpy as np
    >>> A = np.random.default_rng(0).normal(size=(3, 3))
    >>> round(amari_distance(np.linalg.inv(A), A), 12)
    0.0
    """
    W = _as_2d_float(W, "W")
    A = _as_2d_float(A, "A")
    if W.shape[1] != A.shape[0]:
        raise ValidationError(f"W has {W.shape[1]} columns but A has {A.shape[0]} rows; W @ A is undefined")
    P = np.abs(W @ A)
    if P.shape[0] != P.shape[1]:
        raise ValidationError(f"W @ A must be square, got shape {P.shape}")
    n = P.shape[0]
    if n < 2:
        return 0.0
    rmax = P.max(axis=1)
    cmax = P.max(axis=0)
    if np.any(rmax == 0) or np.any(cmax == 0):
        raise ValidationError("W @ A has an all-zero row or column; the Amari distance is undefined")
    rows = (P.sum(axis=1) / rmax - 1.0).sum()
    cols = (P.sum(axis=0) / cmax - 1.0).sum()
    return float((rows + cols) / (2.0 * n * (n - 1)))


def mcc(Z_true, Z_est, *, return_matching: bool = False):
    """Mean correlation coefficient between true and estimated latents.

    The |Pearson| correlation matrix between the columns of ``Z_true`` and ``Z_est`` is
    matched one-to-one with the Hungarian algorithm (:func:`actkit.metrics.match_columns`);
    the score is the mean of the matched entries.

    Parameters
    ----------
    Z_true : array-like of shape (n_samples, n_true)
    Z_est : array-like of shape (n_samples, n_est)
    return_matching : bool, default=False
        Also return ``(rows, cols)``, the matched column indices.

    Returns
    -------
    float
        In [0, 1]; 1 means every true latent is linearly recovered up to sign and scale.
        With ``n_true != n_est`` the mean runs over ``min(n_true, n_est)`` pairs.
    """
    Zt = _as_2d_float(Z_true, "Z_true")
    Ze = _as_2d_float(Z_est, "Z_est")
    if Zt.shape[0] != Ze.shape[0]:
        raise ValidationError(f"Z_true has {Zt.shape[0]} rows but Z_est has {Ze.shape[0]}; they must match")
    if Zt.shape[0] < 2:
        raise ValidationError("mcc needs at least 2 samples")
    Zt = Zt - Zt.mean(axis=0)
    Ze = Ze - Ze.mean(axis=0)
    nt = np.linalg.norm(Zt, axis=0)
    ne = np.linalg.norm(Ze, axis=0)
    nt[nt == 0] = np.inf  # constant columns correlate with nothing
    ne[ne == 0] = np.inf
    C = np.abs((Zt / nt).T @ (Ze / ne))
    rows, cols, _ = match_columns(C)
    score = float(C[rows, cols].mean())
    if return_matching:
        return score, (rows, cols)
    return score


def hoyer_sparsity(X, *, axis: int = -1, reduce: str | None = "mean"):
    """Hoyer sparsity ``(sqrt(n) - |x|_1 / |x|_2) / (sqrt(n) - 1)`` of vectors.

    Parameters
    ----------
    X : array-like of shape (n,) or (n_samples, n)
        One vector, or one vector per row (``axis=-1``).
    axis : int, default=-1
        Axis holding the n coordinates of each vector.
    reduce : {"mean", None}, default="mean"
        ``"mean"`` averages over vectors; ``None`` returns one value per vector.

    Returns
    -------
    float or ndarray of shape (n_samples,)
        1 for a 1-sparse vector, 0 for a vector of equal-magnitude entries; an all-zero
        vector scores 0 by convention.
    """
    if hasattr(X, "detach"):
        X = X.detach().cpu().numpy()
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 0:
        raise ValidationError("hoyer_sparsity needs a vector or a 2-D array, got a scalar")
    if not np.all(np.isfinite(X)):
        raise ValidationError("X contains NaN or infinite values")
    n = X.shape[axis]
    if n < 2:
        raise ValidationError(f"hoyer_sparsity needs vectors of length >= 2, got {n}")
    l1 = np.abs(X).sum(axis=axis)
    l2 = np.sqrt((X * X).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(l2 > 0, l1 / np.where(l2 > 0, l2, 1.0), np.sqrt(n))
    h = (np.sqrt(n) - ratio) / (np.sqrt(n) - 1.0)
    if reduce is None or np.ndim(h) == 0:
        return h if np.ndim(h) else float(h)
    if reduce != "mean":
        raise ValidationError(f"reduce must be 'mean' or None, got {reduce!r}")
    return float(np.mean(h))
