"""Extraction under ``torchrun``: one contiguous block of samples per rank, one shard each.

``torchrun --nproc-per-node K -m actkit extract ... --out run.h5`` starts K processes with the
usual environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``...). Each rank

1. reads the inputs, loads the model and prepares the samples exactly as a single process
   would (so every rank derives the same request and the same sample count);
2. checks that every rank was started with the same request (an ``all_gather`` of the
   request hash; a rank started with a different command is refused on every rank before
   anything is written);
3. extracts samples ``[n*r//K, n*(r+1)//K)`` into ``run.h5.shards/rank-R-of-K.h5``, an
   ordinary crash-safe, resumable store whose request records the full request, the rank
   and the block (so a later run with another command is refused by the shard itself);
4. waits for every rank; rank 0 then writes ``run.h5``, whose layers are HDF5 virtual
   datasets over the shards (:func:`actkit.store.write_virtual_store`); a last barrier.

The process group (``gloo`` on CPU, ``nccl`` with CUDA; ``--device cuda`` puts rank r on
``cuda:LOCAL_RANK``) is created here unless the caller already made one, with a long timeout
because ranks whose shard is already finished wait for the others.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from actkit.errors import ActkitError

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

    def shard_path(self, out: Path) -> Path:
        return shard_path(out, self.rank, self.world_size)


def shard_path(out, rank: int, world_size: int) -> Path:
    """``OUT.shards/rank-R-of-K.h5``."""
    out = Path(out)
    return out.with_name(out.name + ".shards") / f"rank-{rank}-of-{world_size}.h5"


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
    import torch
    import torch.distributed as dist

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
    import json

    import torch.distributed as dist

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
    import torch.distributed as dist

    if world.backend == "nccl":
        dist.barrier(device_ids=[world.local_rank])
    else:
        dist.barrier()


def finish(world: World) -> None:
    import torch.distributed as dist

    if world.owns_group and dist.is_initialized():
        dist.destroy_process_group()
        world.owns_group = False


def extract_sharded(world: World, out: Path, specs, run_block, *, device, n, request, provenance, params,
                    fingerprint, overwrite, compression) -> Path:
    """This rank's block of samples into its shard; rank 0 then writes ``out`` over all shards.

    Parameters
    ----------
    specs : list of LayerSpec
        The layers of the whole run (rows, index with global sample ids).
    run_block : callable (writer, first, last)
        Streams samples ``[first + writer.samples_done, last)`` into ``writer``.
    """
    import numpy as np

    from actkit.store import LayerSpec, create_store, finished_request_hash, request_hash, write_virtual_store

    init(world, device)
    try:
        agree(world, request)  # every rank refuses before anything is written
        full_hash = request_hash({"request": dict(request), "compression": compression})
        if out.exists() and not overwrite:
            if finished_request_hash(out) == full_hash:
                return out  # the identical run is finished
            raise ActkitError(f"{out} already holds a store made by a different command; pass --overwrite "
                              "to replace it")
        lo, hi = world.block(n)
        shard_specs = []
        for s in specs:
            rows = np.searchsorted(s.index[:, 0], [lo, hi], side="left")
            shard_specs.append(LayerSpec(s.name, int(rows[1] - rows[0]), s.features, dtype=s.dtype,
                                         index=s.index[rows[0]:rows[1]], attrs=s.attrs))
        path = world.shard_path(out)
        path.parent.mkdir(exist_ok=True)
        shard = {"rank": world.rank, "world_size": world.world_size, "samples": [int(lo), int(hi)]}
        writer = create_store(path, shard_specs, n_samples=hi - lo, request={"run": request, **shard},
                              provenance={**provenance, "shard": shard}, params=params,
                              inputs_fingerprint=fingerprint, overwrite=overwrite, compression=compression)
        if not writer.complete:
            try:
                run_block(writer, lo, hi)
            except BaseException:
                writer.close()  # the shard and its cursor stay: the same command resumes
                raise
            writer.finalize()
        barrier(world)
        if world.rank == 0:
            paths = [shard_path(out, r, world.world_size) for r in range(world.world_size)]
            write_virtual_store(out, paths, request=request, provenance=provenance, n_samples=n,
                                            inputs_fingerprint=fingerprint, compression=compression)
        barrier(world)
    finally:
        finish(world)
    return out
