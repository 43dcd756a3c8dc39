"""Experiment ``table1``: Nelson et al., Table 1 protocol on the shipped zoo.

Reuses ``actkit.demo.run_demo`` (issue 5's pipeline): both training seeds of each zoo
family (Pythia-, MAE-, ResNet-, ViT-tiny) are extracted on the shipped inputs and seed 0
is mapped onto seed 1 with every alignment of ``actkit.compare`` (permutation, rigid,
linear, whitening + ICA); held-out l2 error / diameter, ICA efficiency
``(perm - ica) / (perm - rigid)`` and linear CKA, beside the paper's rows for real
checkpoints.

Claims: the ordering ``permutation >= ica >= rigid >= linear`` holds on every pair (as in
every row of the paper's table), hence every ICA efficiency lies in [0, 1].

Diagnostics beside the table (they explain a failing row, they do not change a claim):
``k99`` the number of principal components holding 99% of each side's variance (the
effective dimension; ICA whitens every component above ``1e-6`` of the largest
eigenvalue, so a low ``k99`` means most whitened directions are noise-level),
``ica_match`` the mean held-out |correlation| of the ICA sources matched across the two
models (near 1 when both sides find the same sources), ``ica_conv`` whether FastICA
converged on both sides and ``ica_ident`` compare's ``ica_identifiable`` (false: the ICA
value is one optimum of several; the efficiency claim then says so).
"""

from __future__ import annotations

import tempfile
import time

import numpy as np

import actkit
from actkit.demo import run_demo
from actkit.stats import RunningMoments
from actkit.report import pyplot
from actkit.synthetic._result import Claim, ExperimentResult, save_figure

NAME = "table1"
TITLE = "Nelson et al., Table 1: alignment errors between two seeds (shipped zoo)"
METHODS = ("permutation", "ica", "rigid", "linear")


def run(*, quick=False, device="cpu", random_state=0):
    """Run the experiment; returns an :class:`~actkit.synthetic._result.ExperimentResult`."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="actkit-table1-") as tmp:
        report = run_demo(tmp, quick=quick, device=device, random_state=random_state, log=None)
        k99 = [[effective_dim(path, r["layer"] if i == 0 else r["layer_b"])
                for i, path in enumerate(r["stores"])] for r in report["rows"]]
    runtime = time.perf_counter() - t0

    rows = []
    for r, k in zip(report["rows"], k99):
        o, p = r["ours"], r.get("paper") or {}
        c = r.get("compare", {})
        rows.append({"pair": r["name"], "source": "actkit", "perm": o["permutation"],
                     "rigid": o["rigid"], "linear": o["linear"], "ica": o["ica"],
                     "ica_eff": o["ica_efficiency"], "cka": o["linear_cka"],
                     "ordering": bool(r["ordering_holds"]), "n_rows": r["n_rows"],
                     "dims": r["dims"], "layer": r["layer"], "k99": "/".join(map(str, k)),
                     "ica_match": r.get("ica_matched_corr_mean"),
                     "ica_conv": c.get("ica_converged"), "ica_ident": c.get("ica_identifiable"), "ica_fit_rows": c.get("ica_fit_rows"),
                     "ica_n_iter": [c.get("ica_n_iter_a"), c.get("ica_n_iter_b")]})
        if p:
            rows.append({"pair": "  paper: " + p.get("pair", ""), "source": "paper",
                         "perm": p["permutation"], "rigid": p["rigid"], "linear": p["linear"],
                         "ica": p["ica"], "ica_eff": p["ica_efficiency"]})
    ours = [r for r in rows if r["source"] == "actkit"]
    bad = [r["pair"] for r in ours if not r["ordering"]]
    effs = [r["ica_eff"] for r in ours]
    claims = [
        Claim("ordering permutation >= ica >= rigid >= linear on every pair", not bad,
              "holds on all " + str(len(ours)) + " pairs" if not bad
              else "fails on " + ", ".join(bad)),
        Claim("ICA efficiency in [0, 1] (paper: 25-59%)",
              all(e is not None and np.isfinite(e) and -1e-9 <= e <= 1 + 1e-9 for e in effs),
              "efficiencies " + ", ".join("n/a" if e is None else f"{100 * e:.0f}%" for e in effs)
              + _unidentified(ours)),
    ]
    return ExperimentResult(
        name=NAME, title=TITLE,
        columns=["pair", "perm", "rigid", "linear", "ica", "ica_eff", "cka", "ordering", "k99",
                 "ica_match", "ica_conv", "ica_ident"],
        rows=rows, claims=claims, runtime_s=runtime, plot=_plot,
        extra={"demo_conventions": report.get("conventions", {})},
        settings={"quick": quick, "device": str(device), "random_state": random_state,
                  "pipeline": "actkit.demo.run_demo on the shipped zoo"},
        conventions={
            "error": "actkit.compare: held-out mean l2 / diam(B_eval), split by input sample",
            "ica_efficiency": "(err_perm - err_ica) / (err_perm - err_rigid)",
            "k99": "principal components for 99% of the variance of model A / model B (all rows)",
            "ica_match": "mean held-out |corr| of the ICA sources matched across the models",
            "ica_ident": "compare's ica_identifiable: the two halves of the restarts find the "
                         "same sources and the self floor is small against perm - rigid; when "
                         "false, ica and ica_eff are one optimum of several, not a measurement "
                         "(docs/definitions.md, 'ICA alignment')",
            "paper": "Table 1 rows are real checkpoints (Pythia-160M, MAE-base, ResNet-18, "
                     "CheXpert); ours are the zoo's tiny models, so only the ordering and the "
                     "range of the efficiency are comparable",
        })


def _unidentified(rows):
    """What the claims' ICA values rest on: the pairs whose ICA fit is not identifiable."""
    bad = [r["pair"] for r in rows if r.get("ica_ident") is False]
    if not bad:
        return ""
    return (f"; ICA not identifiable on {len(bad)} of {len(rows)} pairs ({', '.join(bad)}): "
            "their ica and ica_eff are one optimum of several, not a measurement")


def effective_dim(path, layer, *, share=0.99):
    """Number of principal components holding ``share`` of a store layer's variance.

    Parameters
    ----------
    path : str or Path
        An actkit store.
    layer : str

    Returns
    -------
    int
    """
    moments = RunningMoments()
    for _, block in actkit.open_store(path)[layer].iter_blocks():
        moments.add(block)
    eig = np.clip(np.linalg.eigvalsh(moments.covariance())[::-1], 0, None)
    return int(np.searchsorted(np.cumsum(eig) / eig.sum(), share) + 1)


def _plot(result, out):
    plt = pyplot()
    ours = [r for r in result.rows if r["source"] == "actkit"]
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    x = np.arange(len(ours))
    for i, m in enumerate(("perm", "ica", "rigid", "linear")):
        ax.bar(x + (i - 1.5) * 0.2, [r[m] for r in ours], 0.2, label=m)
    ax.set_xticks(x, [r["pair"] for r in ours], fontsize=8)
    ax.set_ylabel("held-out l2 error / diameter")
    ax.legend(fontsize=8, ncol=4)
    ax.set_title(TITLE, fontsize=9)
    return [save_figure(fig, out / f"{NAME}.png")]
