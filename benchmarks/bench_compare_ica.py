"""The issue-19 aim: ``compare`` of 10,000 x 384 rows, all methods, with the default ICA
(best contrast of 5 starts per side, k' by the rows rule) in under 2 minutes on 2 idle cores.

    python benchmarks/bench_compare_ica.py [--rows 10000] [--width 384] [--restarts 5]

Two synthetic representations of the same rows (heavy-tailed sources, B with 50% noise,
each mixed by its own random matrix), float32. Prints the table, the ICA components used
and why, the phases' seconds, the wall and CPU time of the call and the load average before
and after (the timing is only comparable between runs at the same load).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np


def main(argv=None):
    import actkit

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=10000)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--restarts", type=int, default=5)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    n, d = args.rows, args.width
    S = rng.laplace(size=(n, d)) * np.linspace(0.2, 3, d)
    A = (S @ rng.normal(size=(d, d)) / 20).astype(np.float32)
    B = ((S + 0.5 * rng.normal(size=S.shape)) @ rng.normal(size=(d, d)) / 20).astype(np.float32)
    load0 = os.getloadavg()
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, ica_restarts=args.restarts)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    load1 = os.getloadavg()
    print(res)
    r = res.to_dict()
    print(f"ica: k={r['ica_n_components']} ({r['ica_n_components_reason']}), iterations "
          f"{r['ica_n_iter_a']}/{r['ica_n_iter_b']}, converged {r['ica_converged']}, identifiable "
          f"{r['ica_identifiable']}")
    print(f"seconds: moments {r['seconds_moments']}, fit {r['seconds_fit']}, errors {r['seconds_errors']}")
    print(f"{n} x {d}: wall {wall:.1f} s, CPU {cpu:.1f} s; load average before {load0[0]:.2f}, "
          f"after {load1[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
