"""The actkit store: one HDF5 file per extraction (or analysis) run.

This is the only module that knows the file layout (documented for plain h5py users in
``docs/store-format.md``)::

    /                       attrs: actkit_format, complete, n_samples, created_at,
                                   fingerprint, inputs_fingerprint, request (JSON),
                                   request_hash, provenance (JSON), layer_order (JSON)
    /provenance             attrs: one per provenance key (model id, revision, versions, ...)
    /layers/<name>/data     (rows, features) float32 | float16, row-major
    /layers/<name>/index    (rows, 2) int64: [sample, position]; position -1 = pooled row
    /params/<name>          fitted parameters and model matrices (mean, whitening_, unembedding)

Crash safety.  A store is written to ``<path>.partial`` with every dataset allocated at its
final size when the file is created; afterwards the writer only overwrites raw data in place,
so the file's metadata never changes while rows stream in and a ``kill -9`` can never leave an
unreadable file.  After each batch, :meth:`StoreWriter.checkpoint` flushes the data and then
atomically replaces ``<path>.progress.json`` (the resume cursor).  The identical request
resumes from the cursor; :meth:`StoreWriter.finalize` flips ``complete`` and renames the
partial file onto ``<path>`` (a completed store only ever appears whole).  Files are
bitwise reproducible: no HDF5 timestamps, and ``created_at`` honours ``SOURCE_DATE_EPOCH``.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from actkit.errors import LayerError, StoreError, StoreIncompleteError

FORMAT = "actkit-store/1"
PARTIAL_SUFFIX = ".partial"
PROGRESS_SUFFIX = ".progress.json"
_STORAGE_DTYPES = ("float32", "float16", "float64")
_BLOCK_BYTES = 64 * 2**20  # default row-block size for streaming reads


# ----------------------------------------------------------------------------- helpers
def _h5py():
    import h5py

    return h5py


def _json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=_json_default, separators=(",", ":"))


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def request_hash(request: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a request (what was asked for, not when)."""
    return hashlib.sha256(_json(dict(request)).encode()).hexdigest()


def partial_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + PARTIAL_SUFFIX)


def progress_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + PROGRESS_SUFFIX)


def _created_at() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = float(epoch) if epoch else time.time()
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat(timespec="seconds")


def _write_json_atomic(path: Path, obj: Mapping[str, Any], fsync: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(_json(dict(obj)))
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _attr_value(value: Any):
    """Provenance values as HDF5 attributes: scalars as-is, everything else as JSON."""
    if value is None:
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, str, np.integer, np.floating)):
        return value
    return _json(value)


def _check_layer_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise StoreError(f"invalid layer name {name!r}: use a non-empty name without '/'")


def _open_h5(path: Path, mode: str = "r"):
    h5py = _h5py()
    try:
        return h5py.File(path, mode, locking=mode != "r" or None)
    except FileNotFoundError:
        raise
    except OSError as exc:
        text = str(exc)
        if "lock" in text.lower():
            raise StoreError(
                f"{path} is open for writing in another process; wait for it to finish"
            ) from None
        if not _looks_like_hdf5(path):
            raise StoreError(f"{path} is not an HDF5 file") from None
        raise StoreError(f"{path} is not a readable HDF5 file (truncated or corrupt)") from None


