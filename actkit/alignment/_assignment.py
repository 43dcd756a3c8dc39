"""The optimal signed permutation between two sets of centred columns (Hungarian)."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def signed_permutation(var_a, var_b, cross):
    """Optimal signed permutation between the columns of two centred matrices.

    Minimises ``sum ||a_i - s b_j||^2`` over signed permutations with cost
    ``C_ij = |a_i|^2 + |b_j|^2 - 2 |a_i . b_j|`` (``scipy.optimize.linear_sum_assignment``);
    when ``p != q`` the narrower side is padded with zero columns.

    Parameters
    ----------
    var_a : ndarray of shape (p,)
        Squared norms of the centred columns of A (diagonal of its scatter matrix).
    var_b : ndarray of shape (q,)
    cross : ndarray of shape (p, q)
        Cross scatter ``A_c^T B_c``.

    Returns
    -------
    P : ndarray of shape (p, q)
        Signed (partial) permutation matrix: ``A_c @ P`` approximates ``B_c``.
    rows, cols : ndarray of int
        The matched pairs (``rows[k]`` of A with ``cols[k]`` of B), real columns only.
    """
    p, q = cross.shape
    m = max(p, q)
    cost = np.empty((m, m))
    cost[:p, :q] = var_a[:, None] + var_b[None, :] - 2.0 * np.abs(cross)
    cost[p:, :q] = var_b[None, :]          # zero column of A against b_j
    cost[:p, q:] = var_a[:, None]          # a_i against a zero column of B
    cost[p:, q:] = 0.0
    r, c = linear_sum_assignment(cost)
    keep = (r < p) & (c < q)
    r, c = r[keep], c[keep]
    P = np.zeros((p, q))
    signs = np.sign(cross[r, c])
    signs[signs == 0] = 1.0
    P[r, c] = signs
    return P, r, c

