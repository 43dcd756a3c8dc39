"""Shape metrics from the moments: the squared Procrustes distance (Ding et al. 2021), the
angular shape metric with partial whitening (Williams et al. 2021, netrep) and the
normalized Bures similarity (Harvey et al. 2024). Formulas: docs/measures.md, "Shape
metrics"."""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.errors import ValidationError
from actkit.measures._linalg import side_cached
from actkit.measures._protocol import Measure, bool_param, float_param

__all__ = ["procrustes_from_moments", "shape_metric_from_moments", "bures_from_moments", "MEASURES"]


def _nuclear(M):
    return float(np.linalg.svd(M, compute_uv=False).sum()) if M.size else 0.0


def bures_from_moments(m):
    """``|Sab|_* / sqrt(tr Saa tr Sbb)``: ``|A~^T B~|_*`` of the centred sides, each scaled
    to unit Frobenius norm."""
    with small_linalg():
        den = np.sqrt(np.trace(m.Saa) * np.trace(m.Sbb))
        return float(_nuclear(m.Sab) / den) if den > 0 else float("nan")


def procrustes_from_moments(m):
    """``2 - 2 |A~^T B~|_*`` (Ding et al. 2021): the squared distance after the best
    rotation of the centred, Frobenius-normalised sides."""
    return 2.0 - 2.0 * bures_from_moments(m)


#: eigenvalues of X^T X are clipped to at least this (netrep's ``whiten(eigval_tol=1e-7)``)
EIGVAL_TOL = 1e-7


@side_cached
def _partial_whitening(S, alpha):
    """netrep's ``whiten``: ``Z = V diag(alpha + (1 - alpha) lam^{-1/2}) V^T`` with ``lam``
    the eigenvalues of the centred scatter (clipped to 1e-7); the identity for alpha
    above 1 - 1e-7 (the rescaling that preserves the variance does not change an angle)."""
    if alpha > 1 - EIGVAL_TOL:
        return None
    lam, V = np.linalg.eigh(S)
    lam = np.maximum(lam, EIGVAL_TOL)
    d = alpha + (1 - alpha) * lam ** -0.5
    return (V * d) @ V.T


def shape_metric_from_moments(m, alpha=1.0, zero_pad=True):
    """Angular shape metric ``arccos(|Za^T Sab Zb|_* / sqrt(tr(Za^T Saa Za) tr(Zb^T Sbb
    Zb)))`` with ``Z`` the partial whitening of each side (alpha = 1: none, the metric is
    ``arccos(bures)``; alpha = 0: full whitening, ``arccos`` of the sum of the canonical
    correlations over the (padded) width). The narrower side is zero-padded, which changes
    nothing here (a zero column adds no variance)."""
    p, q = m.widths
    if p != q and not zero_pad:
        raise ValidationError(f"shape_metric with zero_pad=false needs equal widths, got {p} and "
                              f"{q}; use zero_pad=true (the narrower side is padded with zeros)")
    with small_linalg():
        Za, Zb = _partial_whitening(m.Saa, alpha), _partial_whitening(m.Sbb, alpha)
        cross = m.Sab if Za is None else Za.T @ m.Sab
        cross = cross if Zb is None else cross @ Zb
        va = np.trace(m.Saa) if Za is None else np.trace(Za.T @ m.Saa @ Za)
        vb = np.trace(m.Sbb) if Zb is None else np.trace(Zb.T @ m.Sbb @ Zb)
        den = np.sqrt(va * vb)
        if not den > 0:
            return float("nan")
        return float(np.arccos(np.clip(_nuclear(cross) / den, -1.0, 1.0)))


def _check_widths(params, widths, n_rows):
    if not params.get("zero_pad", True) and widths[0] != widths[1]:
        raise ValidationError(f"shape_metric with zero_pad=false needs equal widths, got {widths[0]} "
                              f"and {widths[1]}; use zero_pad=true (the narrower side is padded with "
                              f"zeros)")


_ROT = "orthogonal transforms, isotropic scaling, translation"
_COST = "O(N D^2) time in one pass, O(D^3) for the decomposition"

MEASURES = (
    Measure("procrustes", "distance", _ROT, "moments", procrustes_from_moments,
            paper="Ding et al. 2021, Grounding representation similarity with statistical testing",
            reference="Ding et al.'s formula 2 - 2 |A~^T B~|_* (js-d/sim_metric)", cost=_COST),
    Measure("shape_metric", "distance", "orthogonal transforms, isotropic scaling, translation; "
            "at alpha < 1 partly invertible linear maps (alpha = 0: all)", "moments",
            shape_metric_from_moments,
            paper="Williams et al. 2021, Generalized shape metrics on neural representations",
            reference='netrep LinearMetric(alpha, score_method="angular").fit_score',
            params=(float_param("alpha", 1.0, 0, 1), bool_param("zero_pad", True)),
            check=_check_widths, cost=_COST),
    Measure("bures", "similarity", _ROT, "moments", bures_from_moments,
            paper="Harvey et al. 2024, Duality of Bures and shape distances",
            reference="Harvey et al.'s normalized Bures similarity (= cos of shape_metric at alpha=1)",
            cost=_COST),
)