def _looks_like_hdf5(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return head == b"\x89HDF\r\n\x1a\n"


# ----------------------------------------------------------------------------- writing
@dataclass
class LayerSpec:
    """What one layer of a new store will hold.

    Parameters
    ----------
    name : str
        Layer name (the module's dotted path for extracted layers).
    rows, features : int
        Final shape of the layer's matrix.
    dtype : {"float32", "float16", "float64"}
        Storage dtype.
    index : ndarray of shape (rows, 2), optional
        ``[sample, position]`` of each row; ``None`` means one row per sample
        (``[i, -1]``).
    attrs : dict
        Extra attributes (pooling, module output shape, ...), stored on the layer group.
    """

    name: str
    rows: int
    features: int
    dtype: str = "float32"
    index: np.ndarray | None = None
    attrs: dict = field(default_factory=dict)


def create_store(
    path: str | os.PathLike,
    layers: Sequence[LayerSpec],
    *,
    n_samples: int,
    request: Mapping[str, Any],
    provenance: Mapping[str, Any] | None = None,
    params: Mapping[str, np.ndarray] | None = None,
    inputs_fingerprint: str | None = None,
    overwrite: bool = False,
    compression: str | None = None,
) -> "StoreWriter":
    """Create a store, or resume the unfinished store of the identical request.

    Returns a :class:`StoreWriter`; ``writer.complete`` is True when ``path`` already holds
    the finished store of the identical request (nothing to do), and
    ``writer.samples_done`` is where to resume.

    Raises :class:`~actkit.errors.StoreError` when ``path`` holds something else (unless
    ``overwrite``), or its folder is missing or not writable.  With ``overwrite`` the
    existing file is left untouched until the new store is finalised.
    """
    path = Path(path)
    if compression not in (None, "gzip", "lzf"):
        raise StoreError(f"unknown compression {compression!r}: use gzip or lzf")
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise StoreError(f"output path {path} is a directory; give a file name like {path}/store.h5")
    if not parent.is_dir():
        raise StoreError(f"cannot write {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"cannot write {path}: folder {parent} is not writable")
    specs = list(layers)
    names = [s.name for s in specs]
    for s in specs:
        _check_layer_name(s.name)
        if s.dtype not in _STORAGE_DTYPES:
            raise StoreError(f"unsupported storage dtype {s.dtype!r} for {s.name}: use float32 or float16")
    if len(set(names)) != len(names):
        raise StoreError(f"duplicate layer names: {names}")

    full_request = {"request": dict(request), "compression": compression}
    rhash = request_hash(full_request)

    # 1. an existing finished file at `path`
    if path.exists() and not overwrite:
        existing = _existing_request_hash(path)
        if existing == rhash:
            return StoreWriter._already_complete(path)
        what = "a store made by a different command" if existing else "a file that is not an actkit store"
        raise StoreError(f"{path} already holds {what}; pass --overwrite (overwrite=True) to replace it")

    # 2. an unfinished partial file
    partial, progress = partial_path(path), progress_path(path)
    if partial.exists():
        state = _read_json(progress)
        if state is not None and state.get("request_hash") == rhash and not overwrite:
            return StoreWriter._resume(path, state)
        if state is not None and state.get("request_hash") != rhash and not overwrite:
            raise StoreError(
                f"an unfinished store from a different command is at {partial}; rerun that "
                "command to finish it, or pass --overwrite to discard it"
            )
        # no cursor (killed while creating), or overwrite: start again
        partial.unlink()
        progress.unlink(missing_ok=True)

    _free_space_check(parent, specs, params)
    rows_index = {}
    for s in specs:
        if s.index is not None:
            idx = np.ascontiguousarray(s.index, dtype=np.int64)
            if idx.shape != (s.rows, 2):
                raise StoreError(f"index of {s.name} has shape {idx.shape}, expected ({s.rows}, 2)")
        else:
            idx = np.stack([np.arange(s.rows, dtype=np.int64), -np.ones(s.rows, np.int64)], 1)
        rows_index[s.name] = idx

    created_at = _created_at()
    prov = dict(provenance or {})
    fingerprint = hashlib.sha256(
        _json({"request_hash": rhash, "inputs": inputs_fingerprint, "created_at": created_at}).encode()
    ).hexdigest()
    h5py = _h5py()
    try:
        with h5py.File(partial, "w", libver="earliest", track_order=False) as f:
            f.attrs["actkit_format"] = FORMAT
            f.attrs["complete"] = False
            f.attrs["n_samples"] = np.int64(n_samples)
            f.attrs["created_at"] = created_at
            f.attrs["fingerprint"] = fingerprint
            f.attrs["inputs_fingerprint"] = inputs_fingerprint or ""
            f.attrs["request"] = _json(full_request)
            f.attrs["request_hash"] = rhash
            f.attrs["provenance"] = _json(prov)
            f.attrs["layer_order"] = _json(names)
            g = f.create_group("provenance")
            for key in sorted(prov):
                g.attrs[key] = _attr_value(prov[key])
            lg = f.create_group("layers")
            for s in specs:
                grp = lg.create_group(s.name)
                grp.attrs["rows"] = np.int64(s.rows)
                grp.attrs["features"] = np.int64(s.features)
                for key in sorted(s.attrs):
                    grp.attrs[key] = _attr_value(s.attrs[key])
                _create_preallocated(grp, "data", (s.rows, s.features), np.dtype(s.dtype))
                grp.create_dataset("index", data=rows_index[s.name])
            pg = f.create_group("params")
            for key in sorted(params or {}):
                arr = np.asarray(params[key])
                if arr.dtype.kind not in "biuf":
                    raise StoreError(f"parameter {key!r} must be numeric, got {arr.dtype}")
                pg.create_dataset(key, data=arr)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    state = {
        "request_hash": rhash,
        "n_samples": int(n_samples),
        "samples_done": 0,
        "rows_done": {s.name: 0 for s in specs},
        "rows_total": {s.name: int(s.rows) for s in specs},
        "compression": compression,
    }
    _write_json_atomic(progress, state)
    return StoreWriter._resume(path, state)


def _create_preallocated(group, name: str, shape: tuple[int, int], dtype: np.dtype):
    """A contiguous dataset whose file space is allocated now (so later writes never
    touch HDF5 metadata) and never filled (so allocation is free)."""
    h5py = _h5py()
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return group.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl, fill_time="never")


def _free_space_check(parent: Path, specs, params) -> None:
    need = sum(s.rows * s.features * np.dtype(s.dtype).itemsize + s.rows * 16 for s in specs)
    need += sum(np.asarray(v).nbytes for v in (params or {}).values())
    free = shutil.disk_usage(parent).free
    if need > free:
        raise StoreError(
            f"not enough disk space in {parent}: the store needs {need / 2**30:.2f} GiB, "
            f"{free / 2**30:.2f} GiB free"
        )


def _existing_request_hash(path: Path) -> str | None:
    if not _looks_like_hdf5(path):
        return None
    try:
        with _h5py().File(path, "r") as f:
            if f.attrs.get("actkit_format") != FORMAT or not bool(f.attrs.get("complete")):
                return None
            return str(f.attrs["request_hash"])
    except Exception:  # unreadable file: treated as "not our store"
        return None


class StoreWriter:
    """Writes rows into a store created by :func:`create_store`.

    Attributes
    ----------
    path : Path
        Where the finished store will be.
    complete : bool
        True if the identical store already exists (then there is nothing to write).
    samples_done : int
        Input samples already written (the resume point).
    rows_done : dict
        Rows already written, per layer.
    """

    def __init__(self, path: Path, state: dict | None, complete: bool):
        self.path = Path(path)
        self.complete = complete
        self._state = state or {}
        self.samples_done = int(self._state.get("samples_done", 0))
        self.rows_done = dict(self._state.get("rows_done", {}))
        self._rows_total = dict(self._state.get("rows_total", {}))
        self.n_samples = int(self._state.get("n_samples", 0))
        self._file = None
        self.checkpoint_interval = 0.5  # seconds between resume-cursor writes
        self._committed = (self.samples_done, dict(self.rows_done))
        self._last_checkpoint = -float("inf")
        if not complete:
            self._file = _open_h5(partial_path(path), "r+")
            self._data = {name: self._file[f"layers/{name}/data"] for name in self._rows_total}

    @classmethod
    def _already_complete(cls, path: Path) -> "StoreWriter":
        w = cls(path, None, complete=True)
        with _h5py().File(path, "r") as f:
            w.n_samples = w.samples_done = int(f.attrs["n_samples"])
        return w

    @classmethod
    def _resume(cls, path: Path, state: dict) -> "StoreWriter":
        return cls(path, state, complete=False)

    @property
    def layers(self) -> list[str]:
        return list(self._rows_total)

    def append(self, name: str, rows) -> None:
        """Write ``rows`` (array of shape (r, features)) at layer ``name``'s row cursor."""
        self._require_open()
        try:
            ds = self._data[name]
        except KeyError:
            raise LayerError(f"store has no layer {name!r}; layers: {', '.join(self._data)}") from None
        arr = np.asarray(rows)
        if arr.ndim != 2 or arr.shape[1] != ds.shape[1]:
            raise ValueError(f"rows for {name} have shape {arr.shape}, expected (r, {ds.shape[1]})")
        start = self.rows_done[name]
        stop = start + arr.shape[0]
        if stop > ds.shape[0]:
            raise ValueError(f"layer {name} holds {ds.shape[0]} rows; writing rows {start}:{stop}")
        if arr.shape[0]:
            arr = np.ascontiguousarray(arr, dtype=ds.dtype)
            ds.write_direct(arr, dest_sel=np.s_[start:stop])
        self.rows_done[name] = stop

    def write_rows(self, name: str, start: int, rows) -> None:
        """Write ``rows`` at an explicit row offset (the cursor moves to the end of them)."""
        self._require_open()
        self.rows_done[name] = int(start)
        self.append(name, rows)

    def checkpoint(self, samples_done: int, *, force: bool = False) -> None:
        """Record that the first ``samples_done`` samples are fully appended.

        The resume cursor is written (data flushed first, then the cursor replaced
        atomically) at most every ``checkpoint_interval`` seconds, unless ``force``: a cursor
        that lags behind only means a few batches are recomputed after a crash.  This
        survives ``kill -9`` of the process; it does not ``fsync`` (power loss may lose the
        last seconds, never the file's readability).
        """
        self._require_open()
        self.samples_done = int(samples_done)
        self._committed = (self.samples_done, dict(self.rows_done))
        now = time.monotonic()
        if not force and now - self._last_checkpoint < self.checkpoint_interval:
            return
        self._write_cursor()

    def _write_cursor(self) -> None:
        self._file.flush()
        done, rows = self._committed
        self._state.update(samples_done=done, rows_done=rows)
        _write_json_atomic(progress_path(self.path), self._state)
        self._last_checkpoint = time.monotonic()

    def finalize(self) -> Path:
        """Check every row was written, mark the store complete and move it into place."""
        self._require_open()
        missing = {n: (self.rows_done[n], t) for n, t in self._rows_total.items() if self.rows_done[n] != t}
        if missing:
            detail = ", ".join(f"{n}: {d}/{t}" for n, (d, t) in missing.items())
            raise StoreError(f"cannot finalise {self.path}: rows missing ({detail})")
        self._file.attrs["complete"] = True
        self._file.flush()
        self._file.close()
        self._file = None
        partial = partial_path(self.path)
        compression = self._state.get("compression")
        if compression:
            tmp = Path(str(self.path) + ".repack")
            _repack(partial, tmp, compression)
            os.replace(tmp, self.path)
            partial.unlink()
        else:
            os.replace(partial, self.path)
        progress_path(self.path).unlink(missing_ok=True)
        self.complete = True
        return self.path

    def abort(self) -> None:
        """Close and delete the unfinished store (for commands that do not resume)."""
        self.close()
        partial_path(self.path).unlink(missing_ok=True)
        progress_path(self.path).unlink(missing_ok=True)

    def close(self) -> None:
        """Close without finalising (the partial store stays, ready to resume)."""
        if self._file is not None:
            if self._state:
                self._write_cursor()  # the last consistent cursor, not half a batch
            self._file.close()
            self._file = None

    def _require_open(self):
        if self._file is None:
            raise StoreError(f"store {self.path} is not open for writing")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _repack(src: Path, dst: Path, compression: str) -> None:
    """Copy a finished store into a chunked, compressed file."""
    h5py = _h5py()
    with h5py.File(src, "r") as fin, h5py.File(dst, "w", libver="earliest") as fout:
        for k, v in fin.attrs.items():
            fout.attrs[k] = v
        def visit(name, obj):
            if isinstance(obj, h5py.Group):
                g = fout.require_group(name)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
            elif name.endswith("/data") and name.startswith("layers/"):
                rows, feats = obj.shape
                chunk_rows = max(1, min(rows, (1 << 20) // max(1, feats * obj.dtype.itemsize)))
                out = fout.create_dataset(
                    name, shape=obj.shape, dtype=obj.dtype, compression=compression,
                    chunks=(chunk_rows, feats) if rows else None, shuffle=compression == "gzip",
                )
                step = max(chunk_rows, _BLOCK_BYTES // max(1, feats * obj.dtype.itemsize))
                for s in range(0, rows, step):
                    out[s : s + step] = obj[s : s + step]
            else:
                fout.create_dataset(name, data=obj[()])
        fin.visititems(visit)


# ----------------------------------------------------------------------------- reading
class Layer:
    """Array-like view of one stored layer: ``(rows, features)``.

    Supports ``len``, ``shape``, ``dtype``, slicing (``layer[a:b]``, integer and sorted
    integer-array row selection), ``np.asarray(layer)`` and :meth:`iter_blocks` for
    streaming reads.  Reading is lazy: nothing is loaded until indexed.
    """

    ndim = 2

    def __init__(self, store: "Store", name: str, rows: int | None = None):
        self.store = store
        self.name = name
        self.dataset = store.file[f"layers/{name}/data"]
        self._rows = self.dataset.shape[0] if rows is None else int(rows)
        self.attrs = {k: _decode_attr(v) for k, v in store.file[f"layers/{name}"].attrs.items()}

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
        return self.store.file[f"layers/{self.name}/index"][: self._rows]

    @property
    def groups(self) -> np.ndarray:
        """(rows,) int64 sample id of every row: rows of one input share a group."""
        return self.store.file[f"layers/{self.name}/index"][: self._rows, 0]

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        norm = self._normalise_rows(rows)
        if isinstance(norm, _Reorder):
            data = self.dataset[(norm.uniq, *rest)] if rest else self.dataset[norm.uniq]
            return data[norm.inverse]
        return self.dataset[(norm, *rest)] if rest else self.dataset[norm]

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
        out = self.dataset[: self._rows]
        return out if dtype is None else out.astype(dtype, copy=False)

    def to_numpy(self, dtype=None) -> np.ndarray:
        return self.__array__(dtype)

    def to_dask(self, block_rows: int | None = None):
        """A ``dask.array.Array`` of this layer, one chunk per row block (default ~64 MiB).

        Every chunk's task opens the file by path in the process that runs it (no h5py
        handle is shipped); needs ``pip install "actkit[dask]"``. See ``docs/dask.md``."""
        from actkit._dask import to_dask

        return to_dask(self, block_rows)

    def iter_blocks(self, block_rows: int | None = None, *, start: int = 0, stop: int | None = None,
                    dtype=None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(first_row, block)`` pairs covering rows ``start:stop`` in order."""
        stop = self._rows if stop is None else min(stop, self._rows)
        if block_rows is None:
            block_rows = default_block_rows(self.shape[1], self.dtype.itemsize)
        for s in range(start, stop, block_rows):
            block = self.dataset[s : min(stop, s + block_rows)]
            yield s, (block if dtype is None else block.astype(dtype, copy=False))


class _Reorder:
    """Row selection h5py cannot do directly (unsorted / repeated): sorted read + take."""

    def __init__(self, uniq, inverse):
        self.uniq, self.inverse = uniq, inverse




def default_block_rows(features: int, itemsize: int = 4, target_bytes: int = _BLOCK_BYTES) -> int:
    """Rows per streaming block so that one block holds about ``target_bytes``."""
    return max(1, int(target_bytes // max(1, features * itemsize)))


def _decode_attr(value):
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


class Store:
    """A store opened for reading (see :func:`open_store`).

    Attributes
    ----------
    path : Path
    layers : list of str
        Layer names, in the order they were written.
    complete : bool
    provenance : dict
    params : dict of str -> ndarray
        Fitted parameters and model matrices (loaded on first access).
    """

    def __init__(self, path: Path, file, complete: bool, progress: dict | None):
        self.path = Path(path)
        self.file = file
        self.complete = complete
        self.progress = progress
        self._params = None
        order = json.loads(_decode_attr(file.attrs.get("layer_order", "[]")))
        present = list(file["layers"]) if "layers" in file else []
        self.layers = [n for n in order if n in present] + [n for n in present if n not in order]

    # --- metadata
    @property
    def attrs(self) -> dict:
        return {k: _decode_attr(v) for k, v in self.file.attrs.items()}

    @property
    def provenance(self) -> dict:
        return json.loads(_decode_attr(self.file.attrs.get("provenance", "{}")))

    @property
    def request(self) -> dict:
        return json.loads(_decode_attr(self.file.attrs.get("request", "{}")))

    @property
    def fingerprint(self) -> str:
        return str(_decode_attr(self.file.attrs.get("fingerprint", "")))

    @property
    def inputs_fingerprint(self) -> str:
        return str(_decode_attr(self.file.attrs.get("inputs_fingerprint", "")))

    @property
    def n_samples(self) -> int:
        return int(self.file.attrs.get("n_samples", 0))

    @property
    def params(self) -> dict[str, np.ndarray]:
        if self._params is None:
            self._params = {k: v[()] for k, v in self.file["params"].items()} if "params" in self.file else {}
        return self._params

    # --- layers
    def __getitem__(self, name: str) -> Layer:
        if name not in self.layers:
            raise LayerError(_unknown(name, self.layers, f"store {self.path}"))
        rows = None
        if self.progress is not None:
            rows = int(self.progress.get("rows_done", {}).get(name, 0))
        return Layer(self, name, rows)

    def __contains__(self, name) -> bool:
        return name in self.layers

    def __iter__(self):
        return iter(self.layers)

    def __len__(self):
        return len(self.layers)

    def info(self) -> dict:
        """The JSON-ready description printed by ``actkit info --json``."""
        layers = {}
        for name in self.layers:
            layer = self[name]
            entry = {
                "dataset": layer.dataset_path,
                "index": f"/layers/{name}/index",
                "shape": list(layer.shape),
                "dtype": str(layer.dtype),
            }
            entry.update({k: v for k, v in layer.attrs.items() if k not in ("rows", "features")})
            layers[name] = entry
        out = {
            "path": str(self.path),
            "format": _decode_attr(self.file.attrs.get("actkit_format")),
            "complete": bool(self.complete),
            "n_samples": self.n_samples,
            "created_at": _decode_attr(self.file.attrs.get("created_at")),
            "fingerprint": self.fingerprint,
            "inputs_fingerprint": self.inputs_fingerprint,
            "layers": layers,
            "params": {k: {"dataset": f"/params/{k}", "shape": list(v.shape), "dtype": str(v.dtype)}
                       for k, v in (self.file["params"].items() if "params" in self.file else [])},
            "provenance": self.provenance,
        }
        if self.progress is not None:
            out["progress"] = {
                "samples_done": int(self.progress.get("samples_done", 0)),
                "n_samples": int(self.progress.get("n_samples", 0)),
            }
        return out

    def close(self) -> None:
        try:
            self.file.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "complete" if self.complete else "INCOMPLETE"
        return f"<actkit Store {str(self.path)!r} {state}, layers={self.layers}>"


def _unknown(name: str, choices: Sequence[str], where: str) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(list(choices)[:12]) + (", ..." if len(choices) > 12 else "")
    return f"unknown layer {name!r} in {where}{hint} (available: {shown})"


def open_store(path: str | os.PathLike, *, allow_incomplete: bool = False) -> Store:
    """Open a store for reading.

    Parameters
    ----------
    path : str or Path
        The store (``.h5``) as given to ``extract``/``whiten``/``ica``/...
    allow_incomplete : bool, default False
        Open a store that is still being written (or whose writer was killed): its layers
        then show only the rows written so far.  Without it such a store is refused with
        :class:`~actkit.errors.StoreIncompleteError`.

    Raises
    ------
    StoreError
        Missing, non-HDF5, truncated or foreign files.
    """
    path = Path(path)
    partial = partial_path(path)
    progress = None
    target = path
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a store file")
    if not path.exists():
        if partial.exists():
            progress = _read_json(progress_path(path)) or {}
            if not allow_incomplete:
                done, total = progress.get("samples_done", 0), progress.get("n_samples", "?")
                raise StoreIncompleteError(
                    f"store {path} is not finished ({done}/{total} samples written); rerun the "
                    "same command to resume it"
                )
            target = partial
        else:
            raise StoreError(f"no such store: {path}")
    if not _looks_like_hdf5(target):
        raise StoreError(f"{target} is not an HDF5 file")
    h5py = _h5py()
    try:
        f = h5py.File(target, "r", locking=False)
    except OSError:
        raise StoreError(f"{target} is not a readable HDF5 file (truncated or corrupt)") from None
    try:
        fmt = _decode_attr(f.attrs.get("actkit_format"))
        if fmt != FORMAT:
            raise StoreError(f"{target} is an HDF5 file but not an actkit store (format {fmt!r})")
        complete = bool(f.attrs.get("complete")) and target == path
        if not complete and not allow_incomplete:
            raise StoreIncompleteError(f"store {path} is not marked complete; rerun the command that wrote it")
        # sanity: every layer readable
        for name in f.get("layers", {}):
            f[f"layers/{name}/data"].shape  # noqa: B018
    except StoreError:
        f.close()
        raise
    except Exception:
        f.close()
        raise StoreError(f"{target} is not a readable actkit store (truncated or corrupt)") from None
    return Store(path, f, complete, progress)
