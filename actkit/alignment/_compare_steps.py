"""The steps of :func:`actkit.alignment.compare`, in the order it runs them; each callable alone.

1. :func:`resolve_request` – the sources checked, the input-sample groups, the measures asked
2. :func:`split_by_sample` – fit / held-out rows by input sample, FastICA's and the diameter's rows
3. :func:`moment_pass` – one pass over the rows: each side's and the cross moments (a :class:`Pair`)
4. :func:`fit_maps` – the alignments fitted on the fit rows, with the notes of their fits
5. :func:`heldout_errors` – held-out errors / diam(B) and the ICA efficiency (:class:`HeldOut`)
6. :func:`ica_report` – the ICA keys (restarts, classic fit, identifiability) and their notes
7. :func:`similarities` – CKA, CCA, their chance levels and the asked measures (:class:`Similarities`)
8. :func:`matched_sources` – correlations of the matched ICA sources on the held-out rows
9. :func:`resample` – permutation p-values and bootstrap intervals by input sample
10. :func:`result` – the :class:`CompareResult` (its ``info`` from :func:`result_info`)

Every note goes through :func:`note` into one list (``CompareResult.notes``) and is warned
once, attributed to the user's line.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from actkit._device import check_device
from actkit._groups import check_same_rows, clustered_se
from actkit._progress import heartbeat
from actkit._rows import sample_rows
from actkit._warn import warn_user
from actkit.alignment._diameter import diameter
from actkit.alignment._ica_map import source_sd
from actkit.alignment._ica_report import fit_notes, ica_maps, ica_measures
from actkit.alignment._inputs import as_source, n_features, n_rows
from actkit.alignment._maps import (LinearAlignment, PermutationAlignment, RigidAlignment,
                                    closed_form_min_rows)
from actkit.alignment._measures_run import (evaluate_asked, finish_measures, pair_moments,
                                             resolve_measures, similarity_columns)
from actkit.alignment._result import METHODS, CompareResult
from actkit.alignment._sides import Pair, chance_cross_scatter, chance_window
from actkit.alignment._split import groups_for, split
from actkit.alignment._uncertainty import attach_records, uncertainty
from actkit.errors import ValidationError
from actkit.inference import resampling_notes
from actkit.measures import constant_side, rank_cut, refuse_constant

__all__ = ["Request", "SplitRows", "HeldOut", "Similarities", "resolve_request", "split_by_sample",
           "moment_pass", "fit_maps", "heldout_errors", "ica_report", "similarities",
           "matched_sources", "resample", "result", "result_info", "note", "efficiency_noise",
           "ratio_se", "EFFICIENCY_FLOOR"]

_CLOSED_FORM = {"permutation": PermutationAlignment, "rigid": RigidAlignment}


# ----------------------------------------------------------------------------- 1. the request
@dataclass
class Request:
    """A checked request: the sources ``A`` (n x Da) and ``B`` (n x Db), ``n`` rows, the
    input-sample id of each row (``groups``, shape (n,), or None: one row = one sample), the
    alignment ``methods`` and the asked measures (``chosen``: ``[(Measure, params)]``)."""

    A: object
    B: object
    n: int
    groups: object
    methods: object
    chosen: list


def resolve_request(A, B, *, methods=METHODS, device="cpu", groups=None, measures=None,
                    max_rows=10000) -> Request:
    """Check everything about a comparison that needs no pass over the data.

    Inputs: the two sources (arrays, tensors, h5py datasets or store layers, row ``i`` of
    each from the same input), the methods, the FastICA device (checked only where ``"ica"``
    is asked), the groups (default: the store layers' own), the measures and ``max_rows``
    (the row-based measures' sample). Output: a :class:`Request`. Raises
    :class:`~actkit.errors.ValidationError` on an unknown method, a bad device, sources that
    do not hold the same rows (:func:`actkit._groups.check_same_rows`) or an unknown measure.
    """
    A, B = as_source(A, "A"), as_source(B, "B")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValidationError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")
    if "ica" in methods:
        check_device(device)      # a bad device fails before the passes over the data
    check_same_rows([A, B], ["A", "B"])
    n = n_rows(A)
    groups = groups_for(A, B, groups)
    chosen = resolve_measures(measures, methods, (n_features(A, "A"), n_features(B, "B")), n, max_rows)
    return Request(A=A, B=B, n=n, groups=groups, methods=methods, chosen=chosen)


# ----------------------------------------------------------------------------- 2. the split
@dataclass
class SplitRows:
    """The rows of a comparison (each an int64 index array into the n rows): ``eval_mask``
    (bool, shape (n,): held out), ``n_groups`` (input samples), ``fit_rows``, ``eval_rows``,
    ``ica_sample`` (FastICA's fit rows; empty without ICA), ``diam_rows`` (the rows of
    diam(B_eval)) with ``diam_method`` (``"exact"`` or ``"sampled"``), and ``k_ica``
    (``min(Da, Db)``: the widest ICA the width allows)."""

    eval_mask: np.ndarray
    n_groups: int
    fit_rows: np.ndarray
    eval_rows: np.ndarray
    ica_sample: np.ndarray
    diam_rows: np.ndarray
    diam_method: str
    k_ica: int


def split_by_sample(request: Request, ica, *, eval_fraction=0.2, random_state=0,
                    diameter_max_rows=10000) -> SplitRows:
    """Split the rows into fit and held-out rows by input sample, then draw FastICA's fit rows
    (``ica.sample_rows_for``, seeded by ``random_state``) and the rows of the diameter
    (every held-out row up to ``diameter_max_rows``, else a seeded sample: ``random_state + 1``).

    Inputs: a :class:`Request`, the (unfitted) :class:`~actkit.alignment.ICAAlignment`, the
    held-out share of samples and the seeds. Output: a :class:`SplitRows`.
    """
    A, B, n = request.A, request.B, request.n
    eval_mask, n_groups = split(n, request.groups, eval_fraction, random_state)
    fit_rows, eval_rows = np.flatnonzero(~eval_mask), np.flatnonzero(eval_mask)
    k_ica = min(n_features(A, "A"), n_features(B, "B"))
    ica_sample = (ica.sample_rows_for(n, fit_rows, k=k_ica, seed=random_state) if "ica" in request.methods
                  else np.zeros(0, np.int64))
    if diameter_max_rows is not None and eval_rows.size > diameter_max_rows:
        diam_rows, diam_method = sample_rows(eval_rows, diameter_max_rows, random_state + 1), "sampled"
    else:
        diam_rows, diam_method = eval_rows, "exact"
    return SplitRows(eval_mask=eval_mask, n_groups=n_groups, fit_rows=fit_rows, eval_rows=eval_rows,
                     ica_sample=ica_sample, diam_rows=diam_rows, diam_method=diam_method, k_ica=k_ica)


# ----------------------------------------------------------------------------- 3. the moments
def moment_pass(request: Request, rows: SplitRows, *, block_rows=None, progress=None, sides=None) -> Pair:
    """One pass over the rows: each side's fit and held-out moments, the cross moments,
    FastICA's sample rows and the diameter's rows (``sides``: precomputed
    :func:`~actkit.alignment._ica_map.prepared_side` pair of :func:`compare_many`, or None).

    Output: the :class:`~actkit.alignment._sides.Pair`, moments filled. Raises
    :class:`~actkit.errors.ValidationError` where a side is constant (before any fit).
    """
    side_a, side_b = sides if sides is not None else (None, None)
    pair = Pair(request.A, request.B, eval_mask=rows.eval_mask, sample_rows=rows.ica_sample,
                block_rows=block_rows, progress=progress, diam_rows=rows.diam_rows,
                side_a=side_a, side_b=side_b)
    pair.fit_moments()
    for side in (pair.a, pair.b):
        side.groups = request.groups        # FastICA's Gaussian check tests by input sample
    refuse_constant(constant_side(pair_moments(pair)), "the comparison")  # before any fit
    return pair


# ----------------------------------------------------------------------------- 4. the maps
def fit_maps(pair: Pair, methods, ica, notes, *, alpha=0.0, n_ica_rows=0, k_ica=None,
             ica_max_iter=200, progress=None):
    """Fit each of ``methods`` on the fit rows of ``pair`` (``ica``: the unfitted
    :class:`~actkit.alignment.ICAAlignment`; ``alpha``: the linear map's ridge).

    Appends to ``notes`` (and warns) FastICA's non-convergence (once for both sides), the
    notes of the ICA fit (``n_ica_rows`` FastICA rows, ``k_ica`` the widest ICA), every
    other warning the fits raised, and each closed-form map short of fit rows.
    Output: ``(alignments, rows_ok)``: ``{method: fitted alignment}`` and the keys
    ``<method>_min_fit_rows`` / ``<method>_fit_rows_ok`` of rigid and linear.
    """
    alignments = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in methods:
            h = ica if name == "ica" else (LinearAlignment(alpha=alpha) if name == "linear"
                                           else _CLOSED_FORM[name]())
            with heartbeat(f"compare: fitting the {name} map", progress):
                alignments[name] = h.fit_pair(pair)
    if "ica" in alignments:
        if not alignments["ica"].converged_:
            # one note (and one warning) for both sides' FastICA ConvergenceWarnings
            note(notes, f"FastICA did not converge within {ica_max_iter} iterations on at least "
                        f"one side; the ica error is not that of converged sources", ConvergenceWarning)
        for message in fit_notes(alignments["ica"], n_ica_rows, k_ica):
            note(notes, message, UserWarning)
    for w in caught:
        if not issubclass(w.category, ConvergenceWarning):
            note(notes, str(w.message), w.category)
    return alignments, closed_form_rows(alignments, pair, notes)


def closed_form_rows(alignments, pair, notes):
    """Note each of rigid and linear fitted on fewer rows than it needs
    (:func:`~actkit.alignment._maps.closed_form_min_rows`); returns the JSON keys
    ``<method>_min_fit_rows`` and ``<method>_fit_rows_ok``."""
    n_fit = int(pair.fit_pm.n)
    out = {}
    for name in ("rigid", "linear"):
        if name not in alignments:
            continue
        need = closed_form_min_rows(name, pair.a.d, pair.b.d)
        out[f"{name}_min_fit_rows"] = int(need)
        out[f"{name}_fit_rows_ok"] = bool(n_fit >= need)
        if n_fit < need:
            rule = "5 max(Da, Db)" if name == "rigid" else "10 Da"
            hint = (" or a ridge the data choose (alpha='gcv', --alpha gcv)"
                    if name == "linear" and not alignments[name].alpha_ else "")
            note(notes, f"the {name} map had {n_fit} fit rows for {pair.a.d} -> {pair.b.d} "
                        f"features; it needs about {need} ({rule}) or its held-out error is "
                        f"inflated by overfitting, so the {name} error is unreliable: give it "
                        f"more rows{hint}", UserWarning)
    return out


# ----------------------------------------------------------------------------- 5. the errors
@dataclass
class HeldOut:
    """The held-out scores: ``errors`` (``{method: mean l2 error / diam(B_eval)}``), ``sums``
    (``{map key: summed l2 error}``, the ICA restarts' and single-start maps' too),
    ``classic_keys`` (the keys of the single-start maps), ``diam_b`` (diam(B_eval), B's
    units), and the efficiency ``eff`` = (perm - ica) / ``den`` with ``den`` = perm - rigid
    and ``den_se`` its standard error over held-out samples (NaN where undefined)."""

    errors: dict
    sums: dict
    classic_keys: list
    diam_b: float
    eff: float
    den: float
    den_se: float


def heldout_errors(pair: Pair, alignments, rows: SplitRows, groups, notes, *, bootstrap=0) -> HeldOut:
    """Score every fitted map (and the ICA restarts' maps) on the held-out rows: one pass.

    Inputs: the :class:`Pair`, ``{method: fitted alignment}``, the :class:`SplitRows`, the
    groups (shape (n,) or None), the notes list; ``bootstrap`` > 0 keeps the per-row errors.
    Output: a :class:`HeldOut`; notes an undefined efficiency. Raises
    :class:`~actkit.errors.ValidationError` where B's held-out rows have zero diameter.
    """
    methods = list(alignments)
    diam_b = diameter(pair.b.diam)
    if not diam_b > 0:
        raise ValidationError("B's held-out rows are all identical (zero diameter): errors are undefined")
    maps = dict(alignments)
    classic_keys = []
    if "ica" in alignments:
        extra, classic_keys = ica_maps(alignments["ica"])
        maps.update(extra)
    eval_rows = rows.eval_rows
    sums = pair.eval_errors(maps, keep=methods if bootstrap else ())
    errors = {name: s / eval_rows.size / diam_b for name, s in sums.items() if isinstance(name, str)}
    eff = den = den_se = float("nan")
    if {"permutation", "rigid"} <= set(errors):
        den = errors["permutation"] - errors["rigid"]
        d_rows = (np.concatenate(pair.row_errors["permutation"])
                  - np.concatenate(pair.row_errors["rigid"])) / diam_b
        den_se = ratio_se(d_rows, None if groups is None else np.asarray(groups)[eval_rows])
    if "ica" in errors and np.isfinite(den):
        if den > efficiency_noise(den_se):
            eff = (errors["permutation"] - errors["ica"]) / den
        else:
            note(notes, f"ica_efficiency is undefined: permutation - rigid = {den:.2g} is not "
                        f"above noise ({efficiency_noise(den_se):.2g}: max(1e-5, 2 x its standard "
                        f"error)), so (perm - ica) / (perm - rigid) has no meaning here", UserWarning)
    return HeldOut(errors=errors, sums=sums, classic_keys=classic_keys, diam_b=diam_b, eff=eff,
                   den=den, den_se=den_se)


#: ica_efficiency is undefined (NaN) when permutation - rigid is at most this far above 0:
#: float rounding of the errors (1e-5 of the diameter) or twice its standard error over
#: the held-out input samples, whichever is larger.
EFFICIENCY_FLOOR = 1e-5


def efficiency_noise(se):
    """The noise level of ``permutation - rigid``: ``max(1e-5, 2 se)``."""
    return float(max(EFFICIENCY_FLOOR, 2.0 * se)) if np.isfinite(se) else EFFICIENCY_FLOOR


def ratio_se(d, groups):
    """Standard error of the mean of per-row values ``d`` with rows clustered in groups
    (input samples): :func:`actkit._groups.clustered_se`."""
    return clustered_se(d, groups)


# ----------------------------------------------------------------------------- 6. the ICA report
def ica_report(alignments, held: HeldOut, rows: SplitRows, pair: Pair, notes) -> dict:
    """The ICA keys of ``CompareResult.info`` from :func:`~actkit.alignment._ica_report.ica_measures`
    (the restarts' spread, the classic single fit, the identifiability check) and their notes,
    plus a note where ica falls below rigid. Output: a dict (empty without ``"ica"``)."""
    if "ica" not in alignments:
        return {}
    ica_info, ica_notes = ica_measures(
        alignments["ica"], held.sums, held.classic_keys, rows.eval_rows.size, held.diam_b,
        held.errors, held.den, bool(np.isfinite(held.eff)), pair.b.diam, pair.dtype)
    for message in ica_notes:
        note(notes, message, UserWarning)
    # beyond float noise (an exact case can put ica a hair below rigid); NaN compares False
    if held.eff > 1.05 or ica_info["ica_classic_efficiency"] > 1.05:
        note(notes, "ica is below rigid (efficiency above 100%): the ICA map is not orthogonal "
                    "(A's whitening, B's mixing), permutation and rigid are; where A and B differ "
                    "by more than a rotation (e.g. a scale per direction) the efficiency is not a "
                    "share of permutation - rigid (compare ica with linear)", UserWarning)
    return ica_info


# ----------------------------------------------------------------------------- 7. the measures
@dataclass
class Similarities:
    """The similarity columns: ``sims`` (``linear_cka``, ``linear_cka_debiased``,
    ``mean_cca``), ``rho_size`` (canonical correlations), ``chance`` (the chance levels of
    ``linear_cka`` and ``mean_cca``) and ``asked`` (``{name: value}`` of the asked measures)."""

    sims: dict
    rho_size: int
    chance: dict
    asked: dict


def similarities(request: Request, pair: Pair, alignments, *, random_state=0, max_rows=10000,
                 device="cpu", progress=None) -> Similarities:
    """CKA, debiased CKA and mean CCA from the moments of all rows (each through its measure,
    :mod:`actkit.measures`), their chance levels (the same statistics with B's input samples
    re-paired against A's: one more pass for the cross scatter, seeded by ``random_state``),
    and the asked measures (moment-based from the same moments, row-based on a seeded sample
    of at most ``max_rows`` rows on ``device``). Output: a :class:`Similarities`."""
    moments = pair_moments(pair)
    sims, rho_size = similarity_columns(moments, request.n)
    sxy_chance = chance_cross_scatter(request.A, request.B, random_state, groups=request.groups,
                                      block_rows=pair.block_rows, progress=progress)
    chance = similarity_columns(replace(moments, Sab=sxy_chance), request.n, debiased=False)[0]
    asked = evaluate_asked(request.chosen, request.A, request.B, moments, groups=request.groups,
                           max_rows=max_rows, random_state=random_state, device=device,
                           methods=alignments)
    return Similarities(sims=sims, rho_size=rho_size, chance=chance, asked=asked)


# ----------------------------------------------------------------------------- 8. the sources
def matched_sources(alignments, pair: Pair):
    """The correlations of the ICA sources on the held-out rows, from the held-out moments.

    Output: ``(matched, source_correlation)``: the matched pairs' signed correlations
    (shape (n_matched,)) and the full k_a x k_b matrix, matched pairs first on the diagonal
    (None); ``(empty, None)`` without ICA or with one held-out row.
    """
    if "ica" not in alignments or pair.eval_pm.n <= 1:
        return np.zeros(0), None
    h = alignments["ica"]
    e = pair.eval_pm
    Ua, Ub = h.unmixing_a_, h.unmixing_b_
    c = Ua @ e.scatter_xy() @ Ub.T
    sa = source_sd(Ua, e.scatter_xx())
    sb = source_sd(Ub, e.scatter_yy())
    with np.errstate(invalid="ignore"):
        corr = np.clip(c / sa[:, None] / sb[None, :], -1.0, 1.0)
    r, cc = h.pairs_[:, 0], h.pairs_[:, 1]
    matched = corr[r, cc] * h.signs_
    rest = np.setdiff1d(np.arange(corr.shape[1]), cc)
    order_a = np.concatenate([r, np.setdiff1d(np.arange(corr.shape[0]), r)])
    src_corr = corr[order_a][:, np.concatenate([cc, rest])]
    src_corr[: r.size, : r.size] *= h.signs_[None, :]
    return matched, src_corr


# ----------------------------------------------------------------------------- 9. the uncertainty
def resample(request: Request, pair: Pair, sim: Similarities, held: HeldOut, rows: SplitRows, notes,
             *, permutations=0, bootstrap=0, confidence=0.95, interval="basic", random_state=0,
             max_rows=10000, device="cpu", progress=None):
    """Permutation p-values and bootstrap intervals by input sample of every measure and
    held-out error (:func:`~actkit.alignment._uncertainty.uncertainty`), with the notes on
    too few resamples and on measures few of whose rows are exchangeable.
    Output: ``(records, info)``: ``{name: record}`` and the resampling keys of ``info``."""
    for message in resampling_notes(permutations, bootstrap, confidence):
        note(notes, message, UserWarning)
    records, info = uncertainty(
        request.A, request.B, request.groups, request.chosen, pair, {**sim.sims, **sim.asked},
        held.errors, rows.eval_rows, held.diam_b, permutations=permutations, bootstrap=bootstrap,
        confidence=confidence, interval=interval, random_state=random_state, max_rows=max_rows,
        device=device, progress=progress)
    for name, rec in records.items():
        if rec.exchangeable is not None and rec.exchangeable < 0.5:
            note(notes, f"{name}: only {rec.exchangeable:.0%} of its sampled rows are in input samples that "
                 f"another of equal length can replace: its permutation test is conservative", UserWarning)
    return records, info


# ----------------------------------------------------------------------------- 10. the result
def result_info(request: Request, rows: SplitRows, pair: Pair, alignments, rows_ok, held: HeldOut,
                ica_info, sim: Similarities, resampling_info, settings, seconds) -> dict:
    """``CompareResult.info``: the counts, the settings (``settings``: ``eval_fraction``,
    ``random_state``, ``alpha``, ``ica_max_iter``, ``ica_tol``, ``ica_restarts``, ``device``),
    the fits' facts, the ICA keys, the efficiency's denominator, the chance levels, the
    diameter, the timings (``seconds``: ``moments``, ``fit``, ``errors``, ``total``) and the
    resampling keys, then ``layer_a`` / ``layer_b`` where the sources are named layers."""
    h = alignments.get("ica")
    alpha = settings["alpha"]
    rows_per_comp = rows.ica_sample.size / max(int(h.n_components_), 1) if h is not None else None
    info = {
        "n_rows": int(request.n), "n_fit_rows": int(rows.fit_rows.size),
        "n_eval_rows": int(rows.eval_rows.size), "n_samples": int(rows.n_groups),
        "n_features_a": int(pair.a.d), "n_features_b": int(pair.b.d),
        "eval_fraction": float(settings["eval_fraction"]), "random_state": int(settings["random_state"]),
        "ridge_alpha": (float(alignments["linear"].alpha_) if "linear" in alignments
                        else (float(alpha) if not isinstance(alpha, str) else None)),
        "ridge_alpha_method": "gcv" if isinstance(alpha, str) else "fixed",
        **rows_ok,
        "ica_n_components": int(h.n_components_) if h is not None else None,
        "ica_fit_rows": int(rows.ica_sample.size) if "ica" in request.methods else None,
        "ica_rows_per_component": round(rows_per_comp, 2) if rows_per_comp is not None else None,
        "ica_max_iter": int(settings["ica_max_iter"]), "ica_tol": float(settings["ica_tol"]),
        "ica_n_iter_a": int(h.n_iter_[0]) if h is not None else None,
        "ica_n_iter_b": int(h.n_iter_[1]) if h is not None else None,
        "ica_converged": bool(h.converged_) if h is not None else None,
        "ica_restarts": int(settings["ica_restarts"]) if h is not None else None,
        **ica_info,
        "ica_identified": min(h.n_identified_) if h is not None else None,
        "ica_identified_a": h.n_identified_[0] if h is not None else None,
        "ica_identified_b": h.n_identified_[1] if h is not None else None,
        "ica_matched": int(h.pairs_.shape[0]) if h is not None else None,
        "efficiency_denominator": held.den, "efficiency_denominator_se": held.den_se,
        "efficiency_noise": efficiency_noise(held.den_se),
        "ica_device": str(settings["device"]) if h is not None else None,
        "cca_n_components": int(sim.rho_size), "rank_cut": float(rank_cut(pair.dtype)),
        "linear_cka_chance": sim.chance["linear_cka"], "mean_cca_chance": sim.chance["mean_cca"],
        "chance_window_rows": int(chance_window(pair.a.d, pair.b.d)),
        "diameter": float(held.diam_b), "diameter_method": rows.diam_method,
        "diameter_rows": int(rows.diam_rows.size),
        "compute_dtype": str(pair.dtype),
        **{f"seconds_{k}": round(v, 3) for k, v in seconds.items()},
        **resampling_info,
    }
    for key, X in (("layer_a", request.A), ("layer_b", request.B)):
        if hasattr(X, "name") and isinstance(getattr(X, "name"), str):
            info[key] = X.name
    return info


def result(request: Request, alignments, held: HeldOut, sim: Similarities, matched, records,
           info, notes, rows: SplitRows | None = None) -> CompareResult:
    """The :class:`CompareResult`: the errors, efficiency, similarity columns, matched-source
    correlations (``matched``: :func:`matched_sources`' pair), maps, ``info`` and ``notes``,
    then the asked measures' values and the resampling ``records`` attached (``rows``: the
    split, whose held-out rows the result keeps)."""
    res = CompareResult(errors=held.errors, ica_efficiency=held.eff, linear_cka=sim.sims["linear_cka"],
                        linear_cka_debiased=sim.sims["linear_cka_debiased"], mean_cca=sim.sims["mean_cca"],
                        matched_correlations=matched[0], source_correlation=matched[1],
                        alignments=alignments, info=info, notes=notes,
                        heldout_rows=None if rows is None else rows.eval_rows)
    res = finish_measures(res, request.chosen, sim.asked)
    return attach_records(res, records)


def note(notes, message, category):
    """Record a caveat in the result and warn it once (attributed to the user's line)."""
    if message not in notes:
        notes.append(message)
        warn_user(message, category)
