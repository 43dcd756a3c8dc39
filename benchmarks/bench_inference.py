"""Inference by input sample (issue 32): permutations and bootstrap of linear CKA from the
per-sample moments vs recomputing the measure from the resampled rows, side by side.

Data: a 20,000-row x 384-wide float32 pair from 200 input samples of 100 rows (rows of a
sample share a per-sample effect). Ours: one gather of the rows, then
``actkit.inference.infer`` (a permutation: one product of the rows, the side scatters
kept; a bootstrap resample: a re-weighting of the per-sample blocks through the Gram route,
no product of the rows). The reference: for each resample, the rows of the resampled
(or re-paired) samples gathered and linear CKA recomputed from them (centring and the three
products X^T X, Y^T Y, X^T Y, float32 like the data, on all threads): timed on
``--ref-resamples`` resamples of each kind and scaled to the same counts (its cost per
resample does not depend on which resample), half before and half after ours. Both on the
same threads (``--threads``).

    python benchmarks/bench_inference.py                       # 1,000 + 1,000, 2 threads
    python benchmarks/bench_inference.py --permutations 100 --bootstrap 100
    python benchmarks/bench_inference.py --row-measures        # rsa and mutual_knn (issue 42)
    python benchmarks/bench_inference.py --columns --call      # issue 42: what users wait for
    python benchmarks/bench_inference.py --skip-cka --columns --call --heavy-tailed   # the same, FastICA fitting
    python benchmarks/bench_inference.py --gil                 # which linalg calls run side by side

``--row-measures`` (issue 42): ``rsa`` and ``mutual_knn`` on a 2,000-row sample of 200
input samples (10 rows each, 64 + 48 wide): ``actkit.inference.infer_rows`` (each measure's
pairwise structure computed once, then re-indexed: :mod:`actkit.measures._structures`), wall
and CPU seconds of the whole call, vs the recompute loop (``infer_rows(structures=False)``:
the measure recomputed from the re-paired or resampled rows, timed on ``--ref-resamples``
of each kind and scaled: the output says so). Then rsatoolbox's own bootstrap of the same
RDM comparison (``bootstrap_sample_pattern(rdm_a, "sample")`` over the input samples,
``rdm_b.subsample_pattern("sample", idx)``, ``compare(method="spearman")``; timed on
``--rsatoolbox-resamples`` and scaled to ``--bootstrap``) beside our bootstrap alone, their
percentile intervals, and ours on rsatoolbox's own draws (its one different rule: it keeps
the pairs of two rows of one sample in two copies of it). Targets: each measure's 1,000 +
1,000 under 60 s on 2 idle cores, >= 20x the recompute loop, faster than rsatoolbox,
intervals that agree. About 5 minutes on 2 idle cores with the defaults (rsatoolbox's 200
resamples about 3 of them).

``--columns`` (issue 42): the engine on compare's three resampled columns together (linear
CKA, debiased CKA, mean CCA: one permuted cross product per permutation for all three,
debiased CKA's bootstrap on the Gram route, mean CCA from the re-weighted per-sample blocks)
against recomputing all three from the resampled rows (the three products in float32, the
row norms, then the three measures). ``--call``: the call users make, side by side with the
engine: ``actkit.compare(A, B, groups=g, permutations=P, bootstrap=M)`` (every default: the
four alignments with their FastICA fits, the three columns resampled) and the same through
``actkit compare a.h5 b.h5 --permutations P --bootstrap M`` on two stores of the pair.

Targets (issue 32): ours under 60 s on 2 idle cores; bootstrap >= 20x, permutations >= 2.5x,
whole call >= 5x faster than the reference. Issue 42: the whole default call with 1,000 +
1,000 at least 5x the recompute loop of the three columns, and under 60 s on 2 idle cores.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def data(n=20000, d=384, G=200, seed=0, heavy_tailed=False):
    """The benchmark pair: Gaussian rows with a per-sample effect, B a noisy linear map of A.
    ``heavy_tailed``: the rows' own part and B's noise Laplace (unit variance) instead, so
    compare's FastICA has sources to find (its Gaussian check passes them on to the fits)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), n // G)

    def noise(size):
        return rng.laplace(scale=np.sqrt(0.5), size=size) if heavy_tailed else rng.normal(size=size)
    A = noise((n, d)) + 0.7 * rng.normal(size=(G, d))[g]
    B = A @ (rng.normal(size=(d, d)) / np.sqrt(d)) + noise((n, d))
    return A.astype(np.float32), B.astype(np.float32), g


