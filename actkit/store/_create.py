"""Creating a store (or resuming the unfinished store of the identical request)."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from actkit._atomic import Temporary
from actkit._faults import fault
from actkit._signals import uninterrupted
from actkit.errors import StoreError
from actkit.store import _inputs as recorded_inputs
from actkit.store import _integrity as integrity
from actkit.store._format import (FORMAT, READABLE_FORMATS, STORAGE_DTYPES, attr_value, canonical_json, check_layer_name,
                                  created_at_now, decode_attr, h5py_module, is_actkit_store, looks_like_hdf5, open_read,
                                  partial_path, progress_path, read_json, request_hash, write_progress)
from actkit.store._writer import StoreWriter


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
    created_at: str | None = None,
    inputs: Mapping[str, Any] | None = None,
) -> "StoreWriter":
    """Create a store, or resume the unfinished store of the identical request.

    Returns a :class:`StoreWriter`; ``writer.complete`` is True when ``path`` already holds
    the finished store of the identical request (nothing to do), and
    ``writer.samples_done`` is where to resume.

    Raises :class:`~actkit.errors.StoreError` when ``path`` holds something else (unless
    ``overwrite``), or its folder is missing or not writable.  With ``overwrite`` the
    existing file is left untouched until the new store is finalised.  ``created_at``
    (default: now, or ``SOURCE_DATE_EPOCH``) keeps a copy's fingerprint that of its source
    (:func:`~actkit.store.consolidate`). ``inputs``: what each input sample was
    (:func:`~actkit.store.text_record` / :func:`~actkit.store.image_record`), written once
    as ``/inputs``.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    specs = _checked_request(path, layers, compression)

    full_request = {"request": dict(request), "compression": compression}
    rhash = request_hash(full_request)

    found = _existing_store(path, rhash, full_request, overwrite)
    if found is not None:
        return found
    partial, progress = partial_path(path), progress_path(path)

    _free_space_check(parent, specs, params)
    rows_index, param_arrays = _row_indexes(specs), _param_arrays(params)

    if inputs is not None:
        recorded_inputs.check_record(inputs, n_samples)
    prov = dict(provenance or {})
    block_rows = {s.name: integrity.block_rows_for(s.features, np.dtype(s.dtype).itemsize) for s in specs}
    meta = store_meta(
        n_samples=n_samples, created_at=created_at or created_at_now(), inputs_fingerprint=inputs_fingerprint,
        full_request=full_request, provenance=prov,
        layers={s.name: {"rows": int(s.rows), "features": int(s.features), "dtype": s.dtype,
                         "attrs": json.loads(canonical_json(s.attrs)), "block_rows": block_rows[s.name],
                         "index_sha256": integrity.array_sha256(rows_index[s.name])} for s in specs},
        params_sha256={k: integrity.array_sha256(v) for k, v in param_arrays.items()},
        **({} if inputs is None else {recorded_inputs.META_KEY: recorded_inputs.meta_entry(inputs)}))
    try:
        # built under a temporary name of its own and renamed: `partial` is absent or a whole
        # store with its marker, whenever a kill comes (a killed build leaves a temporary the
        # next run removes)
        with Temporary(path) as tmp:
            _build(tmp.file(partial.name), meta, specs, rows_index, block_rows, param_arrays, inputs)
            os.replace(tmp.file(partial.name), partial)
        fault("store-created")
        state = {
            "request_hash": rhash,
            "n_samples": int(n_samples),
            "samples_done": 0,
            "rows_done": {s.name: 0 for s in specs},
            "rows_total": {s.name: int(s.rows) for s in specs},
            "compression": compression,
        }
        write_progress(progress, state)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if integrity.is_disk_full(exc):
            raise integrity.disk_full_error(partial, "creating the store") from None
        raise
    return StoreWriter._resume(path, state)


