"""The FastICA contrasts ``G`` (``logcosh``, ``exp``, ``cube``; scikit-learn's), on numpy or torch."""

from __future__ import annotations

import math

import numpy as np

from actkit.errors import ValidationError

__all__ = ["contrast", "CONTRASTS"]

CONTRASTS = ("logcosh", "exp", "cube")
_LOG2 = math.log(2.0)


# ----------------------------------------------------------------------------- contrasts
# Each contrast returns column sums of G(Y) and g'(Y) (float64, shape (k,)) and g(Y) itself.
# ``xp`` is numpy (CPU: numpy's SIMD transcendental functions and OpenBLAS sgemm/ssyrk are
# markedly faster than torch's CPU kernels on this hardware) or torch (GPU).


def _colsum(A, xp):
    if xp is np:
        return A.sum(axis=0, dtype=np.float64)
    import torch  # torch: ~1 s at import; `import actkit` stays torch-free

    return A.sum(0, dtype=torch.float64)


def contrast(fun, alpha):
    """Return ``f(Y, xp) -> (sum_rows G(Y), g(Y), sum_rows g'(Y))`` (sklearn's contrasts)."""

    if fun == "logcosh":

        def f(Y, xp, need_loss=True):
            aY = Y if alpha == 1.0 else Y * alpha
            sG = None
            if need_loss:
                absY = xp.abs(aY)
                e = xp.exp(-2.0 * absY)
                # log cosh(u) = |u| + log1p(exp(-2|u|)) - log 2, stable for every u
                sG = (_colsum(absY, xp) + _colsum(xp.log1p(e), xp) - Y.shape[0] * _LOG2) / alpha
                del absY, e
            t = xp.tanh(aY)
            sgp = alpha * (Y.shape[0] - _colsum(t * t, xp))
            return sG, t, sgp

    elif fun == "exp":

        def f(Y, xp, need_loss=True):
            Y2 = Y * Y
            e = xp.exp(-0.5 * Y2)
            return -_colsum(e, xp), Y * e, _colsum(e - Y2 * e, xp)

    elif fun == "cube":

        def f(Y, xp, need_loss=True):
            Y2 = Y * Y
            return 0.25 * _colsum(Y2 * Y2, xp), Y2 * Y, 3.0 * _colsum(Y2, xp)

    else:  # pragma: no cover - validated earlier
        raise ValidationError(fun)
    f.spec = (fun, float(alpha))  # what a pass ships to a runner's workers (the closure does not pickle)
    return f
