"""Label selectivity of a unit from its histogram by label (one pass, no rows kept).

For unit ``j`` and label ``c`` the one-vs-rest AUROC is the probability that a row of label
``c`` has a higher activation than a row of another label (ties: one half), with the
activations taken at the resolution of the unit's histogram bins; the mutual information
(bits) is that of the binned activation and the indicator of ``c``. Both equal
``sklearn.metrics.roc_auc_score`` and the plug-in mutual information of the binned values.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SELECTIVE_AUROC", "auroc_from_counts", "mi_from_counts", "selectivity"]

#: a label "has a unit of its own" when some unit prefers it with at least this AUROC
SELECTIVE_AUROC = 0.9


def auroc_from_counts(pos, neg) -> float:
    """AUROC of the positives ``pos`` (m,) against the negatives ``neg`` (m,), bin counts in
    increasing order of activation; NaN when a side is empty."""
    pos, neg = np.asarray(pos, np.float64), np.asarray(neg, np.float64)
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    below = np.cumsum(neg) - neg
    return float((pos * (below + 0.5 * neg)).sum() / (n_pos * n_neg))


def mi_from_counts(joint) -> float:
    """Plug-in mutual information (bits) of a joint count table (a, b)."""
    joint = np.asarray(joint, np.float64)
    n = joint.sum()
    if n == 0:
        return 0.0
    p = joint / n
    outer = p.sum(axis=1, keepdims=True) * p.sum(axis=0, keepdims=True)
    nz = p > 0
    return float((p[nz] * np.log2(p[nz] / outer[nz])).sum())


def selectivity(counts):
    """``(label index, AUROC, MI)`` of the label a unit is most selective for, from its
    histogram by label ``counts`` (classes, m)."""
    total = counts.sum(axis=0)
    aucs = np.array([auroc_from_counts(counts[c], total - counts[c]) for c in range(counts.shape[0])])
    if not np.isfinite(aucs).any():
        return None, float("nan"), 0.0
    c = int(np.nanargmax(aucs))
    return c, float(aucs[c]), mi_from_counts(np.stack([counts[c], total - counts[c]]))
