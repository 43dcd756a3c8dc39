"""Stores as training data: a shuffling, resumable torch ``IterableDataset`` over layers.

``store[layer].to_torch(batch_size)`` (or :class:`ActivationDataset` for several layers,
rows aligned) yields ``(batch_size, features)`` tensors in a seeded random order, for SAEs,
probes and transcoders trained in plain torch. See ``docs/loader.md``.

How the order is made (epoch ``e``, seed ``s``):

1. The layer's rows are cut into blocks of ``block_rows`` consecutive rows (by default one
   checksummed block of the store, about 1 MiB). The blocks are permuted by
   ``default_rng([s, e])`` and dealt to the ranks (block ``i`` of the permutation to rank
   ``i % world_size``), so ranks never share a row.
2. A rank's rows (its blocks, in that order) are cut into *windows* of ``buffer_rows``
   rows (rounded down to a multiple of ``batch_size``). A window is read block by block
   (contiguous reads, checked against the block checksums), its rows are permuted
   (seeded by ``s, e``, the rank and the window) and emitted as batches.
3. With ``num_workers = S`` the windows are dealt to S streams (window ``j`` to stream
   ``j % S``); a ``DataLoader`` with S workers yields their batches round-robin, and the
   same interleaving is made in-process when the dataset is iterated directly.

Every row is seen exactly once per epoch (``drop_last`` drops the last partial batch, and
under several ranks cuts every rank to the same number of batches, as
``DistributedSampler(drop_last=True)`` does). The order is a function of ``seed``, the
epoch, ``world_size`` and ``num_workers`` only. :meth:`ActivationDataset.state_dict`
records the epoch and the batches consumed; a dataset given it with
:meth:`~ActivationDataset.load_state_dict` continues with exactly the batches that were
still to come.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch  # the dataset subclasses torch's IterableDataset: importing this module imports torch
import torch.utils.data
from torch.utils.data import IterableDataset, get_worker_info

from actkit.errors import ActkitError, ValidationError
from actkit.loader import _plan as plan
from actkit.loader._ring import RingWriter, populate, receive, shared_empty, worker_buffers

__all__ = ["ActivationDataset", "DataLoader", "to_torch"]

_DEFAULT_BUFFER_BYTES = 64 * 2**20
_ROWS_CHUNK = 256  # rows read together when the dataset yields single rows (batch_size None)
_CONFIG = ("seed", "batch_size", "shuffle", "drop_last", "buffer_rows", "block_rows", "rank", "world_size",
           "num_workers", "rows")


def _distributed() -> tuple[int, int]:
    try:
        import torch.distributed as dist  # a torch built without distributed support: the ImportError is caught

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover
        pass
    return 0, 1


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValidationError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _rebatching_loader():
    """The batch size of a torch ``DataLoader`` that batches again what this dataset yields
    (its fetcher collates automatically: ``batch_size`` not None), else None.

    Found on the frames that called the dataset's first ``next()``: torch's
    ``_IterableDatasetFetcher.fetch`` (its ``auto_collation`` and the batch's indices). Where
    torch's internals differ nothing is found and nothing is refused.
    """
    frame = sys._getframe(1)
    for _ in range(4):
        frame = frame.f_back
        if frame is None:
            return None
        fetcher = frame.f_locals.get("self")
        if type(fetcher).__name__ == "_IterableDatasetFetcher":
            if not getattr(fetcher, "auto_collation", False):
                return None
            return len(frame.f_locals.get("possibly_batched_index") or ()) or "a"
    return None


class ActivationDataset(IterableDataset):
    """A torch ``IterableDataset`` of row batches of one or several layers (rows aligned).

    Parameters
    ----------
    layers : Layer, MatrixLayer or sequence of them
        Store layers (plain or sharded stores) or embedding files, all with the same number
        of rows; row ``i`` of every layer is yielded together.
    batch_size : int or None
        Rows per batch; None: yield single rows (shape ``(features,)``), for a
        ``torch.utils.data.DataLoader(ds, batch_size=64)`` to batch (``drop_last`` is then the
        DataLoader's).
    shuffle : bool, default True
        Seeded random block order and window shuffle; False reads rows in store order.
    seed : int, default 0
    buffer_rows : int, optional
        Rows of a shuffle window (held in memory by each worker, for every layer). Default:
        about 64 MiB of rows, at least ``batch_size``.
    drop_last : bool, default False
    verify : bool, default True
        Check every block read against the store's block checksums (xxh3_128, or sha256 in
        older stores); a mismatch is a
        :class:`~actkit.errors.StoreError` (embedding files have no checksums).
    rank, world_size : int, optional
        Default: ``torch.distributed``'s when it is initialised, else 0 and 1.
    num_workers : int, default 0
        Set by :class:`DataLoader`: the order is the round-robin of that many streams. Under a
        plain ``torch.utils.data.DataLoader`` each worker takes the stream of its id among as
        many streams as the loader has workers (``get_worker_info``), so every row comes once
        per epoch whatever the worker count; there, call :meth:`set_epoch` before each epoch
        for a new order (as with ``DistributedSampler``), since each worker iterates a copy.
    dtype : numpy dtype, optional
        Convert the rows (e.g. ``np.float32`` for a float16 store); default: as stored.
    return_index : bool, default False
        Also yield the row numbers (int64 tensor, shape (batch_size,)) as the last element.
    block_rows : int, optional
        Rows per block (default: the store's checksum block, about 1 MiB).

    Yields
    ------
    torch.Tensor of shape (batch_size, features)
        For one layer; a tuple of such tensors for several layers (in the order given), with
        the row numbers appended when ``return_index``. The last batch may be shorter unless
        ``drop_last``.
    """

    def __init__(self, layers, batch_size, *, shuffle=True, seed=0, buffer_rows=None, drop_last=False, verify=True,
                 rank=None, world_size=None, num_workers=0, dtype=None, return_index=False, block_rows=None):
        single = not isinstance(layers, (list, tuple))
        layers = [layers] if single else list(layers)
        if not layers:
            raise ValidationError("to_torch needs at least one layer")
        self.sources = [plan.source_of(x, verify=bool(verify)) for x in layers]
        rows = {s.rows for s in self.sources}
        if len(rows) != 1:
            raise ValidationError("the layers have different numbers of rows ("
                                  + ", ".join(f"{s.name}: {s.rows}" for s in self.sources) + "); rows must align")
        self.rows = rows.pop()
        self.single = single
        self.yield_rows = batch_size is None
        self.batch_size = _ROWS_CHUNK if self.yield_rows else _positive("batch_size", batch_size)
        self.shuffle, self.drop_last, self.return_index = bool(shuffle), bool(drop_last), bool(return_index)
        self.drop_last = self.drop_last and not self.yield_rows
        self.seed = int(seed)
        self.block_rows = _positive("block_rows", block_rows) if block_rows is not None else \
            plan.default_block_rows(self.sources)
        if buffer_rows is None:
            row_bytes = sum(s.features * np.dtype(s.dtype).itemsize for s in self.sources)
            buffer_rows = max(self.batch_size, _DEFAULT_BUFFER_BYTES // max(1, row_bytes))
        self.buffer_rows = _positive("buffer_rows", buffer_rows)
        r, w = _distributed()
        self.rank = r if rank is None else int(rank)
        self.world_size = w if world_size is None else _positive("world_size", world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValidationError(f"rank {self.rank} is not in 0..{self.world_size - 1}")
        self.num_workers = int(num_workers)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self._worker_buffers = None  # set by actkit.loader.DataLoader: shared buffers of its workers
        self.epoch = 0
        self.batches = 0  # batches of this epoch consumed (counted where they are handed out)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_pool", None)  # in-process window buffers stay here
        return state

    # ------------------------------------------------------------------ state
    @property
    def window_rows(self) -> int:
        """Rows of a shuffle window: ``buffer_rows`` rounded down to a multiple of ``batch_size``."""
        return max(self.batch_size, self.buffer_rows // self.batch_size * self.batch_size)

    @property
    def _buffer_rows(self) -> int:
        """Rows of a window buffer: a window, or the whole layer when that is smaller."""
        return max(1, min(self.window_rows, self.rows))

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (from its first batch), as ``DistributedSampler.set_epoch``."""
        self.epoch, self.batches = int(epoch), 0

    def state_dict(self) -> dict:
        """``{"epoch", "batches", ...}``: where the iteration stands, with the settings that
        fix the order (checked by :meth:`load_state_dict`)."""
        return {"epoch": self.epoch, "batches": self.batches, **{k: getattr(self, k) for k in _CONFIG}}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (a :meth:`state_dict`): the next iteration yields exactly the
        batches that came after it."""
        diff = [f"{k}={state.get(k)!r} (here {getattr(self, k)!r})" for k in _CONFIG
                if k in state and state[k] != getattr(self, k)]
        if diff:
            raise ValidationError("the state was saved by a loader with other settings: " + ", ".join(diff))
        self.epoch, self.batches = int(state["epoch"]), int(state["batches"])

    # ------------------------------------------------------------------ the plan
    def _rank_rows(self, blocks) -> int:
        n, br = self.rows, self.block_rows
        return int(sum(min(n, (int(b) + 1) * br) - int(b) * br for b in blocks))

    def _epoch_plan(self):
        """(windows dealt to streams, batches of each stream, batches of this rank)."""
        args = (self.rows, self.block_rows, self.seed, self.epoch, self.shuffle)
        mine = plan.rank_blocks(*args, self.rank, self.world_size)
        wins = plan.windows(mine, self.rows, self.block_rows, self.window_rows)
        S = max(1, self.num_workers)
        streams = [wins[s::S] for s in range(S)]
        B = self.batch_size
        per_window = (lambda w: w.rows // B) if self.drop_last else (lambda w: -(-w.rows // B))
        counts = np.array([sum(per_window(w) for w in ws) for ws in streams], dtype=np.int64)
        total = int(counts.sum())
        if self.drop_last and self.world_size > 1:  # every rank the same number of batches
            total = min(self._rank_rows(plan.rank_blocks(*args, r, self.world_size)) // B
                        for r in range(self.world_size))
        return streams, counts, total

    def __len__(self) -> int:
        """Batches this rank yields in an epoch (rows, when it yields rows)."""
        if self.yield_rows:
            args = (self.rows, self.block_rows, self.seed, self.epoch, self.shuffle)
            return self._rank_rows(plan.rank_blocks(*args, self.rank, self.world_size))
        return self._epoch_plan()[2]

    def _schedule(self):
        """Per stream, in the round-robin order that continues after ``self.batches``:
        ``(windows, batches to skip, batches to yield)``."""
        streams, counts, total = self._epoch_plan()
        n = min(self.batches, total)
        end = plan.round_robin(counts, total)
        done = plan.round_robin(counts, n)
        first = int(np.argmax(plan.round_robin(counts, n + 1) - done)) if n < total else 0
        S = len(streams)
        order = [(first + i) % S for i in range(S)]
        return [(streams[s], int(done[s]), int(end[s] - done[s])) for s in order]

    # ------------------------------------------------------------------ iteration
    def __iter__(self):
        info = get_worker_info()
        if info is not None and not self._worker_buffers and info.num_workers != self.num_workers:
            # a plain torch DataLoader's worker (this is its own copy): the windows are dealt to
            # as many streams as it has workers, and this worker yields the stream of its id
            self.num_workers = info.num_workers
        if not self.yield_rows and (n := _rebatching_loader()) is not None:
            raise ValidationError(
                f"this dataset already yields batches of {self.batch_size} rows and the DataLoader batches them "
                f"again (batch_size={n}: tensors of {n} x {self.batch_size} x features): give the DataLoader "
                "batch_size=None, or to_torch() no batch_size (single rows) and the DataLoader the batch size")
        schedule = self._schedule()
        if self.yield_rows:
            yield from _rows(self._batches(info, schedule))
            return
        yield from self._batches(info, schedule)

    def _batches(self, info, schedule):
        """The batches of this epoch: a worker's stream, or all streams round-robin here."""
        if info is not None:
            if info.num_workers != len(schedule):
                raise ValidationError(f"the dataset was set up for {self.num_workers} workers and runs in "
                                      f"{info.num_workers}; use actkit.loader.DataLoader(dataset, "
                                      f"num_workers={info.num_workers})")
            ring = windows = None
            if self._worker_buffers:  # under actkit.loader.DataLoader: its shared buffers
                mine = self._worker_buffers[info.id]
                populate([t for w in mine["windows"] for t in w] + mine["ring"] + [mine["ids"], mine["flags"]])
                ring = RingWriter(info.id, mine)
                windows = [[t.numpy() for t in w] for w in mine["windows"]]
            yield from self._stream(*schedule[info.id], shared=not self.yield_rows, ring=ring, buffers=windows)
            return
        pool = self.__dict__.setdefault("_pool", [])  # window buffers kept for the next epoch
        sets = [pool.pop() if pool else [None, None] for _ in schedule]
        gens = [self._stream(*s, buffers=b) for s, b in zip(schedule, sets)]
        while gens:  # the round-robin a DataLoader makes of its workers
            alive = []
            for g in gens:
                batch = next(g, None)
                if batch is None:
                    continue
                alive.append(g)
                self.batches += 1
                yield batch
            gens = alive
        pool.extend(sets)  # only after a finished epoch (an abandoned one may still hold them)
        self.set_epoch(self.epoch + 1)

    def _stream(self, wins, skip, take, shared=False, ring=None, buffers=None):
        """Batches ``skip .. skip + take`` of one stream (its windows in order). The next
        window is read (and checked) on a background thread while this one's batches are
        handed out: two window buffers per layer, reused."""
        B = self.batch_size
        todo = []  # (window, its first batch, batches to hand out)
        for w in wins:
            nb = w.rows // B if self.drop_last else -(-w.rows // B)
            if skip >= nb:
                skip -= nb
                continue
            if take <= 0:
                break
            todo.append((w, skip, min(nb - skip, take)))
            take -= todo[-1][2]
            skip = 0
        if not todo:
            return
        buffers = [None, None] if buffers is None else buffers  # filled (and kept) here

        def load(i):
            if buffers[i % 2] is None:
                buffers[i % 2] = [np.empty((self._buffer_rows, s.features), dtype=s.dtype) for s in self.sources]
            bufs = buffers[i % 2]
            for src in self.sources:  # the disk reads this window and the next one in the background
                src.advise([p for k in (i, i + 1) if k < len(todo) for p in todo[k][0].pieces])
            for src, buf in zip(self.sources, bufs):
                at = 0
                for a, z in todo[i][0].pieces:
                    src.read(a, z, buf[at:at + z - a])
                    at += z - a
            return bufs

        pool = ThreadPoolExecutor(1, thread_name_prefix="actkit-loader")
        try:
            ahead = pool.submit(load, 0)
            for i, (w, first, n) in enumerate(todo):
                bufs = ahead.result()
                if i + 1 < len(todo):
                    ahead = pool.submit(load, i + 1)
                perm = plan.window_perm(w.rows, self.seed, self.epoch, self.rank, w.index, self.shuffle)
                ids = np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in w.pieces]) \
                    if self.return_index else None
                for j in range(first, first + n):
                    sel = slice(j * B, min(w.rows, (j + 1) * B)) if not self.shuffle else perm[j * B:(j + 1) * B]
                    yield self._batch(bufs, ids, sel, shared, ring)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _batch(self, bufs, ids, sel, shared=False, ring=None):
        """The rows ``sel`` of the window, copied out of its (reused) buffer. In a worker they
        are gathered into the next slot of ``ring`` (see :mod:`actkit.loader._ring`), or, under
        a plain torch ``DataLoader``, straight into fresh shared memory, which it then passes
        to the main process without a further copy."""
        n = sel.stop - sel.start if isinstance(sel, slice) else len(sel)
        out = []
        slot = None if ring is None else ring.acquire()
        for i, b in enumerate(bufs):
            dtype = self.dtype or b.dtype
            if slot is not None:
                dst = ring.arrays[i][slot, :n]
                out.append(None)
            else:
                t = shared_empty((n, b.shape[1]), getattr(torch, np.dtype(dtype).name)) if shared else \
                    torch.from_numpy(np.empty((n, b.shape[1]), dtype=dtype))  # numpy: huge pages, few faults
                dst = t.numpy()
                out.append(t)
            if isinstance(sel, slice) or dtype != b.dtype:
                dst[...] = b[sel]
            else:  # mode="clip": the indices are in range, and "raise" gathers through a temporary copy
                np.take(b, sel, axis=0, out=dst, mode="clip")
        if slot is not None:
            if self.return_index:
                ring.id_array[slot, :n] = ids[sel]
            return ring.publish(slot, n)
        if self.return_index:
            out.append(torch.from_numpy(np.ascontiguousarray(ids[sel])))
        return out[0] if len(out) == 1 else tuple(out)

    def __repr__(self):
        names = ", ".join(s.name for s in self.sources)
        return (f"<actkit ActivationDataset [{names}] rows={self.rows} batch_size={self.batch_size} "
                f"shuffle={self.shuffle} rank={self.rank}/{self.world_size} epoch={self.epoch}>")


