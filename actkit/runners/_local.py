"""The local runner: a pass over row blocks in this process.

Blocks are read in row order (a stream one block ahead on a background thread,
:func:`actkit._data.iter_blocks`) and folded into one partial result; a pass with a
``map`` runs it on the thread budget's workers (:func:`actkit._threads.map_ordered`, each at
one BLAS thread) and folds the results in row order, so the result has the same bits at
any thread count.
"""

from __future__ import annotations

import numpy as np

from actkit._data import iter_blocks, source_dtype
from actkit._rows import block_rows
from actkit._threads import current_threads, map_ordered, small_linalg

__all__ = ["LOCAL", "LocalRunner", "run_in_order"]


def _blocks(X, rows):
    """``(first_row, block)`` of ``X`` in order; a torch tensor is sliced where it lies."""
    if hasattr(X, "detach") and hasattr(X, "device"):
        for s in range(0, int(X.shape[0]), rows):
            yield s, X[s : s + rows]
        return
    s = 0
    for block in iter_blocks(X, rows):
        yield s, block
        s += len(block)


def run_in_order(tasks, bar):
    """Run ``(fn, args)`` tasks here, in order; an arg ``("task", i)`` is task i's output."""
    results = [None] * len(tasks)
    for i, (fn, args) in enumerate(tasks):
        results[i] = fn(*[results[a[1]] if isinstance(a, tuple) and a[:1] == ("task",) else a for a in args])
        bar.update(1)
    return results


def _numbered(blocks):
    """``(first_row, block)``; a block may be a tuple of row-aligned blocks (a paired pass)."""
    s = 0
    for block in blocks:
        yield s, block
        s += len(block[0] if isinstance(block, tuple) else block)


class LocalRunner:
    """Runs :class:`~actkit.runners.RowPass` descriptions in this process."""

    n_workers = 1
    client = None
    remote = False  # the rows are read here

    def run(self, X, p, *, desc=None, progress=False, blocks=None):
        """Fold every block of ``X`` into ``p.new(*p.args)``; the partial result of all rows.

        ``progress``: a bar of blocks (None: only on a terminal, False: none). ``blocks``: how
        this process reads ``X`` when not in plain blocks of ``p.rows`` rows (e.g. through the
        checksum-verifying loader), an iterator of consecutive blocks, or of tuples of
        row-aligned blocks of several inputs read together (e.g. a pair's ``(xa, xb)``)."""
        from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

        n, d = int(X.shape[0]), int(X.shape[1])
        rows = int(p.rows) if p.rows else _default_rows(X, d)
        acc = p.new(*p.args)
        items = _blocks(X, rows) if blocks is None else _numbered(blocks)
        with tqdm(total=-(-n // rows), desc=desc or p.name, unit="block", leave=False,
                  disable=None if progress is None else not progress) as bar:
            if p.map is None:
                for s, block in items:
                    acc = p.add(acc, block, s, *p.args)
                    bar.update(1)
                return acc
            workers = current_threads() if p.threads and n > rows else 1
            with small_linalg():  # one BLAS thread per block (process-wide: set once here)
                for s, item in map_ordered(lambda sb: (sb[0], p.map(sb[1], sb[0], *p.args)), items, workers):
                    acc = p.add(acc, item, s, *p.args)
                    bar.update(1)
        return acc

    def task_source(self, X):
        """A source as this runner's tasks read it: ``X`` itself, used as it is."""
        return X

    def tasks(self, tasks, *, desc="tasks", progress=None):
        """Run ``(fn, args)`` tasks here, in order (an arg ``("task", i)``: task i's output);
        their results, in order. ``progress``: a bar of tasks (None: only on a terminal)."""
        from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

        with tqdm(total=len(tasks), desc=desc, unit="task", leave=False,
                  disable=None if progress is None else not progress) as bar:
            return run_in_order(tasks, bar)

    def __repr__(self):
        return "LocalRunner()"


def _default_rows(X, d):
    try:
        size = source_dtype(X).itemsize
    except TypeError:
        size = np.dtype(np.float64).itemsize
    return block_rows(d, size)


#: The runner of every pass that no scheduler was asked for.
LOCAL = LocalRunner()
