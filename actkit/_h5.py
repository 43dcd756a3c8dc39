"""Opening an HDF5 file for reading, one rule for the store and for the runners' workers."""

from __future__ import annotations

__all__ = ["open_read"]


def open_read(path):
    """An HDF5 file opened read-only with HDF5's default file locking, exactly as plain
    ``h5py.File(path, "r")`` opens it, so both can hold the file in one process (HDF5 refuses
    a second open whose locking flags differ). A file that another process holds for writing
    (an unfinished store) is opened without locking instead."""
    import h5py

    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if "lock" not in str(exc).lower() or "don't match" in str(exc):
            raise
        return h5py.File(path, "r", locking=False)
