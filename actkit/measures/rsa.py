"""Representational similarity analysis (Kriegeskorte et al. 2008) of a row sample (torch,
on the measure's device): the correlation-distance RDM of each side, upper triangles
compared by Spearman (default) or Pearson correlation. Formula: docs/measures.md, "RSA"."""

from __future__ import annotations

from actkit.measures._protocol import Measure, choice_param

__all__ = ["rsa_from_rows", "MEASURES"]


def _rdm_upper(X):
    """``1 - corr(x_i, x_j)`` for i < j (each row centred over its features), shape
    (n (n - 1) / 2,): rsatoolbox's ``calc_rdm(method="correlation")`` vector."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    Xc = X - X.mean(dim=1, keepdim=True)
    Xn = Xc / torch.linalg.vector_norm(Xc, dim=1, keepdim=True)
    n = X.shape[0]
    upper = torch.ones(n, n, dtype=torch.bool, device=X.device).triu_(1)
    return (Xn @ Xn.T).neg_().add_(1.0)[upper]


def _average_ranks(v):
    """Ranks 1..m with ties given their average rank (scipy's ``rankdata``): one sort."""
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    s, order = torch.sort(v)
    # label coding of tied values (not input samples: those are actkit._groups')
    _, inverse, counts = torch.unique_consecutive(s, return_inverse=True, return_counts=True)
    start = torch.cumsum(counts, 0) - counts
    average = start.to(v.dtype) + (counts.to(v.dtype) + 1) / 2
    ranks = torch.empty_like(v)
    ranks[order] = average[inverse]
    return ranks


def _pearson(a, b):
    import torch  # torch: ~1.2 s at import (measured); the registry imports every measure module, torch-free ones too

    a = a - a.mean()
    b = b - b.mean()
    return float((a @ b) / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b)))


def rsa_from_rows(A, B, method="spearman"):
    """Spearman (or Pearson) correlation of the two RDMs' upper triangles."""
    ra, rb = _rdm_upper(A), _rdm_upper(B)
    if method == "spearman":
        ra, rb = _average_ranks(ra), _average_ranks(rb)
    return _pearson(ra, rb)


MEASURES = (
    Measure("rsa", "similarity", "permutations of the units, scaling and shift of each row; "
            "spearman: monotone maps of the RDM", "rows", rsa_from_rows,
            paper="Kriegeskorte et al. 2008, Representational similarity analysis",
            reference='rsatoolbox calc_rdm(method="correlation") + compare(method="spearman" / "corr")',
            params=(choice_param("method", "spearman", ("spearman", "pearson")),),
            cost="O(n^2 D) time, O(n^2) memory (the RDMs and their ranks) on n sampled rows"),
)
