"""Extraction under ``torchrun``: one contiguous block of samples per rank, one shard each.

``torchrun --nproc-per-node K -m actkit extract ... --out run.h5`` starts K processes with the
usual environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``...). Each rank

1. reads the inputs, loads the model and prepares the samples exactly as a single process
   would (so every rank derives the same request and the same sample count);
2. checks that every rank was started with the same request (an ``all_gather`` of the
   request hash; a rank started with a different command is refused on every rank before
   anything is written);
3. extracts samples ``[n*r//K, n*(r+1)//K)`` into ``run.h5.shards/rank-R-of-K.<h>.h5``, an
   ordinary crash-safe, resumable store whose request records the full request, the rank
   and the block (so a later run with another command is refused by the shard itself);
   ``<h>`` is the run's request hash (no other run shares the name);
4. waits for every rank; rank 0 then writes ``run.h5``, whose layers are HDF5 virtual
   datasets over the shards (:func:`actkit.store.write_virtual_store`), removes every other
   file under ``run.h5.shards/`` (an overwritten run's shards); a last barrier.

A rerun recomputes exactly the shards that are missing, unfinished or damaged and resumes
unfinished ones; the outcome (written, resumed from N/M, already complete, repaired) is
reported like a single process's.

The process group (``gloo`` on CPU, ``nccl`` with CUDA; ``--device cuda`` puts rank r on
``cuda:LOCAL_RANK``) is created here unless the caller already made one, with a long timeout
because ranks whose shard is already finished wait for the others.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from actkit.errors import ActkitError
from actkit.store import (LayerSpec, WriterLock, create_store, finished_request_hash, remove_stale, request_hash,
                          rerun_state, shard_files, write_virtual_store)

#: how long a finished rank waits for the others at a barrier
BARRIER_TIMEOUT = datetime.timedelta(days=7)


@dataclass
class World:
    """This process's place in a ``torchrun`` job."""

    rank: int
    world_size: int
    local_rank: int
    owns_group: bool = False
    backend: str = "gloo"

    def device(self, device: str) -> str:
        """``cuda`` -> ``cuda:LOCAL_RANK``; any other device as given."""
        return f"cuda:{self.local_rank}" if str(device) == "cuda" else str(device)

    def block(self, n: int) -> tuple[int, int]:
        """This rank's contiguous block of ``n`` samples, ``[lo, hi)``."""
        return n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size


def world_from_env() -> World | None:
    """The ``torchrun`` world of this process, or None when it runs alone."""
    try:
        size = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return None
    if size <= 1:
        return None
    return World(rank=int(os.environ.get("RANK", "0")), world_size=size,
                 local_rank=int(os.environ.get("LOCAL_RANK", "0")))


def init(world: World, device: str) -> None:
    """Join the process group (created here unless one exists)."""
    world.backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if world.backend == "nccl":
        torch.cuda.set_device(int(str(world.device(device)).split(":")[1]))
    if dist.is_initialized():
        world.backend = dist.get_backend()
        if dist.get_world_size() != world.world_size:
            raise ActkitError(f"the process group has {dist.get_world_size()} ranks but WORLD_SIZE "
                              f"is {world.world_size}")
        return
    dist.init_process_group(backend=world.backend, timeout=BARRIER_TIMEOUT)
    world.owns_group = True


def agree(world: World, request: dict) -> None:
    """Refuse (on every rank) unless every rank holds the same request (a JSON-ready dict)."""
    mine = json.loads(json.dumps(request, sort_keys=True, default=str))
    gathered = [None] * world.world_size
    dist.all_gather_object(gathered, mine)
    for r, other in enumerate(gathered):
        if other != gathered[0]:
            keys = sorted(k for k in set(other) | set(gathered[0]) if other.get(k) != gathered[0].get(k))
            key = keys[0]
            raise ActkitError(
                f"rank {r} was started with a different command from rank 0 ({key}: "
                f"{str(other.get(key))[:80]} vs {str(gathered[0].get(key))[:80]}); "
                "start every rank with the same command"
            )


def barrier(world: World) -> None:
    if world.backend == "nccl":
        dist.barrier(device_ids=[world.local_rank])
    else:
        dist.barrier()


def finish(world: World) -> None:
    if world.owns_group and dist.is_initialized():
        dist.destroy_process_group()
        world.owns_group = False


def broadcast(world: World, obj):
    """Rank 0's ``obj`` on every rank."""
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(world: World, obj) -> list:
    got = [None] * world.world_size
    dist.all_gather_object(got, obj)
    return got


