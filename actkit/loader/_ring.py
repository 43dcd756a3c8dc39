"""Buffers that :class:`actkit.loader.DataLoader` keeps across epochs for its workers, and how
a worker hands its batches to the main process through them.

Worker processes are new every epoch, and on this kind of machine fresh memory is dear: a
page fault and a zeroed page for every 4 KiB (or 2 MiB) touched the first time. Measured
before this module: a fresh shared-memory tensor per batch cost the workers 270,000 faults
and about 1.2 CPU s per GiB, and freshly allocated window buffers about 0.4 CPU s per epoch
of zeroing, more than reading, checking and shuffling the rows. So the main process
allocates, once, in shared memory, per worker: the two window buffers of each layer and a
ring of ``slots`` batch buffers (per layer, plus the row numbers, plus a flag per slot). The
workers inherit them (or receive them by file descriptor under ``spawn``) every epoch.

A worker gathers each batch into its next free slot, sets the slot's flag and sends a small
message ``(TAG, worker, slot, rows)``; the main process copies the rows out into a tensor of
its own (a batch handed to the caller is never overwritten later) and clears the flag. A
worker waits for a slot's flag to clear before reusing it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import time

import numpy as np
import torch

from actkit.errors import ValidationError

TAG = "actkit-ring"


def _torch_dtype(dt):
    return getattr(torch, np.dtype(dt).name)


def shared_empty(shape, dtype):
    """An uninitialised tensor in shared memory, as torch's ``default_collate`` makes one in a
    worker (``Tensor.share_memory_()`` would copy a fresh tensor into a new segment: one more
    pass over every batch)."""
    n = int(np.prod(shape)) * torch.empty((), dtype=dtype).element_size()
    try:
        return torch.empty(0, dtype=dtype).set_(torch.UntypedStorage._new_shared(n), 0, shape)
    except (AttributeError, TypeError, RuntimeError):  # pragma: no cover - another torch
        return torch.empty(shape, dtype=dtype).share_memory_()


def worker_buffers(ds, slots: int) -> dict:
    """One worker's shared buffers for the dataset ``ds``: ``windows`` (two lists of one
    (window rows, features) tensor per layer, as stored) and ``ring`` (per layer a
    (slots, batch_size, features) tensor in the output dtype, the row numbers or None, and
    the int32 flags)."""
    rows = ds._buffer_rows  # a window (or the layer, when smaller)
    batch = min(ds.batch_size, rows)
    windows = [[shared_empty((rows, s.features), _torch_dtype(s.dtype)) for s in ds.sources] for _ in range(2)]
    ring = [shared_empty((slots, batch, s.features), _torch_dtype(ds.dtype or s.dtype)) for s in ds.sources]
    ids = shared_empty((slots, batch), _torch_dtype(np.int64)) if ds.return_index else None
    flags = shared_empty((slots,), _torch_dtype(np.int32))
    populate([t for w in windows for t in w] + ring + [ids])  # the pages exist now (or one clear error)
    flags.zero_()
    return {"windows": windows, "ring": ring, "ids": ids, "flags": flags}


def populate(tensors) -> None:
    """Map every page of shared ``tensors`` into this process in one call per tensor
    (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+) instead of one page fault per 4 KiB on
    first touch (a worker is a new process every epoch); a no-op where that is not
    available. A full ``/dev/shm`` is a :class:`~actkit.errors.ValidationError` here, not a
    bus error later."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        page = os.sysconf("SC_PAGE_SIZE")
    except (OSError, AttributeError, ValueError):  # pragma: no cover - not Linux
        return

    for t in tensors:
        if t is None or t.numel() == 0:
            continue
        addr = t.data_ptr() // page * page
        size = t.data_ptr() + t.numel() * t.element_size() - addr
        if libc.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(size), 23) != 0:  # MADV_POPULATE_WRITE
            err = ctypes.get_errno()
            if err in (errno.ENOMEM, errno.EFAULT, errno.EIO, errno.ENOSPC):  # /dev/shm is full

                total = sum(x.numel() * x.element_size() for x in tensors if x is not None) / 2**20
                raise ValidationError(f"not enough shared memory (/dev/shm) for the loader's worker buffers "
                                      f"({total:.0f} MiB a worker); lower buffer_rows or batch_size, use fewer "
                                      f"workers, or enlarge /dev/shm")
            return  # MADV_POPULATE_WRITE unknown to this kernel: pages are mapped on first touch


class RingWriter:
    """The worker's side: ``acquire()`` the next slot (waiting until the main process has
    copied what it held), fill ``arrays[i][slot, :n]`` (and ``id_array[slot, :n]``), then
    ``publish(slot, n)`` returns the message to yield."""

    def __init__(self, worker: int, buffers: dict):
        self.worker, self.count = worker, 0
        self.arrays = [t.numpy() for t in buffers["ring"]]
        self.id_array = None if buffers["ids"] is None else buffers["ids"].numpy()
        self._flags = buffers["flags"].numpy()
        self.slots = len(self._flags)
        self._parent = os.getppid()

    def acquire(self) -> int:
        slot = self.count % self.slots
        wait = 0.0002
        while self._flags[slot]:  # still held by the main process (rare: the DataLoader asks a
            # worker for at most prefetch_factor batches ahead, and there are two more slots)
            if os.getppid() != self._parent:  # pragma: no cover - the main process is gone
                raise SystemExit(0)
            time.sleep(wait)
            wait = min(0.01, wait * 2)
        return slot

    def publish(self, slot: int, n: int):
        self._flags[slot] = 1
        self.count += 1
        return (TAG, self.worker, slot, n)


def receive(item, buffers: list, pin: bool):
    """The main process's side: the batch announced by ``item``, copied out of its slot into
    new tensors (pinned when ``pin``), and the slot freed."""
    _, worker, slot, n = item
    b = buffers[worker]
    out = []
    for t in b["ring"]:
        src = t[slot, :n].numpy()
        # numpy's allocation: huge pages where the kernel allows (far fewer page faults than
        # torch's malloc of a fresh 4 KiB-paged block per batch); one thread to copy (torch's
        # copy_ wakes its OpenMP pool)
        dst = torch.empty(src.shape, dtype=t.dtype, pin_memory=True) if pin else torch.from_numpy(np.empty_like(src))
        np.copyto(dst.numpy(), src)
        out.append(dst)
    if b["ids"] is not None:
        out.append(b["ids"][slot, :n].clone())
    b["flags"][slot] = 0
    return out[0] if len(out) == 1 else tuple(out)
