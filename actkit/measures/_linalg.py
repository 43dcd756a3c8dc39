"""Dense algebra the moment-based measures share: the rank cut, PCA whitening of a scatter
matrix and canonical correlations (with their directions)."""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.errors import ValidationError
from actkit.whitening import whitening_from_moments

__all__ = ["rank_cut", "canonical_correlations", "cca", "whitener"]


def rank_cut(dtype):
    """Directions whose variance is below this x the largest are dropped by the linear map
    and by the CCA family: 1e-6 for float32 rows (as the ICA whitening: below it, float32
    rounding of the activations, which differs between machines, decides the result; e.g.
    the direction a LayerNorm output has none of), 1e-10 for float64 rows."""
    return 1e-6 if np.dtype(dtype) == np.float32 else 1e-10


def whitener(S, eps):
    """PCA whitening ``W`` (rank, p) of a scatter matrix (``W S W^T = I``), or None without
    variance."""
    if not np.max(np.diag(S), initial=0.0) > 0:
        return None
    return whitening_from_moments(np.zeros(S.shape[0]), S, method="pca", eps=eps,
                                  warn=False)["whitening"]


def cca(sxx, syy, sxy, *, n_components=None, eps=1e-10):
    """Canonical correlations and directions from scatter matrices.

    Returns
    -------
    rho : ndarray of shape (k,)
        Sorted decreasing, clipped to [0, 1].
    Wa, Wb : ndarray of shape (k, p), (k, q), or None
        Row ``i``: the weights of the ``i``-th canonical variate of each side (``Wa S_aa
        Wa^T = I``); None when a side has no variance.
    """
    with small_linalg():
        Wx, Wy, k = _whiteners(sxx, syy, n_components, eps)
        if k == 0:
            return np.zeros(0), None, None
        U, rho, Vt = np.linalg.svd(Wx @ sxy @ Wy.T, full_matrices=False)
        return np.clip(rho[:k], 0.0, 1.0), U[:, :k].T @ Wx, Vt[:k] @ Wy


def canonical_correlations(sxx, syy, sxy, *, n_components=None, eps=1e-10):
    """Canonical correlations from scatter matrices, sorted decreasing, shape (k,)."""
    with small_linalg():
        Wx, Wy, k = _whiteners(sxx, syy, n_components, eps)
        if k == 0:
            return np.zeros(0)
        rho = np.linalg.svd(Wx @ sxy @ Wy.T, compute_uv=False)[:k]
        return np.clip(rho, 0.0, 1.0)


def _whiteners(sxx, syy, n_components, eps):
    """``(Wx, Wy, k)``: each side's whitener and the number of canonical pairs to keep (0
    when a side has no variance; at most ``n_components``)."""
    if n_components is not None and n_components < 1:
        raise ValidationError(f"n_components must be >= 1, got {n_components}")
    Wx, Wy = whitener(sxx, eps), whitener(syy, eps)
    if Wx is None or Wy is None:
        return Wx, Wy, 0
    k = min(Wx.shape[0], Wy.shape[0])
    return Wx, Wy, k if n_components is None else min(k, int(n_components))
