"""Permutation p-values and bootstrap intervals over input samples: :func:`infer`.

Schemes (docs/compare.md, "Uncertainty"):

* **permutation null**: the input samples of B are shuffled against those of A, whole
  samples, each only among the samples with the same number of rows (for unequal lengths,
  a sample whose length no other sample has keeps its partner: the test is then
  conservative, and ``permutation_exchangeable`` says which share of the samples was
  shuffled). Permutation ``j`` is drawn by ``np.random.default_rng([random_state, 1])``,
  all ``N`` before any is used (:func:`actkit._groups.permutation_draws`). ``p = (1 +
  #{null at least as similar as observed}) / (1 + N)``: one-sided toward "more similar"
  (``>=`` for a similarity, ``<=`` for a distance), ties counted against the observation.
* **bootstrap interval**: ``M`` resamples of the input samples with replacement
  (``np.random.default_rng([random_state, 2])``, :func:`actkit._groups.bootstrap_draws`),
  each a re-weighting of the per-sample moments. Default the **basic** (reverse percentile) interval ``[2 t - q_{(1+c)/2},
  2 t - q_{(1-c)/2}]`` of the observed value ``t`` and the quantiles ``q`` of the resampled
  values at confidence ``c``: it carries the finite-sample bias of CKA-like measures (the
  bootstrap values lie above ``t`` as ``t`` lies above the population value), where the
  percentile interval ``[q_{(1-c)/2}, q_{(1+c)/2}]`` (``interval="percentile"``) and BCa
  miss the population value (coverage measured in docs/compare.md, "Uncertainty").

The work is split into fixed batches run on the thread budget's workers, each at one BLAS
thread: the digits do not depend on the number of threads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from actkit._threads import current_threads, map_ordered, small_linalg, torch_at_one_thread
from actkit.errors import ValidationError
from actkit.inference._pairs import group_products, group_size, use_pairs
from actkit.measures import reuse_sides

#: resamples per task (a constant: never the thread count)
BOOT_BATCH = 16
PERM_BATCH = 4

#: a null value within this relative distance of the observed one counts as a tie
TIE_TOL = 1e-12


@dataclass
class MeasureRecord:
    """One measure of :func:`actkit.compare` with its uncertainty (``res.measures[name]``).

    Attributes
    ----------
    name : str
    value : float
        The measure on all rows.
    kind : {"similarity", "distance"}
    p : float or None
        Permutation p-value (one-sided toward "more similar"); None without permutations.
    null_mean, null_sd : float or None
        Mean and standard deviation (ddof=1) of the permutation null.
    ci_low, ci_high : float or None
        Bootstrap interval at ``confidence`` (``interval``: basic or percentile); None
        without bootstrap.
    permutations, bootstrap : int
    confidence : float
    exchangeable : float or None
        A row-based measure's share of its sampled rows whose input sample the permutations
        can move (``<name>_permutation_exchangeable``); None for the others.
    """

    name: str
    value: float
    kind: str = "similarity"
    p: float | None = None
    null_mean: float | None = None
    null_sd: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    permutations: int = 0
    bootstrap: int = 0
    confidence: float = 0.95
    interval: str = "basic"
    exchangeable: float | None = None

    def keys(self) -> dict:
        """The ``to_dict()`` keys of this record: ``<name>_p``, ``_null_mean``, ``_null_sd``,
        ``_ci_low``, ``_ci_high`` (those measured)."""
        out = {}
        if self.permutations:
            out.update({f"{self.name}_p": self.p, f"{self.name}_null_mean": self.null_mean,
                        f"{self.name}_null_sd": self.null_sd})
            if self.exchangeable is not None:
                out[f"{self.name}_permutation_exchangeable"] = self.exchangeable
        if self.bootstrap:
            out.update({f"{self.name}_ci_low": self.ci_low, f"{self.name}_ci_high": self.ci_high})
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def min_bootstrap(confidence):
    """Fewest bootstrap resamples an interval at ``confidence`` accepts: ``2 / (1 -
    confidence)`` (40 at 0.95, 200 at 0.99). Each end of the interval is the ``(1 - c) / 2``
    quantile of the resampled values from one side; with fewer resamples that tail holds
    less than one of them, and the end is the smallest (or largest) value drawn, whatever
    the confidence (``--bootstrap 1`` gave a "95% interval" of one point)."""
    return int(math.ceil(round(2.0 / (1.0 - float(confidence)), 9)))


#: below this many resamples an interval's ends are noisy (their Monte Carlo SD is about
#: half the interval's width x 1 / sqrt(M / 10); docs/compare.md, "How many resamples")
NOISY_BOOTSTRAP = 100

#: a p-value can reach 0.05 only with at least this many permutations (1 / (N + 1) <= 0.05)
MIN_PERMUTATIONS_05 = 19


def bootstrap_floor_error(bootstrap, confidence, asked="bootstrap={}"):
    """The one-line error for too few bootstrap resamples (``asked``: how the request is
    named, ``"--bootstrap {}"`` at the command line), or None."""
    need = min_bootstrap(confidence)
    if 0 < bootstrap < need:
        return (f"{asked.format(bootstrap)} is too few resamples for a {100 * confidence:g}% interval: its "
                f"ends are the {100 * (1 - confidence) / 2:g}% and {100 * (1 + confidence) / 2:g}% "
                f"quantiles of the resampled values, which need at least 2 / (1 - confidence) = {need} "
                f"resamples; use 1000 for numbers you report (200 to look)")
    return None


def resampling_notes(permutations, bootstrap, confidence):
    """The caveats of a resampling request that is allowed but weak (one line each)."""
    out = []
    if 0 < permutations < MIN_PERMUTATIONS_05:
        out.append(f"with {permutations} permutations the smallest p-value is 1 / ({permutations} + 1) = "
                   f"{1 / (permutations + 1):.3g}: p cannot fall below 0.05; use at least "
                   f"{MIN_PERMUTATIONS_05} (999 for numbers you report)")
    if 0 < bootstrap < NOISY_BOOTSTRAP:
        out.append(f"with {bootstrap} bootstrap resamples (fewer than {NOISY_BOOTSTRAP}) the interval's "
                   f"ends are noisy: another seed moves them by a good part of the interval's width; "
                   f"use 1000 for numbers you report")
    return out


def check_resampling(permutations, bootstrap, confidence, interval="basic", *, flags=False):
    """Validate the arguments (one-line errors naming them), the bootstrap's floor
    (:func:`min_bootstrap`) included; ``flags``: name them as the command line does
    (``--bootstrap 3``, not ``bootstrap=3``)."""
    name = (lambda k: f"--{k}") if flags else (lambda k: k)
    if interval not in INTERVALS:
        raise ValidationError(f"{name('interval')} must be {' or '.join(INTERVALS)}, got {interval!r}")
    for key, v in (("permutations", permutations), ("bootstrap", bootstrap)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValidationError(f"{name(key)} must be a non-negative integer, got {v!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)) \
            or not 0 < float(confidence) < 1:
        raise ValidationError(f"{name('confidence')} must be a number in (0, 1), got {confidence!r}")
    message = bootstrap_floor_error(int(bootstrap), float(confidence), "--bootstrap {}" if flags else "bootstrap={}")
    if message:
        raise ValidationError(message)


def p_value(null, observed, kind):
    """``(1 + #{null at least as similar}) / (1 + N)``; NaN nulls count as not as similar."""
    null = np.asarray(null, dtype=np.float64)
    tol = TIE_TOL * max(1.0, abs(observed))
    hits = null >= observed - tol if kind == "similarity" else null <= observed + tol
    return float((1 + np.count_nonzero(hits)) / (1 + null.size))


INTERVALS = ("basic", "percentile")


def percentile_interval(values, confidence):
    """``[q_{(1-c)/2}, q_{(1+c)/2}]`` of the finite ``values``."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(v, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def bootstrap_interval(values, observed, confidence, interval="basic"):
    """The bootstrap interval of ``observed`` from resampled ``values``: ``"basic"``
    ``[2 t - q_hi, 2 t - q_lo]`` or ``"percentile"`` ``[q_lo, q_hi]``."""
    lo, hi = percentile_interval(values, confidence)
    if interval == "percentile":
        return lo, hi
    return float(2 * observed - hi), float(2 * observed - lo)


def _batches(n, size):
    return [(s, min(n, s + size)) for s in range(0, n, size)]


def infer(samples, measures, *, permutations=0, bootstrap=0, confidence=0.95, random_state=0,
          interval="basic", fast_bootstrap=None):
    """Permutation nulls and bootstrap intervals of moment-based measures.

    Parameters
    ----------
    samples : Samples
        The pair's rows by input sample (:class:`~actkit.inference.Samples`).
    measures : dict of name -> (compute, kind)
        ``compute(moments) -> float``; ``kind`` "similarity" or "distance".
    permutations, bootstrap : int
    confidence : float
    random_state : int
    interval : {"basic", "percentile"}, default="basic"
    fast_bootstrap : dict of name -> callable, optional
        ``f(samples, W) -> (k,) values`` replacing ``compute`` on resampled moments
        (:func:`~actkit.inference._cka.bootstrap_cka`).

    Returns
    -------
    records : dict of name -> MeasureRecord
    info : dict
        ``permutation_exchangeable``: the share of samples the permutations move.
    """
    check_resampling(permutations, bootstrap, confidence, interval)
    if permutations or bootstrap:
        samples.check_resamplable()
    fast_bootstrap = fast_bootstrap or {}
    names = list(measures)
    workers = current_threads()
    with small_linalg(), torch_at_one_thread():     # mean CCA's eigvalsh is torch's (actkit.inference._cca)
        observed = {k: float(measures[k][0](samples.moments())) for k in names}
        perms, movable = samples.groups.permutation_draws(permutations, random_state)
        null = permutation_null(samples, measures, names, perms, workers)

        W = samples.groups.bootstrap_draws(bootstrap, random_state) if bootstrap else None
        boot = np.full((bootstrap, len(names)), np.nan)
        slow = [k for k in names if k not in fast_bootstrap]

        def boot_task(span):
            w = W[span[0]:span[1]]
            out = np.full((w.shape[0], len(names)), np.nan)
            for i, k in enumerate(names):
                if k in fast_bootstrap:
                    out[:, i] = fast_bootstrap[k](samples, w)
            if slow:
                for r, m in enumerate(samples.weighted_moments(w)):
                    for i, k in enumerate(names):
                        if k not in fast_bootstrap:
                            out[r, i] = measures[k][0](m)
            return out

        if bootstrap:
            if slow and samples.blocks_fit():
                samples.blocks()        # once, before the workers share them
            for k in fast_bootstrap:
                if k in names and hasattr(fast_bootstrap[k], "prepare"):
                    fast_bootstrap[k].prepare(samples, bootstrap)
            for (s0, s1), vals in zip(_batches(bootstrap, BOOT_BATCH),
                                      map_ordered(boot_task, _batches(bootstrap, BOOT_BATCH), workers)):
                boot[s0:s1] = vals

    records = measure_records(names, measures, observed, null, boot, permutations, bootstrap, confidence,
                              interval)
    return records, {"permutation_exchangeable": float(movable) if permutations else None}



def permutation_null(samples, measures, names, perms, workers):
    """``(N, len(names))`` values of the measures under the permutations ``perms`` (N, G):
    one cross product per permutation for every measure, by the pair route
    (:mod:`actkit.inference._pairs`, a group of permutations at a time) where it is the
    cheaper, else by the rows' product; the side decompositions computed once
    (:func:`~actkit.measures.reuse_sides`), in fixed batches on ``workers`` threads."""
    N = len(perms)
    null = np.full((N, len(names)), np.nan)

    def task(span, products=None, g0=0):
        out = []
        for j in range(*span):
            m = samples.permuted_moments(perms[j], None if products is None else products(j - g0))
            out.append([measures[k][0](m) for k in names])
        return out

    with reuse_sides():     # the side scatters are the same in every permutation
        if not use_pairs(samples, N):
            for (s0, s1), vals in zip(_batches(N, PERM_BATCH), map_ordered(task, _batches(N, PERM_BATCH), workers)):
                null[s0:s1] = vals
            return null
        step = group_size(samples)
        for g0 in range(0, N, step):
            g1 = min(N, g0 + step)
            products = group_products(samples, perms[g0:g1])
            spans = _batches(g1 - g0, PERM_BATCH)
            for (s0, s1), vals in zip(spans, map_ordered(
                    lambda sp, p=products, g0=g0: task((g0 + sp[0], g0 + sp[1]), p, g0), spans, workers)):
                null[g0 + s0:g0 + s1] = vals
            del products
    return null

def measure_records(names, measures, observed, null, boot, permutations, bootstrap, confidence, interval):
    """``{name: MeasureRecord}`` from the observed values, the permutation null
    (``(permutations, len(names))``) and the bootstrap values (``(bootstrap, len(names))``)."""
    records = {}
    for i, k in enumerate(names):
        kind = measures[k][1]
        rec = MeasureRecord(k, observed[k], kind, permutations=int(permutations),
                            bootstrap=int(bootstrap), confidence=float(confidence), interval=interval)
        if permutations:
            col = null[:, i]
            fin = col[np.isfinite(col)]
            rec.p = p_value(col, observed[k], kind)
            rec.null_mean = float(fin.mean()) if fin.size else float("nan")
            rec.null_sd = float(fin.std(ddof=1)) if fin.size > 1 else float("nan")
        if bootstrap:
            rec.ci_low, rec.ci_high = bootstrap_interval(boot[:, i], observed[k], confidence, interval)
        records[k] = rec
    return records
