"""Dask benchmark: whitening and FastICA of a >= 2 GB store on 1 and 2 workers vs one process.

Writes (once, then reuses) an N x D float32 store of Laplace sources mixed by a random
matrix (default 8,400,000 x 64 = 2.15 GB), then, each in a fresh child process:

* ``single``  the single-process streaming path: ``Whitener().fit(layer)`` and
  ``FastICA(...).fit(layer)`` (blocks read one ahead in a thread, BLAS and the block
  workers on every core);
* ``dask-1``, ``dask-2``  the same fits with ``scheduler=Client(LocalCluster(n_workers=W,
  threads_per_worker=1, processes=True))`` on 127.0.0.1: every pass a map over the
  store's row blocks (``layer.to_dask(block_rows)``, ``--chunk-mib`` 64 MiB chunks) and an
  exact tree merge.

FastICA runs a fixed budget of solver iterations (``--ica-iter``, random start, no
warm-up, ``tol`` tiny) so that every configuration makes the same passes; the table gives
the wall time per solver pass over the data (measured around each pass; the covariance
pass excluded). Each child first fits a tiny array (imports, worker start-up are one-off). Per-worker peak memory is each
worker process's ``VmHWM`` (peak RSS, including the ~100 MB of an idle worker); the client's
and the single process's too. The scheduler overhead per pass is the wall time of a pass
of the same number of tasks (and the same merge tree) that do no work.

Finally a paper estimate for a 1 TB store on 64 workers from the measured per-worker cost
of a pass (``dask-1``), assuming the storage delivers the aggregate bandwidth (printed)
and the scheduler's per-task overhead stays as measured here.

Usage::

    python benchmarks/bench_dask.py [--rows 8400000] [--features 64] [--ica-iter 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

CHILD = r"""
import json, sys, time, warnings
import numpy as np
import actkit

def vmhwm_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024

def noop(block, start):
    return 0

def add(a, b):
    return a + b

