"""Streaming whitening benchmark: fit from an on-disk store vs the same matrix in memory.

Writes an N x 768 float32 store, then times ``Whitener().fit`` (a) on the numpy matrix in
memory and (b) streaming from the store layer (blocks read one ahead in a background thread
while BLAS computes), alternately, keeping the best of ``--repeats``. The streaming fit also
runs in a child process whose peak resident memory (``VmHWM``) is reported next to the
store's size. Optionally times scikit-learn ``PCA(whiten=True)`` (full SVD) on the matrix.

Usage::

    python benchmarks/bench_whitening.py [--rows 200000] [--precision float64|float32] [--sklearn]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = r"""
import sys, time, json
import actkit


def peak_rss_mb():
    # VmHWM is reset at exec; getrusage's ru_maxrss would include the parent's RSS at fork
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
layer = actkit.open_store(sys.argv[1])["x"]
t = time.perf_counter()
w = actkit.Whitener(precision=sys.argv[2]).fit(layer)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "peak_rss_mb": peak_rss_mb()}))
"""


def make_store(path, n, d, seed=0, block=20000):
    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d)).astype(np.float32) / np.sqrt(d)
    w = create_store(path, [LayerSpec("x", n, d)], n_samples=n, request={"bench": "whitening", "n": n, "d": d})
    for s in range(0, n, block):
        m = min(block, n - s)
        w.append("x", rng.standard_normal((m, d), dtype=np.float32) @ A + 1.0)
    w.checkpoint(n, force=True)
    w.finalize()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--features", type=int, default=768)
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--sklearn", action="store_true", help="also time sklearn PCA(whiten=True)")
    p.add_argument("--dir", default=None, help="where to write the temporary store")
    args = p.parse_args(argv)
    import actkit

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "acts.h5")
        make_store(path, args.rows, args.features)
        size_mb = os.path.getsize(path) / 2**20
        layer = actkit.open_store(path)["x"]
        X = np.asarray(layer)
        best = {"memory": np.inf, "stream": np.inf}
        for _ in range(args.repeats):
            t = time.perf_counter()
            a = actkit.Whitener(precision=args.precision).fit(X)
            best["memory"] = min(best["memory"], time.perf_counter() - t)
            t = time.perf_counter()
            b = actkit.Whitener(precision=args.precision).fit(layer)
            best["stream"] = min(best["stream"], time.perf_counter() - t)
        same = float(np.abs(a.whitening_ - b.whitening_).max() / np.abs(a.whitening_).max())
        del X
        child = subprocess.run([sys.executable, "-c", CHILD, path, args.precision], capture_output=True, text=True,
                               check=True)
        c = json.loads(child.stdout.strip().splitlines()[-1])
        out = {
            "rows": args.rows, "features": args.features, "precision": args.precision,
            "store_mb": round(size_mb, 1),
            "in_memory_s": round(best["memory"], 2), "streaming_s": round(best["stream"], 2),
            "streaming_speed_vs_memory": round(best["memory"] / best["stream"], 3),
            "max_rel_diff_whitening": same,
            "child_streaming_s": round(c["seconds"], 2), "child_peak_rss_mb": round(c["peak_rss_mb"], 1),
        }
        if args.sklearn:
            from sklearn.decomposition import PCA

            X = np.asarray(layer)
            t = time.perf_counter()
            PCA(whiten=True, svd_solver="full").fit(X)
            out["sklearn_pca_full_svd_s"] = round(time.perf_counter() - t, 2)
        print(json.dumps(out), flush=True)
        return out


if __name__ == "__main__":
    main()
