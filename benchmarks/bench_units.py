"""Speed of ``actkit.units``: the whole report against reading the layer and computing the unit
activations alone, and against a numpy brute force over the whole matrix (issue 40's target:
within 1.5x of the former, faster than the latter wherever it fits in memory).

One store of ``--rows`` x ``--features`` float32 (Laplace rows, 16 tokens per sample), two bases:

* neurons: the activations are the rows themselves (baseline: read every block);
* an ICA store (``transform_store`` of a FastICA): its rows are read (baseline: read them);
* an SAE (``--latents`` latents, top-k): the baseline reads the layer and encodes every block.

"Reading the layer" is the read path ``units()`` itself uses, block for block: the local
runner's blocks of the same size (:func:`actkit._data.iter_blocks` over a store opened with
``actkit.open_store``, whose reads check every block against its checksum), not a bare h5py
read. Both columns give the wall clock and, in brackets, this process's CPU time (all threads),
the steadier number on a loaded machine; each is the best of ``--repeat`` runs.

The numpy brute force computes the same statistics from the whole matrix in memory: top-k and
bottom-k by ``argsort`` (stable: ties by row), a histogram per column, mean / SD / skewness /
kurtosis and share active (scipy.stats), and 256 sampled rows per unit.

The store records text inputs (16 tokens a sample from a vocabulary of ``--vocab`` words, each
sample's text and its tokens' character spans, as an extraction records them), so the report is
timed twice: statistics only (``inputs=False``) and whole (each unit's ``top_tokens`` over its
``k_tokens = 200`` highest rows, every example as its text with the unit's activation at every
token of its window, read back from the store). The brute force is timed with the same two
views added: the tokens of each column's 200 highest rows (counts and means by ``np.unique``)
and each top and bottom example's window of activations (``context`` = 8 tokens either side),
gathered from the matrix in memory.

Run::

    python benchmarks/bench_units.py                 # 400k x 256
    python benchmarks/bench_units.py --rows 50000    # quick
    python benchmarks/bench_units.py --rows 100000 --features 64 --latents 256   # docs/units.md "Speed"
    python benchmarks/bench_units.py --floor         # + a floor: the histogram and moments alone, compiled
    python benchmarks/bench_units.py --page          # the units page in chromium (issue 41): size, time to
                                                     # interactive (benchmarks/bench_pages.py; its flags follow)
    python benchmarks/bench_units.py --bases         # issue 50: compare_bases with three bases against the
                                                     # three unit reports it needs (300,000 x 384, recorded
                                                     # text inputs); --store S --layer L --basis B1 --basis B2
                                                     # runs it on a store of yours
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def _text(n_samples, n_per_sample, vocab_size, seed=0):
    """``(token ids (n_samples, n_per_sample), record)``: text inputs as an extraction records
    them (:func:`actkit.store.text_record`: the ids, each sample's text, its tokens' spans)."""
    from actkit.store import text_record

    vocab = [f" w{i}" for i in range(vocab_size)]
    ids = np.random.default_rng(seed).zipf(1.3, size=(n_samples, n_per_sample)) % vocab_size
    texts = ["".join(vocab[i] for i in row) for row in ids]
    spans = []
    for row in ids:
        ends = np.cumsum([len(vocab[i]) for i in row])
        spans.append(np.stack([ends - [len(vocab[i]) for i in row], ends], 1))
    record = text_record(list(ids), tokenizer={"name_or_path": "bench"}, vocab=vocab,
                         special=np.zeros(vocab_size, bool), texts=texts, spans=spans)
    return ids, record


def _store(path, X, n_per_sample=16, inputs=None):
    from actkit.store import LayerSpec, create_store

    n = X.shape[0]
    index = np.stack([np.arange(n) // n_per_sample, np.arange(n) % n_per_sample], 1).astype(np.int64)
    w = create_store(path, [LayerSpec("h", n, X.shape[1], index=index)], n_samples=n // n_per_sample,
                     request={"bench": str(path)}, inputs_fingerprint="bench", inputs=inputs)
    for s in range(0, n, 65536):
        w.append("h", X[s:s + 65536])
    w.checkpoint(n // n_per_sample)
    w.finalize()
    return path


def _timed(fn, repeat=2):
    """``(wall, cpu)`` seconds of the best of ``repeat`` runs (cpu: this process's CPU time, all
    threads; steadier than the wall clock on a loaded machine)."""
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - t, time.process_time() - c))
    return best


def _read_all(layer, rows, activations=None):
    """Read every block of ``layer`` as ``units()`` does (the local runner's blocks,
    :func:`actkit._data.iter_blocks` over the store's verified reads: every block checked
    against its checksum), computing the unit activations of each when given."""
    from actkit._data import iter_blocks

    for block in iter_blocks(layer, rows):
        if activations is not None:
            activations(block)


def _unit_rows(width, n_units):
    """The rows per block of ``units()``'s pass (``actkit._units._api._run_pass``)."""
    try:
        from actkit._units._api import MAX_BLOCK_ROWS
    except ImportError:  # an actkit before issue 51 (its rule, for a run against it)
        return int(max(64, min(16384, (16 << 20) // (4 * max(width, n_units)))))
    from actkit._rows import block_rows

    return block_rows(max(width, n_units), max_rows=MAX_BLOCK_ROWS)


def _brute(A, k, tokens=None, n_per_sample=16, k_tokens=200, context=8):
    """The report's statistics from the matrix in memory; with ``tokens`` ((rows,) token id of
    each row), also each column's top tokens and each top / bottom example's window."""
    import scipy.stats

    order = np.argsort(-A, axis=0, kind="stable")
    top, bottom = order[:k], order[::-1][:k]
    for j in range(A.shape[1]):
        np.histogram(A[:, j], bins=256)
    stats = (A.mean(0), A.std(0, ddof=1), scipy.stats.skew(A), scipy.stats.kurtosis(A), (A != 0).mean(0))
    sample = np.random.default_rng(0).choice(A.shape[0], 256, replace=False)
    if tokens is None:
        return top, bottom, stats, A[sample]
    views = []
    for j in range(A.shape[1]):
        rows = order[:k_tokens, j]
        uniq, inverse, counts = np.unique(tokens[rows], return_inverse=True, return_counts=True)
        means = np.bincount(inverse, A[rows, j], minlength=uniq.size) / counts
        shown = np.concatenate([top[:, j], bottom[:, j]])
        first = shown // n_per_sample * n_per_sample
        lo = np.maximum(first, shown - context)
        hi = np.minimum(first + n_per_sample, shown + context + 1)
        windows = [A[a:b, j] for a, b in zip(lo, hi)]
        views.append((uniq[np.lexsort((uniq, -means, -counts))], windows))
    return top, bottom, stats, A[sample], views


def _floor(X, read_wall, read_cpu):
    """A lower bound on any exact report's ratio for neurons: the per-value histogram (256 bins
    per column) and the four moment sums alone, each compiled by numba (one thread, no top-k, no
    sample, no merges), on the matrix in memory. Their CPU seconds plus the read's, spread
    perfectly over the CPUs, against the read's wall clock. Needs ``pip install numba`` (not an
    actkit dependency: the measurement only)."""
    try:
        from numba import njit
    except ImportError:
        print("--floor needs numba (pip install numba); skipped")
        return

    @njit(nogil=True)
    def hist(X, invw, off, H):  # pragma: no cover - compiled
        nb = H.shape[1]
        for i in range(X.shape[0]):
            for j in range(X.shape[1]):
                b = min(max(np.int64(X[i, j] * invw[j] + off[j]), 0), nb - 1)
                H[j, b] += 1

    @njit(nogil=True)
    def moments(X, S):  # pragma: no cover - compiled
        for i in range(X.shape[0]):
            for j in range(X.shape[1]):
                y = np.float64(X[i, j])
                y2 = y * y
                S[0, j] += y
                S[1, j] += y2
                S[2, j] += y2 * y
                S[3, j] += y2 * y2

    d = X.shape[1]
    lo, hi = X.min(0), X.max(0)
    invw = (256 / np.maximum(hi - lo, 1e-30)).astype(np.float32)
    off = (-lo * invw).astype(np.float32)
    H, S = np.zeros((d, 256), np.int32), np.zeros((4, d))
    hist(X[:64], invw, off, H), moments(X[:64], S)  # compile
    h = _timed(lambda: hist(X, invw, off, H), 3)[1]
    m = _timed(lambda: moments(X, S), 3)[1]
    cpus = os.cpu_count()
    bound = (read_cpu + h + m) / cpus / read_wall
    print(f"floor (numba, 1 thread, CPU s): histogram {h:.3f}s ({h / X.size * 1e9:.2f} ns/value), "
          f"moments {m:.3f}s ({m / X.size * 1e9:.2f} ns/value); read {read_cpu:.3f}s CPU, {read_wall:.3f}s wall")
    print(f"floor on {cpus} CPUs: (read + histogram + moments CPU) / {cpus} / read wall = {bound:.2f}x "
          f"(no top-k, sample or merge yet)")


def main(argv=None):
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    if "--bases" in argv:  # issue 50: compare_bases against its unit reports (bench_bases.py's run)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_bases import main as bases_main

        argv.remove("--bases")
        return bases_main(argv)
    if "--page" in argv:  # the page's size and speed, measured in the browser: bench_pages.py's run
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from bench_pages import main as page_main

        argv.remove("--page")
        return page_main(argv)
    import actkit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--latents", type=int, default=1024)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--vocab", type=int, default=5000, help="words of the recorded text inputs (default: 5000)")
    p.add_argument("--repeat", type=int, default=3, help="runs per timing; the best is kept (default: 3)")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--bases", action="store_true",
                   help="issue 50: compare_bases with three bases against the three unit reports it needs "
                        "(benchmarks/bench_bases.py; its flags follow)")
    p.add_argument("--floor", action="store_true",
                   help="also time a compiled histogram and moments alone (needs numba): the neurons floor")
    args = p.parse_args(argv)
    tmp = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_units_"))
    rng = np.random.default_rng(0)
    X = rng.laplace(size=(args.rows, args.features)).astype(np.float32)
    ids, record = _text(args.rows // 16, 16, args.vocab)
    tokens = ids.ravel()
    src = _store(tmp / "s.h5", X, inputs=record)
    layer = actkit.open_store(src)["h"]
    ica = actkit.FastICA(n_components=min(64, args.features), random_state=0, max_iter=50).fit(X[:50_000])
    ica_path = actkit.transform_store(ica, layer, tmp / "ica.h5", progress=False)
    sd = actkit.SparseDictionary(args.latents, k=16, code="topk", positive=True, random_state=0,
                                 max_iter=2).fit(X[:20_000])
    sae_path = actkit.save_sae(sd, tmp / "sae", hook_name="h")
    sae = actkit.load_sae(sae_path)
    print(f"rows {args.rows:,} x {args.features} float32 ({X.nbytes / 2**20:.0f} MiB), k={args.k}, "
          f"load {os.getloadavg()[0]:.1f} (1 min), CPUs {os.cpu_count()}, best of {args.repeat}; wall (CPU) seconds")
    print(f"{'basis':<8s} {'read+activations':>17s} {'units()':>15s} {'ratio':>13s} {'numpy brute':>15s} {'speed-up':>8s}"
          f" | {'units() + text':>15s} {'numpy + text':>15s} {'speed-up':>8s}")
    F, L = args.features, sae.n_components_
    cases = [("neurons", None, lambda: _read_all(layer, _unit_rows(F, F)), X),
             ("ica", ica_path, lambda: _read_all(actkit.open_store(ica_path)["h"], _unit_rows(min(64, F), min(64, F))), None),
             ("sae", sae_path, lambda: _read_all(layer, _unit_rows(F, L), lambda b: sae._dense(sae.encode_block(b)).numpy()),
              None)]
    for name, basis, baseline, dense in cases:
        base = _timed(baseline, args.repeat)
        full = _timed(lambda: actkit.units(src, basis=basis, k=args.k, inputs=False, progress=False), args.repeat)
        if dense is None and name == "ica":
            dense = np.asarray(actkit.open_store(ica_path)["h"])
        if dense is None and name == "sae":
            dense = sae.transform(X) if args.rows * args.latents * 4 < 2 ** 31 else None
        brute = _timed(lambda: _brute(dense, args.k), 1) if dense is not None else (float("nan"),) * 2
        text = _timed(lambda: actkit.units(src, basis=basis, k=args.k, progress=False), args.repeat)
        brute_text = (_timed(lambda: _brute(dense, args.k, tokens), 1) if dense is not None
                      else (float("nan"),) * 2)
        if name == "neurons":
            read = base
        print(f"{name:<8s} {base[0]:7.2f} ({base[1]:5.2f})s {full[0]:6.2f} ({full[1]:5.2f})s "
              f"{full[0] / base[0]:5.1f}x ({full[1] / base[1]:4.1f}x) {brute[0]:6.2f} ({brute[1]:5.2f})s "
              f"{brute[0] / full[0]:7.1f}x | {text[0]:6.2f} ({text[1]:5.2f})s {brute_text[0]:6.2f} ({brute_text[1]:5.2f})s "
              f"{brute_text[0] / text[0]:7.1f}x")
    if args.floor:
        _floor(X, *read)

if __name__ == "__main__":
    main()
