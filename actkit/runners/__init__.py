"""Where a pass over rows runs: one description of the pass, two runners.

Every pass over the rows of a matrix (moments, FastICA's sums, the dictionary epoch,
transforms, gathering rows) is written once, as a :class:`RowPass`: what to start with,
how to fold one block of rows into a partial result, and how to merge two partial results
exactly. The estimators only build such descriptions and hand them to the runner they
were given; they never ask where it runs. The model is baukit's ``runningstats``
(``add``, ``merge``) and dask's ``reduction(chunk, combine, aggregate)``.

Runners (:meth:`run` executes a description over ``X``):

* :class:`~actkit.runners._local.LocalRunner` -- this process: row blocks read one ahead
  on a background thread (:func:`actkit._data.iter_blocks`), folded in row order; a pass
  with a ``map`` runs it on the thread budget's workers (:func:`actkit._threads.map_ordered`).
* ``actkit.runners._dask.Runner`` -- a Dask scheduler: every chunk folds its own blocks
  on a worker, the chunks' results are merged in a fixed binary tree (left before right).

The runner is chosen once, here, by :func:`runner_for` (from an estimator's ``scheduler``
or a chunked input array), and for task lists (comparisons, :mod:`actkit.alignment._tasks`) by
:func:`use_scheduler`; ``actkit.runners._dask`` and ``_dask_compare`` hold everything
of Dask, imported only when a scheduler or a dask array is given.
"""

from __future__ import annotations

import contextlib

import numpy as np

from actkit._data import as_input, is_streaming
from actkit.runners._local import LOCAL, LocalRunner
from actkit.runners._pass import RowPass, is_chunked, portable

__all__ = ["LOCAL", "LocalRunner", "RowPass", "chunked_rows",
           "file_rows", "gather", "is_chunked", "lazy_transform", "portable",
           "run", "runner_for", "use_scheduler"]


def elsewhere(X, scheduler=None) -> bool:
    """Whether the rows of ``X`` are read by a scheduler's workers rather than here: a chunked
    array, or a stream (store layer, h5py dataset) with a ``scheduler``."""
    return is_chunked(X) or (scheduler is not None and is_streaming(X))


@contextlib.contextmanager
def runner_for(X, scheduler=None, *, block_rows=None, device="cpu"):
    """``(rows, runner)``: where the passes over ``X`` run -- the one place that decides.

    A chunked array, or a stream (store layer, h5py dataset) with a ``scheduler``, runs on
    that scheduler (``actkit.runners._dask``; ``rows`` is then the chunked array); anything
    else runs here (:data:`LOCAL`, ``rows`` is ``X``). The runner is closed on exit (a
    ``"local:N"`` cluster stops).
    """
    X = as_input(X)
    if not elsewhere(X, scheduler):
        yield X, LOCAL
        return
    from actkit.runners import _dask  # Dask's runner: imported only when a scheduler or a dask array is given

    with _dask.on_dask(X, scheduler, block_rows, device) as (rows, runner):
        yield rows, runner


def run(X, rowpass: RowPass, *, scheduler=None, desc=None, progress=False):
    """Run ``rowpass`` over ``X`` on the runner :func:`runner_for` chooses; the merged result."""
    with runner_for(X, scheduler) as (rows, runner):
        return runner.run(rows, rowpass, desc=desc, progress=progress)


def gather(runner, X, idx, rows=None):
    """Rows ``idx`` (sorted, increasing) of ``X`` in one pass on ``runner``, shape (len(idx), D)."""
    out = runner.run(X, RowPass(_no_rows, _pick, _concat, (np.asarray(idx),), rows, name="rows"), progress=False)
    return np.concatenate(out) if out else np.empty((0, int(X.shape[1])))


def _no_rows(idx):
    return []


def _pick(acc, block, start, idx):
    lo, hi = np.searchsorted(idx, [start, start + len(block)])
    if hi > lo:
        acc.append(np.array(np.asarray(block)[idx[lo:hi] - start]))
    return acc


def _concat(a, b):
    return [*a, *b]


@contextlib.contextmanager
def use_scheduler(scheduler=None):
    """The runner of task lists (e.g. comparisons): :data:`LOCAL` for None, else the Dask
    runner of ``scheduler`` (``"local:N"``, an address, a ``Client``), closed on exit."""
    if scheduler is None:
        yield LOCAL
        return
    from actkit.runners import _dask  # Dask's runner: imported only when a scheduler or a dask array is given

    with _dask.use_scheduler(scheduler) as runner:
        yield runner


def file_rows(path, dataset, shape, dtype):
    """Rows of an HDF5 dataset as a picklable array-like that every reader opens by path
    (what a scheduler's worker reads, e.g. a source store's row index)."""
    from actkit.runners._dask import H5Rows  # Dask's runner: imported only when a scheduler or a dask array is given

    return H5Rows(path, dataset, shape, dtype)


def chunked_rows(src, block_rows=None, token=""):
    """A chunked array over ``src`` (a picklable row source that opens its file where it is
    read), one chunk per ``block_rows`` rows, for a scheduler's workers."""
    from actkit.runners._dask import from_rows  # Dask's runner: imported only when a scheduler or a dask array is given

    return from_rows(src, block_rows, token)


def lazy_transform(estimator, X, n_out, block_rows=None):
    """``estimator.transform`` of a chunked ``X`` (or a stream with the estimator's
    ``scheduler``), or None when ``X`` is for the local runner: a lazy chunked array for a
    chunked ``X``, the rows computed on the scheduler for a stream."""
    scheduler = getattr(estimator, "scheduler", None)
    if not elsewhere(X, scheduler):
        return None
    from actkit.runners import _dask  # Dask's runner: imported only when a scheduler or a dask array is given

    return _dask.transform(estimator, X, n_out, scheduler, block_rows)