if __name__ == "__main__":
    path, mode, ica_iter, chunk_rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    layer = actkit.open_store(path)["x"]
    calls = {"n": 0, "s": 0.0}
    import importlib
    from actkit.ica import _source
    inner = _source.data_pass
    def counted(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            calls["n"] += 1
            calls["s"] += time.perf_counter() - t0
    for name in ("_source", "_picard", "_fixed_point", "_init", "_estimator"):  # every caller's binding
        mod = importlib.import_module(f"actkit.ica.{name}")
        if getattr(mod, "data_pass", None) is inner:
            mod.data_pass = counted
    out = {"mode": mode}
    client = cluster = None
    if mode != "single":
        from distributed import Client, LocalCluster
        t = time.perf_counter()
        cluster = LocalCluster(n_workers=int(mode.split("-")[1]), threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
        out["cluster_start_s"] = time.perf_counter() - t
    sched = client
    # warm-up on a tiny array (imports, BLAS discovery, worker-side imports): one-off costs
    import dask.array as da
    small = np.random.default_rng(0).laplace(size=(4000, layer.shape[1])).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tiny = small if client is None else da.from_array(small, chunks=(1000, small.shape[1]))
        actkit.Whitener(scheduler=sched).fit(tiny)
        actkit.FastICA(max_iter=2, scheduler=sched).fit(tiny)
    calls["n"], calls["s"] = 0, 0.0
    data = layer if client is None else layer.to_dask(block_rows=chunk_rows)
    t = time.perf_counter()
    w = actkit.Whitener(scheduler=sched).fit(data)
    out["whiten_s"] = time.perf_counter() - t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        est = actkit.FastICA(init="random", warmup_rows=None, max_iter=ica_iter, tol=1e-12, random_state=0,
                             scheduler=sched).fit(data)
        out["ica_s"] = time.perf_counter() - t
    out["ica_passes"] = calls["n"]
    out["ica_pass_s"] = calls["s"] / max(calls["n"], 1)  # wall time inside the solver's passes
    out["explained_variance_head"] = [float(v) for v in w.explained_variance_[:3]]
    out["ica_components_head"] = [float(v) for v in est.components_[0, :3]]
    if client is not None:
        from actkit.runners._dask import Runner
        import dask.array as da
        out["chunks"] = len(data.chunks[0])
        runner = Runner(client=client)
        def overhead(n_tasks):
            empty = da.zeros((n_tasks, 1), chunks=(1, 1))
            times = []
            for _ in range(5):
                t = time.perf_counter()
                runner.map_reduce(empty, noop, add, progress=False)
                times.append(time.perf_counter() - t)
            return sorted(times)[2]
        out["overhead_pass_s"] = overhead(out["chunks"])
        out["overhead_512_s"] = overhead(512)
        out["worker_peak_mb"] = sorted(client.run(vmhwm_mb).values())
        client.close(); cluster.close()
    out["client_peak_mb"] = vmhwm_mb()
    print(json.dumps(out))
"""


def make_store(path, n, d, seed=0, block=200_000):
    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)).astype(np.float32)
    w = create_store(path, [LayerSpec("x", n, d)], n_samples=n, request={"bench": "dask", "n": n, "d": d})
    if w.complete:
        return
    for s in range(0, n, block):
        m = min(block, n - s)
        w.append("x", rng.laplace(size=(m, d)).astype(np.float32) @ A.T + 1.0)
    w.checkpoint(n, force=True)
    w.finalize()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8_400_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--ica-iter", type=int, default=5, help="FastICA solver iterations (fixed budget)")
    p.add_argument("--modes", default="single,dask-1,dask-2")
    p.add_argument("--chunk-mib", type=float, default=64, help="rows per dask chunk, in MiB (default 64)")
    p.add_argument("--dir", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "actkit-bench-dask"))
    p.add_argument("--json", help="write the raw results here")
    args = p.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, f"store-{args.rows}x{args.features}.h5")
    t = time.perf_counter()
    make_store(path, args.rows, args.features)
    size_gb = os.path.getsize(path) / 1e9
    print(f"store {path}: {args.rows} x {args.features} float32, {size_gb:.2f} GB "
          f"(ready in {time.perf_counter() - t:.0f} s)", flush=True)
    results = {}
    for mode in args.modes.split(","):
        chunk_rows = max(1, int(args.chunk_mib * 2**20 // (4 * args.features)))
        r = subprocess.run([sys.executable, "-c", CHILD, path, mode, str(args.ica_iter), str(chunk_rows)],
                           capture_output=True,
                           text=True, check=False)
        if r.returncode:
            sys.exit(f"{mode} failed:\n{r.stderr[-3000:]}")
        results[mode] = json.loads(r.stdout.strip().splitlines()[-1])
        print(json.dumps(results[mode]), flush=True)
    base = results.get("single")
    print()
    print(f"{'mode':8} {'whiten s':>9} {'ratio':>6} {'ICA s/pass':>10} {'ratio':>6} {'passes':>6} "
          f"{'overhead/pass':>13} {'worker peak MB':>15} {'client peak MB':>14}")
    for mode, r in results.items():
        rw = base["whiten_s"] / r["whiten_s"] if base else float("nan")
        ri = base["ica_pass_s"] / r["ica_pass_s"] if base else float("nan")
        ov = f"{r['overhead_pass_s'] * 1e3:.0f} ms" if "overhead_pass_s" in r else "-"
        wp = "/".join(f"{v:.0f}" for v in r.get("worker_peak_mb", [])) or "-"
        print(f"{mode:8} {r['whiten_s']:9.1f} {rw:6.2f} {r['ica_pass_s']:10.2f} {ri:6.2f} {r['ica_passes']:6d} "
              f"{ov:>13} {wp:>15} {r['client_peak_mb']:14.0f}")
    print("(ratio = single-process time / this time: > 1 is faster than one process)")
    one = results.get("dask-1")
    if one:
        tb, workers = 1000.0, 64
        per_gb_pass = (one["ica_pass_s"] - one["overhead_pass_s"]) / size_gb  # one worker, s per GB
        per_gb_white = (one["whiten_s"] - one["overhead_pass_s"]) / size_gb
        chunks_tb = tb * 1e9 / (args.chunk_mib * 2**20)
        # overhead(n tasks) = fixed + per_task * n, from the no-op passes of n = chunks and 512
        per_task = max(0.0, (one["overhead_512_s"] - one["overhead_pass_s"]) / (512 - one["chunks"]))
        ov_tb = one["overhead_pass_s"] + per_task * (chunks_tb - one["chunks"])
        pass_tb = per_gb_pass * tb / workers + ov_tb
        white_tb = per_gb_white * tb / workers + ov_tb
        print()
        print(f"paper estimate, {tb:.0f} GB store of {args.features} features on {workers} workers "
              f"(one core each, as dask-1's worker):")
        print(f"  measured on one worker: {per_gb_pass:.2f} s per GB per FastICA pass, "
              f"{per_gb_white:.2f} s per GB for the covariance pass; scheduler {per_task * 1e3:.1f} ms per task")
        print(f"  {chunks_tb:.0f} chunks of {args.chunk_mib:g} MiB -> scheduler overhead {ov_tb:.0f} s per pass")
        print(f"  covariance pass {white_tb:.0f} s, FastICA pass {pass_tb:.0f} s; "
              f"whitening + 50 FastICA passes ~ {(white_tb + 50 * pass_tb) / 3600:.1f} h")
        print(f"  needs the storage to deliver {tb / pass_tb:.1f} GB/s in aggregate "
              f"({tb / pass_tb / workers * 1e3:.0f} MB/s per worker)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": args.rows, "features": args.features, "size_gb": size_gb, "results": results}, f,
                      indent=2)


if __name__ == "__main__":
    main()
