"""Dense algebra the moment-based measures share: the rank cut, whitening of a scatter
matrix and canonical correlations (with their directions).

Two things keep the resampling of these measures cheap (:mod:`actkit.inference`):

* inside :func:`reuse_sides`, a side's decomposition (its whitener, its eigenvectors) is
  computed once per scatter *object*: a permutation of B's input samples keeps ``Saa`` and
  ``Sbb`` (the same arrays in every permuted :class:`~actkit.measures.Moments`), so each
  permutation costs the cross product and one small SVD, not two eigendecompositions;
* :func:`whitener` whitens by a Cholesky factor (about a third of the time of ``eigh``)
  where the eigenvalues show that no direction falls below the rank cut: the canonical
  correlations do not depend on which whitening is used (to rounding, ~1e-13), only on which
  directions are dropped, and then none is.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np
import scipy.linalg

from actkit._threads import small_linalg
from actkit.errors import ValidationError
from actkit.whitening import whitening_from_moments

__all__ = ["rank_cut", "canonical_correlations", "cca", "whitener", "reuse_sides", "side_cached"]


def rank_cut(dtype):
    """Directions whose variance is below this x the largest are dropped by the linear map
    and by the CCA family: 1e-6 for float32 rows (as the ICA whitening: below it, float32
    rounding of the activations, which differs between machines, decides the result; e.g.
    the direction a LayerNorm output has none of), 1e-10 for float64 rows."""
    return 1e-6 if np.dtype(dtype) == np.float32 else 1e-10


#: a Cholesky whitening is used only where the smallest eigenvalue is at least this many
#: times the rank cut above it (so that rounding cannot move a direction across the cut)
CHOLESKY_MARGIN = 10.0

_SIDES: OrderedDict = OrderedDict()     # (id(S), what, args) -> (S, value), inside reuse_sides
_SIDES_LOCK = threading.Lock()
_REUSE = [0]                            # depth of reuse_sides (any thread)
_SIDES_MAX = 16


@contextmanager
def reuse_sides():
    """Within it, :func:`side_cached` decompositions are computed once per scatter matrix
    object (the permutation null keeps the side scatters' arrays). Outside, nothing is kept."""
    with _SIDES_LOCK:
        _REUSE[0] += 1
    try:
        yield
    finally:
        with _SIDES_LOCK:
            _REUSE[0] -= 1
            if not _REUSE[0]:
                _SIDES.clear()


def side_cached(fn):
    """``fn(S, *args)`` memoised on the identity of ``S`` inside :func:`reuse_sides` (the
    array is held, so its id is not reused while cached)."""
    def wrapped(S, *args):
        if not _REUSE[0]:
            return fn(S, *args)
        key = (id(S), fn.__name__, args)
        with _SIDES_LOCK:
            hit = _SIDES.get(key)
            if hit is not None and hit[0] is S:
                _SIDES.move_to_end(key)
                return hit[1]
        value = fn(S, *args)
        with _SIDES_LOCK:
            _SIDES[key] = (S, value)
            while len(_SIDES) > _SIDES_MAX:
                _SIDES.popitem(last=False)
        return value
    wrapped.__name__, wrapped.__doc__ = fn.__name__, fn.__doc__
    return wrapped


@side_cached
def whitener(S, eps):
    """A whitening ``W`` (rank, p) of a scatter matrix (``W S W^T = I``), or None without
    variance: the inverse Cholesky factor where every eigenvalue is at least
    :data:`CHOLESKY_MARGIN` x ``eps`` x the largest (nothing to drop), else PCA whitening
    with the directions below ``eps`` x the largest dropped."""
    if not np.max(np.diag(S), initial=0.0) > 0:
        return None
    lam = np.linalg.eigvalsh(S)
    if lam[0] > CHOLESKY_MARGIN * eps * lam[-1]:
        try:
            L = np.linalg.cholesky(S)
        except np.linalg.LinAlgError:
            L = None
        if L is not None:
            inv, info = scipy.linalg.lapack.dtrtri(L, lower=1)
            if info == 0:
                return inv
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
