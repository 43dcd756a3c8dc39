"""Speed of ``actkit.compare_bases`` against the unit reports it needs (issue 50's target:
compare_bases with three bases -- the neurons and two more -- within 1.5x of the three
``actkit.units`` reports of those bases, token scores included), both timed in one run.

``compare_bases`` does more than the three reports: the random-rotation control (a fourth
basis), a held-out pass per basis, the bootstrap of every score (``--bootstrap`` resamples) and,
with labels, k-sparse probing; the reports are what a user would run to compare by hand.

By default a synthetic store of ``--rows`` x ``--features`` float32 with recorded text inputs
(``--tokens`` tokens per sample drawn from a Zipf law over a ``--vocab`` vocabulary; each row the
token's embedding plus Laplace noise) and two bases fitted on ``--fit-rows`` rows: PCA
(``actkit.Whitener``) and ICA (``actkit.FastICA``, ``--ica-iter`` iterations: enough for timing,
not a converged fit), each written as a derived store. ``--store S --layer L --basis B1 --basis
B2`` times a store of yours instead (e.g. the MiniLM store of benchmarks/study_bases_real.py).

Run::

    python benchmarks/bench_units.py --bases                      # 300,000 x 384
    python benchmarks/bench_units.py --bases --rows 50000         # quick
    python benchmarks/bench_units.py --bases --store /tmp/bases-real/minilm.h5 --layer encoder.layer.5 \\
        --basis /tmp/bases-real/pca-5.h5 --basis /tmp/bases-real/ica-5.h5
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def _store(path, rows, features, tokens, vocab, seed=0):
    from actkit.store import LayerSpec, create_store, text_record

    rng = np.random.default_rng(seed)
    n_samples = rows // tokens
    n = n_samples * tokens
    p = 1.0 / np.arange(1, vocab + 1)
    ids = rng.choice(vocab, size=(n_samples, tokens), p=p / p.sum())
    table = rng.laplace(size=(vocab, features)).astype(np.float32)
    index = np.stack([np.arange(n) // tokens, np.arange(n) % tokens], 1).astype(np.int64)
    record = text_record([list(r) for r in ids], tokenizer={"name_or_path": "bench"},
                         vocab=[f"w{i}" for i in range(vocab)], special=np.zeros(vocab, bool))
    w = create_store(path, [LayerSpec("h", n, features, index=index)], n_samples=n_samples,
                     request={"bench_bases": str(path)}, inputs_fingerprint="bench", inputs=record)
    flat = ids.ravel()
    for s in range(0, n, 65536):
        block = table[flat[s:s + 65536]] + rng.laplace(size=(min(65536, n - s), features)).astype(np.float32)
        w.append("h", block)
    w.checkpoint(n_samples)
    w.finalize()
    return path


def _bases(tmp, store, fit_rows, ica_iter):
    import actkit
    from actkit._rows import sample_rows

    layer = actkit.open_store(store)["h"]
    X = np.asarray(layer[sample_rows(layer.shape[0], fit_rows, 0)])
    pca = actkit.transform_store(actkit.Whitener().fit(X), layer, tmp / "pca.h5", progress=False)
    ica = actkit.FastICA(random_state=0, max_iter=ica_iter).fit(X)
    return [pca, actkit.transform_store(ica, layer, tmp / "ica.h5", progress=False)]


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def _load():
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def main(argv=None):
    import warnings

    import actkit

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--features", type=int, default=384)
    p.add_argument("--tokens", type=int, default=40)
    p.add_argument("--vocab", type=int, default=30_522)
    p.add_argument("--fit-rows", type=int, default=40_000)
    p.add_argument("--ica-iter", type=int, default=30)
    p.add_argument("--k", type=int, default=20)
    p.add_argument("--bootstrap", type=int, default=200)
    p.add_argument("--store")
    p.add_argument("--layer")
    p.add_argument("--basis", action="append", default=[])
    p.add_argument("--work-dir")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.store:
        store, layer, bases = args.store, args.layer, list(args.basis)
    else:
        tmp = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_bases_"))
        store = tmp / "s.h5"
        if not store.exists():
            _store(store, args.rows, args.features, args.tokens, args.vocab)
        layer, bases = "h", _bases(tmp, store, args.fit_rows, args.ica_iter)
    shape = actkit.open_store(store)[layer].shape
    print(f"store {store} layer {layer}: {shape[0]:,} x {shape[1]}; bases: neurons, "
          f"{', '.join(Path(str(b)).name for b in bases)}; k={args.k}, {args.bootstrap} resamples; {_load()}")
    reports = 0.0, 0.0
    for b in [None, *bases]:
        _, wall, cpu = _timed(lambda: actkit.units(store, layer, basis=b, k=args.k, progress=False))
        print(f"  units({'neurons' if b is None else Path(str(b)).name}): {wall:.1f} s wall, {cpu:.1f} s CPU")
        reports = reports[0] + wall, reports[1] + cpu
    res, wall, cpu = _timed(lambda: actkit.compare_bases(store, layer, bases=bases, k=args.k,
                                                         bootstrap=args.bootstrap, progress=False))
    print(f"  compare_bases (+ random_rotation): {wall:.1f} s wall, {cpu:.1f} s CPU")
    print(f"ratio compare_bases / three unit reports: {wall / reports[0]:.2f}x wall ({cpu / reports[1]:.2f}x CPU); "
          f"{_load()}")
    print(res)


if __name__ == "__main__":
    main()
