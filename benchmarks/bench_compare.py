"""Benchmark ``actkit.compare`` against the same analysis written with scikit-learn/scipy calls.

Two synthetic "checkpoints" of the same inputs: ``A = S M1 + noise``, ``B = S M2 + noise`` with
independent Laplace sources ``S`` (rows x features, float32), 8 rows ("tokens") per input
sample. Both pipelines use the same 80/20 split by sample and fit FastICA on the same number
of rows per side.

actkit: one streaming pass for moments (float32 GEMMs, float64 accumulation), closed-form
fits from second moments, Picard-O FastICA on whitened rows, one pass for held-out errors,
exact diameter with radius pruning, CKA/CCA from feature moments.

baseline: scipy ``orthogonal_procrustes`` and ``linear_sum_assignment`` on float64 fit rows,
sklearn ``LinearRegression``, sklearn ``FastICA(whiten="unit-variance")`` on each side,
sklearn ``pairwise_distances_chunked`` for the diameter, CKA/CCA from float64 covariances
(sklearn's ``CCA`` with hundreds of components -- NIPALS, one component at a time -- and
sample-space N x N CKA are out of reach at this size and are not run).

Run (numbers in docs/compare.md)::

    python benchmarks/bench_compare.py --rows 100000 --features 768
    python benchmarks/bench_compare.py --rows 100000 --features 768 --baseline
"""

from __future__ import annotations

import argparse
import json
import os
import time


def make_data(rows, features, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(rows, features)).astype(np.float32)
    m1 = (rng.normal(size=(features, features)) / np.sqrt(features)).astype(np.float32)
    m2 = (rng.normal(size=(features, features)) / np.sqrt(features)).astype(np.float32)
    A = S @ m1
    A += 0.3 * rng.standard_normal(size=A.shape, dtype=np.float32)
    B = S @ m2
    B += 0.3 * rng.standard_normal(size=B.shape, dtype=np.float32)
    groups = np.arange(rows) // 8
    return A, B, groups


def run_actkit(A, B, groups, ica_rows, methods=("permutation", "rigid", "linear", "ica"),
               ica_max_iter=200):
    import actkit

    t, c = time.perf_counter(), time.process_time()
    # exact diameter of all held-out rows, as the baseline computes it (same normalisation)
    res = actkit.compare(A, B, groups=groups, ica_max_rows=ica_rows, progress=False,
                         methods=methods, ica_max_iter=ica_max_iter, diameter_max_rows=None)
    total = time.perf_counter() - t
    print(f"actkit.compare CPU time (all threads): {time.process_time() - c:.1f}s")
    d = res.to_dict()
    return total, {k: d[k] for k in ("permutation", "rigid", "linear", "ica", "ica_efficiency",
                                     "linear_cka", "mean_cca", "diameter", "seconds_moments",
                                     "seconds_fit", "seconds_errors", "seconds_total",
                                     "ica_n_iter_a", "ica_n_iter_b", "ica_converged",
                                     "ica_fit_rows", "ica_rows_per_component",
                                     "ica_matched_corr_mean")}


