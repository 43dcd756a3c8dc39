"""How long ``actkit evaluate`` takes at the issue's scale: 200,000 x 384 embeddings, 10 labels.

``python benchmarks/bench_evaluate.py [--rows 200000] [--features 384] [--jobs 2]
[--max-train-rows 5000] [--max-bin 63] [--n-splits 5] [--n-rotations 3] [--json FILE]``

The rows: 384 independent sparse (Bernoulli-Gaussian) factors, linearly mixed; a control
label (110,000 rows) and 9 conditions of 10,000 rows, condition j shifting factor j by +1.5.
``evaluate_postprocessing`` with its defaults (LightGBM, Table 6, 100 trees, 63 bins; 5 folds;
3 rotations; classifier fits on 5,000 training rows; FastICA on 50,000) against the control,
timed end to end, with the load average before and after (the machine is shared) and the
process's CPU time (user + system over all its threads: on a busy machine the wall time
measures the other work too; on an idle one the wall time is about this CPU time over the
cores used). The progress bar (stderr) shows where it is. The other flags change the
protocol's settings (``--max-train-rows 20000 --max-bin 255``: the defaults before
2026-12-04, to compare the AUROC).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np


def planted(n, d, n_conditions=9, per_condition=10_000, seed=0):
    rng = np.random.default_rng(seed)
    S = (rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.2)).astype(np.float32)
    y = np.full(n, "control", object)
    for j in range(n_conditions):
        rows = slice(j * per_condition, (j + 1) * per_condition)
        S[rows, j] += 1.5
        y[rows] = f"c{j}"
    A = rng.standard_normal((d, d)).astype(np.float32) / np.sqrt(d)
    return S @ A.T, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=384)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-train-rows", type=int, default=None, help="default: the API's (5000)")
    parser.add_argument("--max-bin", type=int, default=None, help="default: the API's (63)")
    parser.add_argument("--n-splits", type=int, default=5)
    parser.add_argument("--n-rotations", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import actkit

    X, y = planted(args.rows, args.features)
    load0 = os.getloadavg()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    kw = {k: v for k, v in (("max_train_rows", args.max_train_rows), ("max_bin", args.max_bin)) if v is not None}
    result = actkit.evaluate_postprocessing(X, y, control="control", n_jobs=args.jobs, n_splits=args.n_splits,
                                            n_rotations=args.n_rotations, progress=True, **kw)
    seconds = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    load1 = os.getloadavg()
    print(result.format_table())
    print(f"\n{args.rows} x {args.features}, 10 labels, n_jobs={args.jobs}, {kw or 'defaults'}, "
          f"{args.n_splits} folds, {args.n_rotations} rotations: {seconds:.0f} s wall "
          f"(load average before {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f}, "
          f"after {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}; {os.cpu_count()} cores); "
          f"CPU time of this process {cpu:.0f} s (user + system, all threads)")
    if args.json:
        report = result.to_dict()
        report["benchmark"] = {"seconds": seconds, "cpu_seconds": cpu, "load_before": load0, "load_after": load1,
                               "jobs": args.jobs, "rows": args.rows, "features": args.features}
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)


if __name__ == "__main__":
    main()
