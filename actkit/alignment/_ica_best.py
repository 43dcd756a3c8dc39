"""The default ICA estimator: the best-contrast fit of ``R`` random starts per side.

``docs/definitions.md``, "ICA alignment". FastICA is *defined* as the maximiser of its
contrast ``J(W) = sum_i (E[G(y_i)] - E[G(nu)])^2`` (``nu`` standard normal; ``G`` the
contrast function, ``logcosh`` by default); every fit is a local maximiser, so the best of
``R`` random starts is a better search for the paper's own estimator than any one start.
Each side keeps its fit of largest ``J``; all its sources are matched across the sides by
the optimal signed permutation (no permutation fallback). The spread of the error over all
``R x R`` pairings of one fit of A with one of B is ``ica_std``; the ``R`` pairings of
start ``r`` on both sides are the paper's single fits (``ica_classic``).

The reproducibility check splits the starts into two disjoint halves (``[0, ceil(R/2))``
and the rest) and takes each half's best fit: ``ica_shared_halves`` counts the sources the
two share at ``|cos| >= HALVES_COS``, and ``ica_self_floor`` is the held-out error of B
mapped onto itself through them (what ICA's own optimisation costs where no map is needed).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from actkit._matching import match_columns

#: Two fits share a source when their Hungarian match on |cos| pairs it at least this close.
HALVES_COS = 0.95
#: The halves agree when they share at least this fraction of the sources on each side.
HALVES_AGREE = 0.9
#: The self floor is comparable to permutation - rigid above this fraction of it.
SELF_FLOOR_RATIO = 0.5


def _G(fun):
    """The contrast function ``G`` (scikit-learn's, ``alpha = 1``), on float64 arrays."""
    if fun == "logcosh":
        return lambda y: np.abs(y) + np.log1p(np.exp(-2.0 * np.abs(y))) - math.log(2.0)
    if fun == "exp":
        return lambda y: -np.exp(-0.5 * y * y)
    return lambda y: 0.25 * y ** 4


@functools.lru_cache(maxsize=None)
def gaussian_contrast(fun="logcosh"):
    """``E[G(nu)]`` for a standard normal ``nu`` (Gauss-Hermite quadrature, 100 nodes)."""
    x, w = np.polynomial.hermite_e.hermegauss(100)
    return float(np.sum(w * _G(fun)(x)) / math.sqrt(2.0 * math.pi))


def fastica_contrast(Z, R, fun="logcosh"):
    """FastICA's contrast ``sum_i (E[G(y_i)] - E[G(nu)])^2`` of the sources ``Y = Z R'``.

    Parameters
    ----------
    Z : ndarray of shape (n, k)
        Whitened rows.
    R : ndarray of shape (k, k)
        Orthogonal rotation (one source per row).
    fun : {"logcosh", "exp", "cube"}

    Returns
    -------
    float
    """
    Y = np.asarray(Z, dtype=np.float64) @ np.asarray(R, dtype=np.float64).T
    EG = _G(fun)(Y).mean(axis=0)
    return float(np.sum((EG - gaussian_contrast(fun)) ** 2))


def best_of(fits, indices):
    """The index among ``indices`` of the fit of largest contrast (the first on ties)."""
    return max(indices, key=lambda r: (fits[r]["contrast"], -r))


def shared_sources(R1, R2, cos=HALVES_COS):
    """How many sources (rows) of two rotations of the same whitened rows are shared:
    Hungarian match on ``|cos|`` (:func:`actkit.metrics.match_columns`), pairs with ``|cos| >=
    cos`` counted."""
    C = np.abs(R1 @ R2.T)
    r, c, _ = match_columns(C)
    return int(np.sum(C[r, c] >= cos))


def halves(R):
    """The two disjoint halves of ``R`` starts: ``[0, ceil(R/2))`` and the rest."""
    h = (R + 1) // 2
    return list(range(h)), list(range(h, R))


def side_of(fit):
    """``(unmixing (k, d), mixing (d, k), k)`` of one fit: every source identified."""
    T = fit["rotation"]
    k = T.shape[0]
    return T @ fit["whitening"], fit["dewhitening"] @ T.T, k


class SelfPair:
    """A side paired with itself (``fit_pm`` as the moments of B against B)."""

    def __init__(self, side):
        scatter = side.scatter_fit()
        self.fit_pm = self
        self.mean_x = self.mean_y = side.mean_fit
        self._s = scatter

    def scatter_xx(self):
        return self._s

    scatter_yy = scatter_xy = scatter_xx


def fit_best(h, pair, fits_a, fits_b, clone):
    """Fit ``h`` (an ``ICAAlignment``) as the best-contrast estimator; ``clone()`` makes an
    unfitted copy. Sets ``restarts_`` (the ``R x R`` maps, start of A major),
    ``classic_`` (the ``R`` single-start maps), ``best_``, ``contrasts_``,
    ``shared_halves_`` and ``self_map_`` (None with one start)."""
    R = len(fits_a)
    sa, sb = [side_of(f) for f in fits_a], [side_of(f) for f in fits_b]
    maps = []
    for ra in range(R):
        for rb in range(R):
            maps.append(clone()._fit_sources(pair, sa[ra], sb[rb], select=False))
    ba, bb = best_of(fits_a, range(R)), best_of(fits_b, range(R))
    h._fit_sources(pair, sa[ba], sb[bb], select=False)
    h.restarts_ = maps
    h.classic_ = [maps[r * R + r] for r in range(R)]
    h.best_ = (int(ba), int(bb))
    h.contrasts_ = ([f["contrast"] for f in fits_a], [f["contrast"] for f in fits_b])
    h.shared_halves_ = h.self_map_ = None
    if R >= 2:
        h1, h2 = halves(R)
        shared = []
        for fits in (fits_a, fits_b):
            i, j = best_of(fits, h1), best_of(fits, h2)
            shared.append(shared_sources(fits[i]["rotation"], fits[j]["rotation"]))
        h.shared_halves_ = tuple(shared)
        i, j = best_of(fits_b, h1), best_of(fits_b, h2)
        h.self_map_ = clone()._fit_sources(SelfPair(pair.b), sb[i], sb[j], select=False)
    return h


def classic_maps(pair, fits_a, fits_b, clone):
    """The paper's single-fit maps: start ``r`` of A with start ``r`` of B, every source
    matched (for the consensus method, which does not build the ``R x R`` maps)."""
    return [clone()._fit_sources(pair, side_of(fa), side_of(fb), select=False)
            for fa, fb in zip(fits_a, fits_b)]


def identifiable(shared_halves, k, self_floor, denominator):
    """Whether the ICA estimate is reproducible: the halves share at least ``HALVES_AGREE``
    of the ``k`` sources on each side, and the self floor is at most ``SELF_FLOOR_RATIO``
    of ``permutation - rigid`` (that part is skipped where the denominator is undefined).
    Returns ``(bool or None, reason or None)``; None with one start."""
    if shared_halves is None:
        return None, None
    need = math.ceil(HALVES_AGREE * k)
    if min(shared_halves) < need:
        return False, (f"the two halves of the restarts share {shared_halves[0]} (A) and "
                       f"{shared_halves[1]} (B) of {k} sources at |cos| >= {HALVES_COS} "
                       f"(fewer than {need})")
    if np.isfinite(denominator) and np.isfinite(self_floor) and self_floor > SELF_FLOOR_RATIO * denominator:
        return False, (f"B mapped onto itself through the two halves' fits costs {self_floor:.3g} "
                       f"(ica_self_floor), more than {SELF_FLOOR_RATIO:g} x (permutation - rigid) "
                       f"= {SELF_FLOOR_RATIO * denominator:.3g}")
    return True, None
