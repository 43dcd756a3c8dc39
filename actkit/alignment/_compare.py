"""The entry points: :func:`align` (one alignment), :func:`compare` (all four on a fit/eval
split, with the ICA efficiency, CKA, CCA and the matched-source correlations) and
:func:`compare_many` (a pairwise matrix, each representation read and ICA-fitted once)."""

from __future__ import annotations

import time
import warnings
from dataclasses import replace

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from actkit._device import check_device
from actkit._progress import heartbeat
from actkit._rows import sample_rows
from actkit._threads import follows_thread_policy
from actkit._warn import warn_user
from actkit.alignment._diameter import diameter
from actkit.alignment._ica_map import ICAAlignment, prepared_side, source_sd
from actkit.alignment._ica_report import fit_notes, ica_maps, ica_measures
from actkit.alignment._inputs import as_source, compute_dtype, default_block_rows, n_features, n_rows
from actkit.alignment._maps import (LinearAlignment, PermutationAlignment, RigidAlignment,
                                    closed_form_min_rows)
from actkit.alignment._result import MATRIX_METRICS, METHODS, CompareResult
from actkit.alignment._sides import Pair, chance_cross_scatter, chance_window
from actkit.alignment._split import groups_for, split
from actkit.alignment._uncertainty import attach_records, check_request, uncertainty
from actkit.errors import ValidationError
from actkit.inference import resampling_notes
from actkit.alignment._measures_run import (evaluate_asked, finish_measures, pair_moments,
                                             resolve_measures, similarity_columns)
from actkit.alignment._tasks import compare_many as as_tasks
from actkit.measures import available, constant_side, parse_measures, rank_cut, refuse_constant

DIAMETER_MAX_ROWS = 10000     # exact diam(B_eval) up to this many held-out rows, else sampled

_CLASSES = {"permutation": PermutationAlignment, "rigid": RigidAlignment,
            "linear": LinearAlignment, "ica": ICAAlignment}


def align(A, B, method="rigid", **params):
    """Fit one alignment mapping rows of ``A`` onto the rows of ``B`` from the same inputs.

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        Array, torch tensor, ``h5py.Dataset`` or store layer (streamed in blocks).
    B : array-like of shape (n_rows, n_features_b)
    method : {"permutation", "rigid", "linear", "ica"}, default="rigid"
    **params
        Hyperparameters of the class (``alpha`` for linear; ``n_components``,
        ``random_state``, ``max_fit_rows``, ``fun``, ``max_iter``, ``tol`` for ica).

    Returns
    -------
    alignment : PermutationAlignment, RigidAlignment, LinearAlignment or ICAAlignment
        Fitted; ``alignment.transform(A_new)`` maps new rows of A into B's space.

    Examples
    --------
    >>> import numpy as np
    >>> A = np.random.default_rng(0).normal(size=(200, 4))
    >>> h = align(A, -A[:, ::-1] + 1, method="permutation")
    >>> float(np.abs(h.transform(A) - (-A[:, ::-1] + 1)).max()) < 1e-9
    True
    """
    if method not in _CLASSES:
        raise ValidationError(f"unknown alignment method {method!r}; choose one of {', '.join(METHODS)}")
    return _CLASSES[method](**params).fit(A, B)


