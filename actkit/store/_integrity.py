"""Store integrity: metadata kept out of HDF5's global heap, checksums, one-line errors.

Used by :mod:`actkit.store` (the only module that knows the layout; see
``docs/store-format.md``).

* **Metadata** (request, provenance, layer order and attributes, checksums of the index and
  parameters) is one UTF-8 JSON document in the ``uint8`` dataset ``/meta``, with its sha256
  in the fixed-length attribute ``/meta.attrs["sha256"]``.  Every other string attribute is
  a fixed-length byte string.  Nothing lives in HDF5's global heap, whose corruption can make
  libhdf5 loop forever on a read that Python cannot interrupt; a corrupt header is a
  checksum mismatch (one line, at once).
* **Data checksums**: each layer's rows are cut into blocks of ``block_rows`` rows (about
  1 MiB); the checksum of every block is written into ``/layers/<name>/checksums`` together
  with the rows (so resuming never re-reads more than one block), and
  :func:`verify_store` names the first block that no longer matches.  The algorithm is
  ``/meta["checksum"]``: ``xxh3_128`` (XXH3, 128 bits, ~13 GiB/s on one core: never the
  writer's ceiling) since ``actkit-store/3``; ``sha256`` in ``actkit-store/2`` stores, which
  are still read and verified.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
from typing import Any, Callable

import h5py
import numpy as np
import xxhash

from actkit.errors import StoreError

# block checksum algorithm -> digest bytes; a store names its own in /meta["checksum"]
ALGORITHMS = {"xxh3_128": 16, "sha256": 32}
CHECKSUM = "xxh3_128"  # what new stores are written with
CHECKSUM_BYTES = ALGORITHMS[CHECKSUM]
BLOCK_BYTES = 2**20  # target size of one checksummed block of rows
META = "meta"


# ----------------------------------------------------------------------------- attributes
def fixed(text: str) -> np.bytes_:
    """A fixed-length (not variable-length) HDF5 string attribute value."""
    return np.bytes_(str(text).encode("utf-8"))


def attr_value(value: Any, dumps: Callable[[Any], str]):
    """An HDF5 attribute value that never needs the global heap: numbers and bools as-is,
    strings as fixed-length bytes, everything else as fixed-length JSON."""
    if value is None:
        return fixed("null")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value
    if isinstance(value, str):
        return fixed(value)
    return fixed(dumps(value))


def is_variable_length_string(attrs, name: str) -> bool:
    """Whether attribute ``name`` is a variable-length string (stored in the global heap);
    decided from its datatype alone, without reading the value."""
    info = h5py.check_string_dtype(attrs.get_id(name).dtype)
    return info is not None and info.length is None


# ----------------------------------------------------------------------------- metadata
def write_meta(f, meta: dict, dumps: Callable[[Any], str]) -> None:
    """Write the metadata document as ``/meta`` (uint8 JSON) with its sha256."""
    raw = dumps(meta).encode("utf-8")
    ds = f.create_dataset(META, data=np.frombuffer(raw, dtype=np.uint8))
    ds.attrs["sha256"] = fixed(hashlib.sha256(raw).hexdigest())


def read_meta(f, path) -> dict:
    """Read and check ``/meta``; a corrupt or missing document is a one-line StoreError."""
    if META not in f:
        raise StoreError(f"{path} has no /meta: not an actkit store, or its header is corrupt")
    ds = f[META]
    if ds.dtype != np.uint8 or ds.ndim != 1 or ds.shape[0] > 2**31:
        raise StoreError(f"{path}: the store's metadata (/meta) is corrupt")
    raw = ds[()].tobytes()
    expected = ds.attrs.get("sha256")
    expected = expected.decode("ascii", "replace") if isinstance(expected, bytes) else str(expected)
    if hashlib.sha256(raw).hexdigest() != expected:
        raise StoreError(f"{path}: the store's metadata is corrupt (its checksum does not match); "
                         "re-create the store (rerun the command that wrote it with --overwrite)")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except ValueError:
        raise StoreError(f"{path}: the store's metadata is corrupt (not JSON)") from None
    if not isinstance(meta, dict):
        raise StoreError(f"{path}: the store's metadata is corrupt (not a JSON object)")
    return meta


def array_sha256(arr: np.ndarray) -> str:
    arr = np.ascontiguousarray(arr)
    return hashlib.sha256(memoryview(arr).cast("B") if arr.size else b"").hexdigest()


# ----------------------------------------------------------------------------- errors
_H5_ERRORS = (OSError, RuntimeError, KeyError, SystemError)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f" ({text})" if text and len(text) <= 200 else ""


@contextlib.contextmanager
def h5_errors(path, action: str = "reading"):
    """Turn any h5py/HDF5 error raised inside the block into one StoreError naming ``path``."""
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError:
        raise StoreError(f"store {path} does not exist") from None
    except _H5_ERRORS as exc:
        if is_disk_full(exc):
            raise disk_full_error(path, action) from None
        raise StoreError(f"cannot read {path}: the file is corrupt or truncated{_reason(exc)}") from None


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and (
        exc.errno in (errno.ENOSPC, errno.EDQUOT) or "no space left" in str(exc).lower()
        or "errno = 28" in str(exc)
    )


def disk_full_error(path, action: str) -> StoreError:
    return StoreError(f"no space left on the disk of {path} while {action}; free space and rerun the "
                      "same command to resume")


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: the unit that shows the number with 3 significant digits."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


# ----------------------------------------------------------------------------- checksums
def checksum_algorithm(meta: dict) -> str:
    """The block checksum algorithm of a store from its ``/meta`` (``sha256`` before
    ``actkit-store/3``, which did not record it everywhere)."""
    algo = meta.get("checksum") or "sha256"
    if algo not in ALGORITHMS:
        raise StoreError(f"unknown block checksum algorithm {algo!r} in the store's metadata; "
                         "it was written by a newer actkit")
    return algo


def checksum_bytes(algo: str) -> int:
    """Bytes of one block digest of ``algo``."""
    return ALGORITHMS[algo]


def new_hash(algo: str):
    """A fresh incremental hasher of ``algo`` (``update(buffer)``, ``digest()``); both
    algorithms release the GIL while hashing."""
    if algo == "xxh3_128":
        return xxhash.xxh3_128()
    return hashlib.sha256()


def block_rows_for(features: int, itemsize: int) -> int:
    """Rows per checksummed block (about :data:`BLOCK_BYTES` of data, at least one row)."""
    return max(1, BLOCK_BYTES // max(1, int(features) * int(itemsize)))


def n_blocks(rows: int, block_rows: int) -> int:
    return -(-int(rows) // int(block_rows))


class BlockHasher:
    """Incremental checksums of consecutive row blocks of one layer, fed as rows are written.

    Parameters
    ----------
    block_rows : int
        Rows per block.
    row_bytes : int
        Bytes of one stored row.
    total_rows : int
        Rows of the layer (the last block may be shorter).
    algorithm : str
        A key of :data:`ALGORITHMS` (the store's ``/meta["checksum"]``).
    """

    def __init__(self, block_rows: int, row_bytes: int, total_rows: int, algorithm: str = CHECKSUM):
        self.block_rows, self.row_bytes, self.total = int(block_rows), int(row_bytes), int(total_rows)
        self.algorithm = algorithm
        self.pos = 0
        self._h = new_hash(algorithm)

    def seek(self, start: int, read_rows: Callable[[int, int], np.ndarray]) -> None:
        """Continue at row ``start``; ``read_rows(a, b)`` gives the stored rows ``a:b`` (the
        start of ``start``'s block, re-read once when resuming mid-block)."""
        if start == self.pos:
            return
        first = start - start % self.block_rows
        self._h = new_hash(self.algorithm)
        if start > first:
            self._h.update(memoryview(np.ascontiguousarray(read_rows(first, start))).cast("B"))
        self.pos = int(start)

    def update(self, rows: np.ndarray) -> list[tuple[int, bytes]]:
        """Hash C-contiguous ``rows`` (the next rows of the layer); returns the
        ``(block, digest)`` of every block they complete."""
        done = []
        if not rows.size:
            return done
        mv = memoryview(rows).cast("B")
        i, n, rb = 0, rows.shape[0], self.row_bytes
        while i < n:
            take = min(n - i, self.block_rows - self.pos % self.block_rows)
            self._h.update(mv[i * rb:(i + take) * rb])
            i += take
            self.pos += take
            if self.pos % self.block_rows == 0 or self.pos == self.total:
                done.append(((self.pos - 1) // self.block_rows, self._h.digest()))
                self._h = new_hash(self.algorithm)
        return done


def write_digests(ds, digests: list[tuple[int, bytes]]) -> None:
    """Write ``(block, digest)`` pairs into the ``(n_blocks, digest bytes)`` checksum dataset."""
    if not digests:
        return
    first = digests[0][0]
    arr = np.frombuffer(b"".join(d for _, d in digests), dtype=np.uint8).reshape(len(digests), -1)
    ds[first:first + len(digests)] = arr


def verify_store(store, *, read_bytes: int = 64 * 2**20, on_progress=None, on_rows=None, layers=None) -> dict:
    """Check every written block of every layer, the row indices and the parameters of
    ``store`` (an open :class:`~actkit.store.Store`) against their checksums.

    ``on_rows(layer, first_row, rows)``, if given, receives the rows read, once they matched
    their checksums (the verified read behind :func:`~actkit.store.consolidate`); ``layers``
    limits the layers checked (default: all).

    Returns
    -------
    dict
        ``{"layers", "blocks", "bytes", "params"}``: what was checked.

    Raises
    ------
    StoreError
        Naming the first layer block (and its rows), index or parameter that does not match.
    """
    path, meta = store.path, store.meta
    if meta.get("shards"):  # a virtual index store: each shard against its own checksums
        return _verify_sharded(store, read_bytes=read_bytes, on_progress=on_progress, on_rows=on_rows, layers=layers)
    hint = "the file is corrupt; re-create it (rerun the command that wrote it with --overwrite)"
    checked = {"layers": 0, "blocks": 0, "bytes": 0, "params": 0}
    algo = checksum_algorithm(meta)
    with h5_errors(path):
        for name in store.layers if layers is None else layers:
            entry = meta["layers"][name]
            layer = store[name]
            br = int(entry["block_rows"])
            rows = len(layer)
            complete_blocks = n_blocks(rows, br) if rows == int(entry["rows"]) else rows // br
            sums = store.file[f"layers/{name}/checksums"][:complete_blocks]
            step = max(1, read_bytes // max(1, br * layer.shape[1] * layer.dtype.itemsize))
            for b0 in range(0, complete_blocks, step):
                b1 = min(complete_blocks, b0 + step)
                data = np.ascontiguousarray(layer.dataset[b0 * br:min(rows, b1 * br)])
                raw = memoryview(data).cast("B")
                row_bytes = layer.shape[1] * layer.dtype.itemsize
                for b in range(b0, b1):
                    lo, hi = (b - b0) * br * row_bytes, min(len(raw), (b - b0 + 1) * br * row_bytes)
                    h = new_hash(algo)
                    h.update(raw[lo:hi])
                    if h.digest() != sums[b].tobytes():
                        a, z = b * br, min(int(entry["rows"]), (b + 1) * br) - 1
                        raise StoreError(f"{path}: layer {name} block {b} (rows {a}-{z}) does not match "
                                         f"its checksum; {hint}")
                    if on_progress is not None:
                        on_progress(1)
                if on_rows is not None:
                    on_rows(name, b0 * br, data)
                checked["blocks"] += b1 - b0
                checked["bytes"] += data.nbytes
            if array_sha256(store.file[f"layers/{name}/index"][()]) != entry["index_sha256"]:
                raise StoreError(f"{path}: the row index of layer {name} does not match its checksum; {hint}")
            checked["layers"] += 1
        for key, digest in meta.get("params_sha256", {}).items():
            if array_sha256(store.file[f"params/{key}"][()]) != digest:
                raise StoreError(f"{path}: parameter {key} does not match its checksum; {hint}")
            checked["params"] += 1
        _verify_inputs(store, hint)
    return checked


def _verify_inputs(store, hint: str) -> None:
    """The datasets of ``/inputs`` (the recorded inputs, ``actkit-store/4``) against their sha256."""
    for key, digest in (store.meta.get("recorded_inputs") or {}).get("sha256", {}).items():
        if array_sha256(store.file[f"inputs/{key}"][()]) != digest:
            raise StoreError(f"{store.path}: the recorded inputs (/inputs/{key}) do not match their checksum; {hint}")


def _verify_sharded(store, *, read_bytes: int, on_progress=None, on_rows=None, layers=None) -> dict:
    """:func:`~actkit.store.verify_store` of a sharded store: every shard against its own
    block checksums (``on_rows(layer, first_row, rows)`` gets the verified rows, numbered as
    in the index store), then the index store's row indices and parameters."""
    checked = {"layers": 0, "blocks": 0, "bytes": 0, "params": 0}
    offset = dict.fromkeys(store.layers, 0)
    for r in store.meta["shards"]:
        with store.open_shard(r) as shard:
            shifted = None
            if on_rows is not None:
                def shifted(name, first, rows, base=dict(offset)):
                    on_rows(name, base[name] + first, rows)
            got = verify_store(shard, read_bytes=read_bytes, on_progress=on_progress, on_rows=shifted,
                                         layers=layers)
            for name in shard.layers:
                offset[name] += len(shard[name])
        checked["blocks"] += got["blocks"]
        checked["bytes"] += got["bytes"]
    hint = "the file is corrupt; re-create it (rerun the command that wrote it with --overwrite)"
    with h5_errors(store.path):
        for name in store.layers if layers is None else layers:
            if array_sha256(store.file[f"layers/{name}/index"][()]) != store.meta["layers"][name]["index_sha256"]:
                raise StoreError(f"{store.path}: the row index of layer {name} does not match its checksum; {hint}")
            checked["layers"] += 1
        for key, digest in store.meta.get("params_sha256", {}).items():
            if array_sha256(store.file[f"params/{key}"][()]) != digest:
                raise StoreError(f"{store.path}: parameter {key} does not match its checksum; {hint}")
            checked["params"] += 1
        _verify_inputs(store, hint)
    return checked
