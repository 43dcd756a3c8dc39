"""GPU check: the ``device="cuda"`` paths against the CPU, with timings, in one short run.

Prepared for a session that is lent a GPU (a few minutes of device time): it needs only the
repository (the zoo ships in ``data/zoo``) and prints one JSON line per check.

1. FastICA, 100,000 x 512 float32 Laplace mixtures (issue 3, case B): ``device="cuda"``
   vs ``"cpu"`` -- seconds, Amari distance, iterations; then the CUDA unmixing is compared
   with the CPU one on a small problem (same sources up to sign and order).
2. SparseDictionary, 50,000 x 128, 256 planted atoms, k = 5: ``device="cuda"`` vs
   ``"cpu"`` -- seconds and atom recovery.
3. Extraction of a zoo checkpoint (Pythia-tiny, per token) on ``cuda`` vs ``cpu``: the
   largest absolute difference of the stored activations.
4. ``actkit.compare`` on two 100,000 x 768 layers (``bench_compare.make_data``), all four
   alignments, FastICA on every fit row with ``device="cuda"`` (issue 4): seconds, errors,
   FastICA iterations and convergence.

Usage::

    python benchmarks/bench_gpu.py [--skip-cpu] [--quick]

Exits with status 1 when a CUDA result disagrees with the CPU one, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))


def _sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn):
    _sync()
    t = time.perf_counter()
    out = fn()
    _sync()
    return out, round(time.perf_counter() - t, 2)


def check_fastica(quick, skip_cpu):
    from bench_ica import mixture

    from actkit import FastICA
    from actkit.metrics import amari_distance

    n, k = (20_000, 128) if quick else (100_000, 512)
    X, A = mixture(n, k, seed=1, dtype=np.float32)
    rows = []
    for device in ["cuda"] + ([] if skip_cpu else ["cpu"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est, sec = _timed(lambda: FastICA(random_state=0, device=device).fit(X))
        rows.append({"check": "fastica", "device": device, "shape": [n, k], "seconds": sec,
                     "amari": round(amari_distance(est.components_, A), 5), "n_iter": est.n_iter_,
                     "finite": bool(np.isfinite(est.components_).all())})
        print(json.dumps(rows[-1]), flush=True)
    # same sources on a small problem
    Xs, _ = mixture(5000, 8, seed=2, dtype=np.float64)
    a = FastICA(random_state=0, device="cuda", compute_dtype="float64").fit(Xs).transform(Xs)
    b = FastICA(random_state=0, device="cpu", compute_dtype="float64").fit(Xs).transform(Xs)
    corr = np.abs(np.corrcoef(a.T, b.T)[:8, 8:]).max(axis=1).min()
    ok = bool(corr > 0.999) and all(r["finite"] and r["amari"] < 0.05 for r in rows)
    print(json.dumps({"check": "fastica cuda == cpu sources", "min_matched_corr": round(float(corr), 6),
                      "ok": ok}), flush=True)
    return ok


def check_dictionary(quick, skip_cpu):
    from bench_dictionary import planted, recovery

    from actkit import SparseDictionary

    X, D = planted(n=10_000 if quick else 50_000)
    ok = True
    for device in ["cuda"] + ([] if skip_cpu else ["cpu"]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sd, sec = _timed(lambda: SparseDictionary(256, k=5, random_state=0, device=device).fit(X))
        rec = recovery(D, sd.dictionary_)
        ok &= rec >= 0.95
        print(json.dumps({"check": "dictionary", "device": device, "seconds": sec, "recovery": rec,
                          "reconstruction_error": round(float(sd.reconstruction_error_), 5)}), flush=True)
    return ok


def check_extraction():
    import actkit

    model = REPO / "data" / "zoo" / "pythia-tiny-seed0"
    texts = REPO / "data" / "zoo" / "inputs" / "text.txt"
    with tempfile.TemporaryDirectory() as tmp:
        out = {}
        for device in ("cuda", "cpu"):
            path = actkit.extract(str(model), texts, Path(tmp) / f"{device}.h5", layers="gpt_neox.layers.2",
                                  device=device, max_samples=64, progress=False)
            out[device] = np.asarray(actkit.open_store(path)["gpt_neox.layers.2"][:])
    diff = float(np.abs(out["cuda"] - out["cpu"]).max())
    scale = float(np.abs(out["cpu"]).max())
    ok = diff <= 1e-3 * max(scale, 1.0)
    print(json.dumps({"check": "extraction cuda vs cpu", "rows": int(out["cpu"].shape[0]),
                      "max_abs_diff": diff, "max_abs_value": scale, "ok": ok}), flush=True)
    return ok


def check_compare(quick):
    from bench_compare import make_data

    import actkit

    rows, feats = (20_000, 128) if quick else (100_000, 768)
    A, B, groups = make_data(rows, feats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, sec = _timed(lambda: actkit.compare(A, B, groups=groups, device="cuda", progress=False,
                                                 ica_max_rows=rows, ica_max_iter=1000))
    d = res.to_dict()
    ok = all(np.isfinite(d[m]) for m in ("permutation", "rigid", "linear", "ica"))
    print(json.dumps({"check": "compare cuda", "shape": [rows, feats], "seconds": sec, "ok": ok,
                      **{k: d[k] for k in ("permutation", "rigid", "linear", "ica", "ica_efficiency",
                                           "ica_matched_corr_mean", "ica_fit_rows", "ica_n_iter_a",
                                           "ica_n_iter_b", "ica_converged", "seconds_fit")}}), flush=True)
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller problems (a smoke test)")
    p.add_argument("--skip-cpu", action="store_true", help="time only the GPU")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("bench_gpu: torch sees no CUDA GPU here", file=sys.stderr)
        return 2
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}), flush=True)
    ok = check_fastica(args.quick, args.skip_cpu)
    ok &= check_dictionary(args.quick, args.skip_cpu)
    ok &= check_extraction()
    ok &= check_compare(args.quick)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
