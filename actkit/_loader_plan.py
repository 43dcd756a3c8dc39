"""What :mod:`actkit.loader` reads, and in which order (no torch here).

* :class:`Source` -- one layer as a picklable description (a store layer, with its shards and
  checksum blocks, or an embedding file). Each process opens the files itself on first read
  (a torch ``DataLoader`` worker never inherits an h5py handle) and reads rows ``[a, b)``
  checked against the store's block checksums.
* :func:`epoch_plan` -- the blocks of one rank for one epoch, cut into shuffle windows.
* :func:`round_robin` -- how many batches each of S streams has served after the first
  ``n`` batches of their round-robin interleaving (what a ``DataLoader`` with S workers
  yields, in order).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from actkit.errors import StoreError, ValidationError

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
                from actkit.matrix_files import open_matrix

                h = open_matrix(path, key=self.key, column=self.column, layer=self.name, check=False)[self.name]
            else:
                from actkit.store import open_store

                h = open_store(path)
            self._open[path] = h
        return h

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
                import h5py

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
        from actkit.store import _integrity as integrity

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
        from actkit.store import _integrity as integrity

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


def source_of(layer, verify: bool = True) -> Source:
    """The :class:`Source` of a store :class:`~actkit.store.Layer` or an embedding file's
    :class:`~actkit.matrix_files.MatrixLayer`."""
    from actkit.matrix_files import MatrixLayer
    from actkit.store import Layer
    from actkit.store import _integrity as integrity

    rows, feats = (int(x) for x in layer.shape)
    if isinstance(layer, MatrixLayer):
        prov = layer.store.provenance
        return Source("matrix", str(layer.store.path), layer.name, rows, feats, str(layer.dtype),
                      key=prov.get("key"), column=prov.get("column"), verify=verify)
    if not isinstance(layer, Layer):
        raise ValidationError(f"to_torch reads store layers and embedding files, not {type(layer).__name__}")
    store = layer.store
    if not store.complete:
        raise StoreError(f"store {store.path} is not finished; the loader reads finished stores only")
    meta = store.meta
    segments = []
    if meta.get("shards"):
        from actkit.store import open_store

        start = 0
        for rel in meta["shards"]:
            p = store.path.parent / rel
            with open_store(p) as shard:
                n = len(shard[layer.name])
                br = shard.meta["layers"][layer.name].get("block_rows")
                algo = integrity.checksum_algorithm(shard.meta)
            segments.append(Segment(str(p), start, n, br, algo))
            start += n
        if start != rows:
            raise StoreError(f"store {store.path}: its shards hold {start} rows of layer {layer.name}, "
                             f"the index says {rows}")
    else:
        segments.append(Segment(str(store.path), 0, rows, meta["layers"][layer.name].get("block_rows"),
                                integrity.checksum_algorithm(meta)))
    return Source("store", str(store.path), layer.name, rows, feats, str(layer.dtype), segments, verify=verify)


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


def default_block_rows(sources) -> int:
    """Rows per loader block: the checksum block of the first store source (about 1 MiB of
    rows; reads then never cross a checksummed block), else about 1 MiB of rows."""
    for s in sources:
        for seg in s.segments:
            if seg.block_rows:
                return int(seg.block_rows)
    row_bytes = sum(s.features * np.dtype(s.dtype).itemsize for s in sources)
    return max(1, 2**20 // max(1, row_bytes))


# ---------------------------------------------------------------------------- the order
@dataclass
class Window:
    """Shuffle window ``index`` of a rank: ``pieces`` = ``[(first_row, stop_row), ...]`` of the
    layer, in read order; its rows are emitted in the order ``perm`` (seeded)."""

    index: int
    pieces: list
    rows: int


def rank_blocks(n_rows: int, block_rows: int, seed: int, epoch: int, shuffle: bool, rank: int,
                world: int) -> np.ndarray:
    """The blocks (ids; block i = rows ``[i*block_rows, (i+1)*block_rows)``) of ``rank``:
    every ``world``-th block of the epoch's seeded permutation (of ``range(blocks)`` when
    not shuffling), so the ranks' blocks partition the layer."""
    n_blocks = -(-n_rows // block_rows)
    order = np.random.default_rng([seed, epoch]).permutation(n_blocks) if shuffle else np.arange(n_blocks)
    return order[rank::world]


def windows(blocks: np.ndarray, n_rows: int, block_rows: int, window_rows: int) -> list[Window]:
    """Cut the rows of ``blocks`` (in order) into windows of ``window_rows`` rows (the last
    one shorter)."""
    out, pieces, filled = [], [], 0
    for b in blocks:
        a, z = int(b) * block_rows, min(n_rows, (int(b) + 1) * block_rows)
        while a < z:
            take = min(z - a, window_rows - filled)
            pieces.append((a, a + take))
            a += take
            filled += take
            if filled == window_rows:
                out.append(Window(len(out), pieces, filled))
                pieces, filled = [], 0
    if filled:
        out.append(Window(len(out), pieces, filled))
    return out


def window_perm(rows: int, seed: int, epoch: int, rank: int, index: int, shuffle: bool) -> np.ndarray:
    """The seeded order in which a window's rows are emitted."""
    if not shuffle:
        return np.arange(rows)
    return np.random.default_rng([seed, epoch, rank, index, 1]).permutation(rows)


def round_robin(counts, n: int) -> np.ndarray:
    """Batches taken from each of S streams after the first ``n`` batches of their
    round-robin interleaving (stream 0, 1, ..., S-1, 0, 1, ...; an exhausted stream is
    skipped), as a ``DataLoader`` with S workers yields them.

    Parameters
    ----------
    counts : sequence of int, length S
        Batches of each stream.
    n : int
        Batches yielded so far (0 <= n <= sum(counts)).

    Returns
    -------
    ndarray of int64, shape (S,)
    """
    c = np.asarray(counts, dtype=np.int64)
    lo, hi = 0, int(c.max(initial=0))
    while lo < hi:  # the last round t whose start f(t) = sum(min(c, t)) is <= n
        mid = (lo + hi + 1) // 2
        if int(np.minimum(c, mid).sum()) <= n:
            lo = mid
        else:
            hi = mid - 1
    done = np.minimum(c, lo)
    extra = n - int(done.sum())
    active = np.flatnonzero(c > lo)
    done[active[:extra]] += 1
    return done
