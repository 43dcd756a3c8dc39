"""One layer to read, described by paths only: what the torch loader (:mod:`actkit.loader`)
and a Dask worker read, every block checked against the store's checksums.

The layer builds its own description (:meth:`actkit.store.Layer.loader_source`,
:meth:`actkit.matrix_files.MatrixLayer.loader_source`) and names the function that opens
its file again in another process, so the loader imports nothing of the store's readers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import h5py
import numpy as np

from actkit.errors import StoreError
from actkit.store import _integrity as integrity

__all__ = ["HINT", "Segment", "Source", "SourceRows"]

HINT = "the file is corrupt; re-create it (rerun the command that wrote it with --overwrite)"


@dataclass
class Segment:
    """Rows ``[start, start + rows)`` of a layer, stored in one ordinary store file."""

    path: str
    start: int
    rows: int
    block_rows: int | None  # rows per checksummed block; None: no checksums
    algorithm: str = "sha256"  # the store's block checksum (its /meta["checksum"])


@dataclass
class Source:
    """One layer to read, described by paths only (picklable to worker processes).

    ``kind`` is ``"store"`` (segments: the store itself, or each shard of a sharded store)
    or ``"matrix"`` (an embedding file; ``key``/``column`` as in :func:`actkit.open_matrix`).
    """

    kind: str
    path: str
    name: str
    rows: int
    features: int
    dtype: str
    segments: list = field(default_factory=list)
    key: str | None = None
    column: str | None = None
    verify: bool = True
    opener: object = None  # a module-level function: opener(path) -> Store, or for an embedding file
    #                       opener(path, key, column, name) -> its layer (given by the layer itself)
    _open: dict = field(default_factory=dict, repr=False, compare=False)
    _pid: int = field(default=-1, repr=False, compare=False)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_open"], state["_pid"] = {}, -1  # a worker opens the files itself
        return state

    # ------------------------------------------------------------------ opening
    def _handle(self, path):
        if self._pid != os.getpid():
            self._open, self._pid = {}, os.getpid()
        h = self._open.get(path)
        if h is None:
            if self.kind == "matrix":
                h = self.opener(path, self.key, self.column, self.name)
            else:
                h = self.opener(path)
            self._open[path] = h
        return h

    def __del__(self):  # the raw file descriptors and reopened files of a source nobody closed
        try:
            if self._pid == os.getpid():
                self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def close(self):
        for h in self._open.values():
            if isinstance(h, _Raw):
                os.close(h.fd)
            elif hasattr(h, "close"):
                h.close()
        self._open = {}

    def _raw(self, seg: Segment, ds):
        """The segment's rows as plain bytes of its file (:class:`_Raw`), when its data set is
        stored contiguously, unfiltered, in the dtype read (what an uncompressed store
        writes); else None (read through h5py). Looked up once per process."""
        key = ("raw", seg.path)
        if key not in self._open:
            raw = None
            try:
                layout = ds.id.get_create_plist().get_layout()
                offset = ds.id.get_offset()

                if (layout == h5py.h5d.CONTIGUOUS and offset is not None and ds.dtype == np.dtype(self.dtype)
                        and ds.dtype.isnative and ds.shape == (seg.rows, self.features)):
                    raw = _Raw(os.open(seg.path, os.O_RDONLY), int(offset), self.features * ds.dtype.itemsize)
            except (OSError, AttributeError, ValueError):  # pragma: no cover - an unusual file: h5py reads it
                raw = None
            kept = self._open.setdefault(key, raw)  # another reading thread may have been first
            if raw is not None and kept is not raw:
                os.close(raw.fd)
        return self._open[key]

    def advise(self, pieces) -> None:
        """Ask the kernel to start reading rows ``[(a, b), ...]`` from the disk now (all at
        once, so the disk sees many requests together instead of one block after the other);
        a no-op where the rows are not plain bytes of a file (compressed stores, embedding files)."""
        if not hasattr(os, "posix_fadvise"):  # pragma: no cover - not Linux
            return
        if self.kind != "store":
            return
        for seg in self.segments:
            if not any(max(a, seg.start) < min(b, seg.start + seg.rows) for a, b in pieces):
                continue
            with integrity.h5_errors(seg.path):
                raw = self._raw(seg, self._datasets(seg)[0])
            if raw is None:
                continue
            for a, b in pieces:
                lo, hi = max(a, seg.start), min(b, seg.start + seg.rows)
                if lo < hi:
                    os.posix_fadvise(raw.fd, raw.offset + (lo - seg.start) * raw.row_bytes, (hi - lo) * raw.row_bytes,
                                     os.POSIX_FADV_WILLNEED)

    # ------------------------------------------------------------------ reading
    def read(self, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[a, b)`` as an ndarray (rows, features), written into ``out`` (a C-contiguous
        array of that shape and the stored dtype) when given; every checksummed block they
        touch is checked when ``verify`` (a mismatch is a :class:`StoreError`, never data)."""
        if out is None:
            out = np.empty((b - a, self.features), dtype=self.dtype)
        if self.kind == "matrix":
            out[...] = self._handle(self.path)[a:b]
            return out
        for seg in self.segments:
            lo, hi = max(a, seg.start), min(b, seg.start + seg.rows)
            if lo < hi:
                self._read_segment(seg, lo - seg.start, hi - seg.start, out[lo - a:hi - a])
        return out

    def _datasets(self, seg: Segment):
        """The segment's h5py data set, and (when verifying) all its block digests, read once
        per process (one small read instead of one per block). The data set itself is looked
        up per read and not kept open: HDF5 shares an open data set's buffers with every
        later opening of it in the process, so a file changed on disk would be read stale."""
        store = self._handle(seg.path)
        key = ("digests", seg.path)
        sums = self._open.get(key)
        if sums is None and self.verify and seg.block_rows:
            sums = self._open[key] = store.file[f"layers/{self.name}/checksums"][()]
        return store.file[f"layers/{self.name}/data"], sums

    def _read_segment(self, seg: Segment, a: int, b: int, out: np.ndarray) -> None:
        verify = self.verify and seg.block_rows
        br = seg.block_rows or 1
        b0, b1 = a // br, -(-b // br)
        lo, hi = b0 * br, min(seg.rows, b1 * br)
        if not verify:
            lo, hi = a, b
        with integrity.h5_errors(seg.path):
            ds, all_sums = self._datasets(seg)
            raw = self._raw(seg, ds)
            data = out if (lo, hi) == (a, b) else np.empty((hi - lo, self.features), dtype=self.dtype)
            off = a - lo
            if raw is not None:  # the bytes of the file, straight into the buffer (no HDF5 lock)
                raw.read(seg.path, lo, data)
            else:
                ds.read_direct(data, np.s_[lo:hi])
            if not verify:
                return
            sums = all_sums[b0:b1]
        raw = memoryview(data).cast("B")
        row_bytes = data.shape[1] * data.dtype.itemsize
        for i in range(b1 - b0):
            s, e = i * br * row_bytes, min(len(raw), (i + 1) * br * row_bytes)
            h = integrity.new_hash(seg.algorithm)
            h.update(raw[s:e])
            if h.digest() != sums[i].tobytes():
                first = (b0 + i) * br
                last = min(seg.rows, first + br) - 1
                raise StoreError(f"{seg.path}: layer {self.name} block {b0 + i} (rows {first}-{last}) does not "
                                 f"match its checksum; {HINT}")
        if data is not out:
            out[...] = data[off:off + (b - a)]


