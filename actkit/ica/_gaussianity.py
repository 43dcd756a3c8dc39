"""Whether whitened rows carry non-Gaussian signal beyond chance (``compare``'s ICA check).

ICA identifies a rotation only through the non-Gaussian part of the data: on Gaussian rows
the population contrast is the same at every rotation, every rotation is a FastICA solution,
and a fit only optimises the sampling noise of its rows (``docs/definitions.md``, "ICA
alignment", the Gaussian check). Three rotation-invariant statistics of the third and fourth
moments of the whitened rows ``y`` (k wide) test that, each a z-score that is about
standard normal on Gaussian rows and grows with ``sqrt(n)`` on non-Gaussian ones; for
independent sources ``y = R s`` they estimate:

- ``kurtosis``: Mardia's multivariate kurtosis ``E|y|^4 - k(k+2)`` = the sum of the
  sources' excess kurtoses (two-sided);
- ``skewness``: ``|E[(|y|^2 - k - 2) y]|^2`` = the sum of the squared skewnesses;
- ``cumulant``: ``||E[(|y|^2 - k - 2) y y'] - (k+2) I||_F^2`` (the FOBI matrix) = the sum of
  the squared excess kurtoses, whatever their signs.

Each is a sum of per-row terms (their influence functions, with the estimation of the mean
and the whitening accounted for), summed per **unit** (input samples, dealt into at most
128 units by sample index), so rows of one input sample may depend on each other; the
quadratic ones are U-statistics over pairs of different units
(``sum_{u != v} <S_u, S_v> / sqrt(2 sum_{u != v} <S_u, S_v>^2)``), which have mean 0 on
Gaussian rows. Where the rows come in input samples of several rows and the samples are
fewer than ``10 k``, the tests use each row's deviation from its sample's mean (scaled by
``sqrt(m / (m - 1))``, ``m`` the sample's rows): Gaussian, and independent between samples,
whenever the rows are Gaussian with a Gaussian per-sample effect. Whitening the raw rows
of fewer samples than components leaves the samples' own scatter as spurious structure
(Gaussian rows with per-sample effects, 160 samples, k = 252: kurtosis z = -9), while with
``10 k`` samples or more the raw rows are well calibrated (z within +-2.3 in 32 draws from
16 to 3,000 samples) and keep all of their non-Gaussianity (the deviations of samples of 4
rows keep 58% of a source's excess kurtosis).

Measured (z-scores, the largest of the three): Gaussian rows, 2,000 to 16,000 of them, k = 5
to 252, with and without per-sample effects, within +-2.8; the zoo's Pythia-tiny
activations (16,000 rows, k = 64) 10, 60 and 65; at 16,000 rows and k = 252, ten Laplace
sources among the 252 directions 4.0 to 5.4 (three draws), one Laplace source at most 1.1
(a single weak source among many Gaussian directions is below what these tests resolve).
"""

from __future__ import annotations

import numpy as np

from actkit._groups import SampleGroups
from actkit._threads import small_linalg

__all__ = ["GAUSSIAN_Z", "gaussianity", "no_signal"]

#: Below this z-score on all three tests the rows show no non-Gaussian signal beyond chance.
GAUSSIAN_Z = 3.0
MAX_UNITS = 128
#: Fewer rows are not tested (FastICA fits them as usual): with 200 to 400 rows the tests
#: called 3 of 10 mixtures of 4 Laplace sources Gaussian; from 2,000 rows on none of 160
#: draws of Laplace, uniform, half-Laplace and one-in-eight-Laplace mixtures at k = 2 to 16,
#: and 1 of 40 mixtures of Student-t(8) sources (excess kurtosis 1.5, k = 8).
MIN_ROWS = 2000
#: Deviations from the sample means are tested below this many input samples per component.
WITHIN_BELOW = 10
_UNIT_BYTES = 2 ** 27        # the units' k x k sums of the cumulant test, at most 128 MiB


def no_signal(stats):
    """Whether ``stats`` (:func:`gaussianity`, or None: not testable) show no non-Gaussian
    signal beyond chance: every z-score below :data:`GAUSSIAN_Z` (the kurtosis in absolute value)."""
    return stats is not None and abs(stats["kurtosis"]) < GAUSSIAN_Z \
        and stats["skewness"] < GAUSSIAN_Z and stats["cumulant"] < GAUSSIAN_Z


