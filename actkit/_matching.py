"""One-to-one matching of two sets of columns by their correlations or cosines: :func:`match_columns`.

Every matching in actkit goes through here: the latents of :func:`actkit.metrics.mcc`, the
atoms and codes of two dictionary fits (:func:`actkit.dictionary_stability`), the sources of
two FastICA restarts (the ICA alignment's consensus and reproducibility check) and the units
of two stores (:func:`actkit.match_units`). Public as ``actkit.metrics.match_columns``; it
lives on the ground floor so that every room, the estimators' included, can use it.

The convention, once: the pairing maximises the summed ``|C_ij|`` (the Hungarian algorithm,
``scipy.optimize.linear_sum_assignment`` on ``-|C|``; its tie-breaking), a column is matched
whatever the sign of its correlation, and each pair carries the sign of ``C_ij`` (``+1``
where ``C_ij`` is 0), so that column ``rows[k]`` of the first set times ``signs[k]`` agrees
with column ``cols[k]`` of the second.
"""

from __future__ import annotations

import numpy as np

__all__ = ["match_columns"]


def match_columns(C):
    """Match the rows of ``C`` one to one with its columns, maximising the summed ``|C_ij|``.

    Parameters
    ----------
    C : array-like of shape (p, q)
        Correlations or cosines (signed or already absolute) of ``p`` columns of one set with
        ``q`` columns of another.

    Returns
    -------
    rows, cols : ndarray of int, shape (min(p, q),)
        The matched pairs, ``rows`` ascending.
    signs : ndarray of float64, shape (min(p, q),)
        The sign of each matched entry ``C[rows, cols]`` (``+1.0`` for 0).

    Examples
    --------
    >>> import numpy as np
    >>> rows, cols, signs = match_columns(np.array([[0.1, -0.9], [0.8, 0.2]]))
    >>> rows.tolist(), cols.tolist(), signs.tolist()
    ([0, 1], [1, 0], [-1.0, 1.0])
    """
    from scipy.optimize import linear_sum_assignment  # scipy.optimize: ~0.5 s at import (measured); only a matching needs it

    C = np.asarray(C)
    rows, cols = linear_sum_assignment(-np.abs(C))
    signs = np.where(C[rows, cols] < 0, -1.0, 1.0)
    return rows, cols, signs