def extract_sharded(world: World, out: Path, specs, run_block, *, device, n, request, provenance, params,
                    fingerprint, overwrite, compression, report=None, on_work=None, inputs=None) -> Path:
    """This rank's block of samples into its shard; rank 0 then writes ``out`` over all shards.

    Rank 0 takes the writer lock of ``out`` (a second job aimed at it is refused on every
    rank) and decides from the disk what to do (:func:`actkit.store._shard_state.rerun_state`):
    nothing (the finished store of this request, every shard intact), repair (recompute the
    shards that are missing, unfinished or damaged), resume or write. Every rank learns the
    decision before it touches a file.

    Parameters
    ----------
    specs : list of LayerSpec
        The layers of the whole run (rows, index with global sample ids).
    run_block : callable (writer, first, last)
        Streams samples ``[first + writer.samples_done, last)`` into ``writer``.
    report : dict, optional
        Filled on rank 0 with ``outcome`` (``"written"``, ``"resumed"``, ``"complete"``,
        ``"repaired"``), ``resumed_from`` and ``repaired`` (which shards were recomputed).
    on_work : callable, optional
        Called on rank 0 once it is known that there is something to compute (the deferred
        warnings about the inputs: a no-op rerun says nothing).
    inputs : dict, optional
        What each sample of the run was (:func:`actkit.store.text_record` / ``image_record``):
        recorded once, in ``out`` (the index store rank 0 writes), not in every shard.
    """
    report = {} if report is None else report
    init(world, device)
    lock = None
    try:
        agree(world, request)  # every rank refuses before anything is written
        full = {"request": dict(request), "compression": compression}
        full_hash = request_hash(full)
        decision = None
        if world.rank == 0:
            try:
                lock = WriterLock(out).acquire()
                decision = {"state": rerun_state(out, full, overwrite=overwrite)}
            except ActkitError as exc:
                decision = {"error": str(exc)}
        decision = broadcast(world, decision)
        if "error" in decision:
            raise ActkitError(decision["error"])
        if decision["state"] == "complete":
            report.update(outcome="complete", resumed_from=n)
            return out
        if world.rank == 0 and on_work is not None:
            on_work()
        lo, hi = world.block(n)
        shard_specs = []
        for s in specs:
            rows = np.searchsorted(s.index[:, 0], [lo, hi], side="left")
            shard_specs.append(LayerSpec(s.name, int(rows[1] - rows[0]), s.features, dtype=s.dtype,
                                         index=s.index[rows[0]:rows[1]], attrs=s.attrs))
        paths = shard_files(out, world.world_size, full_hash)
        path = paths[world.rank]
        path.parent.mkdir(exist_ok=True)
        shard = {"rank": world.rank, "world_size": world.world_size, "samples": [int(lo), int(hi)]}
        shard_request = {"run": request, **shard}
        if not overwrite and path.exists() and finished_request_hash(path) != request_hash(
                {"request": shard_request, "compression": compression}):
            path.unlink()  # this run's name, but truncated or replaced: recompute it
        writer = create_store(path, shard_specs, n_samples=hi - lo, request=shard_request,
                              provenance={**provenance, "shard": shard}, params=params,
                              inputs_fingerprint=fingerprint, overwrite=overwrite, compression=compression)
        mine = {"rank": world.rank, "samples": [int(lo), int(hi)], "done": int(writer.samples_done),
                "complete": bool(writer.complete)}
        if not writer.complete:
            try:
                run_block(writer, lo, hi)
            except BaseException:
                writer.close()  # the shard and its cursor stay: the same command resumes
                raise
            writer.finalize()
        states = gather(world, mine)
        if world.rank == 0:
            write_virtual_store(out, paths, request=request, provenance=provenance, n_samples=n,
                                inputs_fingerprint=fingerprint, compression=compression, inputs=inputs)
            remove_stale(out, paths)  # an overwritten run's shards, another world size's
            _report(report, decision["state"], states, paths, n)
        barrier(world)
    finally:
        if lock is not None:
            lock.release()
        finish(world)
    return out


def _report(report: dict, state: str, states: list, paths, n: int) -> None:
    """What the run did, for the outcome line (see ``extract_sharded``)."""
    done = sum(s["samples"][1] - s["samples"][0] if s["complete"] else s["done"] for s in states)
    redone = [s for s in states if not s["complete"]]
    if state == "repair":
        which = ", ".join(f"{paths[s['rank']].name} (samples {s['samples'][0]}-{s['samples'][1]}"
                          + (f", resumed from {s['done']}" if s["done"] else "") + ")" for s in redone)
        report.update(outcome="repaired", resumed_from=done, repaired=f"recomputed {which}" if redone else
                      "rewrote the index over its intact shards")
    elif done:
        report.update(outcome="resumed", resumed_from=done)
    else:
        report.update(outcome="written", resumed_from=0)
