"""InfoM, InfoE, InfoC (Hsu et al. 2023), standalone variant (``docs/definitions.md`` §5).

Given discrete sources ``s`` (N x n_s) and continuous latents ``z`` (N x n_z):

1. label-encode each source; standardise each latent;
2. ``NMI_ij = I(s_i; z_j) / H(s_i)``, the mutual information by scikit-learn's kNN estimator
   (``mutual_info_classif``, ``n_neighbors=10``, fixed ``random_state``), ``H`` the plug-in
   entropy in nats;
3. active latents: ``range_j > max_j range_j / 20`` (ranges of the *raw* latents);
   ``P = NMI[:, active]``;
4. ``InfoM = (mean_{j active} max_i P_ij / sum_i P_ij - 1/n_s) / (1 - 1/n_s)``  (modularity);
5. ``InfoC = (mean_i max_j P_ij / sum_j P_ij - 1/n_a) / (1 - 1/n_a)``  (compactness);
6. ``InfoE = mean_i (H0_i - CE_i) / H0_i`` (explicitness), ``CE_i`` the in-sample log loss of an
   unregularised multinomial logistic regression (fitted with ``class_weight='balanced'``) of
   ``s_i`` on the standardised latents, ``H0_i`` the same for the model fitted on all-zero
   input (uniform: ``log K_i``). As the official code, the log loss is the plain
   (unweighted) mean; ``infoe_loss="balanced"`` weighs it with the balanced class weights
   (actkit 0.1; up to 1.3e-3 apart on imbalanced factors).
"""

from __future__ import annotations

import warnings

import numpy as np

from actkit.errors import ValidationError
from actkit.metrics._inputs import as_2d

__all__ = ["infomec"]


def _entropy(labels):
    _, counts = np.unique(labels, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def _ratio_rows(P, axis, n_other):
    """max / sum along ``axis``; an all-zero line counts as uninformative (1 / n_other)."""
    tot = P.sum(axis=axis)
    mx = P.max(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(tot > 0, mx / np.where(tot > 0, tot, 1.0), 1.0 / n_other)
    return r


def infomec(sources, latents, *, n_neighbors=10, prune_ratio=1 / 20, random_state=0,
            max_iter=1000, infoe_loss="unweighted"):
    """InfoM (modularity), InfoE (explicitness), InfoC (compactness) of latents w.r.t. sources.

    Parameters
    ----------
    sources : array-like of shape (n_samples, n_sources)
        Discrete ground-truth factors (any labels; each column is label-encoded).
    latents : array-like of shape (n_samples, n_latents)
        Continuous representation.
    n_neighbors : int, default=10
        Neighbours of the kNN mutual-information estimator.
    prune_ratio : float, default=1/20
        A latent is active when its range exceeds ``prune_ratio`` x the largest range.
    random_state : int, default=0
        Seed of ``mutual_info_classif`` (it adds tiny noise to break ties).
    max_iter : int, default=1000
        Iterations of the logistic regressions (lbfgs).
    infoe_loss : {"unweighted", "balanced"}, default="unweighted"
        InfoE's log loss: the plain mean over samples (the official code's
        ``sklearn.metrics.log_loss``) or weighted by the balanced class weights.

    Returns
    -------
    dict
        ``infom``, ``infoe``, ``infoc`` (floats in [0, 1]), ``nmi`` (n_sources, n_latents),
        ``active`` (bool mask of shape (n_latents,)), ``infoe_per_source`` (n_sources,).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> s = rng.integers(0, 4, size=(600, 2))
    >>> out = infomec(s, s + 0.01 * rng.normal(size=s.shape))
    >>> round(out["infom"], 1), round(out["infoc"], 1)
    (1.0, 1.0)
    """
    from sklearn.feature_selection import mutual_info_classif  # these three: ~1.7 s at import (measured)
    from sklearn.linear_model import LogisticRegression  # these three: ~1.7 s at import (measured)
    from sklearn.preprocessing import LabelEncoder  # these three: ~1.7 s at import (measured)

    S = np.asarray(sources)
    if S.ndim == 1:
        S = S[:, None]
    if S.ndim != 2:
        raise ValidationError(f"sources must be 2-D (n_samples, n_sources), got shape {S.shape}")
    Z = as_2d(latents, "latents").astype(np.float64)
    if S.shape[0] != Z.shape[0]:
        raise ValidationError(f"sources and latents must have the same number of rows, got "
                         f"{S.shape[0]} and {Z.shape[0]}")
    n, n_s = S.shape
    n_z = Z.shape[1]
    if n <= n_neighbors:
        raise ValidationError(f"need more than n_neighbors={n_neighbors} rows, got {n}")
    if infoe_loss not in ("unweighted", "balanced"):
        raise ValidationError(f"infoe_loss must be 'unweighted' or 'balanced', got {infoe_loss!r}")
    if not 0 <= prune_ratio < 1:
        raise ValidationError(f"prune_ratio must be in [0, 1), got {prune_ratio}")
    codes = np.stack([LabelEncoder().fit_transform(S[:, i]) for i in range(n_s)], axis=1)
    n_classes = codes.max(axis=0) + 1
    if np.any(n_classes < 2):
        bad = int(np.flatnonzero(n_classes < 2)[0])
        raise ValidationError(f"source {bad} takes a single value: it carries no information")
    std = Z.std(axis=0)
    Zs = (Z - Z.mean(axis=0)) / np.where(std > 0, std, 1.0)

    nmi = np.zeros((n_s, n_z))
    for i in range(n_s):
        mi = mutual_info_classif(Zs, codes[:, i], discrete_features=False,
                                 n_neighbors=n_neighbors, random_state=random_state)
        nmi[i] = mi / _entropy(codes[:, i])
    nmi = np.clip(nmi, 0.0, None)

    ranges = Z.max(axis=0) - Z.min(axis=0)
    active = ranges > ranges.max() * prune_ratio if ranges.max() > 0 else np.zeros(n_z, bool)
    P = nmi[:, active]
    n_a = int(active.sum())
    if n_a == 0:
        infom = infoc = 0.0
    else:
        infom = float((_ratio_rows(P, 0, n_s).mean() - 1 / n_s) / (1 - 1 / n_s)) if n_s > 1 else 1.0
        infoc = float((_ratio_rows(P, 1, n_a).mean() - 1 / n_a) / (1 - 1 / n_a)) if n_a > 1 else 1.0

    infoe_each = np.zeros(n_s)
    for i in range(n_s):
        y = codes[:, i]
        K = int(n_classes[i])
        counts = np.bincount(y, minlength=K)
        w = ((n / (K * counts))[y] if infoe_loss == "balanced"   # sklearn's 'balanced'
             else np.ones(n))
        clf = LogisticRegression(C=np.inf, class_weight="balanced", max_iter=max_iter)
        with warnings.catch_warnings():           # separable data: the loss goes to 0
            warnings.simplefilter("ignore")
            clf.fit(Zs, y)
        proba = np.clip(clf.predict_proba(Zs), 1e-15, 1.0)
        ce = float(-(w * np.log(proba[np.arange(n), y])).sum() / w.sum())
        h0 = float(np.log(K))
        infoe_each[i] = (h0 - ce) / h0
    return {
        "infom": infom,
        "infoe": float(infoe_each.mean()),
        "infoc": infoc,
        "nmi": nmi,
        "active": active,
        "infoe_per_source": infoe_each,
    }
