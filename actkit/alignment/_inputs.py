"""Inputs of the alignments: row sources, their sizes, dtypes, blocks and progress bars."""

from __future__ import annotations

import numpy as np

from actkit import _data
from actkit._progress import progress_bar as bar
from actkit._rows import block_rows
from actkit.errors import ValidationError


def n_rows(X) -> int:
    return _data.n_rows(X)


def n_features(X, name: str) -> int:
    shape = tuple(X.shape)
    if len(shape) != 2:
        raise ValidationError(f"{name} must be 2-D (n_rows, n_features), got shape {shape}")
    return _data.n_features(X)


def compute_dtype(*sources) -> np.dtype:
    """float32 GEMMs when every source holds at most 32-bit floats, else float64."""
    for X in sources:
        dt = _data.source_dtype(X)
        if dt.kind != "f" or dt.itemsize > 4:
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def as_source(X, name: str):
    """Accept arrays, tensors, h5py datasets and store layers; lists become arrays."""
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if not hasattr(X, "shape"):
        raise ValidationError(f"{name} must be an array-like of shape (n_rows, n_features)")
    n_features(X, name)
    return X


#: Rows of the fixed blocks every moments pass of compare sums over (a constant).
MOMENT_ROWS = 2048


def blocks(X, rows, dtype):
    """The rows of ``X`` in fixed blocks of :data:`MOMENT_ROWS` rows at global boundaries
    (rows ``[i M, (i + 1) M)``), read ``rows`` at a time. The passes add their statistics
    block by block, so the moments -- and the whitening and FastICA fits built on them --
    have the same bits for any ``block_rows``, in memory or from a store (issue 19: the
    ICA unmixing moved by 1e-4 between block_rows 1000 and the default)."""
    return fixed_blocks(_data.iter_blocks(X, block_rows=rows, dtype=dtype), MOMENT_ROWS)


def fixed_blocks(read, size):
    """Cut a stream of consecutive row blocks into blocks of ``size`` rows (the last one
    shorter): views where a read block holds a whole one, else a concatenation."""
    buf, have = [], 0
    for block in read:
        s, n = 0, block.shape[0]
        while s < n:
            if not buf and n - s >= size:
                yield block[s : s + size]
                s += size
                continue
            take = min(size - have, n - s)
            buf.append(block[s : s + take])
            have += take
            s += take
            if have == size:
                yield np.concatenate(buf)
                buf, have = [], 0
    if buf:
        yield buf[0] if len(buf) == 1 else np.concatenate(buf)


def check_finite(block, name, start):
    if not np.all(np.isfinite(block)):
        bad = start + int(np.flatnonzero(~np.all(np.isfinite(block), axis=1))[0])
        raise ValidationError(f"{name} contains NaN or infinite values (first at row {bad})")


def default_block_rows(width: int) -> int:
    return block_rows(width)


def progress_bar(total, desc, progress):
    """A bar on a terminal, a log line a minute elsewhere (:mod:`actkit._progress`)."""
    return bar(total, desc, progress)
