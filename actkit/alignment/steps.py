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

Each step is a function of what its docstring names and returns a value (a dataclass where
it has several parts); no step changes what it was given (a :class:`Pair` or its sides are
complete once :func:`moment_pass` returns them). A step with caveats returns them as
``notes``, ``(message, category)`` pairs; :func:`compare` gathers them in step order and
warns each once (:func:`warn_notes`), attributed to the user's line
(``CompareResult.notes`` holds the messages).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from actkit._device import check_device
from actkit._groups import check_same_rows, clustered_se
from actkit._progress import heartbeat
from actkit._rows import sample_rows
from actkit._warn import warn_user
from actkit.alignment._diameter import diameter
from actkit.alignment._ica_map import source_moments, source_sd
from actkit.alignment._ica_report import fit_notes, ica_maps, ica_measures
from actkit.alignment._inputs import as_source, n_features, n_rows
from actkit.alignment._maps import LinearAlignment, PermutationAlignment, RigidAlignment, closed_form_rows
from actkit.alignment._measures_run import (evaluate_asked, finish_measures, pair_moments,
                                             resolve_measures, similarity_columns)
from actkit.alignment._result import METHODS, CompareResult
from actkit.alignment._sides import Pair, chance_cross_scatter, chance_window
from actkit.alignment._split import groups_for, split
from actkit.alignment._uncertainty import attach_records, uncertainty
from actkit.errors import ValidationError
from actkit.inference import resampling_notes
from actkit.measures import constant_side, rank_cut, refuse_constant

