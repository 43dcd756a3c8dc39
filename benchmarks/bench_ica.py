"""FastICA benchmark: actkit vs scikit-learn (and optionally python-picard), side by side.

Cases (issue 3):
  A. 200,000 x 128 Laplace sources, Gaussian mixing: sklearn given float64 and float32,
     actkit given float64 and float32. Time to fit and Amari distance to the true mixing.
  B. 100,000 x 512 Laplace sources, float32: actkit (time, Amari, NaN check); sklearn
     optionally (``--sklearn-big``; it fails in float32 inside its whitening).

Usage::

    python benchmarks/bench_ica.py              # both cases
    python benchmarks/bench_ica.py --case A --picard
    python benchmarks/bench_ica.py --quick      # 10x smaller, for a smoke test

Numbers depend on the machine and on its load: say which when you quote them.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np


def mixture(n, k, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(n, k))
    A = rng.normal(size=(k, k))
    return (S @ A.T).astype(dtype), A


def run(name, fn, A):
    from actkit.metrics import amari_distance

    t = time.perf_counter()
    c = time.process_time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            W, extra = fn()
        dt = time.perf_counter() - t
        extra["cpu_seconds"] = round(time.process_time() - c, 2)  # all threads of this process
        finite = bool(np.all(np.isfinite(W)))
        d = amari_distance(W, A) if finite else float("nan")
        notes = sorted({type(w.message).__name__ for w in caught})
        row = {"method": name, "seconds": round(dt, 2), "amari": round(d, 5), "finite": finite, **extra,
               "warnings": notes}
    except Exception as exc:  # a peer failing is a result, not a crash of the benchmark
        row = {"method": name, "seconds": round(time.perf_counter() - t, 2), "error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(row), flush=True)
    return row


def actkit_fit(X, **kw):
    from actkit import FastICA

    est = FastICA(random_state=0, **kw).fit(X)
    return est.components_, {"n_iter": est.n_iter_, "n_iter_warmup": est.n_iter_warmup_}


def sklearn_fit(X):
    from sklearn.decomposition import FastICA

    est = FastICA(random_state=0, whiten="unit-variance").fit(X)
    return est.components_, {"n_iter": int(est.n_iter_)}


def picard_fit(X):
    from picard import Picard

    est = Picard(random_state=0, ortho=True, extended=True, whiten="unit-variance").fit(X)
    return est.components_, {}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=["A", "B", "all"], default="all")
    p.add_argument("--quick", action="store_true", help="10x fewer rows")
    p.add_argument("--picard", action="store_true", help="also time python-picard on case A")
    p.add_argument("--sklearn-big", action="store_true", help="also try sklearn on case B (float32)")
    p.add_argument("--threads", type=int, default=None,
                   help="BLAS/OpenMP threads for every method alike (default: the libraries' own)")
    args = p.parse_args(argv)
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
        print(f"# BLAS threads limited to {args.threads} for all methods", flush=True)
    scale = 10 if args.quick else 1
    results = {}
    if args.case in ("A", "all"):
        n, k = 200_000 // scale, 128
        X64, A = mixture(n, k)
        X32 = X64.astype(np.float32)
        print(f"# case A: {n} x {k} Laplace mixtures", flush=True)
        rows = [
            run("sklearn float64", lambda: sklearn_fit(X64), A),
            run("actkit float64", lambda: actkit_fit(X64), A),
            run("sklearn float32", lambda: sklearn_fit(X32), A),
            run("actkit float32", lambda: actkit_fit(X32), A),
        ]
        if args.picard:
            rows.append(run("picard float64", lambda: picard_fit(X64), A))
        results["A"] = rows
        del X64, X32
    if args.case in ("B", "all"):
        n, k = 100_000 // scale, 512
        X, A = mixture(n, k, seed=1, dtype=np.float32)
        print(f"# case B: {n} x {k} float32 Laplace mixtures", flush=True)
        rows = [run("actkit float32", lambda: actkit_fit(X), A)]
        if args.sklearn_big:
            rows.append(run("sklearn float32", lambda: sklearn_fit(X), A))
        results["B"] = rows
    return results


if __name__ == "__main__":
    main()
