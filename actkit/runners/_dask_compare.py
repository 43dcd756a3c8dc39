"""The Dask side of comparisons as tasks (:mod:`actkit.runners._compare`).

A task on a worker opens its store itself: a store layer or an h5py dataset travels as
a :class:`_Ref` (its path and name), an array is scattered once. :func:`run_futures`
submits the task list, an earlier task's future standing in for its output.
"""

from __future__ import annotations

import h5py
import numpy as np

from actkit._data import as_input
from actkit._h5 import open_read


class _Ref:
    """A source as a task can open it: a store layer or an h5py dataset by path (a layer
    names the function that opens its store again, ``Store.reopen``: the runners import
    nothing of the store)."""

    def __init__(self, kind, path, name, opener=None, rows=None):
        self.kind, self.path, self.name, self.opener = kind, path, name, opener
        self.rows = rows  # a layer's row selection (``Layer.select_rows``), else None

    def actkit_reopen(self):
        if self.kind == "layer":
            layer = self.opener(self.path)[self.name]
            return layer if self.rows is None else layer.select_rows(self.rows)

        return open_read(self.path)[self.name]


def task_source(X, client):
    """``X`` as a task on a worker reads it: a :class:`_Ref`, or the array (scattered)."""
    if hasattr(X, "store") and hasattr(X, "dataset_path"):  # a store layer
        return _Ref("layer", str(X.store.path), X.name, X.store.reopen, getattr(X, "selected_rows", None))
    if isinstance(X, h5py.Dataset):
        return _Ref("h5", X.file.filename, X.name)
    X = np.asarray(as_input(X))
    return client.scatter(X, broadcast=False) if client is not None else X


def run_futures(client, tasks, bar):
    """Submit ``(fn, args)`` tasks to ``client`` (an arg ``("task", i)``: task i's future);
    their results, in order."""
    from distributed import as_completed  # optional dependency (actkit[dask])

    futures = []
    for fn, args in tasks:
        args = [futures[a[1]] if isinstance(a, tuple) and a[:1] == ("task",) else a for a in args]
        futures.append(client.submit(fn, *args, pure=False))
    for _ in as_completed(futures, loop=client.loop):
        bar.update(1)
    return [f.result() for f in futures]
