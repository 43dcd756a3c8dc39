"""Calibration of compare's inference (issue 32; docs/compare.md, "Uncertainty").

1. Permutation p-values of linear CKA between *independent* representations whose rows share
   a strong per-input-sample effect (rows of one sample are dependent): shuffling whole input
   samples (actkit's null) against shuffling rows (each row its own sample).
2. Coverage of the 95% bootstrap interval (input samples resampled) of linear CKA and of the
   debiased CKA on designed cases with a known population value: rows
   ``x = tau z_sample + e``, ``y = x M + noise``, population value from the marginal
   covariances. Percentile, basic and BCa (jackknife over input samples) intervals.
3. How many resamples: the Monte Carlo spread of an interval end and of a p-value against
   the number of resamples, on one dataset.

    python benchmarks/calibration_inference.py --out docs/compare-uncertainty.png
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.stats import norm

from actkit.inference import Samples, bootstrap_cka, bootstrap_draws, infer
from actkit.measures import get_measure

CKA = {"linear_cka": (get_measure("linear_cka").compute, "similarity")}


def p_values(reps, G=20, L=8, d=3, tau=3.0, N=99, seed=7):
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), L)
    out = {"sample": [], "row": []}
    for rep in range(reps):
        A = rng.normal(size=(G * L, d)) + tau * rng.normal(size=(G, d))[g]
        B = rng.normal(size=(G * L, d)) + tau * rng.normal(size=(G, d))[g]
        for key, groups in (("sample", g), ("row", None)):
            rec, _ = infer(Samples(A, B, groups), CKA, permutations=N, random_state=rep)
            out[key].append(rec["linear_cka"].p)
    return {k: np.array(v) for k, v in out.items()}


def _cka(S):
    return float(np.sum(S[2] ** 2) / np.linalg.norm(S[0]) / np.linalg.norm(S[1]))


def coverage(G, L, d, tau, reps, M=300, seed=1):
    """Coverage of percentile / basic / BCa intervals of linear CKA, and basic of debiased CKA
    (whose population value is the same CKA of the marginal covariances)."""
    rng = np.random.default_rng(seed)
    Mx = rng.normal(size=(d, d)) / np.sqrt(d)
    Saa = (1 + tau ** 2) * np.eye(d)
    pop = _cka((Saa, Mx.T @ Saa @ Mx + np.eye(d), Saa @ Mx))
    g = np.repeat(np.arange(G), L)
    hit = {"percentile": 0, "basic": 0, "BCa": 0, "debiased basic": 0}
    est = []
    deb = {"linear_cka_debiased": (get_measure("linear_cka_debiased").compute, "similarity")}
    for r in range(reps):
        A = rng.normal(size=(G * L, d)) + tau * rng.normal(size=(G, d))[g]
        B = A @ Mx + rng.normal(size=(G * L, d))
        s = Samples(A, B, g)
        W = bootstrap_draws(G, M, r)
        th = float(bootstrap_cka(s, np.ones((1, G)))[0])
        est.append(th)
        bt = bootstrap_cka(s, W)
        lo, hi = np.quantile(bt, [0.025, 0.975])
        hit["percentile"] += lo <= pop <= hi
        hit["basic"] += 2 * th - hi <= pop <= 2 * th - lo
        jk = bootstrap_cka(s, 1 - np.eye(G))
        dev = jk.mean() - jk
        a = np.sum(dev ** 3) / (6 * np.sum(dev ** 2) ** 1.5)
        z0 = norm.ppf(np.clip(np.mean(bt < th), 1 / (2 * M), 1 - 1 / (2 * M)))
        q = [norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in norm.ppf([0.025, 0.975])]
        lo, hi = np.quantile(bt, q)
        hit["BCa"] += lo <= pop <= hi
        rec, _ = infer(s, deb, bootstrap=M, random_state=r)
        hit["debiased basic"] += rec["linear_cka_debiased"].ci_low <= pop <= rec["linear_cka_debiased"].ci_high
    return pop, float(np.mean(est)), {k: v / reps for k, v in hit.items()}


def resamples_spread(seed=3, G=50, L=10, d=20, tries=20):
    """SD over bootstrap seeds of the basic interval's lower end, per number of resamples."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), L)
    A = rng.normal(size=(G * L, d)) + rng.normal(size=(G, d))[g]
    B = A @ rng.normal(size=(d, d)) / np.sqrt(d) + rng.normal(size=(G * L, d))
    s = Samples(A, B, g)
    out = {}
    for M in (100, 200, 500, 1000, 2000):
        lows = [infer(s, CKA, bootstrap=M, random_state=t, fast_bootstrap={"linear_cka": bootstrap_cka})[0]
                ["linear_cka"].ci_low for t in range(tries)]
        out[M] = float(np.std(lows, ddof=1))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--out", default="compare-uncertainty.png")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    pv = p_values(args.reps)
    for k, v in pv.items():
        print(f"p-values, shuffling by {k:6s}: P(p <= 0.05) = {np.mean(v <= 0.05):.3f}, "
              f"P(p <= 0.01) = {np.mean(v <= 0.01):.3f}, mean p = {v.mean():.3f} ({args.reps} pairs, 99 permutations)")
    cases = [(50, 10, 5, 1.0), (40, 8, 6, 1.0), (50, 10, 20, 1.0), (30, 20, 10, 2.0)]
    rows = []
    for G, L, d, tau in cases:
        pop, mean_est, cov = coverage(G, L, d, tau, reps=max(50, args.reps // 2))
        rows.append(((G, L, d, tau), pop, mean_est, cov))
        print(f"G={G:3d} L={L:2d} d={d:2d} tau={tau}: population CKA {pop:.3f}, mean estimate "
              f"{mean_est:.3f}; 95% coverage " + ", ".join(f"{k} {v:.2f}" for k, v in cov.items()))
    spread = resamples_spread()
    print("SD of the interval's lower end over bootstrap seeds: "
          + ", ".join(f"M={m}: {s:.4f}" for m, s in spread.items()))
    print(f"{time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.2f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.6))
    bins = np.linspace(0, 1, 21)
    ax[0].hist(pv["sample"], bins=bins, alpha=0.7, label="shuffle input samples (actkit)")
    ax[0].hist(pv["row"], bins=bins, alpha=0.6, label="shuffle rows")
    ax[0].axhline(len(pv["sample"]) / 20, color="k", lw=0.8, ls="--")
    ax[0].set(xlabel="permutation p-value", ylabel="pairs",
              title="independent A, B; rows of a sample dependent")
    ax[0].legend(fontsize=7)
    labels = [f"G={c[0]} d={c[2]}" for c, *_ in rows]
    x = np.arange(len(rows))
    for i, key in enumerate(["percentile", "BCa", "basic", "debiased basic"]):
        ax[1].bar(x + (i - 1.5) * 0.2, [r[3][key] for r in rows], 0.2, label=key)
    ax[1].axhline(0.95, color="k", lw=0.8, ls="--")
    ax[1].set_xticks(x, labels, fontsize=7)
    ax[1].set(ylim=(0, 1.02), ylabel="coverage of the population CKA",
              title="95% bootstrap intervals (input samples)")
    ax[1].legend(fontsize=7, loc="lower left", framealpha=0.9)
    ms = list(spread)
    ax[2].loglog(ms, [spread[m] for m in ms], "o-")
    ax[2].set(xlabel="bootstrap resamples M", ylabel="SD of the lower end over seeds",
              title="Monte Carlo noise of an interval end")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