def cka_rows(X, Y):
    """Linear CKA recomputed from rows (feature space, float32 products like the data)."""
    X = X - X.mean(axis=0)
    Y = Y - Y.mean(axis=0)
    xy, xx, yy = X.T @ Y, X.T @ X, Y.T @ Y
    return float(np.sum(xy.astype(np.float64) ** 2) / np.linalg.norm(xx) / np.linalg.norm(yy))


def columns_rows(X, Y):
    """The three columns recomputed from rows: centring, the three products in float32 (like
    the data), the row norms of the debiased CKA, then the measures on those moments."""
    from actkit.measures import Moments, get_measure

    mx, my = X.mean(axis=0), Y.mean(axis=0)
    X, Y = X - mx, Y - my
    xx, yy, xy = (M.astype(np.float64) for M in (X.T @ X, Y.T @ Y, X.T @ Y))
    dx = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    dy = np.einsum("ij,ij->i", Y, Y, dtype=np.float64)
    m = Moments(float(X.shape[0]), mx.astype(np.float64), my.astype(np.float64), xx, yy, xy, "float32",
                {"dx2": float(dx @ dx), "dy2": float(dy @ dy), "dxdy": float(dx @ dy)})
    return [get_measure(k).compute(m) for k in COLUMNS]


#: compare's resampled columns
COLUMNS = ("linear_cka", "linear_cka_debiased", "mean_cca")


def reference(A, B, g, perms, W, fn=None):
    """Seconds per permutation and per bootstrap resample of the recomputation from rows."""
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    L = np.diff(np.r_[starts, g.size])
    t = time.perf_counter()
    fn = fn or cka_rows
    for perm in perms:
        idx = np.concatenate([np.arange(starts[p], starts[p] + L[p]) for p in perm])
        fn(A, B[idx])
    per_perm = (time.perf_counter() - t) / max(len(perms), 1)
    t = time.perf_counter()
    for w in W:
        picks = np.repeat(np.arange(len(w)), w.astype(int))
        idx = np.concatenate([np.arange(starts[p], starts[p] + L[p]) for p in picks])
        fn(A[idx], B[idx])
    per_boot = (time.perf_counter() - t) / max(len(W), 1)
    return per_perm, per_boot


