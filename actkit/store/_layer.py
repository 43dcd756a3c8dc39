"""Reading one layer: :class:`Layer` (array-like, streamed in row blocks)."""

from __future__ import annotations

import os
from typing import Iterator

import numpy as np

from actkit._rows import block_rows as default_block_rows
from actkit.errors import ActkitError, StoreError, ValidationError
from actkit.store import _integrity as integrity
from actkit.store._source import HINT, Segment, Source


class Layer:
    """Array-like view of one stored layer: ``(rows, features)``.

    Supports ``len``, ``shape``, ``dtype``, slicing (``layer[a:b]``, integer and sorted
    integer-array row selection), ``np.asarray(layer)`` and :meth:`iter_blocks` for
    streaming reads.  Reading is lazy: nothing is loaded until indexed.

    Every read of a finished store checks the checksummed blocks it touches (whole blocks of
    about 1 MiB are read for that) and the row index against its checksum, as
    ``actkit verify`` does: a corrupt block is a one-line :class:`~actkit.errors.StoreError`,
    never data. ``open_store(path, verify_reads=False)`` (the commands' ``--no-verify``)
    reads without the checks; an unfinished store (``allow_incomplete``) is read unchecked.
    """

    ndim = 2

    def __init__(self, store, name: str, rows: int | None = None):
        self.store = store
        self.name = name
        with integrity.h5_errors(store.path):
            self.dataset = store.file[f"layers/{name}/data"]
            self._rows = self.dataset.shape[0] if rows is None else int(rows)
        entry = store.meta["layers"][name]
        self.attrs = {"rows": entry["rows"], "features": entry["features"], **entry["attrs"]}

    @property
    def dataset_path(self) -> str:
        return self.dataset.name

    @property
    def shape(self) -> tuple[int, int]:
        return (self._rows, self.dataset.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.dataset.dtype

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self._rows

    def __repr__(self):
        return f"<actkit Layer {self.name!r} shape={self.shape} dtype={self.dtype}>"

    @property
    def index(self) -> np.ndarray:
        """(rows, 2) int64 array of ``[sample, position]``; position -1 for pooled rows."""
        with integrity.h5_errors(self.store.path):
            index = self.store.file[f"layers/{self.name}/index"][()]
        if self.store.checked_reads and not self.store._index_checked.get(self.name):
            if integrity.array_sha256(index) != self.store.meta["layers"][self.name]["index_sha256"]:

                raise StoreError(f"{self.store.path}: the row index of layer {self.name} does not match its "
                                 f"checksum; {HINT}")
            self.store._index_checked[self.name] = True
        return index[: self._rows]

    @property
    def groups(self) -> np.ndarray:
        """(rows,) int64 sample id of every row: rows of one input share a group."""
        return self.index[:, 0]

    def _read(self, a: int, b: int) -> np.ndarray:
        """Rows ``a:b`` (``a <= b``), checked against their blocks' checksums when the store
        checks its reads."""
        source = self.store.checked_source(self.name)
        if source is None:
            with integrity.h5_errors(self.store.path):
                return self.dataset[a:b]
        return source.read(a, b)

    def _read_rows(self, idx: np.ndarray) -> np.ndarray:
        """Rows ``idx`` (increasing), read as runs of nearby rows (checked like :meth:`_read`)."""
        source = self.store.checked_source(self.name)
        if source is None or not len(idx):
            with integrity.h5_errors(self.store.path):
                return self.dataset[idx]
        # rows less than a checksum block apart are read in one run (a block is read whole anyway)
        gap = max([1] + [int(seg.block_rows or 1) for seg in source.segments])
        cuts = np.flatnonzero(np.diff(idx) > gap) + 1
        parts = []
        for run in np.split(idx, cuts):
            a = int(run[0])
            parts.append(self._read(a, int(run[-1]) + 1)[run - a])
        return np.concatenate(parts)

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        norm = self._normalise_rows(rows)
        if isinstance(norm, _Reorder):
            data = self._read_rows(norm.uniq)[norm.inverse]
        elif isinstance(norm, slice):
            a, b, step = norm.start, max(norm.start, norm.stop), norm.step
            if step < 0:  # rows b+1..a in reverse
                a, b = norm.stop + 1, norm.start + 1
                data = self._read(a, max(a, b))[::step] if b > a else self._read(0, 0)
            else:
                data = self._read(a, b)[::step]
        elif isinstance(norm, int):
            data = self._read(norm, norm + 1)[0]
        else:
            data = self._read_rows(np.asarray(norm, dtype=np.int64))
        return data[(slice(None), *rest)] if rest and np.ndim(data) == 2 else (data[rest] if rest else data)

    def _normalise_rows(self, rows):
        n = self._rows
        if isinstance(rows, slice):
            start, stop, step = rows.indices(n)
            return slice(start, stop, step)
        if isinstance(rows, (int, np.integer)):
            r = int(rows)
            if r < 0:
                r += n
            if not 0 <= r < n:
                raise IndexError(f"row {rows} out of range for layer with {n} rows")
            return r
        if rows is Ellipsis:
            return slice(0, n)
        arr = np.asarray(rows)
        if arr.dtype == bool:
            arr = np.flatnonzero(arr)
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise IndexError(f"row index out of range for layer with {n} rows")
        if arr.size and np.any(np.diff(arr) <= 0):
            # h5py needs increasing indices: read sorted unique, then reorder
            uniq, inverse = np.unique(arr, return_inverse=True)
            return _Reorder(uniq, inverse)
        return arr

    def __array__(self, dtype=None, copy=None):
        out = self._read(0, self._rows)
        return out if dtype is None else out.astype(dtype, copy=False)

    def to_numpy(self, dtype=None) -> np.ndarray:
        return self.__array__(dtype)

    def to_dask(self, block_rows: int | None = None):
        """A ``dask.array.Array`` of this layer, one chunk per row block (default ~32 MiB).

        Every chunk's task opens the file by path in the process that runs it (no h5py
        handle is shipped); needs ``pip install "actkit[dask]"``. See ``docs/dask.md``."""
        from actkit.runners import chunked_rows, file_rows  # the hand-off to the room above (Dask)

        f = self.store.file
        token = (self.store.fingerprint, os.path.getmtime(f.filename))
        rows = file_rows(os.path.abspath(f.filename), self.dataset_path, self.shape, self.dtype)
        return chunked_rows(rows, block_rows, token)

    def loader_source(self, verify: bool = True):
        """This layer as the loader reads it (:class:`actkit.store._source.Source`): its file, or
        each shard of a sharded store, with the checksum blocks (a finished store only)."""
        store, name = self.store, self.name
        rows, feats = (int(x) for x in self.shape)
        if not store.complete:
            raise StoreError(f"store {store.path} is not finished; the loader reads finished stores only")
        meta = store.meta
        segments = []
        if meta.get("shards"):
            start = 0
            for rel in meta["shards"]:
                with store.open_shard(rel) as shard:
                    n = len(shard[name])
                    br = shard.meta["layers"][name].get("block_rows")
                    algo = integrity.checksum_algorithm(shard.meta)
                segments.append(Segment(str(store.path.parent / rel), start, n, br, algo))
                start += n
            if start != rows:
                raise StoreError(f"store {store.path}: its shards hold {start} rows of layer {name}, "
                                 f"the index says {rows}")
        else:
            segments.append(Segment(str(store.path), 0, rows, meta["layers"][name].get("block_rows"),
                                    integrity.checksum_algorithm(meta)))
        return Source("store", str(store.path), name, rows, feats, str(self.dtype), segments, verify=verify,
                      opener=store.reopen)

    def for_each_verified(self, fn, block_rows: int | None = None) -> None:
        """Call ``fn(block)`` on consecutive blocks of ``block_rows`` rows (the last may be
        shorter), covering every row in order, each only after the checksum blocks it was
        read from matched (the read of :func:`~actkit.store.verify_store`, so a corrupt
        block raises verify's :class:`~actkit.errors.StoreError` before any of its rows
        reaches ``fn``). The blocks are those of :meth:`iter_blocks`."""
        if block_rows is None:
            block_rows = default_block_rows(self.shape[1], self.dtype.itemsize)
        elif isinstance(block_rows, bool) or not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
            raise ValidationError(f"block_rows must be a positive integer, got {block_rows!r}")
        block_rows = int(block_rows)
        pending: list = []

        def take(_name, _first, rows):
            pending.append(rows)
            have = sum(len(p) for p in pending)
            if have < block_rows:
                return
            rows = np.concatenate(pending) if len(pending) > 1 else pending[0]
            pending.clear()
            cut = have - have % block_rows
            for a in range(0, cut, block_rows):
                fn(rows[a : a + block_rows])
            if cut < have:
                pending.append(rows[cut:])

        integrity.verify_store(self.store, layers=[self.name], on_rows=take,
                               read_bytes=max(64 * 2**20, block_rows * self.shape[1] * self.dtype.itemsize))
        if pending:  # the last (short) block, possibly gathered from several shards
            fn(np.concatenate(pending) if len(pending) > 1 else pending[0])

    def to_torch(self, batch_size: int | None = None, *, shuffle: bool = True, seed: int = 0, buffer_rows: int | None = None,
                 drop_last: bool = False, num_workers: int | None = None, **kwargs):
        """A torch ``IterableDataset`` of ``(batch_size, features)`` row batches of this layer
        (single ``(features,)`` rows without ``batch_size``, for a torch ``DataLoader`` to batch):
        seeded random block order and a bounded shuffle window, exactly once per epoch,
        resumable (``state_dict``/``load_state_dict``), split over ``DataLoader`` workers and
        torchrun ranks, every block checked against its checksum. With ``num_workers`` given,
        an :class:`actkit.loader.DataLoader` over it. See :class:`actkit.loader.ActivationDataset`
        (further keywords) and ``docs/loader.md``."""
        from actkit.loader import to_torch  # the hand-off to the room above (torch)

        return to_torch(self, batch_size, shuffle=shuffle, seed=seed, buffer_rows=buffer_rows, drop_last=drop_last,
                        num_workers=num_workers, **kwargs)

    def iter_blocks(self, block_rows: int | None = None, *, start: int = 0, stop: int | None = None,
                    dtype=None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_row, block)`` pairs covering rows ``start:stop`` in order."""
        stop = self._rows if stop is None else min(stop, self._rows)
        if block_rows is None:
            block_rows = default_block_rows(self.shape[1], self.dtype.itemsize)
        for s in range(start, stop, block_rows):
            block = self._read(s, min(stop, s + block_rows))
            yield s, (block if dtype is None else block.astype(dtype, copy=False))


    # --- row subsets
    def select_rows(self, rows) -> "RowSelection":
        """A view of some of this layer's rows (:class:`RowSelection`): ``rows`` is a boolean
        mask of shape (rows,) or increasing row numbers. It reads like the layer (slicing,
        ``iter_blocks``, ``np.asarray``, ``index`` and ``groups`` of the rows kept, every read
        checked against the checksums), and every reader (``compare``, the estimators) takes it."""
        return RowSelection(self, _selected(rows, len(self)))

    def drop_rows(self, *, special_tokens: bool = False, positions=None, inputs=None) -> "Layer":
        """This layer without the rows of the tokenizer's special tokens (``special_tokens``,
        from the store's recorded inputs, or ``inputs``) and of the token ``positions`` (``0``
        the first token of each sample, ``-1`` its last); itself when nothing is dropped.

        Raises
        ------
        ActkitError
            Pooled rows (they have no token positions), or special tokens asked for without
            recorded text inputs (then give ``positions``, e.g. ``(0, -1)``).
        """
        index = self.index
        pooled = bool(len(index)) and bool(np.all(index[:, 1] < 0))
        if (special_tokens or positions) and pooled:
            raise ActkitError(f"layer {self.name} holds one pooled row per sample: there are no token rows to drop")
        keep = np.ones(len(index), bool)
        if positions:
            keep &= ~_at_positions(index, [int(p) for p in positions])
        if special_tokens:
            inputs = self.store.inputs if inputs is None else inputs
            if inputs is None or inputs.kind != "text":
                raise ActkitError(f"{self.store.path} has no recorded text inputs to find special tokens in; attach "
                                  "them (--inputs) or drop rows by position instead (--drop-positions 0,-1)")
            keep &= ~inputs.is_special(index[:, 0], index[:, 1])
        return self if keep.all() else self.select_rows(keep)


def _selected(rows, n: int) -> np.ndarray:
    """Increasing row numbers from a boolean mask of length ``n`` or from row numbers."""
    arr = np.asarray(rows)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise ValidationError(f"a row mask must have shape ({n},), got {arr.shape}")
        return np.flatnonzero(arr).astype(np.int64)
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and (arr.min() < 0 or arr.max() >= n or np.any(np.diff(arr) <= 0)):
        raise ValidationError(f"selected rows must be increasing row numbers in [0, {n})")
    return arr


def _at_positions(index: np.ndarray, positions) -> np.ndarray:
    """(rows,) bool: rows at any of ``positions`` of their sample (negative: from its end)."""
    sample, pos = index[:, 0], index[:, 1]
    out = np.zeros(len(index), bool)
    if not len(index):
        return out
    # rows are sample-major: each sample's rows are one run, its length the sample's row count
    starts = np.flatnonzero(np.r_[True, sample[1:] != sample[:-1]])
    counts = np.diff(np.r_[starts, len(index)])
    last = np.repeat(pos[np.r_[starts[1:], len(index)] - 1], counts)  # the sample's last stored position
    for p in positions:
        out |= pos == (p if p >= 0 else last + 1 + p)
    return out


class RowSelection(Layer):
    """Some rows of a stored layer (:meth:`Layer.select_rows`), read like the layer itself.

    Attributes
    ----------
    parent : Layer
        The whole layer.
    selected_rows : ndarray of shape (rows,), int64
        The parent's rows kept, increasing.
    """

    def __init__(self, parent: Layer, rows: np.ndarray):
        if isinstance(parent, RowSelection):  # a selection of a selection: one step from the layer
            rows, parent = parent.selected_rows[rows], parent.parent
        self.parent, self.selected_rows = parent, rows
        self.store, self.name, self.dataset = parent.store, parent.name, parent.dataset
        self._rows = len(rows)
        self.attrs = {**parent.attrs, "rows": len(rows)}

    @property
    def index(self) -> np.ndarray:
        return self.parent.index[self.selected_rows]

    def _read(self, a: int, b: int) -> np.ndarray:
        if b <= a:
            return self.parent._read(0, 0)
        sel = self.selected_rows[a:b]
        lo, hi = int(sel[0]), int(sel[-1]) + 1
        if hi - lo <= 2 * (b - a):  # nearly contiguous (a few rows dropped): one span, then take
            return self.parent._read(lo, hi)[sel - lo]
        return self.parent._read_rows(sel)

    def _read_rows(self, idx: np.ndarray) -> np.ndarray:
        return self.parent._read_rows(self.selected_rows[np.asarray(idx, dtype=np.int64)])

    def for_each_verified(self, fn, block_rows: int | None = None) -> None:
        for _, block in self.iter_blocks(block_rows):  # every read is checked against the checksums
            fn(block)

    def loader_source(self, verify: bool = True):
        raise ActkitError(f"the torch loader and Dask arrays read whole layers; {self.name} is a row selection: "
                          "write it as a store first, or select rows from the batches")

    def to_dask(self, block_rows: int | None = None):
        return self.loader_source()

    def __repr__(self):
        return f"<actkit Layer {self.name!r} rows selected: shape={self.shape} of {self.parent.shape[0]} dtype={self.dtype}>"


class _Reorder:
    """Row selection h5py cannot do directly (unsorted / repeated): sorted read + take."""

    def __init__(self, uniq, inverse):
        self.uniq, self.inverse = uniq, inverse
