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
import threading

import numpy as np

from actkit.metrics import hoyer_sparsity

__all__ = [
    "LIGHTGBM_MAX_BIN",
    "LIGHTGBM_PARAMS",
    "LIGHTGBM_ROUNDS",
    "TOP_SHARE",
    "SharedBins",
    "auroc",
    "between_class_variance",
    "concentration",
    "make_classifier",
    "sparsity",
]

# Nelson et al., Table 6 (every other LightGBM setting at its default: 100 trees)
LIGHTGBM_PARAMS = {"is_unbalance": True, "learning_rate": 0.05, "num_leaves": 31, "feature_fraction": 0.6,
                   "reg_alpha": 5.0, "reg_lambda": 1.0}
LIGHTGBM_ROUNDS = 100  # LightGBM's default n_estimators; the paper gives none
# Feature histogram bins: LightGBM's default is 255 and the paper gives none. Finding the splits
# over 255 bins x 384 features dominates a fit of a few thousand rows: 63 bins fit 2.8x faster
# at 5,000 rows x 384, AUROC within 0.004 on planted data (docs/postprocessing.md, "Scale")
LIGHTGBM_MAX_BIN = 63
TOP_SHARE = 0.25


def lightgbm_params(random_state: int, max_bin: int = LIGHTGBM_MAX_BIN) -> dict:
    """The native parameters of one LightGBM fit: Table 6, binary objective, one thread,
    deterministic (the same as ``make_classifier("lightgbm", ...)``)."""
    return {"objective": "binary", **LIGHTGBM_PARAMS, "max_bin": int(max_bin), "seed": int(random_state),
            "num_threads": 1, "deterministic": True, "force_col_wise": True, "verbose": -1}


def make_classifier(kind: str, random_state: int, max_bin: int = LIGHTGBM_MAX_BIN):
    """A fresh binary classifier: ``"lightgbm"`` (Table 6, one thread) or ``"logistic"`` (L2, C=1)."""
    if kind == "lightgbm":
        import lightgbm  # ~0.6 s at import (measured), only when scoring

        return lightgbm.LGBMClassifier(**LIGHTGBM_PARAMS, n_estimators=LIGHTGBM_ROUNDS, max_bin=max_bin,
                                       random_state=random_state, n_jobs=1, verbose=-1, deterministic=True,
                                       force_col_wise=True)
    from sklearn.linear_model import LogisticRegression  # ~0.7 s at import (measured), only when scoring

    # tight tolerance: the L2 probe is rotation-invariant only at its optimum
    return LogisticRegression(C=1.0, tol=1e-8, max_iter=5000)


def auroc(clf, X_train, y_train, X_pos, X_neg) -> float:
    """Fit ``clf`` on the training rows, AUROC of its probability of class 1 on the positive and
    negative test rows."""
    clf.fit(X_train, y_train)
    return _auroc(clf.predict_proba(X_pos)[:, 1], clf.predict_proba(X_neg)[:, 1])


def _auroc(p_pos, p_neg) -> float:
    from sklearn.metrics import roc_auc_score  # ~0.5 s at import (measured), only when scoring

    return float(roc_auc_score(np.r_[np.ones(len(p_pos)), np.zeros(len(p_neg))], np.r_[p_pos, p_neg]))


class SharedBins:
    """The training rows of every task of one version and fold, binned once by LightGBM.

    Binning (the bin edges of each feature, then every row's bins) costs about as much as a
    third of a fit; here it is done once for ``rows`` (sorted, unique: the union of the tasks'
    training rows, all from the fold's training rows) and each task's fit takes a subset of
    the binned rows (``lightgbm.Dataset.subset``) with its own labels. A fit is the same
    LightGBM fit as ``make_classifier``'s, except that the bin edges come from all the tasks'
    training rows of the fold instead of one task's.
    """

    def __init__(self, X_rows, rows, params):
        """``X_rows``: the version's rows ``rows`` (sorted row numbers), shape (len(rows), d)."""
        import lightgbm  # ~0.6 s at import (measured), only when scoring

        self.rows, self.params, self._lock = rows, params, threading.Lock()
        self.data = lightgbm.Dataset(X_rows, label=np.zeros(len(rows)), params=params,
                                     free_raw_data=True).construct()

    def auroc(self, fit_rows, fit_y, X_pos, X_neg) -> float:
        """Fit on ``fit_rows`` (row numbers among ``rows``, labelled ``fit_y``), AUROC on the
        positive and negative test rows ``X_pos``, ``X_neg``."""
        import lightgbm  # ~0.6 s at import (measured), only when scoring

        order = np.argsort(fit_rows, kind="stable")  # a subset keeps the parent's row order
        index = np.searchsorted(self.rows, fit_rows[order]).astype(np.int32)
        with self._lock:
            data = self.data.subset(index, params=self.params).construct()
        data.set_label(np.asarray(fit_y, np.float64)[order])
        booster = lightgbm.train(self.params, data, num_boost_round=LIGHTGBM_ROUNDS)
        try:
            return _auroc(booster.predict(X_pos), booster.predict(X_neg))
        finally:
            booster.free_dataset()


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