@follows_thread_policy
def compare(A, B, *, eval_fraction=0.2, groups=None, random_state=0, methods=METHODS,
            alpha=0.0, ica_n_components=None, ica_max_rows="auto", ica_max_iter=200,
            ica_tol=1e-4, ica_restarts=5, ica_method="best", ica_seed=0,
            diameter_max_rows=DIAMETER_MAX_ROWS, block_rows=None, measures=None, max_rows=10000,
            progress=None, device="cpu", threads=None, permutations=0, bootstrap=0,
            confidence=0.95, interval="basic", _sides=None) -> CompareResult:
    """Fit every alignment on a fit split of the rows and score it on the held-out split.

    Parameters
    ----------
    A : array-like of shape (n_rows, n_features_a)
        numpy array, torch tensor, ``h5py.Dataset`` or store layer (streamed; never loaded
        whole). Row ``i`` of A and of B must come from the same input (and token).
    B : array-like of shape (n_rows, n_features_b)
    eval_fraction : float, default=0.2
        Share of *input samples* held out for scoring.
    groups : array-like of shape (n_rows,), optional
        Input-sample id of each row: the rows of one sample never straddle the split.
        Default: the store layers' ``groups`` when A is a store layer, else one row = one
        sample.
    random_state : int, default=0
        Seed of the split and of any row sampling (not of FastICA: ``ica_seed``).
    methods : sequence of str, default all four
    alpha : float or "gcv", default=0.0
        Ridge penalty of the linear alignment; ``"gcv"``: chosen by generalised
        cross-validation on the fit rows (``to_dict()["ridge_alpha"]`` is the one used). The
        default 0 is the paper's unregularised affine least squares. With fewer fit rows than
        ``10 Da`` (linear) or ``5 max(Da, Db)`` (rigid) the map overfits: ``compare`` notes it
        (``notes``, ``<method>_fit_rows_ok`` false) and warns.
    ica_n_components : int, optional
        Forces the number of ICA components. Default: all ``min(Da, Db)`` where the FastICA
        rows support them (``ica_min_rows``), else the leading ``k'`` whitened components
        they support, with a note; the other directions are mapped as the permutation
        maps them (``to_dict()``: ``ica_n_components``, ``ica_n_components_reason``).
    ica_max_rows : int or "auto", default="auto"
        FastICA runs on at most this many random fit rows per side; ``"auto"``:
        ``max(20000, ica_min_rows(k))`` for ``k`` ICA components, at most 1 GiB of float32
        rows per side. With fewer than ``ica_min_rows(k) = max(50 k, k^2 / 4)`` rows
        FastICA's sources are unreliable (measured in docs/compare.md): ``compare`` then
        warns (``UserWarning``); ``to_dict()["ica_rows_per_component"]`` says how many it had.
    ica_max_iter, ica_tol : FastICA stopping rule.
    ica_restarts : int, default=5
        FastICA fits (random starts) per side, seeds ``ica_seed + r``.
    ica_method : {"best", "consensus"}, default="best"
        ``"best"``: each side keeps its fit of largest FastICA contrast and every source is
        matched (docs/definitions.md, "ICA alignment"); ``to_dict()``: ``ica_std`` (the
        spread of the error over all ``R x R`` pairings of starts), ``ica_shared_halves``,
        ``ica_self_floor`` and ``ica_identifiable`` (the reproducibility check, with a note
        when False). ``"consensus"``: only the sources pairs of restarts agree on are
        matched, the map is the mean of the restart-pair maps. Both report the paper's
        single fit as ``ica_classic`` / ``ica_classic_efficiency`` with their standard
        errors over the ``R`` starts. ``ica_efficiency`` is NaN (with a note) when
        permutation - rigid is not above ``max(1e-5, 2 x`` its standard error over the
        held-out input samples ``)``.
    ica_seed : int, default=0
        Seed of the first FastICA start (separate from ``random_state``, the split).
    diameter_max_rows : int or None, default=10000
        diam(B_eval) is exact up to this many eval rows, else the exact diameter of a seeded
        random subset of that size, a lower bound (recorded as ``diameter_method="sampled"``);
        None: always exact (O(n_eval^2 D) without outlying rows).
    block_rows : int, optional
        Rows per streamed block (default about 32 MiB).
    measures : sequence, optional
        More measures of :mod:`actkit.measures` (docs/measures.md), each under its name in
        ``to_dict()`` and a column of the table: names, ``"mutual_knn:k=5"`` strings or
        ``(name, params)`` pairs. Moment-based ones use every row (from the same pass),
        row-based ones a seeded sample of whole input samples of at most ``max_rows`` rows
        on ``device`` (``to_dict()``: ``<name>_rows``). ``linear_r2`` is fitted on the fit
        rows and scored on the held-out rows of this split.
    max_rows : int, default=10000
        Rows of the sample of the row-based measures.
    progress : bool, optional
        Show progress bars. Default (None): bars on a terminal, else a log line a minute on
        stderr for each pass and each long map fit (:mod:`actkit._progress`); False: none.
    device : str, default="cpu"
        Torch device of the two FastICA fits (e.g. ``"cuda"``), the only part whose cost
        grows with the square of the width per row; the moments passes, closed-form fits
        and errors run on the CPU.
    threads : int, optional
        CPU threads (BLAS, torch and actkit's own); default: ``OMP_NUM_THREADS``, else the
        CPUs this process may run on (:mod:`actkit._threads`). The result does not depend on it.
    permutations, bootstrap, confidence, interval : int, int, float, str; default 0, 0, 0.95, "basic"
        Permutation p-values and bootstrap intervals by input sample of every measure (the
        errors: bootstrap of the held-out samples, maps fixed), seeded by ``random_state``:
        ``<name>_p|_null_mean|_null_sd|_ci_low|_ci_high`` (docs/compare.md, "Uncertainty").

    Returns
    -------
    CompareResult
        Besides the errors: ``linear_cka`` and ``mean_cca`` with their chance levels
        ``linear_cka_chance`` and ``mean_cca_chance`` (the same statistic with B's input
        samples re-paired against A's, whole samples among samples of equal length, as the
        permutation p-values re-pair them; seeded by ``random_state``; docs/definitions.md,
        "Chance levels"), and ``notes``, every caveat (also in ``to_dict()["notes"]``).

    Raises
    ------
    ValueError
        Different row counts, non-finite values, different row indexes or input
        fingerprints of two store layers, or too few samples for the split.
    """
    t0 = time.perf_counter()
    A, B = as_source(A, "A"), as_source(B, "B")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValidationError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")
    if "ica" in methods:
        check_device(device)      # a bad device fails before the passes over the data
    n = n_rows(A)
    if n_rows(B) != n:
        raise ValidationError(f"A and B have different row counts ({n} and {n_rows(B)}); they "
                         f"must be activations of the same inputs, row for row")
    groups = groups_for(A, B, groups)
    chosen = resolve_measures(measures, methods, (n_features(A, "A"), n_features(B, "B")), n, max_rows)
    eval_mask, n_groups = split(n, groups, eval_fraction, random_state)
    check_request(permutations, bootstrap, confidence, interval, n_groups)
    fit_rows = np.flatnonzero(~eval_mask)
    eval_rows = np.flatnonzero(eval_mask)
    ica = ICAAlignment(n_components=ica_n_components, random_state=ica_seed,
                       max_rows=ica_max_rows, max_iter=ica_max_iter, tol=ica_tol,
                       device=device, restarts=ica_restarts, ica_method=ica_method)
    k_ica = min(n_features(A, "A"), n_features(B, "B"))
    ica_sample = (ica.sample_rows_for(n, fit_rows, k=k_ica, seed=random_state) if "ica" in methods
                   else np.zeros(0, np.int64))
    if diameter_max_rows is not None and eval_rows.size > diameter_max_rows:
        diam_rows = sample_rows(eval_rows, diameter_max_rows, random_state + 1)
        diam_method = "sampled"
    else:
        diam_rows, diam_method = eval_rows, "exact"
    side_a, side_b = _sides if _sides is not None else (None, None)
    pair = Pair(A, B, eval_mask=eval_mask, sample_rows=ica_sample, block_rows=block_rows,
                 progress=progress, diam_rows=diam_rows, side_a=side_a, side_b=side_b)
    pair.fit_moments()
    refuse_constant(constant_side(pair_moments(pair)), "the comparison")  # before any fit
    t_moments = time.perf_counter()

    alignments = {}
    notes = []                  # the caveats of this result (CompareResult.notes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in methods:
            h = ica if name == "ica" else (LinearAlignment(alpha=alpha) if name == "linear"
                                           else _CLASSES[name]())
            with heartbeat(f"compare: fitting the {name} map", progress):
                alignments[name] = h.fit_pair(pair)
    t_fit = time.perf_counter()
    rows_per_comp = None
    if "ica" in alignments:
        k_used = int(alignments["ica"].n_components_)
        rows_per_comp = ica_sample.size / max(k_used, 1)
        if not alignments["ica"].converged_:
            # one note (and one warning) for both sides' FastICA ConvergenceWarnings
            _note(notes, f"FastICA did not converge within {ica_max_iter} iterations on at least "
                         f"one side; the ica error is not that of converged sources",
                  ConvergenceWarning)
        for message in fit_notes(alignments["ica"], ica_sample.size, k_ica):
            _note(notes, message, UserWarning)
    for w in caught:
        if not issubclass(w.category, ConvergenceWarning):
            _note(notes, str(w.message), w.category)
    rows_ok = _closed_form_rows(alignments, pair, notes)

    diam_b = diameter(pair.b.diam)
    if not diam_b > 0:
        raise ValidationError("B's held-out rows are all identical (zero diameter): errors are undefined")
    maps = dict(alignments)
    classic_keys = []
    if "ica" in alignments:
        extra, classic_keys = ica_maps(alignments["ica"])
        maps.update(extra)
    sums = pair.eval_errors(maps, keep=methods if bootstrap else ())
    errors = {name: s / eval_rows.size / diam_b for name, s in sums.items()
              if isinstance(name, str)}

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
            _note(notes, f"ica_efficiency is undefined: permutation - rigid = {den:.2g} is not "
                         f"above noise ({efficiency_noise(den_se):.2g}: max(1e-5, 2 x its standard "
                         f"error)), so (perm - ica) / (perm - rigid) has no meaning here",
                  UserWarning)
    ica_info = {}
    if "ica" in alignments:
        ica_info, ica_notes = ica_measures(
            alignments["ica"], sums, classic_keys, eval_rows.size, diam_b, errors, den,
            bool(np.isfinite(eff)), pair.b.diam, pair.dtype)
        for message in ica_notes:
            _note(notes, message, UserWarning)
        # beyond float noise (an exact case can put ica a hair below rigid); NaN compares False
        if eff > 1.05 or ica_info["ica_classic_efficiency"] > 1.05:
            _note(notes, "ica is below rigid (efficiency above 100%): the ICA map is not orthogonal "
                         "(A's whitening, B's mixing), permutation and rigid are; where A and B differ "
                         "by more than a rotation (e.g. a scale per direction) the efficiency is not a "
                         "share of permutation - rigid (compare ica with linear)", UserWarning)
    t_err = time.perf_counter()

    # the similarity statistics and their chance levels, each through its measure
    # (actkit.measures) from the moments of all rows; the chance levels swap only Sab
    moments = pair_moments(pair)
    sims, rho_size = similarity_columns(moments, n)
    sxy_chance = chance_cross_scatter(A, B, random_state, groups=groups, block_rows=pair.block_rows,
                                      progress=progress)
    chance = similarity_columns(replace(moments, Sab=sxy_chance), n, debiased=False)[0]
    asked = evaluate_asked(chosen, A, B, moments, groups=groups, max_rows=max_rows,
                           random_state=random_state, device=device, methods=alignments)

    matched = np.zeros(0)
    src_corr = None
    if "ica" in alignments and pair.eval_pm.n > 1:
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
    for message in resampling_notes(permutations, bootstrap, confidence):
        _note(notes, message, UserWarning)
    records, resampling_info = uncertainty(
        A, B, groups, chosen, pair, {**sims, **asked}, errors, eval_rows, diam_b,
        permutations=permutations, bootstrap=bootstrap, confidence=confidence,
        interval=interval, random_state=random_state, max_rows=max_rows, device=device, progress=progress)
    for name, rec in records.items():
        if rec.exchangeable is not None and rec.exchangeable < 0.5:
            _note(notes, f"{name}: only {rec.exchangeable:.0%} of its sampled rows are in input samples that "
                  f"another of equal length can replace: its permutation test is conservative", UserWarning)
    t_end = time.perf_counter()

    info = {
        "n_rows": int(n), "n_fit_rows": int(fit_rows.size), "n_eval_rows": int(eval_rows.size),
        "n_samples": int(n_groups), "n_features_a": int(pair.a.d), "n_features_b": int(pair.b.d),
        "eval_fraction": float(eval_fraction), "random_state": int(random_state),
        "ridge_alpha": (float(alignments["linear"].alpha_) if "linear" in alignments
                        else (float(alpha) if not isinstance(alpha, str) else None)),
        "ridge_alpha_method": "gcv" if isinstance(alpha, str) else "fixed",
        **rows_ok,
        "ica_n_components": int(alignments["ica"].n_components_) if "ica" in alignments else None,
        "ica_fit_rows": int(ica_sample.size) if "ica" in methods else None,
        "ica_rows_per_component": (round(rows_per_comp, 2) if rows_per_comp is not None
                                   else None),
        "ica_max_iter": int(ica_max_iter), "ica_tol": float(ica_tol),
        "ica_n_iter_a": int(alignments["ica"].n_iter_[0]) if "ica" in alignments else None,
        "ica_n_iter_b": int(alignments["ica"].n_iter_[1]) if "ica" in alignments else None,
        "ica_converged": bool(alignments["ica"].converged_) if "ica" in alignments else None,
        "ica_restarts": int(ica_restarts) if "ica" in alignments else None,
        **ica_info,
        "ica_identified": (min(alignments["ica"].n_identified_) if "ica" in alignments
                           else None),
        "ica_identified_a": alignments["ica"].n_identified_[0] if "ica" in alignments else None,
        "ica_identified_b": alignments["ica"].n_identified_[1] if "ica" in alignments else None,
        "ica_matched": int(alignments["ica"].pairs_.shape[0]) if "ica" in alignments else None,
        "efficiency_denominator": den, "efficiency_denominator_se": den_se,
        "efficiency_noise": efficiency_noise(den_se),
        "ica_device": str(device) if "ica" in alignments else None,
        "cca_n_components": int(rho_size), "rank_cut": float(rank_cut(pair.dtype)),
        "linear_cka_chance": chance["linear_cka"], "mean_cca_chance": chance["mean_cca"],
        "chance_window_rows": int(chance_window(pair.a.d, pair.b.d)),
        "diameter": float(diam_b), "diameter_method": diam_method,
        "diameter_rows": int(diam_rows.size),
        "compute_dtype": str(pair.dtype),
        "seconds_moments": round(t_moments - t0, 3), "seconds_fit": round(t_fit - t_moments, 3),
        "seconds_errors": round(t_err - t_fit, 3), "seconds_total": round(t_end - t0, 3),
        **resampling_info,
    }
    for key, X in (("layer_a", A), ("layer_b", B)):
        if hasattr(X, "name") and isinstance(getattr(X, "name"), str):
            info[key] = X.name
    res = CompareResult(errors=errors, ica_efficiency=eff, linear_cka=sims["linear_cka"],
                        linear_cka_debiased=sims["linear_cka_debiased"], mean_cca=sims["mean_cca"],
                        matched_correlations=matched, source_correlation=src_corr,
                        alignments=alignments, info=info, notes=notes)
    res = finish_measures(res, chosen, asked)
    return attach_records(res, records)


