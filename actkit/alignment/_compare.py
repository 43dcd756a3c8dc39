"""The entry points: :func:`align` (one alignment), :func:`compare` (all four on a fit/eval
split, with the ICA efficiency, CKA, CCA and the matched-source correlations) and
:func:`compare_many` (a pairwise matrix, each representation read and ICA-fitted once)."""

from __future__ import annotations

import time

import numpy as np

from actkit._groups import check_same_rows
from actkit._rows import sample_rows
from actkit._threads import follows_thread_policy
from actkit.alignment.steps import (Settings, Timings, fit_maps, heldout_errors, ica_report, matched_sources,
                                    moment_pass, resample, resolve_request, result, result_info, similarities,
                                    split_by_sample, warn_notes)
from actkit.alignment._ica_map import ICAAlignment, prepared_side
from actkit.alignment._inputs import as_source, compute_dtype, default_block_rows, n_features, n_rows
from actkit.alignment._maps import LinearAlignment, PermutationAlignment, RigidAlignment
from actkit.alignment._measures_run import methods_needed
from actkit.alignment._result import MATRIX_METRICS, METHODS, CompareResult
from actkit.alignment._split import groups_for, split
from actkit.alignment._tasks import compare_many as as_tasks
from actkit.alignment._uncertainty import check_request
from actkit.errors import ValidationError
from actkit.measures import available, parse_measures

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
    request = resolve_request(A, B, methods=methods, device=device, groups=groups,
                              measures=measures, max_rows=max_rows)
    ica = ICAAlignment(n_components=ica_n_components, random_state=ica_seed,
                       max_rows=ica_max_rows, max_iter=ica_max_iter, tol=ica_tol,
                       device=device, restarts=ica_restarts, ica_method=ica_method)
    rows = split_by_sample(request, ica, eval_fraction=eval_fraction, random_state=random_state,
                           diameter_max_rows=diameter_max_rows)
    check_request(permutations, bootstrap, confidence, interval, rows.n_groups)
    pair = moment_pass(request, rows, block_rows=block_rows, progress=progress, sides=_sides)
    t_moments = time.perf_counter()
    maps = fit_maps(pair, methods, ica, alpha=alpha, n_ica_rows=rows.ica_sample.size, k_ica=rows.k_ica,
                    ica_max_iter=ica_max_iter, progress=progress)
    t_fit = time.perf_counter()
    held = heldout_errors(pair, maps.alignments, rows, request.groups, bootstrap=bootstrap)
    ica_rep = ica_report(maps.alignments, held, rows, pair)
    t_err = time.perf_counter()
    sim = similarities(request, pair, maps.alignments, random_state=random_state, max_rows=max_rows,
                       device=device, progress=progress)
    sources = matched_sources(maps.alignments, pair)
    resampled = resample(request, pair, sim, held, rows, permutations=permutations, bootstrap=bootstrap,
                         confidence=confidence, interval=interval, random_state=random_state, max_rows=max_rows,
                         device=device, progress=progress)
    t_end = time.perf_counter()
    notes = warn_notes(maps, held, ica_rep, resampled)       # every caveat, once, in step order
    settings = Settings(eval_fraction=eval_fraction, random_state=random_state, alpha=alpha, ica_max_iter=ica_max_iter,
                        ica_tol=ica_tol, ica_restarts=ica_restarts, device=device)
    timings = Timings(moments=t_moments - t0, fit=t_fit - t_moments, errors=t_err - t_fit, total=t_end - t0)
    info = result_info(request, rows, pair, maps, held, ica_rep, sim, resampled, settings, timings)
    return result(request, maps, held, sim, sources, resampled, info, notes, rows)


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
        Passed to :func:`compare`. Without ``methods``, only the alignments ``metric`` needs
        are fitted (:func:`~actkit.alignment._measures_run.methods_needed`: none for a
        similarity, so no FastICA for ``"rigid"`` or ``"linear_cka"``); ``methods`` that
        leave a needed one out are refused in one line.

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
    kwargs["methods"] = metric_methods(metric, kwargs.get("methods"))
    # one task list (a side each, then every ordered pair) for the runner the scheduler names
    setup = many_setup(list(sources), kwargs)
    return as_tasks(setup, [n_features(X, "X") for X in setup[0]], compare_fn=compare, side_fn=prepared_side,
                    metric=metric, progress=progress, scheduler=scheduler, **kwargs)


def _measure_names(asked):
    return [m.name for m, _ in parse_measures(asked)]


def metric_methods(metric, methods=None):
    """The alignments a matrix of ``metric`` fits: those it needs
    (:func:`~actkit.alignment._measures_run.methods_needed`), or ``methods`` where given, if
    they hold every one it needs (one line otherwise)."""
    need = methods_needed(metric)
    if methods is None:
        return need
    missing = [m for m in need if m not in methods]
    if missing:
        raise ValidationError(f"metric {metric} needs the method(s) {', '.join(missing)}; add them to methods "
                              f"(or leave methods out)")
    return list(methods)


def many_setup(sources, kwargs):
    """What every pair of :func:`compare_many` shares: the checked sources, the groups, the
    eval mask, the ICA sample rows, the diameter rows, the compute dtype and the block size
    (``kwargs`` loses ``groups``)."""
    K = len(sources)
    if K < 2:
        raise ValidationError("compare_many needs at least two representations")
    sources = [as_source(X, f"source {i}") for i, X in enumerate(sources)]
    check_same_rows(sources, [f"representation {i}" for i in range(K)])
    n = n_rows(sources[0])
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