def _units(n, k, groups, within_below):
    """Each row's input sample, the rows kept and whether rows are taken as deviations from
    their sample's mean: with samples of several rows and fewer than ``within_below * k``
    samples."""
    if groups is None:
        return np.arange(n), np.ones(n, bool), False
    g = SampleGroups(groups)
    gid, counts = g.inverse, g.n_s
    if counts.max() < 2 or counts.size >= within_below * k:
        return gid, np.ones(n, bool), False
    return gid, counts[gid] >= 2, True


def _deviations(Z, gid, keep, within):
    """float64 rows to test (n_kept, k): each row minus its sample's mean times
    ``sqrt(m / (m - 1))`` (``within``), else minus the mean of all rows; and their dof."""
    Y = np.asarray(Z[keep], dtype=np.float64)
    g = gid[keep]
    if not within:
        return Y - Y.mean(axis=0), Y.shape[0] - 1, g
    kept = SampleGroups(g)           # the kept rows' samples, numbered anew
    g, m = kept.inverse, kept.n_s.astype(np.float64)
    sums = np.zeros((m.size, Y.shape[1]))
    np.add.at(sums, g, Y)
    Y -= (sums / m[:, None])[g]
    Y *= np.sqrt(m / (m - 1.0))[g][:, None]
    return Y, Y.shape[0] - m.size, g


def _ustat(S):
    """``sum_{u != v} <S_u, S_v> / sqrt(2 sum_{u != v} <S_u, S_v>^2)`` over the rows of ``S``."""
    G = S @ S.T
    d = np.diag(G)
    den = 2.0 * (np.sum(G * G) - np.sum(d * d))
    return float((G.sum() - d.sum()) / np.sqrt(den)) if den > 0 else 0.0


def gaussianity(Z, groups=None, *, within_below=WITHIN_BELOW):
    """The three z-scores of the module docstring on whitened rows ``Z``.

    Parameters
    ----------
    Z : ndarray of shape (n, k)
        Rows (whitened or not: they are re-whitened here).
    groups : array-like of shape (n,), optional
        Input-sample id of each row (None: every row its own sample).
    within_below : float, default=10
        Test deviations from the sample means below ``within_below * k`` input samples.

    Returns
    -------
    dict or None
        ``{"kurtosis", "skewness", "cumulant"}`` (floats), ``"rows"`` (rows tested) and
        ``"units"``; None where the rows are too few to test (fewer than :data:`MIN_ROWS`
        rows, ``10 k`` degrees of freedom or 8 units) or do not span ``k`` directions. The same bits at any thread count.
    """
    n, k = Z.shape
    gid, keep, within = _units(n, k, groups, within_below)
    units = min(MAX_UNITS, max(8, _UNIT_BYTES // (8 * k * k)))
    with small_linalg():
        Y, dof, g = _deviations(Z, gid, keep, within)
        if Y.shape[0] < MIN_ROWS or dof < 10 * k or np.unique(g).size < 8:
            return None
        evals, evecs = np.linalg.eigh(Y.T @ Y / Y.shape[0])
        if not evals[0] > 1e-8 * evals[-1]:
            return None
        Y = Y @ (evecs / np.sqrt(evals)) @ evecs.T
        u = g % units
        B = int(u.max()) + 1
        r = np.einsum("ij,ij->i", Y, Y)
        # Mardia's kurtosis: E[b2] = k(k+2)(1 - 2/(dof+2)) on Gaussian rows (covariance estimated)
        v = r * r - (2 * k + 4) * r + k * (k + 2) * (1.0 + 2.0 / (dof + 2))
        c = np.bincount(u, v, minlength=B)
        kurt = float(c.sum() / np.sqrt(np.sum(c * c)))
        skew = np.zeros((B, k))
        np.add.at(skew, u, (r - k - 2)[:, None] * Y)
        cum = np.empty((B, k * k))
        for j in range(B):
            Yj, rj = Y[u == j], r[u == j]
            M = (Yj * (rj - k - 4)[:, None]).T @ Yj
            M[np.diag_indices(k)] -= np.sum(rj - k - 2)
            cum[j] = M.ravel()
        return {"kurtosis": kurt, "skewness": _ustat(skew), "cumulant": _ustat(cum),
                "rows": int(Y.shape[0]), "units": B}
