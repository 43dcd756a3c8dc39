"""Opening an HDF5 file for reading, one rule for the store and for the runners' workers, and
the name of the process that opens it (for their error messages)."""

from __future__ import annotations

import os
import socket

import h5py

__all__ = ["open_read", "where"]


def where() -> str:
    """``worker tcp://...`` on a Dask worker, else ``process PID on HOST``."""
    try:
        from distributed import get_worker  # optional dependency (actkit[dask])

        return f"worker {get_worker().address}"
    except Exception:  # not inside a distributed worker (or distributed not installed)
        return f"process {os.getpid()} on {socket.gethostname()}"


def open_read(path):
    """An HDF5 file opened read-only with HDF5's default file locking, exactly as plain
    ``h5py.File(path, "r")`` opens it, so both can hold the file in one process (HDF5 refuses
    a second open whose locking flags differ). A file that another process holds for writing
    (an unfinished store) is opened without locking instead."""
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if "lock" not in str(exc).lower() or "don't match" in str(exc):
            raise
        return h5py.File(path, "r", locking=False)
