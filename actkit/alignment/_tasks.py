"""Comparisons as a task list, for any runner.

:func:`compare_many` is :func:`actkit.compare_many` stated once: one task per
representation computes its split-aware moments, diameter rows and the FastICA fits every
pair will ask for (``prepared_side``, once), then one task per ordered pair (K^2, the
diagonal included) computes the cross moments and the held-out errors. :func:`compare_pairs`
is independent :func:`actkit.compare` calls (e.g. the layer pairs of two stores). A runner
executes the list (``runner.tasks``, the runner :func:`actkit.runners.use_scheduler` picks):
the local runner in order, here, with the sources used as they are; the Dask runner as
futures, each task opening its store itself (``actkit.runners._dask_compare``). Warnings
raised in a pair task are raised again here.

What a comparison is lives here, in alignment; the runners only run a list of tasks. The
caller hands over ``compare``, the per-side preparation and the shared setup.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np

from actkit._warn import warn_user
from actkit.runners import LOCAL, use_scheduler

__all__ = ["compare_many", "compare_pairs"]


def _open(src):
    """The source a task reads: a reference opened where the task runs, else ``src`` itself."""
    reopen = getattr(src, "actkit_reopen", None)
    return reopen() if reopen is not None else src


def _side_task(side_fn, src, *args):
    return side_fn(_open(src), *args)  # the pair tasks open the source themselves


def _pair_task(compare_fn, src_a, src_b, side_a, side_b, groups, kwargs, progress=False):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sides = None if side_a is None else (side_a, side_b)
        res = compare_fn(_open(src_a), _open(src_b), groups=groups, progress=progress, _sides=sides, **kwargs)
    return res, [(w.category, str(w.message)) for w in caught]


def _defaults(compare_fn):
    return {k: v.default for k, v in inspect.signature(compare_fn).parameters.items()
            if v.default is not inspect.Parameter.empty}


def _rewarn(caught):
    for category, message in caught:
        warn_user(message, category)


def compare_many(setup, widths, *, compare_fn, side_fn, metric="rigid", progress=None, scheduler=None, **kwargs):
    """:func:`actkit.compare_many` as one task list: one task per representation (its
    statistics, computed once), then one per ordered pair, on the runner
    :func:`actkit.runners.use_scheduler` picks for ``scheduler``.

    ``setup``: what :func:`actkit.alignment._compare.many_setup` returned for the sources
    (``kwargs`` without ``groups``); ``widths``: their numbers of features; ``compare_fn``:
    :func:`actkit.compare`; ``side_fn``: :func:`actkit.alignment._ica_map.prepared_side`.

    Returns ``(matrix, results)``: matrix of shape (K, K), results a dict (i, j) -> CompareResult.
    """
    with use_scheduler(scheduler) as runner:
        return _many(runner, setup, widths, compare_fn, side_fn, metric, progress, kwargs)


def _many(runner, setup, widths, compare_fn, side_fn, metric, progress, kwargs):
    kwargs = dict(kwargs)
    sources, groups, eval_mask, sample_rows, diam_rows, dtype, br = setup
    K = len(sources)
    kwargs.pop("groups", None)
    d = {**_defaults(compare_fn), **kwargs}
    ica_params = {"fun": "logcosh", "max_iter": d["ica_max_iter"], "tol": d["ica_tol"], "device": str(d["device"])}
    seeds = [int(d["ica_seed"]) + r for r in range(int(d["ica_restarts"]))]
    srcs = [runner.task_source(X) for X in sources]
    tasks = []
    for i in range(K):
        ks = sorted({(d["ica_n_components"], min(widths[i], widths[j])) for j in range(K)}) \
            if "ica" in d["methods"] else []
        tasks.append((_side_task, (side_fn, srcs[i], f"source {i}", eval_mask, sample_rows, diam_rows, dtype, br,
                                   ks, seeds, ica_params, groups)))
    pairs = [(i, j) for i in range(K) for j in range(K)]
    for i, j in pairs:
        tasks.append((_pair_task, (compare_fn, srcs[i], srcs[j], ("task", i), ("task", j), groups, kwargs)))
    out = runner.tasks(tasks, desc=f"compare: {K} sides, {len(pairs)} pairs", progress=progress)
    matrix = np.full((K, K), np.nan)
    results = {}
    for (i, j), (res, caught) in zip(pairs, out[K:]):
        _rewarn(caught)
        value = res.to_dict()[metric]
        matrix[i, j] = np.nan if value is None else value
        results[(i, j)] = res
    return matrix, results


def compare_pairs(pairs, *, compare_fn, progress=None, return_warnings=False, scheduler=None, **kwargs):
    """Independent ``compare_fn(A, B)`` calls (:func:`actkit.compare`), one task each, in order,
    on the runner :func:`actkit.runners.use_scheduler` picks for ``scheduler``.

    Returns
    -------
    list of CompareResult, or of ``(CompareResult, warnings)`` with ``return_warnings``
    (``warnings``: list of (category, message) raised in the task; otherwise they are
    raised again here).
    """
    with use_scheduler(scheduler) as runner:
        return _pairs(runner, pairs, compare_fn, progress, return_warnings, kwargs)


def _pairs(runner, pairs, compare_fn, progress, return_warnings, kwargs):
    groups = kwargs.pop("groups", None)
    here = runner is LOCAL       # here, each comparison shows its own passes; on workers, the tasks do
    tasks = [(_pair_task, (compare_fn, runner.task_source(A), runner.task_source(B), None, None, groups, kwargs,
                           progress if here else False)) for A, B in pairs]
    out = runner.tasks(tasks, desc=f"compare: {len(tasks)} pair(s)", progress=False if here else progress)
    if return_warnings:
        return out
    results = []
    for res, caught in out:
        _rewarn(caught)
        results.append(res)
    return results
