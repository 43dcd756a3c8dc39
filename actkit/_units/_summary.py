"""Summaries of a basis's per-unit scores and their bootstrap by input sample.

Per basis and score: the median, mean and 90th percentile over the units that have the score
(a dead unit, or one constant on the held-out rows, has no R^2), and the share of them at or
above a fixed threshold (:data:`THRESHOLDS`); each with a percentile interval over resamples of
the input samples (``draws``: one multiplicity per input sample, the same resamples for every
basis, so two bases' differences are paired). A difference of two bases is resolved when its
interval leaves out 0.

The interval is the percentile interval of the resampled values centred on the observed value,
``[t + q_lo - m, t + q_hi - m]`` (``m`` their mean, ``q`` their ``(1 -+ c) / 2`` quantiles),
within the statistic's range: a resample repeats whole input samples, which shifts top-``k``
statistics (a repeated row fills two of the ``k`` places: the resampled purity is higher
than the observed); the shift is not the estimator's bias (the observed purity is an unbiased
draw of the purity at this size), so the interval keeps the resamples' spread and the observed
centre. On a designed case (tests/test_bases.py) it covers the expected purity and the
conditional R^2 about as often as it says.

Resampling the token purity: a resample's top-``k`` rows of a unit are its highest rows with
each row repeated as often as its input sample is drawn, taken in order until ``k``; they are
among the unit's top ``K`` rows of the data whenever the drawn multiplicities of those add up
to ``k`` (``K = 3 k`` by default: short of that in about 1e-7 of the resamples of independent
rows; a short resample takes the ``K`` rows it has).
"""

from __future__ import annotations

import warnings

import numpy as np


__all__ = ["SCORES", "STATISTICS", "THRESHOLDS", "TOP_FACTOR", "centred_interval", "difference", "purity_resampled", "statistics",
           "summarize"]

#: the per-unit scores a comparison summarises
SCORES = ("token_purity", "token_r2", "context_r2", "label_auroc")
#: "share of units at or above" thresholds
THRESHOLDS = {"token_purity": 0.5, "token_r2": 0.5, "context_r2": 0.5, "label_auroc": 0.9}
#: the statistics of a score's distribution over units
STATISTICS = ("median", "mean", "p90", "share")
#: a unit's top rows a resampled token purity reads: ``TOP_FACTOR x k``
TOP_FACTOR = 3


def centred_interval(values, observed, confidence, low=-np.inf, high=np.inf):
    """``(lo, hi)``: the percentile interval of the finite resampled ``values`` moved so that
    their mean lies on ``observed``, clipped to ``[low, high]``; ``(None, None)`` without."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0 or observed is None or not np.isfinite(observed):
        return None, None
    t, m = float(observed), float(v.mean())
    q_lo, q_hi = np.quantile(v, [(1 - confidence) / 2, (1 + confidence) / 2])
    lo, hi = min(t, t - (m - q_lo)), max(t, t + (q_hi - m))      # the observed value inside, whatever the rounding
    return float(np.clip(lo, low, high)), float(np.clip(hi, low, high))


def _range(score, statistic):
    """The values a statistic of a score can take."""
    if statistic == "share" or score in ("token_purity", "label_auroc"):
        return 0.0, 1.0
    return -np.inf, 1.0


def statistics(values, threshold):
    """``{statistic: array}`` over the last axis of ``values`` (units), ignoring NaN: median,
    mean, 90th percentile, share at or above ``threshold``; NaN where no unit has a value."""
    v = np.asarray(values, np.float64)
    finite = np.isfinite(v)
    count = finite.sum(axis=-1)
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)    # all-NaN rows: NaN, said by n_units
        return {"median": np.nanmedian(v, axis=-1), "mean": np.nanmean(v, axis=-1),
                "p90": np.nanquantile(v, 0.9, axis=-1),
                "share": np.where(count > 0, (finite & (np.where(finite, v, -np.inf) >= threshold)).sum(-1)
                                  / np.maximum(count, 1), np.nan)}


def summarize(score, point, boot, threshold, confidence):
    """``({statistic: {"value", "ci_low", "ci_high"}, "n_units", "threshold"}, {statistic:
    (B,) resampled})`` of one basis's ``score``: ``point`` (units,), ``boot`` (B, units) or None."""
    obs = statistics(point, threshold)
    res = statistics(boot, threshold) if boot is not None else None
    out = {"n_units": int(np.isfinite(point).sum()), "threshold": threshold}
    for name in STATISTICS:
        lo = hi = None
        if res is not None:
            lo, hi = centred_interval(res[name], obs[name], confidence, *_range(score, name))
        out[name] = {"value": _num(obs[name]), "ci_low": _num(lo), "ci_high": _num(hi)}
    return out, res


def difference(a, boot_a, b, boot_b, confidence):
    """``{"difference", "ci_low", "ci_high", "resolved"}`` of ``a - b`` (two statistics of the
    same resamples): resolved where the interval leaves out 0."""
    diff = _num(a - b) if a is not None and b is not None else None
    lo = hi = None
    if boot_a is not None and boot_b is not None and diff is not None:
        lo, hi = centred_interval(np.asarray(boot_a) - np.asarray(boot_b), diff, confidence)
        lo, hi = _num(lo), _num(hi)
    resolved = None if lo is None or hi is None else bool(lo > 0 or hi < 0)
    return {"difference": diff, "ci_low": lo, "ci_high": hi, "resolved": resolved}


def _num(x):
    if x is None:
        return None
    x = float(x)
    return x if np.isfinite(x) else None


def purity_resampled(keys, samples, draws, k, chunk=256):
    """(B, units) token purity of every resample: ``keys``, ``samples`` (K, units) the key and
    input sample of each unit's top ``K`` rows (sample -1: no row), ``draws`` (B, sample ids)
    multiplicities. Each row counts as often as its sample is drawn, in order, up to ``k``."""
    keys, samples = np.asarray(keys), np.asarray(samples)
    B, (K, U) = draws.shape[0], keys.shape
    out = np.full((B, U), np.nan)
    for lo in range(0, U, chunk):
        hi = min(U, lo + chunk)
        s = samples[:, lo:hi]
        w = np.where(s[None] >= 0, draws[:, np.maximum(s, 0)], 0.0)               # (B, K, u)
        before = np.cumsum(w, axis=1) - w
        take = np.clip(k - before, 0.0, w)
        same = (keys[:, None, lo:hi] == keys[None, :, lo:hi]) & (s[:, None] >= 0) & (s[None, :] >= 0)
        # the weight of each row's key: one (B, K) x (K, K) product per unit (batched matmul, BLAS)
        counts = np.matmul(take.transpose(2, 0, 1), same.transpose(2, 0, 1).astype(np.float64))   # (u, B, K)
        total = take.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, lo:hi] = np.where(total > 0, counts.max(axis=2).T / total, np.nan)
    return out
