"""One writer per output: an exclusive, non-blocking lock on ``<out>.lock``.

The sharded writers (``torchrun`` extraction, the Dask writer behind ``--scheduler``) hold it
from before they touch anything under ``<out>.shards/`` until the index is in place, so a
second command aimed at the same output (with or without ``--overwrite``) is refused in one
line while the first finishes. The lock is the kernel's (``flock``): a killed writer holds
nothing, and its empty lock file is taken over by the next run. A finished writer removes
the file while it still holds the lock (and a taker checks that the file it locked is still
the one at the path), so nothing is left behind and two writers never both hold it.
"""

from __future__ import annotations

import os
from pathlib import Path

from actkit.errors import StoreError

LOCK_SUFFIX = ".lock"


class WriterLock:
    """``with WriterLock(out):`` — refuse (StoreError) when another process writes ``out``."""

    def __init__(self, out):
        self.out = Path(out)
        self.path = Path(str(out) + LOCK_SUFFIX)
        self._fd = None

    def acquire(self) -> "WriterLock":
        try:
            import fcntl  # POSIX only: absent on Windows
        except ImportError:  # not POSIX: no lock (the single-writer checks of create_store remain)
            return self
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise StoreError(f"cannot write {self.out}: cannot create its lock file {self.path} "
                                 f"({exc.strerror})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise StoreError(f"{self.out} is being written by another command right now (it holds "
                                 f"{self.path}); wait for it to finish, or stop it and rerun") from None
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                return self
            os.close(fd)  # the holder removed it as we opened it: take the new one

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
