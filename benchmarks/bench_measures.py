"""Every measure of actkit.measures against its reference, side by side on one pair, and the
moment-based measures of one layer pair from one streaming pass over a store (issue 31).

Part 1: one A, B pair (default 5,000 x 512, float64, a shared latent plus noise): each
measure timed through ``actkit.measure`` and through its reference (the installed package
or the reference formula of ``tests/test_measures_reference.py``), best of ``--repeat``;
the table prints both times, their ratio (reference / actkit: above 1 means actkit is
faster) and the absolute difference of the values.

Part 2: two float32 store layers of ``--store-rows`` x ``--store-width`` rows (default
100,000 x 768) written to ``--tmp``; ``actkit.measures.moments_of`` reads both once, then
every moment-based measure is computed from those moments. Prints the pass's time and each
measure's time after it.

Run::

    python benchmarks/bench_measures.py                      # both parts
    python benchmarks/bench_measures.py --rows 2000 --width 256 --store-rows 20000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def _best(fn, repeat):
    best, value = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t)
    return best, value


def _references(A, B):
    """name -> (label, callable) of each measure's reference on A, B."""
    import torch

    import test_measures_reference as ref

    def rsa(method):
        from rsatoolbox.data import Dataset
        from rsatoolbox.rdm import calc_rdm, compare
        return float(compare(calc_rdm(Dataset(A), method="correlation"),
                             calc_rdm(Dataset(B), method="correlation"), method=method)[0, 0])

    def jaccard(k=10):
        from sklearn.neighbors import NearestNeighbors
        sets = [[set(r) for r in NearestNeighbors(n_neighbors=k + 1, metric="cosine").fit(X)
                 .kneighbors(X)[1][:, 1:]] for X in (A, B)]
        return float(np.mean([len(x & y) / len(x | y) for x, y in zip(*sets)]))

    def r2():
        from sklearn.linear_model import LinearRegression
        from sklearn.metrics import r2_score
        perm = np.random.default_rng(0).permutation(len(A))
        test, fit = perm[: len(A) // 2], perm[len(A) // 2:]
        return r2_score(B[test], LinearRegression().fit(A[fit], B[fit]).predict(A[test]))

    def dcor_ref(unbiased=False):
        import dcor
        return (dcor.u_distance_correlation_sqr(A, B) if unbiased else dcor.distance_correlation(A, B))

    fa = lambda: torch.nn.functional.normalize(torch.from_numpy(A), dim=-1)  # noqa: E731
    fb = lambda: torch.nn.functional.normalize(torch.from_numpy(B), dim=-1)  # noqa: E731
    return {
        "linear_cka": ("Kornblith feature_space_linear_cka", lambda: ref._feature_space_linear_cka(A, B)),
        "linear_cka_debiased": ("Kornblith feature_space_linear_cka(debiased)",
                                lambda: ref._feature_space_linear_cka(A, B, True)),
        "rbf_cka": ("Kornblith gram_rbf + cka", lambda: ref._cka(ref._gram_rbf(A, 0.8), ref._gram_rbf(B, 0.8))),
        "mean_cca": ("google cca_core (closed form)", lambda: float(np.mean(ref._google_cca(A.T, B.T)[1]))),
        "svcca": ("google tutorial SVD + cca_core", lambda: ref._svcca_tutorial(A, B)),
        "pwcca": ("google pwcca.compute_pwcca*", lambda: ref._google_pwcca(A.T, B.T)),
        "procrustes": ("Ding et al. formula", lambda: ref._procrustes_ding(A, B)),
        "shape_metric": ("netrep LinearMetric angular (alpha=0.5)", lambda: ref._netrep_angular(A, B, 0.5)),
        "bures": ("Harvey et al. formula", lambda: 1 - ref._procrustes_ding(A, B) / 2),
        "rsa": ("rsatoolbox spearman", lambda: rsa("spearman")),
        "mutual_knn": ("platonic-rep mutual_knn", lambda: ref._platonic_mutual_knn(fa(), fb(), 10)),
        "cknna": ("platonic-rep cknna", lambda: ref._platonic_cknna(fa(), fb(), 10)),
        "jaccard_knn": ("ReSi (sklearn NearestNeighbors)", jaccard),
        "dcor": ("dcor.distance_correlation", dcor_ref),
        "linear_r2": ("sklearn LinearRegression + r2_score", r2),
    }


def part_pair(rows, width, repeat, device, only):
    import actkit

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(rows, 64))
    A = Z @ rng.normal(size=(64, width)) + rng.normal(size=(rows, width))
    B = np.tanh(Z @ rng.normal(size=(64, width)) / 8) + rng.normal(size=(rows, width))
    refs = _references(A, B)
    params = {"shape_metric": {"alpha": 0.5}}
    actkit.measure(A[:50], B[:50], "mutual_knn", k=3)        # torch's first call outside the timing
    print(f"part 1: {rows} x {width} pair (float64), best of {repeat}; device {device}")
    print(f"{'measure':20s} {'actkit s':>9s} {'reference s':>11s} {'ratio':>7s} {'|diff|':>9s}  reference")
    for name, (label, fn) in refs.items():
        if only and name not in only:
            continue
        t_a, v_a = _best(lambda: actkit.measure(A, B, name, max_rows=None, device=device,
                                                **params.get(name, {})), repeat)
        try:
            t_r, v_r = _best(fn, repeat)
        except MemoryError as e:      # dcor's reference forms an n x n x D array
            print(f"{name:20s} {t_a:9.3f} {'fails':>11s} {'-':>7s} {'-':>9s}  {label}: {e}", flush=True)
            continue
        print(f"{name:20s} {t_a:9.3f} {t_r:11.3f} {t_r / t_a:7.1f} {abs(v_a - v_r):9.1e}  {label}",
              flush=True)
    print("* google's pwcca skips the whitening in its projection: its value differs where A is "
          "not white (docs/measures.md)")


