"""Rotations: the exponential of an antisymmetric matrix and symmetric decorrelation."""

from __future__ import annotations

import numpy as np
from scipy.linalg import expm

from actkit._threads import small_linalg


def expm_skew(D):
    """``expm`` of an antisymmetric matrix (float64): an exact rotation."""
    with small_linalg():
        return expm(D)


def sym_decorrelation(W):
    """``(W W')^{-1/2} W``: the orthogonal matrix nearest to ``W``."""
    with small_linalg():
        return _sym_decorrelation(W)


def _sym_decorrelation(W):
    s, u = np.linalg.eigh(W @ W.T)
    s = np.clip(s, np.finfo(W.dtype).tiny, None)
    return (u * (1.0 / np.sqrt(s))) @ u.T @ W
