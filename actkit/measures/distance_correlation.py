"""Distance correlation (Székely et al. 2007) of a row sample (torch, on the measure's
device), in blocks of rows: nothing n x n is kept. Formula: docs/measures.md, "dcor"."""

from __future__ import annotations

from actkit.errors import ValidationError
from actkit.measures._protocol import Measure, bool_param
from actkit.measures._rowtools import row_blocks

__all__ = ["dcor_from_rows", "MEASURES"]


def _distances(X, a, b):
    """Euclidean distances of rows a:b to all rows, shape (b - a, n), 0 on the diagonal."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    d = torch.cdist(X[a:b], X, compute_mode="use_mm_for_euclid_dist")
    d[torch.arange(b - a, device=X.device), torch.arange(a, b, device=X.device)] = 0.0
    return d


def _sums(X, Y):
    """One pass over blocks of rows: ``sum D*E``, ``sum D*D``, ``sum E*E`` and the row sums
    of the distance matrices D of X and E of Y."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    n = X.shape[0]
    prods = torch.zeros(3, dtype=X.dtype, device=X.device)
    r, s = [], []
    for a, b in row_blocks(n):
        da, db = _distances(X, a, b), _distances(Y, a, b)
        prods += torch.stack([(da * db).sum(), (da * da).sum(), (db * db).sum()])
        r.append(da.sum(1))
        s.append(db.sum(1))
    return prods, torch.cat(r), torch.cat(s)


def _centred(p, r, s, n, unbiased):
    """``sum_ij A_ij B_ij`` of the double-centred (or U-centred) matrices from ``p = sum D*E``
    and the row sums: centring expands into row-sum terms, so no centred copy is formed."""
    return _centred_sums(p, r @ s, r.sum(), s.sum(), n, unbiased)


def _centred_sums(p, rs, rsum, ssum, n, unbiased):
    """:func:`_centred` from ``p``, ``rs = r . s``, ``rsum = sum r``, ``ssum = sum s`` (also
    what a bootstrap resample's weighted sums give: actkit.measures._structures)."""
    if not unbiased:   # A = D - r_i/n - r_j/n + g/n^2 (D symmetric)
        return p - 2.0 / n * rs + rsum * ssum / n ** 2
    # A_ij = D_ij - a_i - a_j + c off the diagonal, 0 on it: a = r/(n-2), c = g/((n-1)(n-2))
    ab, asum, bsum = rs / (n - 2) ** 2, rsum / (n - 2), ssum / (n - 2)
    c, d = rsum / ((n - 1) * (n - 2)), ssum / ((n - 1) * (n - 2))
    cross = -2 * rs / (n - 2) + d * rsum - 2 * rs / (n - 2) + c * ssum
    full = 2 * n * ab + 2 * asum * bsum - 2 * n * d * asum - 2 * n * c * bsum + n * n * c * d
    diag = 4 * ab - 2 * d * asum - 2 * c * bsum + n * c * d
    return p + cross + full - diag


def dcor_from_rows(A, B, unbiased=False):
    """Distance correlation ``sqrt(dCov^2(A, B) / sqrt(dCov^2(A, A) dCov^2(B, B)))`` of
    the double-centred distance matrices (``dcor.distance_correlation``); ``unbiased``:
    the bias-corrected squared distance correlation of the U-centred matrices
    (``dcor.u_distance_correlation_sqr``), which can be negative."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    n = A.shape[0]
    A, B = A - A.mean(0), B - B.mean(0)     # distances unchanged; the Gram form more exact
    if unbiased and n < 4:
        raise ValidationError("the unbiased distance correlation needs at least 4 rows")
    (pxy, pxx, pyy), r, s = _sums(A, B)
    xy, xx, yy = (_centred(pxy, r, s, n, unbiased), _centred(pxx, r, r, n, unbiased),
                  _centred(pyy, s, s, n, unbiased))
    den = torch.sqrt(xx * yy)
    if not den > 0:
        return 0.0
    r2 = xy / den
    return float(r2) if unbiased else float(torch.sqrt(torch.clamp(r2, min=0.0)))


MEASURES = (
    Measure("dcor", "similarity", "orthogonal transforms, isotropic scaling, translation",
            "rows", dcor_from_rows,
            paper="Székely, Rizzo & Bakirov 2007, Measuring and testing dependence by correlation "
                  "of distances",
            reference="dcor.distance_correlation; unbiased=true: dcor.u_distance_correlation_sqr",
            params=(bool_param("unbiased", False),),
            cost="O(n^2 D) time in blocks of rows, O(n) memory beyond a block on n sampled rows"),
)
