"""Writing rows into a store: :class:`StoreWriter` (checkpoints, finalize, abort, repack)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np

from actkit._atomic import Temporary, remove_stale_temporaries
from actkit._faults import fault
from actkit._rows import block_rows
from actkit.errors import LayerError, StoreError, ValidationError
from actkit.store import _integrity as integrity
from actkit.store._format import (h5py_module, open_h5, open_read, partial_path, progress_path, refuse_foreign_shards,
                                  shard_dir, write_progress)


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
    resumed_from : int
        Samples that were already written when this writer was opened (0 for a new store).
    """

    def __init__(self, path: Path, state: dict | None, complete: bool):
        self.path = Path(path)
        self.complete = complete
        self._state = state or {}
        self.samples_done = int(self._state.get("samples_done", 0))
        self.resumed_from = self.samples_done
        self.rows_done = dict(self._state.get("rows_done", {}))
        self._rows_total = dict(self._state.get("rows_total", {}))
        self.n_samples = int(self._state.get("n_samples", 0))
        self._file = None
        self.checkpoint_interval = 0.5  # seconds between resume-cursor writes
        self._committed = (self.samples_done, dict(self.rows_done))
        self._last_checkpoint = -float("inf")
        if not complete:
            partial = partial_path(path)
            self._file = open_h5(partial, "r+")
            with integrity.h5_errors(partial):
                self._data = {name: self._file[f"layers/{name}/data"] for name in self._rows_total}
                self._sums = {name: self._file[f"layers/{name}/checksums"] for name in self._rows_total}
                algorithm = integrity.checksum_algorithm(integrity.read_meta(self._file, partial))
                self._hashers = {}
                for name, ds in self._data.items():
                    block_rows = int(self._sums[name].attrs["block_rows"])
                    self._hashers[name] = integrity.BlockHasher(block_rows, ds.shape[1] * ds.dtype.itemsize,
                                                                ds.shape[0], algorithm)

    @classmethod
    def _already_complete(cls, path: Path) -> "StoreWriter":
        w = cls(path, None, complete=True)
        with open_read(path) as f:
            w.n_samples = w.samples_done = w.resumed_from = int(f.attrs["n_samples"])
        # a run killed between the rename and removing its cursor leaves the cursor behind
        progress_path(path).unlink(missing_ok=True)
        remove_stale_temporaries(progress_path(path))
        return w

    @classmethod
    def _resume(cls, path: Path, state: dict) -> "StoreWriter":
        return cls(path, state, complete=False)

    @property
    def layers(self) -> list[str]:
        return list(self._rows_total)

    def _writing(self, action: str):
        """h5py/OS errors while writing: a full disk is one line, anything else as it is."""
        return _WriteErrors(partial_path(self.path), action)

    def append(self, name: str, rows) -> None:
        """Write ``rows`` (array of shape (r, features)) at layer ``name``'s row cursor, with
        the checksums of the row blocks they complete."""
        self._require_open()
        try:
            ds = self._data[name]
        except KeyError:
            raise LayerError(f"store has no layer {name!r}; layers: {', '.join(self._data)}") from None
        arr = np.asarray(rows)
        if arr.ndim != 2 or arr.shape[1] != ds.shape[1]:
            raise ValidationError(f"rows for {name} have shape {arr.shape}, expected (r, {ds.shape[1]})")
        start = self.rows_done[name]
        stop = start + arr.shape[0]
        if stop > ds.shape[0]:
            raise ValidationError(f"layer {name} holds {ds.shape[0]} rows; writing rows {start}:{stop}")
        if arr.shape[0]:
            arr = np.ascontiguousarray(arr, dtype=ds.dtype)
            hasher = self._hashers[name]
            with self._writing(f"writing rows of layer {name}"):
                hasher.seek(start, lambda a, b: ds[a:b])
                fault("rows")
                ds.write_direct(arr, dest_sel=np.s_[start:stop])
                integrity.write_digests(self._sums[name], hasher.update(arr))
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
        with self._writing("writing the resume cursor"):
            self._file.flush()
            done, rows = self._committed
            self._state.update(samples_done=done, rows_done=rows)
            write_progress(progress_path(self.path), self._state)
        self._last_checkpoint = time.monotonic()
        fault("cursor")

    def finalize(self) -> Path:
        """Check every row was written, mark the store complete and move it into place."""
        self._require_open()
        missing = {n: (self.rows_done[n], t) for n, t in self._rows_total.items() if self.rows_done[n] != t}
        if missing:
            detail = ", ".join(f"{n}: {d}/{t}" for n, (d, t) in missing.items())
            raise StoreError(f"cannot finalise {self.path}: rows missing ({detail})")
        partial = partial_path(self.path)
        with self._writing("finishing the store"):
            # in place: rewriting the attribute (h5py's ``attrs[...] =``) moves header messages,
            # and a resumed finalisation would then differ from an uninterrupted one
            self._file.attrs.modify("complete", True)
            self._file.flush()
            self._file.close()
            self._file = None
            fault("finalize")
            compression = self._state.get("compression")
            if compression:
                with Temporary(self.path) as tmp:  # a kill leaves a temporary the next run removes
                    repack(partial, tmp.file(), compression)
                    os.replace(tmp.file(), self.path)
                partial.unlink()
            else:
                os.replace(partial, self.path)
        fault("renamed")
        progress_path(self.path).unlink(missing_ok=True)
        remove_stale_temporaries(progress_path(self.path))  # left by a kill mid-write
        _remove_replaced_shards(self.path)
        self.complete = True
        return self.path

    def abort(self) -> None:
        """Close and delete the unfinished store (for commands that do not resume)."""
        self._file_close(write_cursor=False)
        partial_path(self.path).unlink(missing_ok=True)
        progress_path(self.path).unlink(missing_ok=True)

    def close(self) -> None:
        """Close without finalising (the partial store stays, ready to resume).

        Never raises: when the last cursor cannot be written (a full disk), the previous one
        stays, which is consistent too (a few more batches are recomputed on resume).
        """
        self._file_close(write_cursor=True)

    def _file_close(self, write_cursor: bool) -> None:
        if self._file is None:
            return
        if write_cursor and self._state:
            try:
                self._write_cursor()  # the last consistent cursor, not half a batch
            except Exception:
                pass
        try:
            self._file.close()
        except Exception:
            pass
        self._file = None

    def _require_open(self):
        if self._file is None:
            raise StoreError(f"store {self.path} is not open for writing")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _remove_replaced_shards(path: Path) -> None:
    """A single store finalised at ``path`` replaced a sharded one: its ``.shards`` folder goes."""
    folder = shard_dir(path)
    if folder.is_dir():
        try:
            refuse_foreign_shards(folder)
        except StoreError:  # not only shards: the user's files stay
            return
        shutil.rmtree(folder, ignore_errors=True)


class _WriteErrors:
    """Context manager: a full disk (ENOSPC from HDF5 or the OS) becomes one StoreError."""

    def __init__(self, path: Path, action: str):
        self.path, self.action = path, action

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is not None and integrity.is_disk_full(exc):
            raise integrity.disk_full_error(self.path, self.action) from None
        return False


def repack(src: Path, dst: Path, compression: str) -> None:
    """Copy a finished store into a chunked, compressed file."""
    h5py = h5py_module()
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
                step = max(chunk_rows, block_rows(feats, obj.dtype.itemsize))
                for s in range(0, rows, step):
                    out[s : s + step] = obj[s : s + step]
            else:
                out = fout.create_dataset(name, data=obj[()])
            if isinstance(obj, h5py.Dataset):  # /meta's checksum, checksums' block_rows
                for k, v in obj.attrs.items():
                    out.attrs[k] = v
        fin.visititems(visit)


