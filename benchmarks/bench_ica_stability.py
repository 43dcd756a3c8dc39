"""How far float noise moves the demo's numbers (issue 11): every zoo pair compared as the
demo compares it (``actkit.demo.DEMO_ICA``, ``ica_restarts`` restarts), then again with B
replaced by copies carrying 1e-6 relative Gaussian noise (what another batch size or CPU
changes), and B against each noisy copy.

    python benchmarks/bench_ica_stability.py [--copies 3] [--restarts 3] [--out DIR] [--only NAME]

Prints, per pair, each alignment error's largest move over the copies, the range of the
ica error and of its efficiency, how many sources ICA identified on each side, and the
worst ``ica - rigid`` of a representation against its own noisy copy.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np


def main(argv=None):
    import actkit
    from actkit.demo import DEMO_ICA, _extract, zoo_pairs

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--copies", type=int, default=3, help="noisy copies of B per pair (default 3)")
    p.add_argument("--restarts", type=int, default=3, help="ica_restarts (default 3)")
    p.add_argument("--out", default="actkit-demo/stores", help="store folder (the demo's by default)")
    p.add_argument("--only", default="", help="only the pairs whose name contains this")
    args = p.parse_args(argv)
    print(f"float-noise stability of the demo's pairs: {args.copies} copies, ica_restarts={args.restarts}, "
          f"{DEMO_ICA}")
    for pair in zoo_pairs():
        if args.only not in pair.name:
            continue
        t0 = time.perf_counter()
        layer_b = pair.layer_b or pair.layer
        a = actkit.open_store(_extract(pair.model_a, pair, pair.layer, _path(args.out), "", None, "cpu", False))[pair.layer]
        b = actkit.open_store(_extract(pair.model_b, pair, layer_b, _path(args.out), "", None, "cpu", False))[layer_b]
        A, B = a[:], b[:]
        rng = np.random.default_rng(0)
        copies = [B + (1e-6 * B.std() * rng.standard_normal(B.shape)).astype(B.dtype)
                  for _ in range(args.copies)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, res = actkit.compare_many([A, B, *copies], groups=a.groups, metric="ica",
                                         methods=("permutation", "rigid", "linear", "ica"),
                                         ica_restarts=args.restarts, **DEMO_ICA, progress=False)
        runs = [res[(0, 1)]] + [res[(0, 2 + c)] for c in range(args.copies)]
        selfs = [res[(1, 2 + c)] for c in range(args.copies)]
        moves = {m: max(abs(r.errors[m] - runs[0].errors[m]) for r in runs)
                 for m in ("permutation", "rigid", "linear", "ica")}
        for key in ("linear_cka", "mean_cca"):
            moves[key] = max(abs(getattr(r, key) - getattr(runs[0], key)) for r in runs)
        ica = [r.errors["ica"] for r in runs]
        eff = [r.ica_efficiency for r in runs]
        ident = [(r.to_dict()["ica_identified_a"], r.to_dict()["ica_identified_b"]) for r in runs]
        worst_self = max(s.errors["ica"] - s.errors["rigid"] for s in selfs)
        undefined = sum(math.isnan(s.ica_efficiency) for s in selfs)
        std = [r.to_dict()["ica_std"] or 0.0 for r in runs]
        print(f"{pair.name}: ica {min(ica):.4f}-{max(ica):.4f} (ica_std {min(std):.4f}-{max(std):.4f}), "
              f"efficiency {100 * min(eff):.1f}-{100 * max(eff):.1f}%, identified (A, B) {ident}; largest move "
              + ", ".join(f"{m} {v:.1e}" for m, v in moves.items())
              + f"; B vs noisy B: ica - rigid <= {worst_self:.4f}, efficiency undefined in "
              f"{undefined}/{len(selfs)}  [{time.perf_counter() - t0:.0f} s]", flush=True)


def _path(out):
    from pathlib import Path

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
