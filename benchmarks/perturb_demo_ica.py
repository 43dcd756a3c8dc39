"""How far is an unidentifiable ICA cell from a measurement? (docs/compare.md, "Reading the
demo table")

Runs the demo's ``compare`` on the stores that ``actkit demo --out DIR`` wrote, once as they
are and then with every column given additive Gaussian noise of 1e-6 times its standard
deviation (``--draws`` seeds), as another CPU's BLAS or another extraction batch size
perturbs the rows; ``--k`` repeats it with ``ica_n_components`` forced. One JSON line per run.

    actkit demo --out /tmp/demo
    python benchmarks/perturb_demo_ica.py /tmp/demo --draws 3
    python benchmarks/perturb_demo_ica.py /tmp/demo --draws 2 --k 32,16,8
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

import actkit
from actkit.demo import DEMO_ICA

KEYS = ("permutation", "rigid", "linear_cka", "mean_cca", "ica", "ica_std", "ica_efficiency",
        "ica_classic", "ica_classic_se", "ica_identifiable", "ica_shared_halves_a",
        "ica_shared_halves_b", "ica_self_floor", "ica_best_restart_a", "ica_best_restart_b")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("demo", help="the folder actkit demo wrote (report.json, stores/)")
    ap.add_argument("--draws", type=int, default=3, help="noise draws besides the clean run")
    ap.add_argument("--k", default="", help="comma-separated ica_n_components to force")
    args = ap.parse_args()
    report = json.loads((Path(args.demo) / "report.json").read_text())
    ks = [int(k) for k in args.k.split(",")] if args.k else [None]
    for row in report["rows"]:
        A = actkit.open_store(Path(args.demo) / "stores" / Path(row["stores"][0]).name)[row["layer"]]
        B = actkit.open_store(Path(args.demo) / "stores" / Path(row["stores"][1]).name)[row["layer_b"]]
        Xa, Xb, groups = np.asarray(A[:]), np.asarray(B[:]), A.groups[:]
        for k in ks:
            for draw in range(args.draws + 1):
                xa, xb = Xa, Xb
                if draw:
                    rng = np.random.default_rng(draw)
                    xa = Xa + (1e-6 * Xa.std(0) * rng.standard_normal(Xa.shape)).astype(Xa.dtype)
                    xb = Xb + (1e-6 * Xb.std(0) * rng.standard_normal(Xb.shape)).astype(Xb.dtype)
                kw = dict(DEMO_ICA, random_state=report["random_state"], ica_seed=report["ica_seed"],
                          ica_restarts=report["ica_restarts"], groups=groups, progress=False)
                if k is not None:
                    kw["ica_n_components"] = k
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    d = actkit.compare(xa, xb, **kw).to_dict()
                print(json.dumps({"pair": row["name"], "k": k, "draw": draw,
                                  "seconds": round(time.perf_counter() - t, 1),
                                  **{key: d.get(key) for key in KEYS}}), flush=True)


if __name__ == "__main__":
    main()