def _rows(batches):
    """Each row of each batch (a tensor, or a tuple of tensors row by row)."""
    for batch in batches:
        if isinstance(batch, tuple):
            for i in range(len(batch[0])):
                yield tuple(t[i] for t in batch)
        else:
            yield from batch.unbind(0)


class DataLoader:
    """A ``torch.utils.data.DataLoader`` over an :class:`ActivationDataset` that keeps the
    dataset's :meth:`~ActivationDataset.state_dict` current with ``num_workers > 0``.

    Each worker opens the files itself and reads only its own windows, into buffers this
    loader allocates once in shared memory and keeps across epochs (two windows, and a ring of
    ``prefetch_factor + 2`` batch slots out of which each batch is copied here; see
    :mod:`actkit.loader._ring`). Batches come out in the order the dataset defines for
    ``num_workers`` streams; the dataset counts the batches
    handed out, so ``loader.dataset.state_dict()`` after any batch resumes right after it.

    Parameters
    ----------
    dataset : ActivationDataset
    num_workers : int, default 0
    **kwargs
        Passed to ``torch.utils.data.DataLoader`` (``pin_memory``, ``prefetch_factor``,
        ``multiprocessing_context``, ...); ``batch_size`` is the dataset's.
    """

    def __init__(self, dataset: ActivationDataset, num_workers: int = 0, **kwargs):
        if not isinstance(dataset, ActivationDataset):
            raise ValidationError("actkit.loader.DataLoader takes an ActivationDataset (layer.to_torch(...))")
        if kwargs.get("persistent_workers"):
            raise ValidationError("persistent_workers would keep the first epoch's order; leave it off")
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) or num_workers < 0:
            raise ValidationError(f"num_workers must be a non-negative integer (0: read in this process), "
                                  f"got {num_workers!r}")
        if dataset.yield_rows:
            raise ValidationError("actkit.loader.DataLoader hands out the dataset's batches: give to_torch a "
                                  "batch_size, or batch its rows with torch.utils.data.DataLoader(ds, batch_size=B)")
        self.dataset = dataset
        self.num_workers = int(num_workers)
        dataset.num_workers = self.num_workers
        self._pin = False
        if self.num_workers > 0:  # batches come through reused shared slots, copied out here
            self._pin = bool(kwargs.pop("pin_memory", False)) and torch.cuda.is_available()
        self._slots = int(kwargs.get("prefetch_factor") or 2) + 2
        self._buffers, self._busy = None, False
        self._loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=self.num_workers, **kwargs)

    def __len__(self):
        return len(self.dataset) - min(self.dataset.batches, len(self.dataset))

    def __iter__(self):
        ds = self.dataset
        if self.num_workers == 0:  # the dataset runs here and counts itself
            yield from self._loader
            return
        # the workers' shared buffers, kept for the next epoch (fresh ones if an earlier
        # iteration, perhaps abandoned, may still have workers writing into them)
        kept = not self._busy
        buffers = self._buffers if kept else None
        if buffers is None:
            buffers = [worker_buffers(ds, self._slots) for _ in range(self.num_workers)]
            if kept:
                self._buffers = buffers
        for b in buffers:
            b["flags"].zero_()
        self._busy = self._busy or kept
        ds._worker_buffers = buffers
        it = None
        try:
            it = iter(self._loader)  # the workers start here, with the buffers
            ds._worker_buffers = None
            for item in it:
                batch = receive(item, buffers, self._pin)
                ds.batches += 1
                yield batch
        except ActkitError as exc:  # a worker's error: its own one line, not torch's wrapper
            raise type(exc)(_original_message(str(exc))) from None
        finally:
            ds._worker_buffers = None
            if kept:
                del it  # the workers are shut down before their buffers are handed out again
                self._busy = False
        ds.set_epoch(ds.epoch + 1)

    def state_dict(self) -> dict:
        return self.dataset.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.dataset.load_state_dict(state)


def _original_message(text: str) -> str:
    """The message of an exception re-raised by torch from a worker (its last line)."""
    last = [line for line in text.strip().splitlines() if line.strip()]
    if not last or "Original Traceback" not in text:
        return text
    line = last[-1]
    return line.split(": ", 1)[1] if ": " in line and line.split(": ", 1)[0].endswith("Error") else line


def to_torch(layers, batch_size=None, *, num_workers=None, **kwargs):
    """An :class:`ActivationDataset` of ``layers`` (see there for the parameters; batches of
    ``batch_size`` rows, or single rows when it is None); with ``num_workers`` given, a
    :class:`DataLoader` over it with that many workers."""
    ds = ActivationDataset(layers, batch_size, **kwargs)
    return ds if num_workers is None else DataLoader(ds, num_workers=num_workers)