def run_baseline(A, B, groups, ica_rows, skip_ica=False):
    import numpy as np
    from scipy.linalg import orthogonal_procrustes
    from scipy.optimize import linear_sum_assignment
    from sklearn.decomposition import FastICA
    from sklearn.linear_model import LinearRegression
    from sklearn.metrics import pairwise_distances_chunked

    from actkit.alignment import split as _split

    times = {}
    c0 = time.process_time()
    t0 = time.perf_counter()
    ev, _ = _split(A.shape[0], groups, 0.2, 0)
    Af, Bf = A[~ev].astype(np.float64), B[~ev].astype(np.float64)
    Ae, Be = A[ev].astype(np.float64), B[ev].astype(np.float64)
    ma, mb = Af.mean(0), Bf.mean(0)
    Ac, Bc = Af - ma, Bf - mb
    times["prepare"] = time.perf_counter() - t0

    t = time.perf_counter()
    diam = 0.0
    for chunk in pairwise_distances_chunked(Be, working_memory=256):
        diam = max(diam, float(chunk.max()))
    times["diameter"] = time.perf_counter() - t

    def err(pred):
        return float(np.linalg.norm(pred - Be, axis=1).mean() / diam)

    out = {}
    t = time.perf_counter()
    cross = Ac.T @ Bc
    cost = (Ac ** 2).sum(0)[:, None] + (Bc ** 2).sum(0)[None, :] - 2 * np.abs(cross)
    r, c = linear_sum_assignment(cost)
    P = np.zeros_like(cross)
    P[r, c] = np.sign(cross[r, c])
    out["permutation"] = err((Ae - ma) @ P + mb)
    times["permutation"] = time.perf_counter() - t

    t = time.perf_counter()
    R, _ = orthogonal_procrustes(Ac, Bc)
    out["rigid"] = err((Ae - ma) @ R + mb)
    times["rigid"] = time.perf_counter() - t

    t = time.perf_counter()
    out["linear"] = err(LinearRegression().fit(Af, Bf).predict(Ae))
    times["linear"] = time.perf_counter() - t

    if not skip_ica:
        t = time.perf_counter()
        rng = np.random.default_rng(0)
        idx = np.sort(rng.choice(Af.shape[0], min(ica_rows, Af.shape[0]), replace=False))
        k = min(A.shape[1], B.shape[1])
        ia = FastICA(n_components=k, whiten="unit-variance", random_state=0, max_iter=200).fit(Af[idx])
        ib = FastICA(n_components=k, whiten="unit-variance", random_state=0, max_iter=200).fit(Bf[idx])
        sa = (Af - ia.mean_) @ ia.components_.T
        sb = (Bf - ib.mean_) @ ib.components_.T
        sa -= sa.mean(0)
        sb -= sb.mean(0)
        cr = sa.T @ sb
        cost = (sa ** 2).sum(0)[:, None] + (sb ** 2).sum(0)[None, :] - 2 * np.abs(cr)
        r, c = linear_sum_assignment(cost)
        Pm = np.zeros_like(cr)
        Pm[r, c] = np.sign(cr[r, c])
        pred = ((Ae - ia.mean_) @ ia.components_.T) @ Pm @ ib.mixing_.T + ib.mean_
        out["ica"] = err(pred)
        times["ica"] = time.perf_counter() - t

    t = time.perf_counter()
    Aall, Ball = A.astype(np.float64), B.astype(np.float64)
    Aall -= Aall.mean(0)
    Ball -= Ball.mean(0)
    xy = Aall.T @ Ball
    out["linear_cka"] = float((xy ** 2).sum() / np.linalg.norm(Aall.T @ Aall) / np.linalg.norm(Ball.T @ Ball))
    times["cka"] = time.perf_counter() - t
    times["total"] = time.perf_counter() - t0
    times["cpu_total"] = time.process_time() - c0
    return times, out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--features", type=int, default=768)
    p.add_argument("--ica-rows", default="auto",
                   help="FastICA rows per side: 'auto' (compare's default) or an integer")
    p.add_argument("--ica-max-iter", type=int, default=200)
    p.add_argument("--methods", default="permutation,rigid,linear,ica")
    p.add_argument("--baseline", action="store_true", help="also run the scikit-learn/scipy version")
    p.add_argument("--baseline-skip-ica", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the numbers here")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    A, B, groups = make_data(args.rows, args.features)
    print(f"data {A.shape} float32 x2 in {time.perf_counter() - t:.1f}s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    ica_rows = args.ica_rows if args.ica_rows == "auto" else int(args.ica_rows)
    total, res = run_actkit(A, B, groups, ica_rows, tuple(args.methods.split(",")),
                            args.ica_max_iter)
    print(f"actkit.compare: {total:.1f}s  " + json.dumps(res))
    report = {"rows": args.rows, "features": args.features, "actkit_seconds": total, "actkit": res,
              "loadavg_1min": os.getloadavg()[0]}
    if args.baseline:
        # the baseline's FastICA sees as many rows as actkit's did
        times, out = run_baseline(A, B, groups, res.get("ica_fit_rows") or 20_000,
                                  args.baseline_skip_ica)
        print("sklearn/scipy: " + json.dumps({k: round(v, 2) for k, v in times.items()}))
        print("sklearn/scipy results: " + json.dumps(out))
        report["baseline_seconds"] = times
        report["baseline"] = out
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
