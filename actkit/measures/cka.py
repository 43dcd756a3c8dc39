"""Centred kernel alignment (Kornblith et al. 2019): linear (plain and debiased, from the
moments) and Gaussian-kernel (from a row sample). The one place CKA is computed in actkit.

Formulas: docs/measures.md, "CKA".
"""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.errors import ValidationError
from actkit.measures._protocol import Measure, float_param
from actkit.measures._rowtools import pairwise_sq_distances

__all__ = ["linear_cka_from_moments", "debiased_cka_from_moments", "hsic_unbiased", "rbf_cka_from_rows", "MEASURES"]

_PAPER = "Kornblith et al. 2019, Similarity of neural network representations revisited"


def linear_cka_from_moments(m):
    """``|Sab|_F^2 / (|Saa|_F |Sbb|_F)`` (feature space; equals the Gram-matrix form)."""
    with small_linalg():  # norms are BLAS dots: one thread, the same bits at any budget
        num = np.sum(m.Sab * m.Sab)
        den = np.linalg.norm(m.Saa) * np.linalg.norm(m.Sbb)
        return float(num / den) if den > 0 else float("nan")


def hsic_unbiased(n, tr_kl, trace_k, trace_l, kl1):
    """Unbiased HSIC (Song et al. 2012) of linear kernels of centred rows: with K = X X^T,
    L = Y Y^T and tilde = zero diagonal, tr(K~L~) = |X^T Y|_F^2 - sum_i dx_i dy_i,
    1^T K~ 1 = -sum_i dx_i (the rows sum to zero), 1^T K~ L~ 1 = sum_i dx_i dy_i."""
    k1, l1 = -trace_k, -trace_l
    return (tr_kl + k1 * l1 / ((n - 1) * (n - 2)) - 2.0 * kl1 / (n - 2)) / (n * (n - 3))


def debiased_cka_from_moments(m):
    """CKA with each HSIC replaced by its unbiased estimator, from the scatter matrices and
    the row-norm sums ``m.norms`` (Kornblith et al.'s ``center_gram(unbiased=True)``)."""
    if m.norms is None:
        raise ValidationError("debiased CKA needs the row-norm sums (Moments.norms)")
    n = m.n
    if n < 4:
        raise ValidationError("debiased CKA needs at least 4 rows")
    with small_linalg():
        ta, tb = float(np.trace(m.Saa)), float(np.trace(m.Sbb))
        nm = m.norms
        hxy = hsic_unbiased(n, np.sum(m.Sab * m.Sab) - nm["dxdy"], ta, tb, nm["dxdy"])
        hxx = hsic_unbiased(n, np.sum(m.Saa * m.Saa) - nm["dx2"], ta, ta, nm["dx2"])
        hyy = hsic_unbiased(n, np.sum(m.Sbb * m.Sbb) - nm["dy2"], tb, tb, nm["dy2"])
    den = np.sqrt(hxx * hyy) if hxx > 0 and hyy > 0 else 0.0
    return float(hxy / den) if den > 0 else float("nan")


def _rbf_gram(X, sigma):
    """Kornblith et al.'s ``gram_rbf``: exp(-d^2 / (2 sigma^2 median(d^2))), the median over
    all n^2 squared distances (the zero diagonal included), as their notebook takes it."""
    d2 = pairwise_sq_distances(X)
    return d2.mul_(-1.0 / (2.0 * sigma ** 2 * _median(d2))).exp_()


def _median(t):
    """np.median of a tensor (the mean of the two middle values at even size)."""
    if t.device.type == "cpu":
        return float(np.median(t.numpy()))
    flat = t.reshape(-1)
    n = flat.numel()
    return float((flat.kthvalue((n + 1) // 2).values + flat.kthvalue(n // 2 + 1).values) / 2)


def rbf_cka_from_rows(A, B, sigma=0.8):
    """Gaussian-kernel CKA of row samples ``A`` (n, p), ``B`` (n, q) (torch float64):
    ``<HKH, HLH> / (|HKH|_F |HLH|_F)``, computed through row sums (no centred copy)."""
    K, L = _rbf_gram(A, sigma), _rbf_gram(B, sigma)
    kl, kk, ll = _centred_dot(K, L), _centred_dot(K, K), _centred_dot(L, L)
    return float(kl / (kk.sqrt() * ll.sqrt()))


def _centred_dot(K, L):
    """<HKH, HLH>_F = sum K L - (2/n) (K1).(L1) + (1'K1)(1'L1)/n^2 for symmetric K, L."""
    import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

    n = K.shape[0]
    rk, rl = K.sum(1), L.sum(1)
    return torch.dot(K.reshape(-1), L.reshape(-1)) - 2.0 / n * (rk @ rl) + rk.sum() * rl.sum() / n ** 2


_LINEAR_INV = "orthogonal transforms, isotropic scaling, translation"

MEASURES = (
    Measure("linear_cka", "similarity", _LINEAR_INV, "moments", linear_cka_from_moments,
            paper=_PAPER, reference="Kornblith et al.'s notebook: feature_space_linear_cka",
            cost="O(N D^2) time in one pass, O(D^2) memory"),
    Measure("linear_cka_debiased", "similarity", _LINEAR_INV, "moments", debiased_cka_from_moments,
            paper=_PAPER + "; unbiased HSIC of Song et al. 2012",
            reference="Kornblith et al.'s notebook: feature_space_linear_cka(debiased=True)",
            cost="O(N D^2) time in one pass, O(D^2) memory"),
    Measure("rbf_cka", "similarity", "orthogonal transforms, isotropic scaling (the bandwidth "
            "follows the median distance), translation", "rows", rbf_cka_from_rows,
            paper=_PAPER, reference="Kornblith et al.'s notebook: gram_rbf + cka",
            params=(float_param("sigma", 0.8, 0, None, open_low=True),),
            cost="O(n^2 D) time, O(n^2) memory on n sampled rows"),
)
