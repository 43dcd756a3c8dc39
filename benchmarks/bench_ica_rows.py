"""How many rows FastICA needs per component: recovery of known sources against the row count.

Generator of ``bench_compare.py`` (Laplace sources, a random Gaussian mixing scaled by
1/sqrt(k), Gaussian noise): for each ``k`` and each ratio ``rows / k``, ``actkit.FastICA``
(defaults, ``max_iter``) is fitted on the first ``ratio * k`` rows and scored by the mean
matched |correlation| (Hungarian) between its sources and the true ones on 20,000 held-out
rows, beside a least-squares oracle that sees the sources (the ceiling set by the noise).
The table in docs/compare.md ("How many rows ICA needs") and ``actkit.alignment.ica_min_rows``
come from this script::

    python benchmarks/bench_ica_rows.py --ks 64,128,256 --ratios 10,25,50,100,200
    python benchmarks/bench_ica_rows.py --ks 384 --ratios 100,192
    python benchmarks/bench_ica_rows.py --ks 64,256 --ratios 50,100,200 --init random --max-iter 200
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings


def run(k, ratios, noise, max_iter, init="data", seed=0):
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    from actkit import FastICA

    rng = np.random.default_rng(seed)
    n_eval = 20_000
    n = max(max(ratios), 200) * k + n_eval       # the same draw for every ratio list
    S = rng.laplace(size=(n, k)).astype(np.float32)
    mixing = (rng.normal(size=(k, k)) / np.sqrt(k)).astype(np.float32)
    X = S @ mixing + noise * rng.standard_normal(size=(n, k), dtype=np.float32)
    ev = slice(n - n_eval, n)
    S_ev = (S[ev] - S[ev].mean(0)) / S[ev].std(0)
    Xt = X[: n - n_eval].astype(np.float64)
    St = S[: n - n_eval].astype(np.float64)
    W = np.linalg.lstsq(Xt - Xt.mean(0), St - St.mean(0), rcond=None)[0]
    P = (X[ev] - X[ev].mean(0)) @ W
    P = (P - P.mean(0)) / P.std(0)
    oracle = float(np.mean(np.einsum("ij,ij->j", P, S_ev) / n_eval))
    for ratio in ratios:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = FastICA(random_state=seed, max_iter=max_iter, init=init).fit(X[: ratio * k])
        sec = time.perf_counter() - t
        Y = est.transform(X[ev])
        Y = (Y - Y.mean(0)) / Y.std(0)
        C = np.abs(Y.T @ S_ev) / n_eval
        r, c = linear_sum_assignment(-C)
        print(json.dumps({"k": k, "rows_per_component": ratio, "rows": ratio * k, "noise": noise,
                          "init": init, "iterations": int(est.n_iter_), "converged": bool(est.converged_),
                          "seconds": round(sec, 1), "matched_abs_corr": round(float(C[r, c].mean()), 3),
                          "oracle": round(oracle, 3)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="64,128,256", help="comma-separated numbers of components")
    p.add_argument("--ratios", default="10,25,50,100,200", help="comma-separated rows per component")
    p.add_argument("--noise", type=float, default=0.3)
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--init", default="data", choices=["data", "random"],
                   help="FastICA start (compare's ICA alignment uses 'random')")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    ratios = [int(r) for r in args.ratios.split(",")]
    for k in (int(x) for x in args.ks.split(",")):
        run(k, ratios, args.noise, args.max_iter, args.init)


if __name__ == "__main__":
    main()
