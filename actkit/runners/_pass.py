"""What every runner executes: :class:`RowPass`, the description of one pass over rows
(see :mod:`actkit.runners`), and the two facts about an input the runners share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["RowPass", "is_chunked", "portable"]


class RowPass(NamedTuple):
    """One pass over rows, as the runners execute it.

    Attributes
    ----------
    new : callable ``(*args) -> partial``
        An empty partial result.
    add : callable ``(partial, item, first_row, *args) -> partial``
        Fold the next block (or ``map``'s result for it) into ``partial``, in row order;
        ``first_row``: the block's first global row. May update ``partial`` in place.
    merge : callable ``(a, b) -> partial``
        ``a``'s rows then ``b``'s; must not modify its arguments (a retried task reuses them).
    args : tuple
        Shared arguments of ``new``, ``map`` and ``add`` (module-level functions and plain
        arrays: they travel to workers).
    rows : int
        Rows per block (a chunk of a cluster is folded in blocks of this many rows).
    map : callable ``(block, first_row, *args) -> item``, optional
        Per-block work without shared state: locally it runs on the thread budget's
        workers (results folded in order).
    aligned : bool
        Blocks must start at multiples of ``rows`` (FastICA's fixed reduction blocks): a
        cluster's chunks are then cut at such rows.
    threads : bool
        Whether ``map`` may run on several threads (False for GPU blocks).
    name : str
        Progress bar label.
    """

    new: Callable
    add: Callable
    merge: Callable
    args: tuple = ()
    rows: int | None = None
    map: Callable | None = None
    aligned: bool = False
    threads: bool = True
    name: str = "pass"


def is_chunked(X) -> bool:
    """True for a lazily chunked array (a ``dask.array.Array``), checked without importing it."""
    return (type(X).__module__ or "").startswith("dask") and hasattr(X, "chunks") and hasattr(X, "dask")


def portable(estimator):
    """A shallow copy without the scheduler (a Client does not travel to workers)."""
    est = copy.copy(estimator)
    if hasattr(est, "scheduler"):
        est.scheduler = None
    return est