def columns(args, A, B, g):
    """The engine on the three columns, and their recompute loop, side by side."""
    from actkit._threads import use_threads
    from actkit.alignment._uncertainty import fast_bootstraps, resampled_measures
    from actkit.inference import Samples, bootstrap_draws, infer, permutation_draws
    from actkit.measures import parse_measures

    measures = resampled_measures(parse_measures(list(COLUMNS)))[0]
    k = args.ref_resamples
    with use_threads(args.threads):
        perms0 = permutation_draws(np.bincount(g), k, 1)[0]
        W0 = bootstrap_draws(np.unique(g).size, k, 1)
        before = reference(A, B, g, perms0[: k // 2], W0[: k // 2], columns_rows)
        t0, c0 = time.perf_counter(), time.process_time()
        s = Samples(A, B, g, product_dtype=np.float32, dtype="float32")
        rec, _ = infer(s, measures, permutations=args.permutations, bootstrap=args.bootstrap, random_state=0,
                       fast_bootstrap=fast_bootstraps(s, measures, args.bootstrap))
        ours, cpu = time.perf_counter() - t0, time.process_time() - c0
        after = reference(A, B, g, perms0[k // 2:], W0[k // 2:], columns_rows)
    ref = ((before[0] + after[0]) / 2 * args.permutations + (before[1] + after[1]) / 2 * args.bootstrap)
    print(f"three columns ({', '.join(COLUMNS)}), engine: {ours:.1f} s ({cpu:.1f} s CPU); recompute loop: "
          f"{ref:.1f} s ({(before[0] + after[0]) / 2:.3f} s per permutation, {(before[1] + after[1]) / 2:.3f} s "
          f"per bootstrap resample: {k} of each timed, half before and half after the engine, scaled to "
          f"{args.permutations} + {args.bootstrap}); ratio {ref / ours:.1f}x; load {os.getloadavg()[0]:.2f}")
    for name in COLUMNS:
        r = rec[name]
        print(f"  {name}: {r.value:.4f} p={r.p:.4g} null {r.null_mean:.4f} +- {r.null_sd:.4f} "
              f"[{r.ci_low:.4f}, {r.ci_high:.4f}]")
    return ours, ref


def call(args, A, B, g, ref):
    """``actkit.compare`` and ``actkit compare`` with every default, resampling asked."""
    import subprocess
    import sys
    import tempfile
    import warnings

    import actkit
    from actkit.store import LayerSpec, create_store

    kw = dict(permutations=args.permutations, bootstrap=args.bootstrap)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=g, threads=args.threads, progress=False, **kw)
    api, cpu = time.perf_counter() - t0, time.process_time() - c0
    sec = {k: res.info[f"seconds_{k}"] for k in ("moments", "fit", "errors", "total")}
    print(f"actkit.compare(A, B, groups=g, permutations={args.permutations}, bootstrap={args.bootstrap}): "
          f"{api:.1f} s wall, {cpu:.1f} s CPU; {ref / api:.1f}x the recompute loop of the three columns "
          f"({ref:.1f} s, above); load {os.getloadavg()[0]:.2f}")
    print(f"  of it: split + moments pass {sec['moments']:.1f} s, the four alignments' fits (FastICA "
          f"included) {sec['fit']:.1f} s, held-out errors + ICA report {sec['errors']:.1f} s, similarities "
          f"with chance levels + resampling {sec['total'] - sec['moments'] - sec['fit'] - sec['errors']:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        G = int(g.max()) + 1
        index = np.stack([g, np.concatenate([np.arange(c) for c in np.bincount(g)])], 1)
        paths = []
        for name, X in (("a", A), ("b", B)):
            path = os.path.join(tmp, f"{name}.h5")
            w = create_store(path, [LayerSpec("h", X.shape[0], X.shape[1], index=index)], n_samples=G,
                             request={"bench": name}, inputs_fingerprint="bench")
            w.append("h", X)
            w.checkpoint(G)
            w.finalize()
            paths.append(path)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "actkit", "compare", *paths, "--permutations", str(args.permutations),
                        "--bootstrap", str(args.bootstrap), "--quiet", "--json", os.path.join(tmp, "r.json")],
                       check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cli = time.perf_counter() - t0
    print(f"actkit compare a.h5 b.h5 --permutations {args.permutations} --bootstrap {args.bootstrap}: {cli:.1f} s "
          f"(with the interpreter's start and the stores' reads); {ref / cli:.1f}x; load {os.getloadavg()[0]:.2f}")


def gil(args):
    """Whether mean CCA's per-resample LAPACK / BLAS calls run side by side on two worker
    threads (``--gil``): each call's speed-up on two threads over one, at one BLAS / torch
    thread per call, on a 384 x 384 scatter (docs/compare.md: numpy's and scipy's hold the GIL,
    torch's ``eigvalsh`` and numpy's ``@`` release it)."""
    from concurrent.futures import ThreadPoolExecutor

    import scipy.linalg
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    X = np.random.default_rng(0).normal(size=(2000, args.width))
    S = X.T @ X
    L, M, T = np.linalg.cholesky(S), X[:args.width].copy(), torch.from_numpy(S)
    calls = {"numpy eigvalsh": lambda: np.linalg.eigvalsh(S),
             "scipy eigh (values, evd)": lambda: scipy.linalg.eigh(S, eigvals_only=True, driver="evd"),
             "scipy dtrmm": lambda: scipy.linalg.blas.dtrmm(1.0, L, M, side=0, lower=1),
             "numpy @": lambda: L @ M,
             "torch eigvalsh": lambda: torch.linalg.eigvalsh(T)}

    def run(f, n):
        with threadpool_limits(1):
            for _ in range(n):
                f()

    n = 40
    print(f"{args.width} x {args.width}, {n} calls a thread; load {os.getloadavg()[0]:.2f}")
    for name, f in calls.items():
        run(f, 2)
        t = time.perf_counter()
        run(f, 2 * n)
        one = time.perf_counter() - t
        with ThreadPoolExecutor(2) as ex:
            t = time.perf_counter()
            list(ex.map(lambda _: run(f, n), range(2)))
            two = time.perf_counter() - t
        print(f"  {name:<26}{one / (2 * n) * 1e3:7.2f} ms a call; two threads {one / two:4.2f}x one")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--permutations", type=int, default=1000)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--ref-resamples", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--row-measures", action="store_true", help="rsa and mutual_knn (issue 42)")
    ap.add_argument("--rsatoolbox-resamples", type=int, default=200)
    ap.add_argument("--columns", action="store_true",
                    help="also the engine on compare's three resampled columns against their recompute loop")
    ap.add_argument("--call", action="store_true",
                    help="also actkit.compare and the actkit compare command with every default (implies --columns)")
    ap.add_argument("--rows", type=int, default=20000, help="rows of the pair (default 20000)")
    ap.add_argument("--width", type=int, default=384, help="features per side (default 384)")
    ap.add_argument("--gil", action="store_true",
                    help="only: which of mean CCA's per-resample calls run side by side on two threads")
    ap.add_argument("--heavy-tailed", action="store_true",
                    help="the pair's row noise Laplace, not Gaussian: compare's FastICA fits run (docs/compare.md)")
    ap.add_argument("--skip-cka", action="store_true",
                    help="leave out the engine on linear CKA alone (issue 32's table)")
    args = ap.parse_args(argv)
    if args.row_measures:
        return row_measures(args)
    if args.gil:
        return gil(args)

    from actkit._threads import use_threads
    from actkit.inference import (Samples, bootstrap_cka, bootstrap_draws, gram_fits, infer,
                                  permutation_draws)
    from actkit.measures import get_measure

    A, B, g = data(n=args.rows, d=args.width, heavy_tailed=args.heavy_tailed)
    cka = {"linear_cka": (get_measure("linear_cka").compute, "similarity")}
    print(f"data: {A.shape[0]} rows x {A.shape[1]} + {B.shape[1]} features, {np.unique(g).size} input "
          f"samples, float32, {'Laplace' if args.heavy_tailed else 'Gaussian'} row noise; threads {args.threads}; load before {os.getloadavg()[0]:.2f}")
    k = args.ref_resamples
    if args.skip_cka:
        _, ref = columns(args, A, B, g)
        if args.call:
            call(args, A, B, g, ref)
        return
    with use_threads(args.threads):
        # the reference is timed in two halves, before and after ours: the same load on average
        perms0 = permutation_draws(np.bincount(g), k, 1)[0]
        W0 = bootstrap_draws(np.unique(g).size, k, 1)
        before = reference(A, B, g, perms0[: k // 2], W0[: k // 2])
        t0 = time.perf_counter()
        s = Samples(A, B, g, product_dtype=np.float32, dtype="float32", norms=False)
        fast = {"linear_cka": bootstrap_cka} if gram_fits(s, args.bootstrap) else {}
        t1 = time.perf_counter()
        rp, _ = infer(s, cka, permutations=args.permutations, random_state=0)
        t2 = time.perf_counter()
        rb, _ = infer(s, cka, bootstrap=args.bootstrap, random_state=0, fast_bootstrap=fast)
        t3 = time.perf_counter()
        gather, perm_s, boot_s = t1 - t0, t2 - t1, t3 - t2
        whole = gather + perm_s + boot_s
        after = reference(A, B, g, perms0[k // 2:], W0[k // 2:])
    ref_perm, ref_boot = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
    ref_p, ref_b = ref_perm * args.permutations, ref_boot * args.bootstrap
    r = rp["linear_cka"]
    print(f"linear CKA {r.value:.4f}: p = {r.p:.4g} (null {r.null_mean:.4f} +- {r.null_sd:.4f}); "
          f"{100 * rb['linear_cka'].confidence:g}% interval [{rb['linear_cka'].ci_low:.4f}, "
          f"{rb['linear_cka'].ci_high:.4f}]")
    print(f"{'part':<28}{'ours (s)':>10}{'reference (s)':>15}{'ratio':>8}")
    print(f"{'gather rows by sample':<28}{gather:>10.2f}{'-':>15}{'':>8}")
    if args.permutations:
        print(f"{f'{args.permutations} permutations':<28}{perm_s:>10.2f}{ref_p:>15.1f}{ref_p / perm_s:>7.1f}x")
    if args.bootstrap:
        print(f"{f'{args.bootstrap} bootstrap resamples':<28}{boot_s:>10.2f}{ref_b:>15.1f}{ref_b / boot_s:>7.1f}x")
    print(f"{'whole call':<28}{whole:>10.2f}{ref_p + ref_b:>15.1f}{(ref_p + ref_b) / whole:>7.1f}x")
    print(f"reference: {k} resamples of each kind timed, half before and half after ours ({ref_perm:.3f} s per permutation, "
          f"{ref_boot:.3f} s per bootstrap resample), scaled to the counts; load after "
          f"{os.getloadavg()[0]:.2f}")
    if args.columns or args.call:
        _, ref = columns(args, A, B, g)
        if args.call:
            call(args, A, B, g, ref)


def row_data(G=200, L=10, seed=0):
    """2,000 rows of 200 input samples: a per-sample effect and a latent shared by A and B."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), L)
    z = rng.normal(size=(G, 6))[g] + rng.normal(size=(G * L, 6))
    A = z @ rng.normal(size=(6, 64)) + rng.normal(size=(G * L, 64))
    B = z @ rng.normal(size=(6, 48)) + 1.5 * rng.normal(size=(G * L, 48))
    return A, B, g


def rsatoolbox_bootstrap(A, B, g, M, seed=0):
    """rsatoolbox's own bootstrap of the Spearman comparison of the two correlation-distance
    RDMs over the input samples: ``bootstrap_sample_pattern(rdm_a, "sample")`` (the samples
    drawn with replacement, their rows with repetitions, the RDM's diagonal NaN so a row's
    pairs with its own copies drop out), ``rdm_b.subsample_pattern("sample", idx)``,
    ``compare(method="spearman")`` (scipy average ranks of the non-NaN entries). Returns the
    ``M`` values, the multiplicities drawn (M, G) and the seconds (wall, CPU)."""
    import rsatoolbox

    descriptors = {"sample": g}
    rdm = [rsatoolbox.rdm.calc_rdm(rsatoolbox.data.Dataset(X, obs_descriptors=descriptors),
                                   method="correlation") for X in (A, B)]
    np.random.seed(seed)
    t, c = time.perf_counter(), time.process_time()
    vals, draws = [], []
    for _ in range(M):
        ra, idx = rsatoolbox.inference.bootstrap_sample_pattern(rdm[0], "sample")
        rb = rdm[1].subsample_pattern("sample", idx)
        vals.append(float(rsatoolbox.rdm.compare(ra, rb, method="spearman")[0, 0]))
        draws.append(np.bincount(idx, minlength=np.unique(g).size))
    return np.array(vals), np.array(draws), (time.perf_counter() - t, time.process_time() - c)


def _timed_cpu(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def row_measures(args):
    """Issue 42's side-by-side run of rsa and mutual_knn."""
    import torch

    from actkit._threads import use_threads
    from actkit.inference import infer_rows, row_measure

    A, B, g = row_data()
    a, b = torch.from_numpy(A), torch.from_numpy(B)
    P, M, k = args.permutations, args.bootstrap, args.ref_resamples
    print(f"data: {A.shape[0]} rows x {A.shape[1]} + {B.shape[1]} features, {np.unique(g).size} input samples "
          f"of 10 rows; threads {args.threads}; {P} permutations + {M} bootstrap resamples; "
          f"load before {os.getloadavg()[0]:.2f}")
    print(f"{'measure':<12}{'ours (s)':>10}{'CPU (s)':>9}{'recompute (s)':>15}{'ratio':>8}  value, p, 95% percentile "
          f"interval")
    for name, params in (("rsa", {"method": "spearman"}), ("mutual_knn", {"k": 10})):
        ms = {name: (row_measure(name, params), "similarity")}
        kw = dict(confidence=0.95, random_state=0, interval="percentile", progress=False)
        with use_threads(args.threads):
            rec, ours, cpu = _timed_cpu(lambda: infer_rows(a, b, g, ms, permutations=P, bootstrap=M, **kw)[name])
            _, ref, _ = _timed_cpu(lambda: infer_rows(a, b, g, ms, permutations=k, bootstrap=k, structures=False,
                                                      **kw))
        ref_total = ref / (2 * k) * (P + M)
        print(f"{name:<12}{ours:>10.1f}{cpu:>9.1f}{ref_total:>15.1f}{ref_total / ours:>7.1f}x  {rec.value:.4f}, "
              f"p = {rec.p:.4g}, [{rec.ci_low:.4f}, {rec.ci_high:.4f}]")
        if name == "rsa":
            rsa_side = (a, b, g, ms, kw)
    print(f"recompute: the measure recomputed from the re-paired / resampled rows "
          f"(infer_rows(structures=False)), {k} permutations + {k} resamples timed and scaled to {P} + {M}; "
          f"ours: the whole call (structure + resamples), wall and CPU; load after {os.getloadavg()[0]:.2f}")
    rsatoolbox_side_by_side(args, A, B, *rsa_side)


def rsatoolbox_side_by_side(args, A, B, a, b, g, ms, kw):
    """rsatoolbox's own bootstrap of the same RDM comparison beside our bootstrap alone (the
    same number of resamples; rsatoolbox timed on ``--rsatoolbox-resamples`` and scaled), the
    two percentile intervals, and ours on rsatoolbox's own draws: the shift its rule gives
    (it keeps the pairs of two rows of one sample lying in two copies of it; ours leaves
    them out, as it leaves out a row's pairs with its copies)."""
    from actkit._threads import use_threads
    from actkit.inference import infer_rows, percentile_interval
    from actkit._groups import SampleGroups
    from actkit.measures import structure_for

    M, R = args.bootstrap, args.rsatoolbox_resamples
    with use_threads(args.threads):
        rec, ours, cpu = _timed_cpu(lambda: infer_rows(a, b, g, ms, bootstrap=M, **kw)["rsa"])
        vals, draws, (t_wall, t_cpu) = rsatoolbox_bootstrap(A, B, g, R)
        st = structure_for("rsa", {"method": "spearman"}, a, b, SampleGroups(g), permutations=False,
                           bootstrap=True)
        same = np.array([st.resampled(m) for m in draws])
    scale = M / R
    lo, hi = percentile_interval(vals, 0.95)
    lo2, hi2 = percentile_interval(same, 0.95)
    shift = vals - same
    print(f"rsa bootstrap, {M} resamples: ours {ours:.1f} s (CPU {cpu:.1f} s); rsatoolbox's own bootstrap "
          f"{t_wall * scale:.1f} s (CPU {t_cpu * scale:.1f} s; {R} resamples timed and scaled to {M}); "
          f"{t_wall * scale / ours:.1f}x; load {os.getloadavg()[0]:.2f}")
    print(f"  95% percentile intervals: ours [{rec.ci_low:.4f}, {rec.ci_high:.4f}] ({M} resamples, our draws) | "
          f"rsatoolbox [{lo:.4f}, {hi:.4f}] ({R} resamples, its draws) | ours on rsatoolbox's draws "
          f"[{lo2:.4f}, {hi2:.4f}]")
    print(f"  on rsatoolbox's draws, rsatoolbox - ours: mean {shift.mean():+.5f}, max |.| {np.abs(shift).max():.5f} "
          f"(bootstrap sd {vals.std():.4f}): the pairs of two rows of one sample in two copies of it, "
          f"which rsatoolbox keeps and ours leaves out")


if __name__ == "__main__":
    main()
