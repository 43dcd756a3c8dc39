"""The three numbers of each version on one task and fold: AUROC, sparsity, concentration.

Definitions (``docs/definitions.md``, "Downstream protocol"):

* AUROC: ``sklearn.metrics.roc_auc_score`` of the classifier's probability on the test rows
  of the task, the classifier fitted on the training rows;
* sparsity: the mean Hoyer sparsity of the test rows of the positive class, each taken
  relative to the mean of the negative training rows (the effect of the label on a row);
* concentration: the share of the between-class variance of the test rows carried by the
  top 25% of features, the features ranked by their between-class variance on the
  training rows.
"""

from __future__ import annotations

import math

import numpy as np

from actkit.metrics import hoyer_sparsity

__all__ = [
    "LIGHTGBM_PARAMS",
    "TOP_SHARE",
    "auroc",
    "between_class_variance",
    "concentration",
    "make_classifier",
    "sparsity",
]

# Nelson et al., Table 6 (every other LightGBM setting at its default: 100 trees)
LIGHTGBM_PARAMS = {"is_unbalance": True, "learning_rate": 0.05, "num_leaves": 31, "feature_fraction": 0.6,
                   "reg_alpha": 5.0, "reg_lambda": 1.0}
TOP_SHARE = 0.25


def make_classifier(kind: str, random_state: int):
    """A fresh binary classifier: ``"lightgbm"`` (Table 6, one thread) or ``"logistic"`` (L2, C=1)."""
    if kind == "lightgbm":
        import lightgbm

        return lightgbm.LGBMClassifier(**LIGHTGBM_PARAMS, random_state=random_state, n_jobs=1,
                                       verbose=-1, deterministic=True, force_col_wise=True)
    from sklearn.linear_model import LogisticRegression

    # tight tolerance: the L2 probe is rotation-invariant only at its optimum
    return LogisticRegression(C=1.0, tol=1e-8, max_iter=5000)


def auroc(clf, X_train, y_train, X_test, y_test) -> float:
    """Fit ``clf`` on the training rows, AUROC of its probability of class 1 on the test rows."""
    from sklearn.metrics import roc_auc_score

    clf.fit(X_train, y_train)
    return float(roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1]))


def sparsity(X_pos_test, negative_mean) -> float:
    """Mean Hoyer sparsity of ``X_pos_test - negative_mean`` (rows: vectors of n features)."""
    return float(hoyer_sparsity(np.asarray(X_pos_test, np.float64) - negative_mean))


def between_class_variance(sum_pos, n_pos, sum_neg, n_neg) -> np.ndarray:
    """Per feature, the between-class variance of two classes, ``p1 p0 (m1 - m0)^2``, from the
    classes' column sums (float64, shape (d,)) and sizes (``p1 = n_pos / (n_pos + n_neg)``)."""
    p1 = n_pos / (n_pos + n_neg)
    return p1 * (1 - p1) * (np.asarray(sum_pos) / n_pos - np.asarray(sum_neg) / n_neg) ** 2


def concentration(b_train, b_test, top_share: float = TOP_SHARE) -> float:
    """Share of ``sum(b_test)`` carried by the ``ceil(top_share * d)`` features of largest
    ``b_train`` (ranked on the training rows, measured on the test rows)."""
    d = len(b_train)
    top = np.argsort(-b_train, kind="stable")[:max(1, math.ceil(top_share * d))]
    total = float(b_test.sum())
    return float(b_test[top].sum() / total) if total > 0 else float("nan")