__all__ = ["Request", "SplitRows", "Maps", "HeldOut", "ICAReport", "Similarities", "Sources", "Resampled",
           "Settings", "Timings", "resolve_request", "split_by_sample", "moment_pass", "fit_maps", "heldout_errors",
           "ica_report", "similarities", "matched_sources", "resample", "result_info", "result", "warn_notes",
           "efficiency_noise", "EFFICIENCY_FLOOR"]

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
    :func:`~actkit.alignment._ica_map.prepared_side` pair of :func:`compare_many`, or None);
    the sides carry ``request.groups`` (FastICA's Gaussian check tests by input sample).

    Output: the :class:`~actkit.alignment._sides.Pair`, moments filled. Raises
    :class:`~actkit.errors.ValidationError` where a side is constant (before any fit).
    """
    side_a, side_b = sides if sides is not None else (None, None)
    pair = Pair(request.A, request.B, eval_mask=rows.eval_mask, sample_rows=rows.ica_sample,
                block_rows=block_rows, progress=progress, diam_rows=rows.diam_rows,
                side_a=side_a, side_b=side_b, groups=request.groups).fit_moments()
    refuse_constant(constant_side(pair_moments(pair)), "the comparison")  # before any fit
    return pair


# ----------------------------------------------------------------------------- 4. the maps
@dataclass
class Maps:
    """The fitted maps: ``alignments`` (``{method: fitted alignment}``), ``rows_ok`` (the keys
    ``<method>_min_fit_rows`` / ``<method>_fit_rows_ok`` of rigid and linear) and ``notes``
    (``[(message, category)]``)."""

    alignments: dict
    rows_ok: dict
    notes: list


def fit_maps(pair: Pair, methods, ica, *, alpha=0.0, n_ica_rows=0, k_ica=None, ica_max_iter=200,
             progress=None) -> Maps:
    """Fit each of ``methods`` on the fit rows of ``pair`` (``ica``: the unfitted
    :class:`~actkit.alignment.ICAAlignment`, not changed: a fitted copy is returned;
    ``alpha``: the linear map's ridge).

    Output: :class:`Maps`, whose notes are FastICA's non-convergence (once for both sides),
    the notes of the ICA fit (``n_ica_rows`` FastICA rows, ``k_ica`` the widest ICA), every
    other warning the fits raised (caught here), and each closed-form map short of fit rows.
    """
    alignments, notes = {}, []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in methods:
            h = clone(ica) if name == "ica" else (LinearAlignment(alpha=alpha) if name == "linear"
                                                  else _CLOSED_FORM[name]())
            with heartbeat(f"compare: fitting the {name} map", progress):
                alignments[name] = h.fit_pair(pair)
    if "ica" in alignments:
        if not alignments["ica"].converged_:
            # one note (and one warning) for both sides' FastICA ConvergenceWarnings
            notes.append((f"FastICA did not converge within {ica_max_iter} iterations on at least one side; "
                          f"the ica error is not that of converged sources", ConvergenceWarning))
        notes += [(message, UserWarning) for message in fit_notes(alignments["ica"], n_ica_rows, k_ica)]
    notes += [(str(w.message), w.category) for w in caught if not issubclass(w.category, ConvergenceWarning)]
    rows_ok, short = closed_form_rows(alignments, pair)
    return Maps(alignments=alignments, rows_ok=rows_ok, notes=notes + short)


# ----------------------------------------------------------------------------- 5. the errors
@dataclass
class HeldOut:
    """The held-out scores: ``errors`` (``{method: mean l2 error / diam(B_eval)}``), ``sums``
    (``{map key: summed l2 error}``, the ICA restarts' and single-start maps' too),
    ``classic_keys`` (the keys of the single-start maps), ``diam_b`` (diam(B_eval), B's
    units), the efficiency ``eff`` = (perm - ica) / ``den`` with ``den`` = perm - rigid
    and ``den_se`` its standard error over held-out samples (NaN where undefined),
    ``row_errors`` (``{method: per-row l2 error, shape (n_eval,)}`` of permutation, rigid and,
    with the bootstrap, every method) and ``notes``."""

    errors: dict
    sums: dict
    classic_keys: list
    diam_b: float
    eff: float
    den: float
    den_se: float
    row_errors: dict
    notes: list


def heldout_errors(pair: Pair, alignments, rows: SplitRows, groups, *, bootstrap=0) -> HeldOut:
    """Score every fitted map (and the ICA restarts' maps) on the held-out rows: one pass.

    Inputs: the :class:`Pair`, ``{method: fitted alignment}`` (:attr:`Maps.alignments`), the
    :class:`SplitRows`, the groups (shape (n,) or None); ``bootstrap`` > 0 keeps every
    method's per-row errors. Output: a :class:`HeldOut` (its notes: an undefined efficiency).
    Raises :class:`~actkit.errors.ValidationError` where B's held-out rows have zero diameter.
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
    sums, row_errors = pair.eval_errors(maps, keep=methods if bootstrap else ())
    errors = {name: s / eval_rows.size / diam_b for name, s in sums.items() if isinstance(name, str)}
    eff = den = den_se = float("nan")
    notes = []
    if {"permutation", "rigid"} <= set(errors):
        den = errors["permutation"] - errors["rigid"]
        d_rows = (row_errors["permutation"] - row_errors["rigid"]) / diam_b
        den_se = clustered_se(d_rows, None if groups is None else np.asarray(groups)[eval_rows])
    if "ica" in errors and np.isfinite(den):
        if den > efficiency_noise(den_se):
            eff = (errors["permutation"] - errors["ica"]) / den
        else:
            notes.append((f"ica_efficiency is undefined: permutation - rigid = {den:.2g} is not above noise "
                          f"({efficiency_noise(den_se):.2g}: max(1e-5, 2 x its standard error)), so (perm - ica) / "
                          f"(perm - rigid) has no meaning here", UserWarning))
    return HeldOut(errors=errors, sums=sums, classic_keys=classic_keys, diam_b=diam_b, eff=eff,
                   den=den, den_se=den_se, row_errors=row_errors, notes=notes)


#: ica_efficiency is undefined (NaN) when permutation - rigid is at most this far above 0:
#: float rounding of the errors (1e-5 of the diameter) or twice its standard error over
#: the held-out input samples, whichever is larger.
EFFICIENCY_FLOOR = 1e-5


def efficiency_noise(se):
    """The noise level of ``permutation - rigid``: ``max(1e-5, 2 se)``."""
    return float(max(EFFICIENCY_FLOOR, 2.0 * se)) if np.isfinite(se) else EFFICIENCY_FLOOR


# ----------------------------------------------------------------------------- 6. the ICA report
@dataclass
class ICAReport:
    """The ICA keys of ``CompareResult.info`` (``info``, empty without ICA) and their ``notes``."""

    info: dict
    notes: list


def ica_report(alignments, held: HeldOut, rows: SplitRows, pair: Pair) -> ICAReport:
    """The ICA keys of ``CompareResult.info`` from :func:`~actkit.alignment._ica_report.ica_measures`
    (the restarts' spread, the classic single fit, the identifiability check) and their notes,
    plus a note where ica falls below rigid; from the fitted maps (:attr:`Maps.alignments`),
    the :class:`HeldOut` scores, the :class:`SplitRows` and the :class:`Pair`."""
    if "ica" not in alignments:
        return ICAReport(info={}, notes=[])
    ica_info, ica_notes = ica_measures(
        alignments["ica"], held.sums, held.classic_keys, rows.eval_rows.size, held.diam_b,
        held.errors, held.den, bool(np.isfinite(held.eff)), pair.b.diam, pair.dtype)
    notes = [(message, UserWarning) for message in ica_notes]
    # beyond float noise (an exact case can put ica a hair below rigid); NaN compares False
    if held.eff > 1.05 or ica_info["ica_classic_efficiency"] > 1.05:
        notes.append(("ica is below rigid (efficiency above 100%): the ICA map is not orthogonal (A's whitening, "
                      "B's mixing), permutation and rigid are; where A and B differ by more than a rotation (e.g. a "
                      "scale per direction) the efficiency is not a share of permutation - rigid (compare ica with "
                      "linear)", UserWarning))
    return ICAReport(info=ica_info, notes=notes)


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
@dataclass
class Sources:
    """The ICA sources on the held-out rows: ``matched`` (the matched pairs' signed
    correlations, shape (n_matched,)) and ``correlation`` (the full k_a x k_b matrix, matched
    pairs first on the diagonal; None without ICA or with one held-out row)."""

    matched: np.ndarray
    correlation: np.ndarray | None


def matched_sources(alignments, pair: Pair) -> Sources:
    """The correlations of the ICA sources of the fitted maps (:attr:`Maps.alignments`) on the
    held-out rows of the :class:`Pair`, from its held-out moments. Output: :class:`Sources`."""
    if "ica" not in alignments or pair.eval_pm.n <= 1:
        return Sources(matched=np.zeros(0), correlation=None)
    h = alignments["ica"]
    e = pair.eval_pm
    Ua, Ub = h.unmixing_a_, h.unmixing_b_
    sa = source_sd(Ua, e.scatter_xx())      # NaN: a source that does not vary beyond rounding
    sb = source_sd(Ub, e.scatter_yy())
    with np.errstate(invalid="ignore"):
        corr = source_moments(e, Ua, Ub).correlation()
        corr = np.clip(np.where(np.isnan(sa)[:, None] | np.isnan(sb)[None, :], np.nan, corr), -1.0, 1.0)
    r, cc = h.pairs_[:, 0], h.pairs_[:, 1]
    matched = corr[r, cc] * h.signs_
    rest = np.setdiff1d(np.arange(corr.shape[1]), cc)
    order_a = np.concatenate([r, np.setdiff1d(np.arange(corr.shape[0]), r)])
    src_corr = corr[order_a][:, np.concatenate([cc, rest])]
    src_corr[: r.size, : r.size] *= h.signs_[None, :]
    return Sources(matched=matched, correlation=src_corr)


# ----------------------------------------------------------------------------- 9. the uncertainty
@dataclass
class Resampled:
    """The resampling: ``records`` (``{name: MeasureRecord}``), ``info`` (its keys of
    ``CompareResult.info``; empty without resampling) and ``notes``."""

    records: dict
    info: dict
    notes: list


def resample(request: Request, pair: Pair, sim: Similarities, held: HeldOut, rows: SplitRows, *, permutations=0,
             bootstrap=0, confidence=0.95, interval="basic", random_state=0, max_rows=10000, device="cpu",
             progress=None) -> Resampled:
    """Permutation p-values and bootstrap intervals by input sample of every measure (the
    :class:`Similarities`, on the rows of the :class:`Request`; the :class:`Pair` gives the
    compute dtype and block size) and held-out error (:attr:`HeldOut.row_errors` over the
    held-out samples of the :class:`SplitRows`): :func:`~actkit.alignment._uncertainty.uncertainty`,
    with the notes on too few resamples and on measures few of whose rows are exchangeable."""
    notes = [(message, UserWarning) for message in resampling_notes(permutations, bootstrap, confidence)]
    records, info = uncertainty(
        request.A, request.B, request.groups, request.chosen, pair, {**sim.sims, **sim.asked},
        held.errors, held.row_errors, rows.eval_rows, held.diam_b, permutations=permutations, bootstrap=bootstrap,
        confidence=confidence, interval=interval, random_state=random_state, max_rows=max_rows,
        device=device, progress=progress)
    for name, rec in records.items():
        if rec.exchangeable is not None and rec.exchangeable < 0.5:
            notes.append((f"{name}: only {rec.exchangeable:.0%} of its sampled rows are in input samples that another "
                          f"of equal length can replace: its permutation test is conservative", UserWarning))
    return Resampled(records=records, info=info, notes=notes)


# ----------------------------------------------------------------------------- 10. the result
@dataclass
class Settings:
    """The arguments of :func:`compare` that ``CompareResult.info`` records."""

    eval_fraction: float
    random_state: int
    alpha: object
    ica_max_iter: int
    ica_tol: float
    ica_restarts: int
    device: str


@dataclass
class Timings:
    """Seconds of :func:`compare`'s parts (``info``'s ``seconds_*``)."""

    moments: float
    fit: float
    errors: float
    total: float


def result_info(request: Request, rows: SplitRows, pair: Pair, maps: Maps, held: HeldOut, ica: ICAReport,
                sim: Similarities, resampled: Resampled, settings: Settings, timings: Timings) -> dict:
    """``CompareResult.info``: the counts, the :class:`Settings`, the fits' facts, the ICA keys,
    the efficiency's denominator, the chance levels, the diameter, the :class:`Timings` and the
    resampling keys, then ``layer_a`` / ``layer_b`` where the sources are named layers."""
    h = maps.alignments.get("ica")
    rows_per_comp = rows.ica_sample.size / max(int(h.n_components_), 1) if h is not None else None
    info = {
        "n_rows": int(request.n), "n_fit_rows": int(rows.fit_rows.size),
        "n_eval_rows": int(rows.eval_rows.size), "n_samples": int(rows.n_groups),
        "n_features_a": int(pair.a.d), "n_features_b": int(pair.b.d),
        "eval_fraction": float(settings.eval_fraction), "random_state": int(settings.random_state),
        "ridge_alpha": (float(maps.alignments["linear"].alpha_) if "linear" in maps.alignments
                        else (float(settings.alpha) if not isinstance(settings.alpha, str) else None)),
        "ridge_alpha_method": "gcv" if isinstance(settings.alpha, str) else "fixed",
        **maps.rows_ok,
        "ica_n_components": int(h.n_components_) if h is not None else None,
        "ica_fit_rows": int(rows.ica_sample.size) if "ica" in request.methods else None,
        "ica_rows_per_component": round(rows_per_comp, 2) if rows_per_comp is not None else None,
        "ica_max_iter": int(settings.ica_max_iter), "ica_tol": float(settings.ica_tol),
        "ica_n_iter_a": int(h.n_iter_[0]) if h is not None else None,
        "ica_n_iter_b": int(h.n_iter_[1]) if h is not None else None,
        "ica_converged": bool(h.converged_) if h is not None else None,
        "ica_restarts": int(settings.ica_restarts) if h is not None else None,
        **ica.info,
        "ica_identified": min(h.n_identified_) if h is not None else None,
        "ica_identified_a": h.n_identified_[0] if h is not None else None,
        "ica_identified_b": h.n_identified_[1] if h is not None else None,
        "ica_matched": int(h.pairs_.shape[0]) if h is not None else None,
        "efficiency_denominator": held.den, "efficiency_denominator_se": held.den_se,
        "efficiency_noise": efficiency_noise(held.den_se),
        "ica_device": str(settings.device) if h is not None else None,
        "cca_n_components": int(sim.rho_size), "rank_cut": float(rank_cut(pair.dtype)),
        "linear_cka_chance": sim.chance["linear_cka"], "mean_cca_chance": sim.chance["mean_cca"],
        "chance_window_rows": int(chance_window(pair.a.d, pair.b.d)),
        "diameter": float(held.diam_b), "diameter_method": rows.diam_method,
        "diameter_rows": int(rows.diam_rows.size),
        "compute_dtype": str(pair.dtype),
        **{f"seconds_{k}": round(v, 3) for k, v in vars(timings).items()},
        **resampled.info,
    }
    for key, X in (("layer_a", request.A), ("layer_b", request.B)):
        if hasattr(X, "name") and isinstance(getattr(X, "name"), str):
            info[key] = X.name
    return info


def result(request: Request, maps: Maps, held: HeldOut, sim: Similarities, sources: Sources, resampled: Resampled,
           info, notes, rows: SplitRows) -> CompareResult:
    """The :class:`CompareResult`: the errors, efficiency, similarity columns, matched-source
    correlations (:class:`Sources`), maps, ``info`` (:func:`result_info`) and ``notes`` (the
    messages :func:`warn_notes` returned), then the asked measures' values and the resampling
    records attached; it keeps the held-out rows of the :class:`SplitRows`."""
    res = CompareResult(errors=held.errors, ica_efficiency=held.eff, linear_cka=sim.sims["linear_cka"],
                        linear_cka_debiased=sim.sims["linear_cka_debiased"], mean_cca=sim.sims["mean_cca"],
                        matched_correlations=sources.matched, source_correlation=sources.correlation,
                        alignments=maps.alignments, info=info, notes=list(notes), heldout_rows=rows.eval_rows)
    res = finish_measures(res, request.chosen, sim.asked)
    return attach_records(res, resampled.records)


def warn_notes(*steps) -> list:
    """The notes of ``steps`` (each a step's value with ``notes``: ``[(message, category)]``)
    in step order, each message once, each warned once (attributed to the user's line);
    returns the messages (``CompareResult.notes``)."""
    out = []
    for step in steps:
        for message, category in step.notes:
            if message not in out:
                out.append(message)
                warn_user(message, category)
    return out
