"""The CCA family from the moments: mean CCA, SVCCA (Raghu et al. 2017) and PWCCA (Morcos
et al. 2018). Formulas: docs/measures.md, "CCA family"."""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.measures._linalg import canonical_correlations, cca, rank_cut, side_cached
from actkit.measures._protocol import Measure, float_param, int_param

__all__ = ["mean_cca_from_moments", "svcca_from_moments", "pwcca_from_moments", "MEASURES"]


def _eps(m, eps):
    return rank_cut(m.dtype) if eps is None else eps


def mean_cca_from_moments(m, n_components=None, eps=None):
    """Mean of the top ``min(rank A, rank B)`` (or ``n_components``) canonical correlations:
    the singular values of ``Saa^{-1/2} Sab Sbb^{-1/2}`` after dropping directions of
    variance below ``eps`` x the largest (default :func:`rank_cut` of the rows' dtype)."""
    rho = canonical_correlations(m.Saa, m.Sbb, m.Sab, n_components=n_components, eps=_eps(m, eps))
    return float(rho.mean()) if rho.size else float("nan")


@side_cached
def _top_directions(S, keep):
    """Eigenvectors (p, k) and eigenvalues (k,) of a scatter matrix: the fewest leading
    directions whose eigenvalues (squared singular values of the centred rows) reach
    ``keep`` of their sum."""
    lam, U = np.linalg.eigh(S)
    lam, U = lam[::-1].clip(0.0), U[:, ::-1]
    total = lam.sum()
    if not total > 0:
        return U[:, :0], lam[:0]
    k = int(np.searchsorted(np.cumsum(lam) / total, keep - 1e-12) + 1)
    k = min(k, lam.size)
    return U[:, :k], lam[:k]


def svcca_from_moments(m, keep=0.99, eps=None):
    """SVCCA: each side projected on its fewest principal directions holding ``keep`` of
    the variance, then the mean canonical correlation of the projections."""
    with small_linalg():
        Ua, la = _top_directions(m.Saa, keep)
        Ub, lb = _top_directions(m.Sbb, keep)
        if la.size == 0 or lb.size == 0:
            return float("nan")
        rho = canonical_correlations(np.diag(la), np.diag(lb), Ua.T @ m.Sab @ Ub, eps=_eps(m, eps))
    return float(rho.mean()) if rho.size else float("nan")


def pwcca_from_moments(m, eps=None):
    """PWCCA: ``sum_i alpha_i rho_i / sum_i alpha_i`` with ``alpha_i = sum_j |<h_i, a_j>|``,
    ``h_i`` A's ``i``-th canonical variate (unit norm) and ``a_j`` A's centred ``j``-th
    neuron over the rows; ``<h_i, a_j> = (Saa w_i)_j`` for the variate's weights ``w_i``."""
    rho, Wa, _ = cca(m.Saa, m.Sbb, m.Sab, eps=_eps(m, eps))
    if rho.size == 0:
        return float("nan")
    with small_linalg():
        alpha = np.abs(Wa @ m.Saa).sum(axis=1)
    return float(np.sum(alpha * rho) / np.sum(alpha))


_INV = "invertible linear transforms, translation"

#: the CCA family's rank convention, against google/svcca's cca_core (docs/measures.md)
RANK_CONVENTION = ("the mean is over the min(rank A, rank B) canonical correlations (directions of "
                   "variance below the rank cut, 1e-6 for float32 rows, 1e-10 for float64, x the "
                   "largest dropped); google/svcca's cca_core averages over min(Da, Db) with its "
                   "epsilon regularisation, so on a rank-deficient side (every LayerNorm output: "
                   "rank D - 1) the two differ by 5e-4 to 2e-3; on full-rank sides they agree")
_EPS = float_param("eps", None, 0, 1, open_low=True, none=True)

MEASURES = (
    Measure("mean_cca", "similarity", _INV, "moments", mean_cca_from_moments,
            paper="Hotelling 1936; mean canonical correlation as in Raghu et al. 2017",
            reference="sklearn.cross_decomposition.CCA (closed form, at convergence)",
            params=(int_param("n_components", None, 1, none=True), _EPS),
            cost="O(N D^2) time in one pass, O(D^3) for the decomposition", convention=RANK_CONVENTION),
    Measure("svcca", "similarity", "orthogonal transforms, isotropic scaling, translation "
            "(invertible linear maps only of the kept subspace)", "moments", svcca_from_moments,
            paper="Raghu et al. 2017, SVCCA", reference="google/svcca tutorial: SVD then "
            "cca_core.get_cca_similarity, mean of cca_coef1",
            params=(float_param("keep", 0.99, 0, 1, open_low=True), _EPS),
            cost="O(N D^2) time in one pass, O(D^3) for the decompositions", convention=RANK_CONVENTION),
    Measure("pwcca", "similarity", "orthogonal transforms, isotropic scaling, translation",
            "moments", pwcca_from_moments,
            paper="Morcos et al. 2018, projection-weighted CCA (weights from A's side)",
            reference="google/svcca pwcca.compute_pwcca (its deviations: docs/measures.md)",
            params=(_EPS,), cost="O(N D^2) time in one pass, O(D^3) for the decomposition",
            convention=RANK_CONVENTION),
)
