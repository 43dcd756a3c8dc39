"""The store's file format: names, canonical JSON, attributes and opening HDF5 files safely."""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import h5py
import numpy as np

from actkit._atomic import json_default, write_atomic
from actkit._faults import fault
from actkit._h5 import open_read  # noqa: F401  (the store reads through it)
from actkit.errors import StoreError
from actkit.store import _integrity as integrity

FORMAT = "actkit-store/5"  # /5: recorded text and token spans; /4: the recorded inputs (/inputs); /3: xxh3_128 block checksums (/meta["checksum"])
READABLE_FORMATS = (FORMAT, "actkit-store/4", "actkit-store/3", "actkit-store/2")  # /2: sha256 block checksums, read and verified
OLD_FORMATS = ("actkit-store/1",)
PARTIAL_SUFFIX = ".partial"
PROGRESS_SUFFIX = ".progress.json"
STORAGE_DTYPES = ("float32", "float16", "float64")


def h5py_module():
    return h5py


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=json_default, separators=(",", ":"))


def request_hash(request: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of a request (what was asked for, not when)."""
    return hashlib.sha256(canonical_json(dict(request)).encode()).hexdigest()


SHARDS_SUFFIX = ".shards"


def shard_dir(path) -> Path:
    """``<path>.shards``: the folder of a sharded store's shards."""
    return Path(str(path) + SHARDS_SUFFIX)


def partial_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + PARTIAL_SUFFIX)


def progress_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + PROGRESS_SUFFIX)


def created_at_now() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    t = float(epoch) if epoch else time.time()
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).isoformat(timespec="seconds")


def write_progress(path: Path, obj: Mapping[str, Any], fsync: bool = False) -> None:
    """The resume cursor (canonical JSON), written atomically: on failure (a full disk) no
    temporary file is left and ``path`` keeps its old content."""
    text = canonical_json(dict(obj))

    def write(tmp):
        with open(tmp, "w") as fh:
            fault("cursor-write")
            fh.write(text)

    write_atomic(path, write, fsync=fsync)


def read_json(path: Path) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def attr_value(value: Any):
    """Provenance values as HDF5 attributes: numbers as-is, everything else as fixed-length
    strings (JSON for containers); nothing goes to HDF5's global heap."""
    return integrity.attr_value(value, canonical_json)


def check_layer_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise StoreError(f"invalid layer name {name!r}: use a non-empty name without '/'")


def open_h5(path: Path, mode: str = "r"):
    h5py = h5py_module()
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
        if not looks_like_hdf5(path):
            raise StoreError(f"{path} is not an HDF5 file") from None
        raise StoreError(f"{path} is not a readable HDF5 file (truncated or corrupt)") from None


def looks_like_hdf5(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    return head == b"\x89HDF\r\n\x1a\n"


def refuse_foreign_shards(folder) -> None:
    """A one-line :class:`StoreError` unless everything in ``folder`` (a ``<out>.shards``
    folder) is what actkit writes there: ``rank-*`` shard files (finished, unfinished, their
    cursors) and hidden temporaries. A user's file or folder there is never deleted."""
    folder = Path(folder)
    if not folder.exists():
        return
    foreign = [p.name for p in folder.iterdir() if not p.is_file() or not p.name.startswith(("rank-", "."))] \
        if folder.is_dir() else [folder.name]
    if foreign:
        raise StoreError(f"{folder} holds files actkit did not write there ({', '.join(sorted(foreign)[:3])}); "
                         "actkit replaces only its own outputs: move them away or choose another output path")


def is_actkit_store(path) -> bool:
    """Whether ``path`` is a file actkit wrote as a store (finished, unfinished, of an older
    format, or with a corrupt body): an HDF5 file whose root carries ``actkit_format``. What
    ``--overwrite`` may replace; anything else is the user's and is never touched."""
    path = Path(path)
    if not path.is_file() or not looks_like_hdf5(path):
        return False
    try:
        with open(path, "rb") as fh:  # the root group's header, where the attribute's name lives
            if b"actkit_format" in fh.read(2**20):
                return True
    except OSError:
        return False
    try:
        with open_read(path) as f:
            return "actkit_format" in f.attrs
    except Exception:  # unreadable: not provably ours
        return False




def decode_attr(value):
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value




def unknown_name(name: str, choices: Sequence[str], where: str) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    shown = ", ".join(list(choices)[:12]) + (", ..." if len(choices) > 12 else "")
    return f"unknown layer {name!r} in {where}{hint} (available: {shown})"
