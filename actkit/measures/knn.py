"""Nearest-neighbour measures of a row sample (torch, on the measure's device): mutual k-NN
alignment and CKNNA (Huh et al. 2024, the platonic-representation measures) and the
Jaccard overlap of k-NN sets (Klabunde et al., ReSi). Formulas: docs/measures.md,
"Neighbourhood measures".

Rows are L2-normalised first (as the platonic-rep pipeline feeds them; the cosine k-NN of
ReSi is the same neighbourhood), a row is never its own neighbour, and nothing of size
n x n is kept: neighbours come from blocks of rows, CKNNA's masked kernels are sparse (at
most k entries a row).
"""

from __future__ import annotations

from actkit.errors import ValidationError
from actkit.measures._protocol import Measure, int_param
from actkit.measures._rowtools import check_k, row_blocks

__all__ = ["mutual_knn_from_rows", "cknna_from_rows", "jaccard_knn_from_rows", "MEASURES"]


def _neighbours(X, k):
    """Values and indices (n, k) of each L2-normalised row's ``k`` largest inner products
    with the other rows (decreasing)."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    n = X.shape[0]
    vals, idx = [], []
    for a, b in row_blocks(n):
        sim = X[a:b] @ X.T
        sim[torch.arange(b - a, device=X.device), torch.arange(a, b, device=X.device)] = -float("inf")
        top = torch.topk(sim, k, dim=1)
        vals.append(top.values)
        idx.append(top.indices)
    return torch.cat(vals), torch.cat(idx)


def _normalised(X):
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    return torch.nn.functional.normalize(X, dim=-1)


def _shared(idx_a, idx_b):
    """(n, k, k) bool: neighbour ``s`` of A equals neighbour ``t`` of B, row by row."""
    return idx_a[:, :, None] == idx_b[:, None, :]


def mutual_knn_from_rows(A, B, k=10):
    """Mean over rows of ``|N_A(i) ∩ N_B(i)| / k`` (platonic-rep's ``mutual_knn``)."""
    _, ia = _neighbours(_normalised(A), k)
    _, ib = _neighbours(_normalised(B), k)
    return float(_shared(ia, ib).any(-1).sum(1).double().mean() / k)


def jaccard_knn_from_rows(A, B, k=10):
    """Mean over rows of ``|N_A(i) ∩ N_B(i)| / |N_A(i) ∪ N_B(i)|``, cosine neighbours."""
    _, ia = _neighbours(_normalised(A), k)
    _, ib = _neighbours(_normalised(B), k)
    c = _shared(ia, ib).any(-1).sum(1).double()
    return float((c / (2 * k - c)).mean())


def _hsic_sparse(n, rows, cols, kv, lv):
    """platonic-rep's ``hsic_unbiased(K~, L~)`` of two n x n matrices that are zero but at
    ``(rows, cols)`` (no diagonal entry), with values ``kv`` and ``lv``:
    ``[sum K~ * L~^T + sum K~ sum L~ / ((n-1)(n-2)) - 2 (1'K~)(L~1) / (n-2)] / (n(n-3))``."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    key = rows * n + cols
    tkey = cols * n + rows                        # where L~^T has its entries
    order = torch.argsort(tkey)
    pos = torch.searchsorted(tkey[order], key).clamp(max=key.numel() - 1)
    hit = tkey[order][pos] == key
    trans = (kv[hit] * lv[order][pos][hit]).sum()
    col_k = torch.zeros(n, dtype=kv.dtype, device=kv.device).index_add_(0, cols, kv)
    row_l = torch.zeros(n, dtype=lv.dtype, device=lv.device).index_add_(0, rows, lv)
    value = trans + kv.sum() * lv.sum() / ((n - 1) * (n - 2)) - 2 * (col_k @ row_l) / (n - 2)
    return value / (n * (n - 3))


def cknna_from_rows(A, B, k=10):
    """CKNNA: the unbiased HSIC of the inner-product kernels restricted to pairs that are
    mutual k-nearest neighbours, normalised as CKA, with the reference's ``+ 1e-6`` in the
    denominator (platonic-rep ``AlignmentMetrics.cknna(topk=k)``)."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    X, Y = _normalised(A), _normalised(B)
    return cknna_from_lists(*_neighbours(X, k), *_neighbours(Y, k))


def cknna_from_lists(ka, ia, lb, ib):
    """CKNNA from both sides' neighbour lists: values and indices (n, k), decreasing (what a
    permutation of B's rows re-indexes: actkit.measures._structures)."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    n, k = ia.shape
    rows = torch.arange(n, device=ia.device)[:, None].expand(n, k)
    eq = _shared(ia, ib)                           # (n, k, k)
    both = eq.any(-1)                              # A's neighbour s is also one of B's
    l_at_a = (eq.to(lb.dtype) * lb[:, None, :]).sum(-1)     # L at A's neighbour positions
    kl = _hsic_sparse(n, rows[both], ia[both], ka[both], l_at_a[both])
    # K against itself: the mask is A's neighbours; L against itself: B's
    kk = _hsic_sparse(n, rows.reshape(-1), ia.reshape(-1), ka.reshape(-1), ka.reshape(-1))
    ll = _hsic_sparse(n, rows.reshape(-1), ib.reshape(-1), lb.reshape(-1), lb.reshape(-1))
    return float(kl / (torch.sqrt(kk * ll) + 1e-6))


def _check_cknna(params, widths, n_rows):
    if params["k"] < 2:
        raise ValidationError(f"cknna needs k >= 2, got k={params['k']}")
    check_k(params, widths, n_rows)


_INV = "orthogonal transforms, isotropic scaling (rows are L2-normalised; not translation)"
_COST = "O(n^2 D) time in blocks of rows, O(n k) memory on n sampled rows"

MEASURES = (
    Measure("mutual_knn", "similarity", _INV, "rows", mutual_knn_from_rows,
            paper="Huh et al. 2024, The platonic representation hypothesis",
            reference="platonic-rep metrics.py AlignmentMetrics.mutual_knn (rows L2-normalised)",
            params=(int_param("k", 10, 1),), check=check_k, cost=_COST),
    Measure("cknna", "similarity", _INV, "rows", cknna_from_rows,
            paper="Huh et al. 2024, The platonic representation hypothesis",
            reference="platonic-rep metrics.py AlignmentMetrics.cknna (unbiased, rows L2-normalised)",
            params=(int_param("k", 10, 2),), check=_check_cknna, cost=_COST),
    Measure("jaccard_knn", "similarity", _INV, "rows", jaccard_knn_from_rows,
            paper="Klabunde et al. 2024, ReSi: a comprehensive benchmark for representational "
                  "similarity measures",
            reference="ReSi jaccard_similarity (cosine k-NN, self excluded)",
            params=(int_param("k", 10, 1),), check=check_k, cost=_COST),
)
