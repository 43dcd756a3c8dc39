"""How many fit rows the rigid and linear maps need: the measurement behind compare's rows
rule (rigid 5 max(Da, Db), linear 10 Da; docs/definitions.md, "Too few fit rows").

Planted case: A Gaussian with a decaying spectrum (sd exp(-i/20), D = 64), B = A Q + noise
(Q a random rotation, noise sd 0.3 x the mean sd). Each map is fitted on n_fit = ratio x D
rows (closed form: Procrustes, ordinary least squares with intercept) and scored on 5000
held-out rows; the table prints its held-out mean l2 error over the true map's (Q), the
mean of 5 draws.

Run::

    python benchmarks/bench_closed_form_rows.py
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import ortho_group


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--draws", type=int, default=5)
    args = p.parse_args(argv)
    D = args.features
    rng = np.random.default_rng(0)
    sd = np.exp(-np.arange(D) / 20)
    Q = ortho_group.rvs(D, random_state=1)

    def draw(n):
        A = rng.normal(size=(n, D)) * sd
        return A, A @ Q + 0.3 * sd.mean() * rng.normal(size=(n, D))

    Ae, Be = draw(5000)

    def err(W, ma, mb):
        return np.linalg.norm((Ae - ma) @ W + mb - Be, axis=1).mean()

    truth = err(Q, 0.0, 0.0)
    print("fit rows / D   rigid / true map   linear / true map")
    for ratio in (0.5, 1, 2, 3, 5, 10, 20, 50):
        out = []
        for _ in range(args.draws):
            A, B = draw(int(ratio * D))
            ma, mb = A.mean(0), B.mean(0)
            U, _, Vt = np.linalg.svd((A - ma).T @ (B - mb))
            W = np.linalg.lstsq(A - ma, B - mb, rcond=None)[0]
            out.append((err(U @ Vt, ma, mb) / truth, err(W, ma, mb) / truth))
        r, l = np.mean(out, axis=0)
        print(f"{ratio:>12g}   {r:>16.3f}   {l:>17.3f}")


if __name__ == "__main__":
    main()