def _closed_form_rows(alignments, pair, notes):
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
            _note(notes, f"the {name} map had {n_fit} fit rows for {pair.a.d} -> {pair.b.d} "
                         f"features; it needs about {need} ({rule}) or its held-out error is "
                         f"inflated by overfitting, so the {name} error is unreliable: give it "
                         f"more rows{hint}", UserWarning)
    return out


#: ica_efficiency is undefined (NaN) when permutation - rigid is at most this far above 0:
#: float rounding of the errors (1e-5 of the diameter) or twice its standard error over
#: the held-out input samples, whichever is larger.
EFFICIENCY_FLOOR = 1e-5


def efficiency_noise(se):
    """The noise level of ``permutation - rigid``: ``max(1e-5, 2 se)``."""
    return float(max(EFFICIENCY_FLOOR, 2.0 * se)) if np.isfinite(se) else EFFICIENCY_FLOOR


def ratio_se(d, groups):
    """Standard error of the mean of per-row values ``d`` with rows clustered in groups
    (input samples): ``sqrt(G / (G - 1) sum_g (t_g - mean n_g)^2) / n``."""
    n = d.size
    if n < 2:
        return float("nan")
    if groups is None:
        return float(d.std(ddof=1) / np.sqrt(n))
    _, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    G = counts.size
    if G < 2:
        return float("nan")
    t = np.bincount(inv.ravel(), weights=d)
    return float(np.sqrt(G / (G - 1) * np.sum((t - d.mean() * counts) ** 2)) / n)


