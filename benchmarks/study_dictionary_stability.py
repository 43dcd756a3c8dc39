"""Does the stability index see what dictionary learning recovers? (issue 34; docs/dictionary.md)

Planted data (``actkit.synthetic.dgp.sparse_measurements``): ``x = s A`` with k-sparse
signed latents (64) through a Gaussian 64 x 32 measurement matrix (spark 33 > 2k for every
k <= 16). For each k, five ``SparseDictionary(64, k=k)`` fits (seeds 0-4) on 10,000 rows:

* recovery: the share of planted atoms whose Hungarian partner in a fit has |cos| >= 0.95
  (mean over the five fits; ground truth, which real data do not have);
* ``actkit.dictionary_stability`` of the five fits, codes' MCC on 2,000 held-out rows
  (no ground truth needed): the share of atoms matched between fits, the mean stability
  index and ``identifiable``.

The control: Gaussian rows of the same covariance as the k = 3 data. Prints one JSON line
per setting, writes them all to ``--json`` (default docs/dictionary-stability.json) and the
figure ``--plot`` (default docs/dictionary-stability.png); ``--replot`` redraws the figure
from a ``--json`` file without fitting.

Usage::

    python benchmarks/study_dictionary_stability.py [--ks 2,3,6,10,14] [--plot docs/dictionary-stability.png]
    python benchmarks/study_dictionary_stability.py --replot docs/dictionary-stability.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

N_LATENTS, N_FEATURES, N_FIT, N_HELD, SEEDS = 64, 32, 10_000, 2_000, range(5)


def one(k, gaussian=False):
    from actkit import SparseDictionary, dictionary_stability
    from actkit.dictionary._stability import match_atoms
    from actkit.synthetic.dgp import sparse_measurements

    X, S, A = sparse_measurements(N_FIT + N_HELD, n_latents=N_LATENTS, n_features=N_FEATURES, k=k,
                                  gaussian=gaussian, random_state=0)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning where nothing is identifiable
        fits = [SparseDictionary(N_LATENTS, k=k, random_state=s).fit(X[:N_FIT]) for s in SEEDS]
    fit_s = time.perf_counter() - t
    rec = [float(np.mean(match_atoms(A, f.dictionary_)[2] >= 0.95)) for f in fits]
    t = time.perf_counter()
    st = dictionary_stability(fits, X[N_FIT:])
    d = st.to_dict()
    return {"k": k, "data": "gaussian control" if gaussian else "sparse", "recovered": float(np.mean(rec)),
            "recovered_per_fit": rec, "share_matched": d["share_matched"], "mean_cos": d["mean_cos"],
            "stability_index_mean": d["stability_index_mean"], "mcc": d["mcc"], "shared_halves": d["shared_halves"],
            "self_floor": d["self_floor"], "identifiable": d["identifiable"], "reason": d["reason"],
            "fit_seconds": round(fit_s, 1), "stability_seconds": round(time.perf_counter() - t, 2),
            "stability_index": d["stability_index"]}


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from actkit._atomic import save_figure_atomic

    sparse = [r for r in rows if r["data"] == "sparse"]
    ctrl = [r for r in rows if r["data"] != "sparse"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    ks = [r["k"] for r in sparse]
    for key, label, style in (("recovered", "planted atoms recovered (|cos| ≥ 0.95; truth)", "o-"),
                              ("share_matched", "atoms matched between fits (|cos| > 0.9)", "s--"),
                              ("stability_index_mean", "mean stability index (best fit)", "^:"),
                              ("mcc", "codes' MCC between fits (held-out rows)", "d-.")):
        a.plot(ks, [r[key] for r in sparse], style, label=label)
    for r in ctrl:
        a.plot([r["k"]], [r["share_matched"]], "kx", ms=10, label=f"Gaussian control (k={r['k']}): matched")
    for r in sparse:
        a.annotate("identifiable" if r["identifiable"] else "not identifiable", (r["k"], 0.04), rotation=90,
                   fontsize=7, ha="center", va="bottom")
    a.set_xlabel("active latents per row k (spark condition 2k < 33 holds throughout)")
    a.set_ylim(0, 1.05)
    a.set_title("64 planted atoms in R^32, 5 seeds", fontsize=10)
    a.legend(fontsize=7, loc="center left")
    three = next(r for r in sparse if r["k"] == 3) if any(r["k"] == 3 for r in sparse) else sparse[0]
    bins = np.linspace(-0.125, 1.125, 6)  # the index takes the values 0, 1/4, ..., 1 (R = 5)
    b.hist([three["stability_index"], ctrl[0]["stability_index"] if ctrl else []], bins=bins,
           label=[f"sparse (k={three['k']})", "Gaussian control"], color=["C0", "k"])
    b.set_xlabel("stability index of an atom (share of the other 4 fits that find it)")
    b.set_ylabel("atoms of the best fit")
    b.legend(fontsize=8)
    b.set_title("per-atom stability index", fontsize=10)
    fig.tight_layout()
    save_figure_atomic(fig, path)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="2,3,6,10,14")
    p.add_argument("--plot", default="docs/dictionary-stability.png")
    p.add_argument("--json", default="docs/dictionary-stability.json", help="all rows, per-atom indices included")
    p.add_argument("--replot", metavar="JSON", help="only redraw the figure from this --json file")
    args = p.parse_args(argv)
    from actkit._atomic import write_json_atomic

    if args.replot:
        with open(args.replot) as f:
            rows = json.load(f)["rows"]
    else:
        rows = []
        for k in [int(k) for k in args.ks.split(",")] + [None]:
            rows.append(one(3, gaussian=True) if k is None else one(k))
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "stability_index"}), flush=True)
        write_json_atomic(args.json, {"command": "python benchmarks/study_dictionary_stability.py --ks " + args.ks,
                                      "rows": rows}, indent=1)
    plot(rows, args.plot)
    print(f"# wrote {args.plot}")
    return rows


if __name__ == "__main__":
    main()