def _build(target, meta, specs, rows_index, block_rows, param_arrays, inputs) -> None:
    """Write a new store's layout (header, preallocated layers, parameters, inputs) at ``target``.

    Reserves the planned size before HDF5 writes a byte (fallocate, KEEP_SIZE: the file still
    looks empty to HDF5, which creates it through the open file object, never truncating it),
    then allocates whatever the plan missed: a disk that fills up later cannot fail a write
    mid-run, and HDF5 never meets ENOSPC (which can crash it as it closes the file).
    """
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    # h5py's file-object driver calls back into Python: a SIGTERM raised in a callback left
    # h5py's file half made (its cleanup at exit printed a traceback), so it waits until the
    # layout is written (milliseconds)
    with uninterrupted(), os.fdopen(fd, "r+b", buffering=0) as fh:
        _reserve(fh.fileno(), _planned_bytes(specs, param_arrays) + len(canonical_json(meta))
                 + recorded_inputs.planned_bytes(inputs), keep_size=True)
        with h5py_module().File(fh, "w", libver="earliest", track_order=False) as f:
            _write_layout(f, meta, specs, rows_index, block_rows, param_arrays)
            if inputs is not None:
                recorded_inputs.write_inputs(f, inputs)
        _reserve(fh.fileno(), os.fstat(fh.fileno()).st_size)


def _checked_request(path, layers, compression):
    """Check what needs no file: the compression, that ``path`` is a writable file path, the
    layer names (valid, distinct) and storage dtypes. Returns the layer specs as a list;
    raises :class:`~actkit.errors.StoreError`."""
    if compression not in (None, "gzip", "lzf"):
        raise StoreError(f"unknown compression {compression!r}: use gzip or lzf")
    if path.is_dir():
        raise StoreError(f"output path {path} is a directory; give a file name like {path}/store.h5")
    if why := unwritable_reason(path):
        raise StoreError(f"cannot write {path}: {why}")
    specs = list(layers)
    names = [s.name for s in specs]
    for s in specs:
        check_layer_name(s.name)
        if s.dtype not in STORAGE_DTYPES:
            raise StoreError(f"unsupported storage dtype {s.dtype!r} for {s.name}: use float32 or float16")
    if len(set(names)) != len(names):
        raise StoreError(f"duplicate layer names: {names}")
    return specs


def _existing_store(path, rhash, full_request, overwrite):
    """What is already at ``path`` (request hash ``rhash``): the finished store of this request
    (a complete :class:`StoreWriter`), the partial store to resume (a resuming one), or None
    where a new store is to be made (a stale partial file removed). Raises
    :class:`~actkit.errors.StoreError` where ``path`` or its partial file holds another request
    (unless ``overwrite``)."""
    # 1. an existing finished file at `path` (--overwrite replaces only a store of actkit's)
    if path.exists() and overwrite:
        refuse_foreign(path)
    if path.exists() and not overwrite:
        existing = _existing_request(path)
        if existing is not None and existing[0] == rhash:
            return StoreWriter._already_complete(path)
        raise occupied_error(path, full_request, existing)

    # 2. an unfinished partial file
    partial, progress = partial_path(path), progress_path(path)
    if partial.exists():
        state = read_json(progress)
        if state is not None and state.get("request_hash") == rhash and not overwrite:
            _reserve_written(partial)  # a file from before reservations, or holes: fail now, not mid-run
            return StoreWriter._resume(path, state)
        if state is not None and state.get("request_hash") != rhash and not overwrite:
            theirs = _partial_request(partial)
            detail = f" ({describe_difference(full_request, theirs)})" if theirs is not None else ""
            raise StoreError(
                f"an unfinished store of a different request is at {partial}{detail}; rerun that "
                "command to finish it, or pass --overwrite to discard it"
            )
        # no cursor (killed while creating), or overwrite: start again
        refuse_foreign(partial)
        partial.unlink()
        progress.unlink(missing_ok=True)

    return None