def _note(notes, message, category):
    """Record a caveat in the result and warn it once (``stacklevel``: compare's caller)."""
    if message not in notes:
        notes.append(message)
        warn_user(message, category)


def compare_many(sources, *, labels=None, metric="rigid", progress=None, scheduler=None, **kwargs):
    """Compare every pair of several representations of the same inputs.

    Each representation is read for its own moments, whitened and ICA-fitted **once** and
    reused in every pair; each pair then costs one pass for cross moments and one over the
    held-out rows. The split (by sample) is the same for every pair.

    Parameters
    ----------
    sources : list of array-like, each of shape (n_rows, n_features_k)
    labels : list of str, optional
    metric : str, default="rigid"
        Any measure of :func:`actkit.measures.available` (docs/measures.md), or one of the
        values of :meth:`CompareResult.to_dict`: a method error
        (``"permutation"``, ``"rigid"``, ``"linear"``, ``"ica"``), ``"ica_efficiency"``,
        ``"linear_cka"``, ``"linear_cka_debiased"``, ``"mean_cca"``,
        ``"ica_matched_corr_mean"`` / ``_median`` / ``_min`` or ``"diameter"``; the matrix
        holds it for (row -> column). An unknown name fails before any pass over the data.
    scheduler : None, str or distributed.Client, optional
        Dask (``docs/dask.md``): each representation's statistics (moments, diameter rows
        and the FastICA fits the pairs need) are computed once, one task per
        representation, and the K^2 pairs are spread over the workers, each task opening
        the stores itself. ``"local:N"``, an address or a ``Client``; the sources must then
        be store layers, h5py datasets or arrays.
    **kwargs
        Passed to :func:`compare`.

    Returns
    -------
    matrix : ndarray of shape (K, K)
        ``matrix[i, j]`` = ``metric`` of ``compare(sources[i], sources[j])``; the diagonal
        is the self-comparison's value.
    results : dict of (i, j) -> CompareResult
    """
    if metric not in MATRIX_METRICS:
        names, spec = available(), metric
        metric = metric.partition(":")[0]           # "mutual_knn:k=5": the key is its name
        if metric not in names:
            raise ValidationError(f"unknown metric {metric!r}; use one of "
                                  f"{', '.join(dict.fromkeys([*MATRIX_METRICS, *names]))}")
        asked = list(kwargs.get("measures") or [])
        kwargs["measures"] = asked + [spec] if metric not in _measure_names(asked) else asked
    # one task list (a side each, then every ordered pair) for the runner the scheduler names
    setup = many_setup(list(sources), kwargs)
    return as_tasks(setup, [n_features(X, "X") for X in setup[0]], compare_fn=compare, side_fn=prepared_side,
                    metric=metric, progress=progress, scheduler=scheduler, **kwargs)


