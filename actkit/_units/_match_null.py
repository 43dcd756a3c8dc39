"""The chance level of matched units, from input samples as groups: which rows enter, the
re-pairings of whole samples (the null) and the resamples of samples (the bootstrap).

Every use of the input samples in :func:`actkit.match_units` is here, and each goes through
actkit's one module of input-sample groups (:class:`actkit._groups.SampleGroups`: lengths,
movable samples, the row order of a re-pairing, the draws).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from actkit._groups import SampleGroups
from actkit.inference import Samples, percentile_interval

__all__ = ["abs_corr_intervals", "max_t_null", "null_rows", "repairings"]

#: tolerance of "at least as large" between a re-pairing's statistic and the observed one
TIE_TOL = 1e-9


def null_rows(index, max_rows, random_state):
    """Rows of whole samples that can be re-paired (another sample of the same length is among
    them), at most ``max_rows`` (sorted global row numbers). Rows of a sample that cannot move
    would keep their pairing under every re-pairing and make the null as large as the data."""
    groups = index[:, 0]
    g = SampleGroups(groups)
    ids, counts = np.flatnonzero(g.movable()), g.n_s[g.movable()]
    rng = np.random.default_rng([int(random_state), 3])
    order = rng.permutation(ids.size)
    keep = ids[order[np.cumsum(counts[order]) <= max_rows]]
    lengths = g.n_s[keep]  # of the kept samples, only those with a partner of their length stay
    keep = keep[np.bincount(lengths)[lengths] >= 2]
    return np.flatnonzero(np.isin(g.inverse, keep))


def repairings(g, permutations, random_state):
    """``(perms (N, G), exact, movable share)`` of the samples ``g`` (:class:`SampleGroups`):
    every re-pairing of the samples (among samples of equal length; the identity included) when
    there are at most ``permutations`` of them (``exact``), else ``permutations`` random ones
    (:meth:`SampleGroups.permutation_draws`)."""
    classes = [idx for _, idx in g.classes()]
    total = 1
    for idx in classes:
        total *= math.factorial(idx.size)
        if total > permutations:
            break
    if total > permutations:
        perms, movable = g.permutation_draws(int(permutations), random_state)
        return perms, False, movable
    out = []
    for combo in itertools.product(*[itertools.permutations(idx.tolist()) for idx in classes]):
        perm = np.arange(g.G)
        for idx, p in zip(classes, combo):
            perm[idx] = p
        out.append(perm)
    return np.array(out, dtype=np.int64), True, g.movable_share()


def max_t_null(A, B, groups, permutations, random_state):
    """Westfall-Young max-T over all pairs of units under re-pairings of whole samples.

    Each pair's |correlation| is standardised by its own null mean and SD (a unit that depends
    on the position alone, such as one firing on every [CLS], keeps part of its correlation
    under any re-pairing); the null of the largest standardised value over all pairs gives
    every pair a p-value that accounts for the choice of partner and the number of pairs:
    ``(1 + #{re-pairings at least as large}) / (1 + N)``, or, where every re-pairing was
    enumerated (the identity among them), ``#{at least as large} / N``.
    Returns ``(p-value matrix (Ua, Ub), null max (N,), exact, share movable, samples)``."""
    S = Samples(A, B, groups, norms=False)
    sd_a, sd_b = S.A.std(axis=0), S.B.std(axis=0)
    sd_a[sd_a == 0] = np.inf
    sd_b[sd_b == 0] = np.inf
    Az, Bz = S.A / sd_a, S.B / sd_b
    observed = np.abs(Az.T @ Bz) / S.n
    perms, exact, movable = repairings(S.groups, permutations, random_state)

    def permuted(perm):
        return np.abs(Az.T @ Bz[S.groups.row_order(perm)]) / S.n

    total, total2 = np.zeros_like(observed), np.zeros_like(observed)
    for perm in perms:  # each pair's null mean and SD
        c = permuted(perm)
        total += c
        total2 += c * c
    mu = total / len(perms)
    sd = np.sqrt(np.clip(total2 / len(perms) - mu * mu, 0, None))
    sd = np.maximum(sd, 1e-12 + 1e-9 * mu)
    null = np.array([((permuted(perm) - mu) / sd).max() for perm in perms])  # the same draws again
    t = (observed - mu) / sd
    at_least = null.size - np.searchsorted(np.sort(null), t - TIE_TOL, side="left")  # nulls >= t, per pair
    p = at_least / null.size if exact else (1 + at_least) / (1 + null.size)
    return p, null, exact, movable, S.G


def abs_corr_intervals(A, B, groups, a, b, bootstrap, confidence, random_state):
    """Percentile intervals ``(lo, hi)`` (each (P,)) of the pairs' |correlation| (columns
    ``a`` of A with ``b`` of B) over ``bootstrap`` resamples of whole input samples."""
    S = Samples(A[:, a], B[:, b], groups, norms=False)
    x, y = S.A, S.B
    per = [S.groups.per_sample(v) for v in (x, y, x * x, y * y, x * y)]  # (G, P) each
    W = S.groups.bootstrap_draws(int(bootstrap), random_state)  # (M, G) multiplicities
    n = W @ S.n_s
    sx, sy, sxx, syy, sxy = (W @ v for v in per)
    cov = sxy - sx * sy / n[:, None]
    var = np.clip(sxx - sx ** 2 / n[:, None], 0, None) * np.clip(syy - sy ** 2 / n[:, None], 0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(var > 0, np.abs(cov) / np.sqrt(np.where(var > 0, var, 1.0)), 0.0)
    ends = np.array([percentile_interval(r[:, i], confidence) for i in range(r.shape[1])]).reshape(-1, 2)
    return ends[:, 0], ends[:, 1]