def _row_indexes(specs):
    """``{layer: int64 array (rows, 2)}``: each layer's (sample, position) row index, checked
    (default: row i of sample i, position -1)."""
    rows_index = {}
    for s in specs:
        if s.index is not None:
            idx = np.ascontiguousarray(s.index, dtype=np.int64)
            if idx.shape != (s.rows, 2):
                raise StoreError(f"index of {s.name} has shape {idx.shape}, expected ({s.rows}, 2)")
        else:
            idx = np.stack([np.arange(s.rows, dtype=np.int64), -np.ones(s.rows, np.int64)], 1)
        rows_index[s.name] = idx
    return rows_index


def _param_arrays(params):
    """``{key: numeric array}`` of the model parameters to store, in key order; raises
    :class:`~actkit.errors.StoreError` on a non-numeric one."""
    param_arrays = {}
    for key in sorted(params or {}):
        arr = np.asarray(params[key])
        if arr.dtype.kind not in "biuf":
            raise StoreError(f"parameter {key!r} must be numeric, got {arr.dtype}")
        param_arrays[key] = arr
    return param_arrays


def unwritable_reason(path) -> str | None:
    """Why nothing new can be made at ``path``: ``"folder F does not exist"`` or ``"folder F is
    not writable (REASON)"`` (F: the folder ``path`` would be in), else None.

    Proven, not guessed: the temporary folder a writer of ``path`` would build in
    (:class:`actkit._atomic.Temporary`) is made in F and removed at once; the temporaries
    that killed runs left for ``path`` are removed first. A permission check alone passes
    ``/proc`` and ``/sys`` (and, for root, every folder of a read-only mount where
    ``access(2)`` is not told), and the command then failed after its work. Whether something
    already at ``path`` may be replaced is the caller's rule; ``path`` itself is never touched.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"folder {parent} does not exist"
    probe = Temporary(path)
    try:
        probe.open()
    except OSError as exc:
        return f"folder {parent} is not writable ({exc.strerror or exc})"
    folder = probe.folder
    probe.close()
    if folder.exists():  # made but not removable: nothing actkit writes there could be replaced either
        return f"folder {parent} is not writable (a folder made there cannot be removed)"
    return None


def _write_layout(f, meta, specs, rows_index, block_rows, param_arrays) -> None:
    """Header, preallocated layers (data, index, checksums) and parameters of a new store."""
    write_header(f, meta, complete=False)
    lg = f.create_group("layers")
    for s in specs:
        grp = layer_group(lg, s.name, s.rows, s.features, s.attrs)
        _create_preallocated(grp, "data", (s.rows, s.features), np.dtype(s.dtype))
        grp.create_dataset("index", data=rows_index[s.name])
        sums = _create_preallocated(grp, "checksums",
                                    (integrity.n_blocks(s.rows, block_rows[s.name]), integrity.CHECKSUM_BYTES),
                                    np.dtype(np.uint8))
        sums.attrs["block_rows"] = np.int64(block_rows[s.name])
    pg = f.create_group("params")
    for key, arr in param_arrays.items():
        pg.create_dataset(key, data=arr)


def _reserve(fd: int, size: int, *, keep_size: bool = False) -> bool:
    """Allocate the first ``size`` bytes of the open file ``fd`` on disk now (Linux
    ``fallocate(2)``; ``keep_size``: beyond the end without changing the file's size).

    Returns False where the system or filesystem cannot (nothing is emulated by writing
    zeros); raises ``OSError(ENOSPC)`` when the disk has no room.
    """
    if size <= 0:
        return True
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fallocate = getattr(libc, "fallocate64", None) or libc.fallocate
    except (OSError, AttributeError):
        return False
    fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
    fallocate.restype = ctypes.c_int
    if fallocate(int(fd), 1 if keep_size else 0, 0, int(size)) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSPC, errno.EDQUOT):
        raise OSError(err, os.strerror(err))
    return False  # EOPNOTSUPP, ENOSYS, ...


def _reserve_written(partial: Path) -> None:
    """Allocate every hole of an unfinished store before resuming it (one line when full)."""
    try:
        with open(partial, "r+b") as fh:
            _reserve(fh.fileno(), os.fstat(fh.fileno()).st_size)
    except OSError as exc:
        if integrity.is_disk_full(exc):
            raise integrity.disk_full_error(partial, "reserving the space of the store") from None
        raise


def store_meta(*, n_samples: int, created_at: str, inputs_fingerprint: str | None, full_request: Mapping,
               provenance: Mapping, layers: Mapping[str, dict], params_sha256: Mapping[str, str],
               **extra) -> dict:
    """The metadata document (``/meta``) of a store: the one place its fields are decided
    (single stores here, sharded index stores in :mod:`actkit.store._shards`; ``extra``:
    e.g. ``shards``)."""
    rhash = request_hash(full_request)
    fingerprint = hashlib.sha256(
        canonical_json({"request_hash": rhash, "inputs": inputs_fingerprint, "created_at": created_at}).encode()
    ).hexdigest()
    return {
        "actkit_format": FORMAT,
        "n_samples": int(n_samples),
        "created_at": created_at,
        "fingerprint": fingerprint,
        "inputs_fingerprint": inputs_fingerprint or "",
        "request": dict(full_request),
        "request_hash": rhash,
        "provenance": dict(provenance),
        "layer_order": list(layers),
        "layers": dict(layers),
        "params_sha256": dict(params_sha256),
        "checksum": integrity.CHECKSUM,
        **extra,
    }


def write_header(f, meta: Mapping, *, complete: bool) -> None:
    """Root attributes (fixed-length), the checksummed ``/meta`` document and the
    ``/provenance`` group of a new store file ``f``."""
    fixed = integrity.fixed
    f.attrs["actkit_format"] = fixed(FORMAT)
    f.attrs["complete"] = bool(complete)
    f.attrs["n_samples"] = np.int64(meta["n_samples"])
    for key in ("created_at", "fingerprint", "inputs_fingerprint", "request_hash"):
        f.attrs[key] = fixed(meta[key])
    integrity.write_meta(f, dict(meta), canonical_json)
    g = f.create_group("provenance")
    prov = meta["provenance"]
    for key in sorted(prov):
        g.attrs[key] = attr_value(prov[key])


def layer_group(parent, name: str, rows: int, features: int, attrs: Mapping):
    """``/layers/<name>`` with its ``rows``, ``features`` and extra attributes."""
    grp = parent.create_group(name)
    grp.attrs["rows"] = np.int64(rows)
    grp.attrs["features"] = np.int64(features)
    for key in sorted(attrs):
        grp.attrs[key] = attr_value(attrs[key])
    return grp


def refuse_foreign(path: Path) -> None:
    """Raise a one-line :class:`StoreError` unless ``path`` is a store actkit wrote (the only
    thing ``--overwrite`` replaces): a user's file or folder stays as it is."""
    if not is_actkit_store(path):
        raise foreign_error(path)


def foreign_error(path: Path) -> StoreError:
    what = "a folder" if Path(path).is_dir() else "a file that is not an actkit store"
    return StoreError(f"{path} is {what}; actkit replaces only its own outputs (even with --overwrite): move "
                      "it away or choose another output path")


def occupied_error(path: Path, full_request: Mapping, existing) -> StoreError:
    """``path`` holds something other than the finished store of ``full_request``
    (``existing``: what :func:`_existing_request` found there)."""
    if existing is None and not is_actkit_store(path):
        return foreign_error(path)
    if existing is None:
        what = "an unfinished or unreadable actkit store"
    elif existing[0] == "old-format":
        what = f"a store in an older format ({existing[1]})"
    else:
        what = f"a store of a different request ({describe_difference(full_request, existing[1])})"
    return StoreError(f"{path} already holds {what}; pass --overwrite (overwrite=True) to replace it")


#: request fields -> how the user names them (``describe_difference``)
_FIELD_NAMES = {"model": "model", "weights_sha256": "model weights", "inputs_fingerprint": "inputs",
                "n_samples": "number of samples", "preprocessing": "the model's preprocessing",
                "source_fingerprint": "source store", "source": "source store path",
                "compression": "--compression", "init_seed": "seed of randomly initialised weights",
                "world_size": "world size (torchrun --nproc-per-node)"}


#: request fields that are hashes or large documents: named, not shown
_OPAQUE = ("inputs_fingerprint", "weights_sha256", "source_fingerprint", "preprocessing")


def describe_difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """Which fields of two requests differ, as the user names them: ``'--pool: none here,
    mean in the store'`` (first three differences)."""
    def flat(req):
        out = {k: v for k, v in dict(req.get("request") or {}).items()}
        out["compression"] = req.get("compression")
        return out

    def show(v):
        if v is None:
            return "none"
        if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
            return ",".join(map(str, v))
        if isinstance(v, (dict, list)):
            return "other values"
        return str(v)

    a, b = flat(ours), flat(theirs)
    diffs = []
    first = ("command", "model", "layers", "pool")
    for key in sorted(set(a) | set(b), key=lambda k: (k in _OPAQUE, k not in first, k)):
        if a.get(key) != b.get(key):
            name = _FIELD_NAMES.get(key, "--" + key.replace("_", "-"))
            va, vb = show(a.get(key)), show(b.get(key))
            if key in _OPAQUE or va == vb:
                diffs.append(f"{name}: differ" if name.endswith("s") else f"{name}: differs")
            else:
                diffs.append(f"{name}: {va} here, {vb} in the store")
    if not diffs:
        return "its request differs"
    more = ""
    if len(diffs) > 3:
        more = f"; and {', '.join(d.split(':')[0] for d in diffs[3:])}"
    return "; ".join(diffs[:3]) + more


def _create_preallocated(group, name: str, shape: tuple[int, int], dtype: np.dtype):
    """A contiguous dataset whose file space is allocated now (so later writes never
    touch HDF5 metadata) and never filled (so allocation is free)."""
    h5py = h5py_module()
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    return group.create_dataset(name, shape=shape, dtype=dtype, dcpl=dcpl, fill_time="never")


def _planned_bytes(specs, params) -> int:
    """Bytes of a new store: rows, indices, checksums and parameters, plus a margin for HDF5's
    object headers (the reservation is cut to the file's size once it is written)."""
    need = sum(s.rows * s.features * np.dtype(s.dtype).itemsize + s.rows * 16 for s in specs)
    need += sum(integrity.n_blocks(s.rows, integrity.block_rows_for(s.features, np.dtype(s.dtype).itemsize))
                * integrity.CHECKSUM_BYTES for s in specs)
    need += sum(np.asarray(v).nbytes for v in (params or {}).values())
    return need + 4096 * (4 * len(specs) + len(params or {}) + 8)


def _free_space_check(parent: Path, specs, params) -> None:
    need = sum(s.rows * s.features * np.dtype(s.dtype).itemsize + s.rows * 16 for s in specs)
    need += sum(np.asarray(v).nbytes for v in (params or {}).values())
    free = shutil.disk_usage(parent).free
    if need > free:
        fmt = integrity.format_bytes
        raise StoreError(f"not enough disk space in {parent}: the store needs {fmt(need)}, {fmt(free)} free")


def _existing_request(path: Path) -> tuple[str, Any] | None:
    """``(request_hash, request)`` of the complete store at ``path``; ``("old-format",
    format)`` for a store of an older format; None for anything else."""
    if not looks_like_hdf5(path):
        return None
    try:
        with open_read(path) as f:
            if integrity.is_variable_length_string(f.attrs, "actkit_format"):
                return ("old-format", "actkit-store/1")
            if decode_attr(f.attrs.get("actkit_format")) not in READABLE_FORMATS or not bool(f.attrs.get("complete")):
                return None
            meta = integrity.read_meta(f, path)
            return str(meta["request_hash"]), meta["request"]
    except Exception:  # unreadable file: treated as "not our store"
        return None


def _partial_request(partial: Path) -> dict | None:
    try:
        with open_read(partial) as f:
            return integrity.read_meta(f, partial)["request"]
    except Exception:
        return None
