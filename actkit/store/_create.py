"""Creating a store (or resuming the unfinished store of the identical request)."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from actkit.errors import StoreError
from actkit.store._format import (FORMAT, STORAGE_DTYPES, attr_value, canonical_json, check_layer_name,
                                  created_at_now, h5py_module, looks_like_hdf5, partial_path,
                                  progress_path, read_json, request_hash, write_progress)
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
        check_layer_name(s.name)
        if s.dtype not in STORAGE_DTYPES:
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
        state = read_json(progress)
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

    created_at = created_at_now()
    prov = dict(provenance or {})
    fingerprint = hashlib.sha256(
        canonical_json({"request_hash": rhash, "inputs": inputs_fingerprint, "created_at": created_at}).encode()
    ).hexdigest()
    h5py = h5py_module()
    try:
        with h5py.File(partial, "w", libver="earliest", track_order=False) as f:
            f.attrs["actkit_format"] = FORMAT
            f.attrs["complete"] = False
            f.attrs["n_samples"] = np.int64(n_samples)
            f.attrs["created_at"] = created_at
            f.attrs["fingerprint"] = fingerprint
            f.attrs["inputs_fingerprint"] = inputs_fingerprint or ""
            f.attrs["request"] = canonical_json(full_request)
            f.attrs["request_hash"] = rhash
            f.attrs["provenance"] = canonical_json(prov)
            f.attrs["layer_order"] = canonical_json(names)
            g = f.create_group("provenance")
            for key in sorted(prov):
                g.attrs[key] = attr_value(prov[key])
            lg = f.create_group("layers")
            for s in specs:
                grp = lg.create_group(s.name)
                grp.attrs["rows"] = np.int64(s.rows)
                grp.attrs["features"] = np.int64(s.features)
                for key in sorted(s.attrs):
                    grp.attrs[key] = attr_value(s.attrs[key])
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
    write_progress(progress, state)
    return StoreWriter._resume(path, state)


def _create_preallocated(group, name: str, shape: tuple[int, int], dtype: np.dtype):
    """A contiguous dataset whose file space is allocated now (so later writes never
    touch HDF5 metadata) and never filled (so allocation is free)."""
    h5py = h5py_module()
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
    if not looks_like_hdf5(path):
        return None
    try:
        with h5py_module().File(path, "r") as f:
            if f.attrs.get("actkit_format") != FORMAT or not bool(f.attrs.get("complete")):
                return None
            return str(f.attrs["request_hash"])
    except Exception:  # unreadable file: treated as "not our store"
        return None
