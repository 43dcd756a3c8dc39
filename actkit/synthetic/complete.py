"""Experiment ``complete``: Zhou & Klindt, complete vs undercomplete (generative DGP).

Labels cause latents (:func:`actkit.synthetic.dgp.generative_dgp`: a factorial grid of
class means, Gaussian noise, an invertible leaky-MLP mixing ``x = g(z)``). We train MLP
classifiers ``x -> h -> logits = W h + b`` and measure, on held-out rows:

1. Linear identifiability (``actkit.metrics.linear_r2``: affine map h -> z, fitted on one
   half, scored on the other) as the representation width ``M`` goes from complete
   (``M >= d``) to undercomplete (``M < d``). Claim: R^2 near 1 (>= 0.85) for every complete
   width, and clearly lower (by >= 0.2) for every undercomplete one.
2. Grandmother cells: with non-negative (ReLU) units, an activity (energy) penalty and
   weight decay on the read-out, the fraction of active units whose |Pearson correlation|
   with a single latent exceeds 0.9, against the same architecture without those
   constraints (linear units, no penalty). Claim: the constrained model's fraction is
   larger by >= 0.2, and its mean selectivity (``max_j corr_j^2 / sum_j corr_j^2``) higher.

The paper's text is not available beyond its abstract, so these setups and thresholds are
**[actkit]** choices that test its stated claims; its numbers cannot be compared.
"""

from __future__ import annotations

import time

import numpy as np

from actkit.synthetic import _api
from actkit.synthetic._result import Claim, ExperimentResult, pyplot, save_figure
from actkit.synthetic._training import train_classifier
from actkit.synthetic.dgp import generative_dgp

NAME = "complete"
TITLE = "Zhou & Klindt: complete vs undercomplete representations (generative DGP)"

N_LATENTS = 3
QUICK = dict(widths=(4, 2), n_samples=10000, n_steps=2000, n_seeds=1, gm_seeds=2, gm_width=6)
FULL = dict(widths=(8, 4, 3, 2, 1), n_samples=20000, n_steps=4000, n_seeds=3, gm_seeds=5,
            gm_width=6)
LR = 3e-3
R2_COMPLETE = 0.85
R2_GAP = 0.2
TUNED_CORR = 0.9
GM_GAIN = 0.2
GM_SETTINGS = dict(representation="relu", energy=1e-3, weight_decay=1e-3)


def tuning(H, Z, *, threshold=TUNED_CORR, active_std=1e-3):
    """Per-unit selectivity of a representation.

    Parameters
    ----------
    H : ndarray of shape (n_samples, n_units)
    Z : ndarray of shape (n_samples, n_latents)

    Returns
    -------
    dict
        ``corr`` (n_units, n_latents) |Pearson|, ``active`` mask (std > active_std),
        ``fraction_tuned``: share of active units with max |corr| > threshold,
        ``selectivity``: mean over active units of ``max_j corr_j^2 / sum_j corr_j^2``
        (1 = driven by one latent, 1/n_latents = equal mixture), and ``n_active``.
    """
    Hc = H - H.mean(0)
    Zc = Z - Z.mean(0)
    sh, sz = Hc.std(0), Zc.std(0)
    active = sh > active_std
    C = np.zeros((H.shape[1], Z.shape[1]))
    C[active] = np.abs((Hc[:, active] / sh[active]).T @ (Zc / sz)) / len(H)
    n_active = int(active.sum())
    Ca = C[active]
    tuned = Ca.max(1) > threshold
    sel = (Ca.max(1) ** 2 / np.maximum((Ca ** 2).sum(1), 1e-300)) if n_active else np.zeros(0)
    return {"corr": C, "active": active, "n_active": n_active,
            "fraction_tuned": float(tuned.mean()) if n_active else 0.0,
            "selectivity": float(sel.mean()) if n_active else 0.0}


