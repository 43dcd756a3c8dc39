"""Chunked (dask) arrays over the rows of files: one chunk per row block, every task opening
the file by path in the process that runs it (see :mod:`actkit.runners._dask`)."""

from __future__ import annotations

import os

import numpy as np

from actkit import _data
from actkit._h5 import open_read, where
from actkit._rows import block_rows as default_block_rows
from actkit.errors import ActkitError, StoreError
from actkit.runners._pass import is_chunked

__all__ = ["H5Rows", "as_dask", "check_chunks", "from_h5", "from_rows", "is_dask", "to_dask", "where"]


def _require_dask():
    try:
        import dask.array  # noqa: F401
    except ImportError:
        raise ActkitError('Dask is not installed; install the extra: pip install "actkit[dask]"') from None


def is_dask(X) -> bool:
    """True for a ``dask.array.Array`` (checked without importing Dask)."""
    return is_chunked(X)


class H5Rows:
    """Picklable rows of one HDF5 dataset, opened lazily on every read (by the reader).

    Parameters
    ----------
    path : str
        Absolute path of the HDF5 file (for a sharded store: its index file).
    dataset : str
        Dataset path inside the file, e.g. ``/layers/final_hidden/data``.
    shape : (int, int)
        Rows visible (an unfinished store shows only the rows written) and features.
    dtype : numpy dtype
    """

    ndim = 2

    def __init__(self, path, dataset, shape, dtype):
        self.path, self.dataset = str(path), str(dataset)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def __getitem__(self, key):
        try:
            f = open_read(self.path)
        except OSError as exc:
            reason = "no such file" if isinstance(exc, FileNotFoundError) or not os.path.exists(self.path) \
                else (str(exc).splitlines() or ["unreadable"])[0]
            raise StoreError(f"{where()} cannot open store {self.path}: {reason}") from None
        with f:
            ds = f[self.dataset]
            if ds.is_virtual:
                _check_sources(self.path, ds)
            return ds[key]

    def __repr__(self):
        return f"H5Rows({self.path!r}, {self.dataset!r}, shape={self.shape})"


def _check_sources(path, ds):
    """HDF5 reads a missing source file of a virtual dataset as fill values: refuse instead."""
    base = os.path.dirname(path)
    for vs in ds.virtual_sources():
        name = vs.file_name
        if name == ".":
            continue
        full = name if os.path.isabs(name) else os.path.join(base, name)
        if not os.path.exists(full):
            raise StoreError(f"{where()} cannot open shard {full} of store {path}: no such file")


def from_h5(path, dataset, shape, dtype, block_rows=None, token=""):
    """A dask array over rows of an HDF5 dataset: one chunk per ``block_rows`` rows."""
    return from_rows(H5Rows(os.path.abspath(path), dataset, shape, dtype), block_rows, token)


def from_rows(src, block_rows=None, token=""):
    """A dask array over ``src``, a picklable row source that opens its file in the process
    that reads it (:class:`H5Rows`, :class:`actkit.matrix_files._readers.MatrixRows`): one chunk per
    ``block_rows`` rows (default: the row block of every streamed pass)."""
    _require_dask()
    import dask.array as da  # optional dependency (actkit[dask])
    from dask.base import tokenize  # optional dependency (actkit[dask])

    rows, d = src.shape
    if block_rows is None:
        block_rows = default_block_rows(d, src.dtype.itemsize)
    block_rows = max(1, min(int(block_rows), max(rows, 1)))
    name = "actkit-rows-" + tokenize(repr(src), rows, d, str(src.dtype), block_rows, token)
    return da.from_array(src, chunks=(block_rows, d), name=name, lock=False, asarray=True,
                         meta=np.empty((0, 0), dtype=src.dtype))


def to_dask(layer, block_rows=None):
    """``layer`` (a store :class:`~actkit.store.Layer`, an embedding file's
    :class:`~actkit.matrix_files.MatrixLayer` or an ``h5py.Dataset``) as a dask array.

    Parameters
    ----------
    layer : Layer or h5py.Dataset of shape (n_rows, n_features)
    block_rows : int, optional
        Rows per chunk (default: the row block of every streamed pass, about 32 MiB).

    Returns
    -------
    dask.array.Array of shape (n_rows, n_features), chunks ``(block_rows, n_features)``
        Each chunk's task opens the file by path (no h5py handle is shipped).
    """
    if hasattr(layer, "to_dask"):  # a store layer or an embedding file's layer: it knows its file
        return layer.to_dask(block_rows)
    return from_h5(layer.file.filename, layer.name, layer.shape, layer.dtype, block_rows,
                   os.path.getmtime(layer.file.filename))


def check_chunks(X):
    """A 2-D dask array with every row block whole: column chunks are merged (rechunk)."""
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D dask array (rows, features), got shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]) or any(np.isnan(c) for c in X.chunks[1]):
        raise ValueError("the dask array has unknown chunk sizes; call X.compute_chunk_sizes() first")
    if len(X.chunks[1]) > 1:  # a chunk must hold whole rows: merge the column chunks
        X = X.rechunk({1: -1})
    return X


def as_dask(X, scheduler=None, block_rows=None):
    """The dask array a fit should run on, or None for the in-process path.

    A dask array is used as is (columns merged into one chunk); a store layer or an h5py
    dataset becomes one with :func:`to_dask` when a ``scheduler`` is given; anything in
    memory stays in process.
    """
    if is_dask(X):
        return check_chunks(X)
    if scheduler is None:
        return None

    if _data.is_streaming(X):
        return to_dask(X, block_rows)
    return None
