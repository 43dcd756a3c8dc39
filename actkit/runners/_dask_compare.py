"""Comparisons on Dask: pairs spread over the workers, per-side statistics computed once.

:func:`compare_many_dask` is :func:`actkit.compare_many` with a ``scheduler``: one
task per representation computes its split-aware moments, diameter rows and the FastICA
fits every pair will ask for (``_Side``, cached once), then one task per ordered pair
(K^2, the diagonal included, as the serial version) computes the cross moments and the
held-out errors. Tasks open the stores themselves (a store layer travels as its path and
name); warnings raised on a worker are raised again on the client. :func:`compare_pairs`
runs independent :func:`actkit.compare` calls (e.g. the layer pairs of two stores).

This module imports nothing of :mod:`actkit.alignment`: the caller hands over ``compare``,
the per-side preparation and the shared setup, so the import graph has no circle.
"""

from __future__ import annotations

import inspect
import warnings

import numpy as np


class _Ref:
    """A source as a task can open it: a store layer or an h5py dataset by path."""

    def __init__(self, kind, path, name):
        self.kind, self.path, self.name = kind, path, name

    def open(self):
        if self.kind == "layer":
            import actkit

            return actkit.open_store(self.path)[self.name]
        from actkit._h5 import open_read

        return open_read(self.path)[self.name]


def _ref(X, client):
    import h5py

    from actkit._data import as_input
    from actkit.errors import ValidationError
    from actkit.runners import _dask

    if hasattr(X, "store") and hasattr(X, "dataset_path"):  # a store layer
        return _Ref("layer", str(X.store.path), X.name)
    if isinstance(X, h5py.Dataset):
        return _Ref("h5", X.file.filename, X.name)
    if _dask.is_dask(X):
        raise ValidationError("compare_many with a scheduler takes store layers, h5py datasets or arrays, "
                              "not dask arrays")
    X = np.asarray(as_input(X))
    return client.scatter(X, broadcast=False) if client is not None else X


def _open(ref):
    return ref.open() if isinstance(ref, _Ref) else ref


def _side_task(side_fn, ref, *args):
    return side_fn(_open(ref), *args)  # the pair tasks open the source themselves


def _pair_task(compare_fn, ref_a, ref_b, side_a, side_b, groups, kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sides = None if side_a is None else (side_a, side_b)
        res = compare_fn(_open(ref_a), _open(ref_b), groups=groups, progress=False, _sides=sides, **kwargs)
    return res, [(w.category, str(w.message)) for w in caught]


def _defaults(compare_fn):
    return {k: v.default for k, v in inspect.signature(compare_fn).parameters.items()
            if v.default is not inspect.Parameter.empty}


def _run(runner, tasks, desc, progress):
    """Run ``(fn, args)`` tasks whose args may name earlier tasks' outputs (``("task", i)``)."""
    from tqdm.auto import tqdm

    results = [None] * len(tasks)
    with tqdm(total=len(tasks), desc=desc, unit="task", leave=False,
              disable=None if progress is None else not progress) as bar:
        if runner.client is None:
            for i, (fn, args) in enumerate(tasks):
                results[i] = fn(*[results[a[1]] if isinstance(a, tuple) and a[:1] == ("task",) else a
                                  for a in args])
                bar.update(1)
            return results
        from distributed import as_completed

        client = runner.client
        futures = []
        for fn, args in tasks:
            args = [futures[a[1]] if isinstance(a, tuple) and a[:1] == ("task",) else a for a in args]
            futures.append(client.submit(fn, *args, pure=False))
        for _ in as_completed(futures, loop=client.loop):
            bar.update(1)
        return [f.result() for f in futures]


def _rewarn(caught):
    for category, message in caught:
        warnings.warn(message, category, stacklevel=3)


def compare_many_dask(setup, widths, *, compare_fn, side_fn, metric="rigid", progress=None, scheduler=None,
                      **kwargs):
    """:func:`actkit.compare_many` on Dask (same results).

    ``setup``: what :func:`actkit.alignment._compare.many_setup` returned for the sources
    (``kwargs`` without ``groups``); ``widths``: their numbers of features; ``compare_fn``:
    :func:`actkit.compare`; ``side_fn``: :func:`actkit.alignment._ica_map.prepared_side`."""
    from actkit.runners import _dask

    kwargs = dict(kwargs)
    sources, groups, eval_mask, sample_rows, diam_rows, dtype, br = setup
    K = len(sources)
    kwargs.pop("groups", None)
    d = {**_defaults(compare_fn), **kwargs}
    ica_params = {"fun": "logcosh", "max_iter": d["ica_max_iter"], "tol": d["ica_tol"], "device": str(d["device"])}
    with _dask.use_scheduler(scheduler) as runner:
        refs = [_ref(X, runner.client) for X in sources]
        tasks = []
        for i in range(K):
            ks = sorted({(d["ica_n_components"], min(widths[i], widths[j])) for j in range(K)}) \
                if "ica" in d["methods"] else []
            tasks.append((_side_task, (side_fn, refs[i], f"source {i}", eval_mask, sample_rows, diam_rows, dtype, br,
                                       ks,
                                       [int(d["ica_seed"]) + r for r in range(int(d["ica_restarts"]))],
                                       ica_params)))
        pairs = [(i, j) for i in range(K) for j in range(K)]
        for i, j in pairs:
            tasks.append((_pair_task, (compare_fn, refs[i], refs[j], ("task", i), ("task", j), groups, kwargs)))
        out = _run(runner, tasks, f"compare: {K} sides, {len(pairs)} pairs", progress)
    matrix = np.full((K, K), np.nan)
    results = {}
    for (i, j), (res, caught) in zip(pairs, out[K:]):
        _rewarn(caught)
        value = res.to_dict()[metric]
        matrix[i, j] = np.nan if value is None else value
        results[(i, j)] = res
    return matrix, results


def compare_pairs(pairs, *, compare_fn, scheduler=None, progress=None, return_warnings=False, **kwargs):
    """Independent ``compare_fn(A, B)`` calls (:func:`actkit.compare`), one task each, in order.

    Returns
    -------
    list of CompareResult, or of ``(CompareResult, warnings)`` with ``return_warnings``
    (``warnings``: list of (category, message) raised on the worker; otherwise they are
    raised again here).
    """
    from actkit.runners import _dask

    groups = kwargs.pop("groups", None)
    with _dask.use_scheduler(scheduler) as runner:
        tasks = [(_pair_task, (compare_fn, _ref(A, runner.client), _ref(B, runner.client), None, None, groups,
                               kwargs)) for A, B in pairs]
        out = _run(runner, tasks, f"compare: {len(tasks)} pair(s)", progress)
    if return_warnings:
        return out
    results = []
    for res, caught in out:
        _rewarn(caught)
        results.append(res)
    return results