def run(*, quick=False, device="cpu", random_state=0):
    """Run the experiment; returns an :class:`~actkit.synthetic._result.ExperimentResult`."""
    cfg = dict(QUICK if quick else FULL)
    t0 = time.perf_counter()
    X, Z, y, info = generative_dgp(cfg["n_samples"], n_latents=N_LATENTS,
                                   random_state=random_state, mixing_state=random_state)
    fit, ev = _api.split_indices(len(X), random_state=random_state)
    K = info["n_classes"]
    rows = []
    for width in cfg["widths"]:
        r2s, accs = [], []
        for seed in range(cfg["n_seeds"]):
            rep, _, hist = train_classifier(X[fit], y[fit], width=width, n_classes=K, lr=LR,
                                            n_steps=cfg["n_steps"], seed=random_state + seed,
                                            device=device, desc=f"classifier M={width}")
            r2s.append(_api.linear_r2(rep(X[ev]), Z[ev], random_state=random_state))
            accs.append(hist["train_accuracy"])
        rows.append({"model": f"M={width}", "width": width,
                     "regime": "complete" if width >= N_LATENTS else "undercomplete",
                     "linear_r2": float(np.mean(r2s)), "linear_r2_sd": float(np.std(r2s)),
                     "train_acc": float(np.mean(accs))})

    gm = {}
    for label, kw in (("unconstrained", {}), ("relu+energy", GM_SETTINGS)):
        fracs, sels, n_act, r2s, corr = [], [], [], [], None
        for seed in range(cfg["gm_seeds"]):
            rep, _, hist = train_classifier(X[fit], y[fit], width=cfg["gm_width"], n_classes=K,
                                            lr=LR, n_steps=cfg["n_steps"], seed=random_state + seed,
                                            device=device, desc=f"classifier {label}", **kw)
            H = rep(X[ev])
            t = tuning(H, Z[ev])
            fracs.append(t["fraction_tuned"])
            sels.append(t["selectivity"])
            n_act.append(t["n_active"])
            r2s.append(_api.linear_r2(H, Z[ev], random_state=random_state))
            corr = t["corr"] if corr is None else corr
        gm[label] = {"fraction_tuned": float(np.mean(fracs)), "n_active": float(np.mean(n_act)),
                     "fraction_tuned_per_seed": fracs, "selectivity": float(np.mean(sels)),
                     "linear_r2": float(np.mean(r2s)), "corr_seed0": corr}
        rows.append({"model": f"M={cfg['gm_width']} {label}", "width": cfg["gm_width"],
                     "regime": "grandmother" if kw else "baseline",
                     "linear_r2": float(np.mean(r2s)), "train_acc": float(hist["train_accuracy"]),
                     "frac_tuned": float(np.mean(fracs)), "selectivity": float(np.mean(sels)),
                     "n_active": float(np.mean(n_act))})
    runtime = time.perf_counter() - t0

    comp = [r["linear_r2"] for r in rows if r["regime"] == "complete"]
    under = [r["linear_r2"] for r in rows if r["regime"] == "undercomplete"]
    claims = [
        Claim("complete widths are linear in the latents", min(comp) >= R2_COMPLETE,
              f"min R^2 over M >= d={N_LATENTS}: {min(comp):.3f} (target >= {R2_COMPLETE})"),
        Claim("undercomplete widths are clearly less linear", max(under) <= min(comp) - R2_GAP,
              f"max R^2 over M < d: {max(under):.3f} vs min complete {min(comp):.3f} "
              f"(gap target >= {R2_GAP})"),
        Claim("non-negativity + energy give grandmother cells",
              gm["relu+energy"]["fraction_tuned"]
              >= gm["unconstrained"]["fraction_tuned"] + GM_GAIN
              and gm["relu+energy"]["selectivity"] > gm["unconstrained"]["selectivity"],
              f"fraction of active units with |corr| > {TUNED_CORR} to one latent: "
              f"{gm['relu+energy']['fraction_tuned']:.2f} constrained vs "
              f"{gm['unconstrained']['fraction_tuned']:.2f} unconstrained (gain target >= "
              f"{GM_GAIN}); selectivity {gm['relu+energy']['selectivity']:.2f} vs "
              f"{gm['unconstrained']['selectivity']:.2f}"),
    ]
    return ExperimentResult(
        name=NAME, title=TITLE,
        columns=["model", "regime", "linear_r2", "train_acc", "frac_tuned", "selectivity",
                 "n_active"],
        rows=rows, claims=claims, runtime_s=runtime, plot=_plot,
        extra={"grandmother": gm},
        settings={"quick": quick, "device": str(device), "random_state": random_state,
                  "n_latents": N_LATENTS, "dgp": {k: v for k, v in info.items()}, **cfg,
                  "grandmother_settings": GM_SETTINGS},
        conventions={
            "dgp": "[actkit] z_i = grid level of digit y_i + N(0, sigma^2), K = levels^d "
                   "classes, x = invertible leaky MLP(z)",
            "classifier": "MLP x-64-64-M (LeakyReLU 0.2) -> linear read-out, cross-entropy, "
                          "Adam with cosine schedule [actkit]",
            "linear_r2": "actkit.metrics.linear_r2(h, z) on held-out rows (its own 50/50 split)",
            "tuned": f"active unit (std > 1e-3) with max_j |corr(h, z_j)| > {TUNED_CORR}",
            "paper": "numbers not available (abstract only): claims tested qualitatively",
        })


def _plot(result, out):
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.3))
    sweep = [r for r in result.rows if r["regime"] in ("complete", "undercomplete")]
    axes[0].plot([r["width"] for r in sweep], [r["linear_r2"] for r in sweep], marker="o")
    axes[0].axvline(result.settings["n_latents"] - 0.5, ls="--", c="gray")
    axes[0].set_xlabel("representation width M")
    axes[0].set_ylabel("linear identifiability R^2")
    axes[0].set_ylim(0, 1.02)
    gm = result.extra["grandmother"]
    for ax, label in zip(axes[1:], ("unconstrained", "relu+energy")):
        im = ax.imshow(np.asarray(gm[label]["corr_seed0"]), vmin=0, vmax=1, cmap="viridis",
                       aspect="auto")
        ax.set_title(f"{label}: {gm[label]['fraction_tuned']:.2f} tuned", fontsize=9)
        ax.set_xlabel("latent")
        ax.set_ylabel("unit")
    fig.colorbar(im, ax=axes[2], label="|corr|")
    fig.suptitle(TITLE, fontsize=9)
    return [save_figure(fig, out / f"{NAME}.png")]
