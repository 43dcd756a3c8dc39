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

from actkit._groups import SampleGroups
from actkit.alignment._measures_run import MeasureValue
from actkit.errors import ValidationError
from actkit.inference import (MIN_SAMPLES, MeasureRecord, Samples, bootstrap_cka, bootstrap_cka_debiased,
                              bootstrap_interval, bootstrap_mean_cca, check_resampling,
                              gather_pair, gram_fits, infer, infer_rows, mean_cca_resampled, row_measure)
from actkit.measures import available, get_measure, rows_of


def check_request(permutations, bootstrap, confidence, interval, n_groups):
    """Every argument checked before any pass over the rows."""
    check_resampling(permutations, bootstrap, confidence, interval)
    if (permutations or bootstrap) and n_groups < MIN_SAMPLES:
        raise ValidationError(f"resampling (permutations, bootstrap) needs at least {MIN_SAMPLES} "
                              f"input samples, got {n_groups}")


#: the table's moment-based columns, resampled whenever resampling is asked
TABLE_MEASURES = ("linear_cka", "linear_cka_debiased", "mean_cca")


def resampled_measures(chosen):
    """``name -> (compute(moments), kind)`` of the moment-based measures to resample (the
    table's, :data:`TABLE_MEASURES`, and the asked-for ones, ``chosen``: [(Measure,
    params)]), ``name -> (compute(a, b), kind)`` of the asked-for row-based ones, and the
    names left out (scored on held-out rows: ``linear_r2``)."""
    todo = [(get_measure(k), {}) for k in TABLE_MEASURES]
    todo += [(m, p) for m, p in chosen if m.name not in TABLE_MEASURES]
    out, rows, skipped = {}, {}, []
    for m, params in todo:
        if m.source == "moments" and not m.needs_split:
            out[m.name] = (_bound(m, params), m.kind)
        elif m.source == "rows":
            rows[m.name] = (row_measure(m.name, params), m.kind)
        elif m.source != "alignment":
            skipped.append(m.name)
    return out, rows, skipped


def _bound(m, params):
    if m.name == "mean_cca" and not params:
        return mean_cca_resampled      # the same value, about half the work (actkit.inference._cca)

    def compute(moments):
        return float(m.compute(moments, **params))
    return compute


def map_measure(name, params=None, dtype="float64"):
    """``(compute(moments), kind)`` of a moment-based measure by name (one-line errors naming
    the valid ones otherwise)."""
    m = get_measure(name)
    if m.source != "moments" or m.needs_split:
        ok = [k for k in available() if get_measure(k).source == "moments" and not get_measure(k).needs_split]
        raise ValidationError(f"a layer map needs a moment-based measure; {name} is not: choose one "
                              f"of {', '.join(ok)}")
    return _bound(m, m.validate(params)), m.kind


def similarity_records(A, B, groups, chosen, *, permutations, bootstrap, confidence, interval,
                       random_state, dtype, block_rows=None, max_rows=10000, device="cpu", progress=None):
    """:class:`MeasureRecord` of each moment-based measure (:func:`resampled_measures`) and
    each asked-for row-based one (on its row sample), and info keys
    (``resampling_skipped``: asked-for measures without resampling)."""
    measures, by_rows, skipped = resampled_measures(chosen)
    rows_a, rows_b = gather_pair(A, B, block_rows=block_rows)
    samples = Samples(rows_a, rows_b, groups, product_dtype=dtype, dtype=str(np.dtype(dtype)),
                      device=None if str(device) == "cpu" else device,
                      norms="linear_cka_debiased" in measures)
    fast = fast_bootstraps(samples, measures, bootstrap)
    records, info = infer(samples, measures, permutations=permutations, bootstrap=bootstrap,
                          confidence=confidence, random_state=random_state, interval=interval,
                          fast_bootstrap=fast)
    if by_rows:
        a, b, rows = rows_of(A, B, groups, max_rows, random_state, device)
        ids = rows if groups is None else np.asarray(groups)[rows]
        records.update(infer_rows(a, b, ids, by_rows, permutations=permutations, bootstrap=bootstrap,
                                  confidence=confidence, random_state=random_state, interval=interval,
                                  progress=progress))
    if skipped:
        info["resampling_skipped"] = skipped
    if permutations:
        info["permutation_null"] = permutation_null(samples.n_s)
    return records, info


