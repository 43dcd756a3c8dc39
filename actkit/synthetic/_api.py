"""The thin layer between the experiments and actkit's public API.

Every number the experiments report goes through actkit's own estimators and metrics
(that is the point of the reproduction); this module only adapts their calls to the
fit/eval protocol the experiments share.
"""

from __future__ import annotations

import numpy as np

import actkit
from actkit.metrics import linear_r2 as _linear_r2
from actkit.metrics import mcc as _mcc


def split_indices(n, *, eval_fraction=0.2, random_state=0):
    """Random fit/eval split of ``range(n)`` -> (fit_idx, eval_idx)."""
    perm = np.random.default_rng(random_state).permutation(n)
    n_eval = int(round(n * eval_fraction))
    return np.sort(perm[n_eval:]), np.sort(perm[:n_eval])


def whiten(Z, fit_idx):
    """PCA-whiten ``Z`` with an :class:`actkit.Whitener` fitted on ``Z[fit_idx]``."""
    w = actkit.Whitener(method="pca").fit(Z[fit_idx])
    return w.transform(Z)


def ica_sources(Z, fit_idx, *, random_state=0, n_components=None, device="cpu"):
    """PCA whitening + :class:`actkit.FastICA` fitted on ``Z[fit_idx]``, applied to all rows."""
    ica = actkit.FastICA(n_components=n_components, random_state=random_state, max_iter=1000,
                         device=str(device))
    ica.fit(Z[fit_idx])
    return ica.transform(Z)


def alignment_error(A, B, fit_idx, eval_idx, *, method="rigid"):
    """``actkit.align`` fitted on the fit rows; mean l2 error / diam(B_eval) on the eval rows."""
    aligner = actkit.align(A[fit_idx], B[fit_idx], method=method)
    return float(aligner.score(A[eval_idx], B[eval_idx]))


def mcc(Z_true, Z_est):
    return float(_mcc(Z_true, Z_est))


def linear_r2(Z, S, *, random_state=0):
    return float(_linear_r2(Z, S, random_state=random_state))