class SourceRows:
    """Rows of a :class:`Source` as a picklable array-like for ``dask.array.from_array``:
    every read checks the checksummed blocks it touches (what a derived store written on
    Dask reads, so a corrupt source block is an error on the worker, never fresh checksums
    over it)."""

    ndim = 2

    def __init__(self, source: Source):
        self.source = source
        self.shape = (source.rows, source.features)
        self.dtype = np.dtype(source.dtype)

    def __getitem__(self, key):
        rows, cols = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        if not isinstance(rows, slice):
            raise TypeError(f"SourceRows reads row slices, got {rows!r}")
        a, b, step = rows.indices(self.shape[0])
        data = self.source.read(a, max(a, b))[::step]
        return data[(slice(None), *cols)] if cols else data

    def __repr__(self):
        return f"SourceRows({self.source.path!r}, {self.source.name!r}, verify={self.source.verify})"


@dataclass
class _Raw:
    """A contiguous, unfiltered HDF5 data set as bytes of its file: row ``r`` at
    ``offset + r * row_bytes`` (read with ``os.preadv``, which releases the GIL)."""

    fd: int
    offset: int
    row_bytes: int

    def read(self, path, a: int, out: np.ndarray) -> None:
        view = memoryview(out).cast("B")
        pos, done = self.offset + a * self.row_bytes, 0
        while done < len(view):
            n = os.preadv(self.fd, [view[done:]], pos + done)
            if n <= 0:
                raise StoreError(f"cannot read {path}: the file is truncated; {HINT}")
            done += n
