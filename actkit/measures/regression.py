"""Linear identifiability R^2 from the moments of a fit and a held-out part
(:func:`actkit.metrics.linear_r2` as a measure). Formula: docs/measures.md, "linear_r2"."""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.errors import ValidationError
from actkit.measures._protocol import Measure, float_param

__all__ = ["linear_r2_from_moments", "MEASURES"]


def linear_r2_from_moments(m, alpha=0.0, test_fraction=0.5, per_latent=False):
    """R^2 on the test part of the affine map A -> B least-squares fitted on the fit part.

    ``W = (Saa_fit + alpha I)^+ Sab_fit``; on the test part, with ``d = (mean_b,test -
    mean_b,fit) - (mean_a,test - mean_a,fit) W``, the residual sum of squares per column of
    B is ``diag(Sbb - 2 W^T Sab + W^T Saa W)_test + n_test d^2`` and R^2 = 1 - SSE / SST
    with ``SST = diag(Sbb_test)`` (sklearn's ``r2_score``, ``multioutput="uniform_average"``).
    ``test_fraction`` sets the split the caller draws (``m.parts``).
    """
    if m.parts is None:
        raise ValidationError("linear_r2 needs the moments of a fit and a test part (Moments.parts)")
    fit, test = m.parts
    with small_linalg():
        G = fit.Saa + alpha * np.eye(fit.Saa.shape[0]) if alpha else fit.Saa
        W = np.linalg.lstsq(G, fit.Sab, rcond=None)[0]
        d = (test.mean_b - fit.mean_b) - (test.mean_a - fit.mean_a) @ W
        sse = (np.diag(test.Sbb) - 2.0 * np.einsum("ij,ij->j", W, test.Sab)
               + np.einsum("ij,ij->j", W, test.Saa @ W) + test.n * d * d)
        sse = np.maximum(sse, 0.0)
        sst = np.diag(test.Sbb)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(sst > 0, 1.0 - sse / sst, np.where(sse > 0, 0.0, 1.0))
    score = float(r2.mean())
    return (score, r2) if per_latent else score


MEASURES = (
    Measure("linear_r2", "similarity", "invertible affine maps of A; B's columns scored one by one",
            "moments", linear_r2_from_moments, needs_split=True,
            paper="linear identifiability (e.g. Nelson et al.; Khemakhem et al. 2020)",
            reference="actkit.metrics.linear_r2 (sklearn LinearRegression + r2_score on the held-out part)",
            params=(float_param("alpha", 0.0, 0, None),
                    float_param("test_fraction", 0.5, 0, 1, open_low=True, open_high=True)),
            cost="O(N D^2) time in one pass (fit and test parts), O(D^3) for the solve"),
)
