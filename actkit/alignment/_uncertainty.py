"""compare's uncertainty: permutation p-values and bootstrap intervals by input sample.

* the moment-based similarities (linear CKA, mean CCA): :func:`actkit.inference.infer` on
  the pair's rows gathered by input sample (one more pass over the rows);
* the alignment errors: a bootstrap over the **held-out** input samples with the fitted maps
  held fixed: each resample re-weights the per-sample sums of ``||h(a_i) - b_i||`` and of the
  rows; ``diam(B_eval)`` is **not** re-estimated (it is a maximum over pairs of rows, whose
  bootstrap is degenerate): it stays the scale of every resample. No permutation test for
  them (their chance level is not a question of pairing alone: the maps were fitted on the
  pairing).
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError
from actkit.inference import MIN_SAMPLES, MeasureRecord, Samples, bootstrap_interval, infer
from actkit.inference._cka import bootstrap_cka, gram_fits
from actkit.inference._samples import gather_pair


def check_request(permutations, bootstrap, confidence, interval, n_groups):
    """Every argument checked before any pass over the rows."""
    from actkit.inference import check_resampling

    check_resampling(permutations, bootstrap, confidence, interval)
    if (permutations or bootstrap) and n_groups < MIN_SAMPLES:
        raise ValidationError(f"resampling (permutations, bootstrap) needs at least {MIN_SAMPLES} "
                              f"input samples, got {n_groups}")


def moment_measures(eps):
    """The moment-based measures of compare's table: name -> (compute(moments), kind)."""
    from actkit.metrics import canonical_correlations

    def cka(m):
        num = np.sum(m.Sab * m.Sab)
        den = np.sqrt(np.sum(m.Saa * m.Saa)) * np.sqrt(np.sum(m.Sbb * m.Sbb))
        return float(num / den) if den > 0 else float("nan")

    def mean_cca(m):
        rho = canonical_correlations(m.Saa, m.Sbb, m.Sab, eps=eps)
        return float(rho.mean()) if rho.size else float("nan")

    return {"linear_cka": (cka, "similarity"), "mean_cca": (mean_cca, "similarity")}


def map_measure(name, params=None, dtype="float64"):
    """``(compute(moments), kind)`` of a moment-based measure by name (a one-line error
    naming the valid ones otherwise)."""
    from actkit.metrics._similarity import rank_cut

    known = moment_measures(rank_cut(dtype))
    if name not in known:
        raise ValidationError(f"unknown or not moment-based measure {name!r} for a layer map; "
                              f"choose one of {', '.join(known)}")
    if params:
        raise ValidationError(f"measure {name} has no parameters, got {', '.join(params)}")
    return known[name]


def similarity_records(A, B, groups, *, permutations, bootstrap, confidence, interval, random_state,
                       eps, dtype, block_rows=None):
    """:class:`MeasureRecord` of linear CKA and mean CCA, and info keys."""
    rows_a, rows_b = gather_pair(A, B, block_rows=block_rows)
    samples = Samples(rows_a, rows_b, groups, product_dtype=dtype)
    fast = {"linear_cka": bootstrap_cka} if gram_fits(samples, bootstrap) else {}
    return infer(samples, moment_measures(eps), permutations=permutations, bootstrap=bootstrap,
                 confidence=confidence, random_state=random_state, interval=interval,
                 fast_bootstrap=fast)


def error_records(row_errors, eval_groups, diam, errors, *, bootstrap, confidence, interval,
                  random_state):
    """Bootstrap intervals of the held-out errors over the held-out input samples, maps and
    diam(B_eval) fixed. ``row_errors``: name -> (n_eval,) per-row ``||h(a_i) - b_i||``."""
    _, inv = np.unique(eval_groups, return_inverse=True)
    inv = inv.ravel()
    counts = np.bincount(inv).astype(np.float64)
    G = counts.size
    rng = np.random.default_rng([int(random_state), 3])
    draws = rng.integers(0, G, size=(bootstrap, G))
    W = np.bincount((draws + (np.arange(bootstrap) * G)[:, None]).ravel(),
                    minlength=bootstrap * G).reshape(bootstrap, G).astype(np.float64)
    rows = W @ counts
    out = {}
    for name, e in row_errors.items():
        per_sample = np.bincount(inv, weights=e, minlength=G)
        values = (W @ per_sample) / rows / diam
        rec = MeasureRecord(name, float(errors[name]), "distance", bootstrap=int(bootstrap),
                            confidence=float(confidence), interval=interval)
        rec.ci_low, rec.ci_high = bootstrap_interval(values, errors[name], confidence, interval)
        out[name] = rec
    return out, G
