"""Store write and read speed against plain h5py and ``np.save``, side by side in one run.

The same float32 rows (``--mib`` MiB, ``--features`` wide) are written in ``--append-rows``-row
appends by

* plain h5py: one contiguous dataset created at its final size, ``ds[a:b] = rows``;
* ``np.save`` of the whole matrix (one call: its best case);
* actkit: ``create_store`` + ``append`` + ``checkpoint`` (every append) + ``finalize``, block
  checksums included (``/meta["checksum"]``: xxh3_128 since actkit-store/3);
* the block checksums alone: xxh3_128 (now) and sha256 (actkit-store/2), one thread;

each followed by ``os.sync()`` inside the timed region (the data reach the disk), files
removed between cases, cases interleaved over ``--repeats`` rounds (median MiB/s, and the
spread). Reads: plain h5py (``ds[a:b]`` blocks), actkit ``open_store`` + layer blocks, and
actkit ``open_store(verify=True)`` (every block checked), from the page cache.

Run (numbers in docs/store-format.md)::

    python benchmarks/bench_store.py                  # 512 MiB, 3 rounds
    python benchmarks/bench_store.py --mib 128 --dir /dev/shm
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_h5py(path, X, step):
    import h5py

    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", shape=X.shape, dtype=X.dtype)
        for a in range(0, len(X), step):
            ds[a:a + step] = X[a:a + step]


def write_npy(path, X, step):
    np.save(path, X)


def write_actkit(path, X, step):
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec("layer", X.shape[0], X.shape[1])], n_samples=X.shape[0],
                     request={"bench": "store"}, overwrite=True)
    for a in range(0, len(X), step):
        w.append("layer", X[a:a + step])
        w.checkpoint(min(len(X), a + step))
    w.finalize()


def _hash_all(X, new):
    from actkit.store._integrity import block_rows_for

    br = block_rows_for(X.shape[1], X.itemsize)
    for a in range(0, len(X), br):
        h = new()
        h.update(memoryview(np.ascontiguousarray(X[a:a + br])).cast("B"))
        h.digest()


def hash_xxh3(path, X, step):
    import xxhash

    _hash_all(X, xxhash.xxh3_128)


def hash_sha256(path, X, step):
    _hash_all(X, hashlib.sha256)


def read_h5py(path, step):
    import h5py

    with h5py.File(path, "r") as f:
        ds = f["layers/layer/data"]
        for a in range(0, ds.shape[0], step):
            ds[a:a + step]


def read_actkit(path, step, verify=False):
    from actkit.store import open_store

    with open_store(path, verify=verify) as st:
        layer = st["layer"]
        for a in range(0, len(layer), step):
            layer[a:a + step]


WRITERS = {"plain h5py": write_h5py, "np.save": write_npy, "actkit write": write_actkit,
           "xxh3_128 alone": hash_xxh3, "sha256 alone": hash_sha256}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--features", type=int, default=1024)
    p.add_argument("--append-rows", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", default=None, help="where the files go (default: the system's temporary folder)")
    args = p.parse_args(argv)
    rows = args.mib * 2**20 // (4 * args.features)
    X = np.random.default_rng(0).standard_normal((rows, args.features), dtype=np.float32)
    mib = X.nbytes / 2**20
    print(f"{mib:.0f} MiB float32, {rows} x {args.features}, appends of {args.append_rows} rows, "
          f"{args.repeats} rounds; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    speeds = {k: [] for k in [*WRITERS, "plain h5py read", "actkit read", "actkit read --verify"]}
    with tempfile.TemporaryDirectory(prefix="bench_store_", dir=args.dir) as tmp:
        tmp = Path(tmp)
        for _ in range(args.repeats):
            for name, fn in WRITERS.items():
                path = tmp / ("x.npy" if name == "np.save" else "store.h5" if name == "actkit write" else "x.h5")
                t0 = time.perf_counter()
                fn(path, X, args.append_rows)
                os.sync()
                speeds[name].append(mib / (time.perf_counter() - t0))
                if name != "actkit write":
                    path.unlink(missing_ok=True)
            store = tmp / "store.h5"  # the actkit store just written, in the page cache
            for name, fn in (("plain h5py read", read_h5py), ("actkit read", read_actkit),
                             ("actkit read --verify", lambda p, s: read_actkit(p, s, verify=True))):
                t0 = time.perf_counter()
                fn(store, args.append_rows)
                speeds[name].append(mib / (time.perf_counter() - t0))
            store.unlink()
    base = statistics.median(speeds["plain h5py"])
    for name, v in speeds.items():
        med = statistics.median(v)
        rel = f"  {med / base:5.2f}x plain h5py write" if name in WRITERS else ""
        print(f"{name:22s} {med:8.0f} MiB/s  (runs {', '.join(f'{x:.0f}' for x in v)}){rel}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