def part_store(rows, width, folder):
    import actkit
    from actkit.measures import all_measures, moments_of
    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(1)
    n_samples = rows // 100
    index = np.stack([np.repeat(np.arange(n_samples), 100), np.tile(np.arange(100), n_samples)], 1)
    mix_a, mix_b = rng.normal(size=(64, width)), rng.normal(size=(64, width))
    paths = []
    t = time.perf_counter()
    for name, mix in (("a", mix_a), ("b", mix_b)):
        path = os.path.join(folder, f"{name}.h5")
        w = create_store(path, [LayerSpec("h", rows, width, index=index)], n_samples=n_samples,
                         request={"p": path}, inputs_fingerprint="bench")
        z = np.random.default_rng(2)
        for s in range(0, rows, 10000):
            Z = z.normal(size=(min(10000, rows - s), 64))
            X = Z @ mix + rng.normal(size=(Z.shape[0], width))
            w.append("h", (np.tanh(X / 8) if name == "b" else X).astype(np.float32))
        w.checkpoint(n_samples)
        w.finalize()
        paths.append(path)
    print(f"\npart 2: two stores of {rows} x {width} float32 written in {time.perf_counter() - t:.1f} s")
    with actkit.open_store(paths[0]) as sa, actkit.open_store(paths[1]) as sb:
        t = time.perf_counter()
        m = moments_of(sa["h"], sb["h"], progress=False)
        t_pass = time.perf_counter() - t
    print(f"one streaming pass (both stores read once): {t_pass:.1f} s "
          f"({rows * width * 8 / t_pass / 2**20:.0f} MiB/s of rows of both sides)")
    total = t_pass
    for meas in all_measures():
        if not meas.moment_based or meas.needs_split:
            continue
        t = time.perf_counter()
        value = meas.compute(m)
        dt = time.perf_counter() - t
        total += dt
        print(f"  {meas.name:20s} {value:10.6f}  {dt:7.3f} s from the moments")
    print(f"all moment-based measures of the pair: {total:.1f} s, one read of each store "
          f"(linear_r2 needs its fit/test parts: the same pass with a test mask)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=5000)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--only", default="", help="comma-separated measures of part 1 (default all)")
    p.add_argument("--store-rows", type=int, default=100_000)
    p.add_argument("--store-width", type=int, default=768)
    p.add_argument("--skip-pair", action="store_true")
    p.add_argument("--skip-store", action="store_true")
    p.add_argument("--tmp", default=None, help="folder of the part-2 stores (default: a temporary one)")
    args = p.parse_args(argv)
    print(f"load average: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} "
          f"{os.getloadavg()[2]:.1f}; cpus {os.cpu_count()}")
    if not args.skip_pair:
        part_pair(args.rows, args.width, args.repeat, args.device,
                  [x for x in args.only.split(",") if x])
    if not args.skip_store:
        with tempfile.TemporaryDirectory(dir=args.tmp) as folder:
            part_store(args.store_rows, args.store_width, folder)


if __name__ == "__main__":
    main()