def _measure_names(asked):
    return [m.name for m, _ in parse_measures(asked)]


def many_setup(sources, kwargs):
    """What every pair of :func:`compare_many` shares: the checked sources, the groups, the
    eval mask, the ICA sample rows, the diameter rows, the compute dtype and the block size
    (``kwargs`` loses ``groups``)."""
    K = len(sources)
    if K < 2:
        raise ValidationError("compare_many needs at least two representations")
    sources = [as_source(X, f"source {i}") for i, X in enumerate(sources)]
    n = n_rows(sources[0])
    for i, X in enumerate(sources):
        if n_rows(X) != n:
            raise ValidationError(f"representation {i} has {n_rows(X)} rows, the first has {n}")
        groups_for(sources[0], X, None)
    groups = groups_for(sources[0], sources[1], kwargs.pop("groups", None))
    eval_fraction = kwargs.get("eval_fraction", 0.2)
    random_state = kwargs.get("random_state", 0)
    eval_mask, _ = split(n, groups, eval_fraction, random_state)
    eval_rows = np.flatnonzero(eval_mask)
    ica = ICAAlignment(n_components=kwargs.get("ica_n_components"), random_state=random_state,
                       max_rows=kwargs.get("ica_max_rows", "auto"))
    widths = sorted(n_features(X, "X") for X in sources)
    ica_sample = ica.sample_rows_for(n, np.flatnonzero(~eval_mask), k=widths[-2])
    dmax = kwargs.get("diameter_max_rows", DIAMETER_MAX_ROWS)
    if dmax is not None and eval_rows.size > dmax:
        diam_rows = sample_rows(eval_rows, dmax, random_state + 1)
    else:
        diam_rows = eval_rows
    dtype = compute_dtype(*sources)
    br = kwargs.get("block_rows") or default_block_rows(max(n_features(X, "X") for X in sources))
    return sources, groups, eval_mask, ica_sample, diam_rows, dtype, br