def permutation_null(n_s):
    """What the permutation null holds fixed and what its mean means, in words (the JSON's
    ``permutation_null``), for input samples of ``n_s`` rows each."""
    if np.all(n_s == 1):
        return ("B's input samples re-paired against A's at random (one row per sample: a "
                "permutation of the rows); <name>_null_mean is the measure between unrelated "
                "representations of these inputs")
    return ("B's input samples re-paired against A's, whole samples, only among samples of equal "
            "length, row i with row i: the position within a sample is held fixed (token i of one "
            "input meets token i of another: [CLS] meets [CLS], position structure stays paired); "
            "<name>_null_mean is the measure when which input meets which is broken but position is "
            "kept, not the measure between unrelated representations; p asks whether the pairing of "
            "the inputs matters beyond position (docs/compare.md, 'What the permutation null holds "
            "fixed')")


def fast_bootstraps(samples, measures, bootstrap):
    """The measures of ``measures`` with a bootstrap of their own: plain and debiased linear
    CKA on the Gram route (:mod:`actkit.inference`), where that route is the cheaper exact
    one; mean CCA (default parameters) from the re-weighted per-sample blocks, each side
    whitened without its eigenvalues (:func:`~actkit.inference.bootstrap_mean_cca`). The
    others re-weight the per-sample moment blocks into :class:`~actkit.measures.Moments`."""
    fast = {}
    if gram_fits(samples, bootstrap):
        fast["linear_cka"] = bootstrap_cka
        if samples.norms:
            fast["linear_cka_debiased"] = bootstrap_cka_debiased
    if measures.get("mean_cca", (None,))[0] is mean_cca_resampled:
        fast["mean_cca"] = bootstrap_mean_cca      # after the Gram route's prepare (packed blocks)
    return {k: f for k, f in fast.items() if k in measures}


def attach_records(res, records):
    """Every record into ``res.measures`` (an asked-for measure's entry gains the fields)."""
    for name, rec in records.items():
        mv = res.measures.get(name)
        if mv is None:
            mv = res.measures[name] = MeasureValue(name, float(rec.value), asked=False)
        mv.attach(rec)
    return res


def error_records(row_errors, eval_groups, diam, errors, *, bootstrap, confidence, interval,
                  random_state):
    """Bootstrap intervals of the held-out errors over the held-out input samples, maps and
    diam(B_eval) fixed. ``row_errors``: name -> (n_eval,) per-row ``||h(a_i) - b_i||``."""
    g = SampleGroups(eval_groups)
    W = g.bootstrap_draws(bootstrap, random_state, stream=3)
    rows = W @ g.n_s.astype(np.float64)
    G = g.G
    out = {}
    for name, e in row_errors.items():
        per_sample = g.totals(e)
        values = (W @ per_sample) / rows / diam
        rec = MeasureRecord(name, float(errors[name]), "distance", bootstrap=int(bootstrap),
                            confidence=float(confidence), interval=interval)
        rec.ci_low, rec.ci_high = bootstrap_interval(values, errors[name], confidence, interval)
        out[name] = rec
    return out, G


def uncertainty(A, B, groups, chosen, pair, values, errors, row_errors, eval_rows, diam_b, *, permutations,
                bootstrap, confidence, interval, random_state, max_rows=10000, device="cpu", progress=None):
    """compare's resampling: the records of the moment-based measures (``values``: the
    values compare reports) and of the held-out errors (``row_errors``: per-row errors of
    each method, shape (n_eval,)), and the info keys."""
    if not (permutations or bootstrap):
        return {}, {}
    records, extra = similarity_records(
        A, B, groups, chosen, permutations=permutations, bootstrap=bootstrap,
        confidence=confidence, interval=interval, random_state=random_state, dtype=pair.dtype,
        block_rows=pair.block_rows, max_rows=max_rows, device=device, progress=progress)
    for name, value in values.items():
        if name in records:
            records[name].value = float(value)      # the value compare reports
    if bootstrap:
        eval_groups = eval_rows if groups is None else np.asarray(groups)[eval_rows]
        rec_err, _ = error_records(
            {k: v for k, v in row_errors.items() if k in errors},
            eval_groups, diam_b, errors, bootstrap=bootstrap, confidence=confidence,
            interval=interval, random_state=random_state)
        records.update(rec_err)
    extra.update(permutations=int(permutations), bootstrap=int(bootstrap),
                 confidence=float(confidence), interval=interval)
    return records, {k: v for k, v in extra.items() if v is not None}
