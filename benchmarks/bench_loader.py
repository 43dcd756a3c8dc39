"""The torch loader (``layer.to_torch``) against a plain sequential h5py read, side by side.

One store of ``--rows`` x ``--features`` float32 rows is written to ``--dir`` (default: a
temporary folder), then, alternating, ``--repeats`` times each:

* ``h5py sequential``: ``f["layers/L/data"][a:b]`` in ~32 MiB row blocks, start to end
  (the plain read a user would write; no shuffling, no checks);
* ``loader shuffle=True, workers=W``: every batch of one epoch through
  ``actkit.loader.DataLoader`` (random block order, window shuffle, the store's block
  checksum, XXH3-128, of every block), for W in ``--workers``; also with ``verify=False``,
  and ``shuffle=False`` in-process. Each loader is made once and each repeat is its next
  epoch, as in training (the first epoch also allocates the loader's buffers; ``--fresh``
  makes a new loader for every pass instead).

Reported: rows/s (median of the repeats, and min-max), each loader's ratio to the
sequential read of the same repeat, and the CPU seconds of one pass (this process and its
finished workers): on a shared, loaded machine the wall-clock rows/s are a share of a busy
CPU, and the CPU seconds say what the reader itself costs. The page cache is warm after the first pass (the store
is not larger than memory here); say so when quoting the numbers. ``--cold`` drops the page cache
before every timed pass (Linux, root: ``/proc/sys/vm/drop_caches``), so every pass reads from the
disk, as it would for a store larger than memory.

Usage::

    python benchmarks/bench_loader.py --rows 262144 --features 1024 --batch-size 4096 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def make_store(path: Path, rows: int, features: int) -> Path:
    from actkit.store import LayerSpec, create_store

    if path.exists():
        return path
    w = create_store(path, [LayerSpec("L", rows, features)], n_samples=rows, request={"bench": rows})
    rng = np.random.default_rng(0)
    step = max(1, 2**25 // (4 * features))
    for a in range(0, rows, step):
        w.append("L", rng.standard_normal((min(rows, a + step) - a, features), dtype=np.float32))
    w.checkpoint(rows, force=True)
    return w.finalize()


def cpu_seconds() -> float:
    """User + system CPU of this process and of its finished (joined) children."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def sequential(path: Path) -> tuple[float, float]:
    import h5py

    t = time.perf_counter()
    total = 0.0
    with h5py.File(path, "r") as f:
        ds = f["layers/L/data"]
        step = max(1, 2**25 // (ds.shape[1] * 4))
        for a in range(0, ds.shape[0], step):
            total += float(ds[a:a + step][0, 0])
    return ds.shape[0] / (time.perf_counter() - t), total


def make_loader(store, batch_size: int, workers: int, shuffle: bool, verify: bool):
    return store["L"].to_torch(batch_size, shuffle=shuffle, seed=0, verify=verify, num_workers=workers)


def epoch(dl, rows: int) -> float:
    """Rows/s of one epoch of ``dl``."""
    t = time.perf_counter()
    n = 0
    for batch in dl:
        n += batch.shape[0]
    dt = time.perf_counter() - t
    assert n == rows
    return n / dt


def mixing(path: Path, batch_size: int) -> dict:
    """How well one shuffled epoch is mixed (no timing): per batch, the share of row pairs
    that come from the same block (uniform sampling over the whole layer: 1 / blocks; the
    window shuffle: about 1 / blocks-per-window), and the spread of the row numbers."""
    from actkit.store import open_store

    with open_store(path) as s:
        ds = s["L"].to_torch(batch_size, seed=0, return_index=True)
        br, wr, n = ds.block_rows, ds.window_rows, len(s["L"])
        same, spread = [], []
        for _, idx in ds:
            ids = idx.numpy()
            _, counts = np.unique(ids // br, return_counts=True)
            same.append(float((counts * (counts - 1)).sum()) / (len(ids) * (len(ids) - 1)))
            spread.append(float(np.ptp(ids)) / n)
    return {"block_rows": br, "window_rows": wr, "blocks": -(-n // br), "blocks_per_window": wr / br,
            "same_block_pairs": float(np.mean(same)), "expected_in_window": br / wr,
            "uniform": br / n, "row_spread_of_a_batch": float(np.mean(spread))}


def drop_cache() -> None:
    """Write back and drop the page cache, so the next read comes from the disk."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("1\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=262144)
    ap.add_argument("--features", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=4096)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cold", action="store_true", help="drop the page cache before every timed pass (root)")
    ap.add_argument("--fresh", action="store_true", help="a new loader for every pass (not one per case)")
    args = ap.parse_args(argv)
    if args.cold:
        try:
            drop_cache()
        except OSError as exc:
            raise SystemExit(f"bench_loader: --cold needs root on Linux to drop the page cache ({exc})") from None
    tmp = None if args.dir else tempfile.TemporaryDirectory()
    folder = Path(args.dir or tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = make_store(folder / f"bench-{args.rows}x{args.features}.h5", args.rows, args.features)
    size = os.path.getsize(path)
    print(f"store {path} ({size / 2**30:.2f} GiB); load before: {os.getloadavg()}")
    cases = [(f"loader shuffle=True workers={w}", {"workers": int(w), "shuffle": True, "verify": True})
             for w in args.workers.split(",")]
    cases += [("loader shuffle=True workers=2 verify=False", {"workers": 2, "shuffle": True, "verify": False}),
              ("loader shuffle=False workers=0", {"workers": 0, "shuffle": False, "verify": True})]
    sequential(path)  # warm the page cache
    import actkit.loader  # noqa: F401  (torch imported before any timing)
    from actkit.store import open_store

    store = open_store(path)
    loaders = {}
    res = {"h5py sequential": []}
    ratios = {name: [] for name, _ in cases}
    for name, _ in cases:
        res[name] = []
    cpu = {name: [] for name in res}
    for _ in range(args.repeats):
        for name, kw in cases:
            if args.cold:
                drop_cache()
            c = cpu_seconds()
            seq, _ = sequential(path)
            cpu["h5py sequential"].append(cpu_seconds() - c)
            res["h5py sequential"].append(seq)
            if args.cold:
                drop_cache()
            c = cpu_seconds()
            if args.fresh or name not in loaders:
                loaders[name] = make_loader(store, args.batch_size, **kw)
            got = epoch(loaders[name], args.rows)
            cpu[name].append(cpu_seconds() - c)
            res[name].append(got)
            ratios[name].append(got / seq)
    loaders.clear()
    store.close()
    print(f"load after: {os.getloadavg()}")
    print(f"{'reader':45s} {'rows/s (median)':>16s} {'min-max':>22s} {'x sequential':>14s} {'CPU s/pass':>11s}")
    out = {}
    for name, vals in res.items():
        r = ratios.get(name)
        rtxt = f"{np.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "1"
        print(f"{name:45s} {np.median(vals):16,.0f} {min(vals):10,.0f}-{max(vals):<11,.0f} {rtxt:>14s} "
              f"{np.median(cpu[name]):11.2f}")
        out[name] = {"rows_per_s": vals, "ratio": r, "cpu_seconds": cpu[name]}
    mix = mixing(path, args.batch_size)
    print("mixing: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in mix.items()))
    out["mixing"] = mix
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
