"""Experiment ``complete``: Zhou & Klindt, complete vs undercomplete (generative DGP).

Labels cause latents (:func:`truncated_generative_dgp`: a factorial grid of class means,
Gaussian noise truncated to the box spanned by the grid, an invertible leaky-MLP mixing
``x = g(z)``). We train MLP classifiers ``x -> h -> logits = W h + b`` and measure, on
held-out rows:

1. Linear identifiability (``actkit.metrics.linear_r2``: affine map h -> z, fitted on one
   half, scored on the other) as the representation width ``M`` goes from complete
   (``M >= d``) to undercomplete (``M < d``). Claim: R^2 near 1 (>= 0.85) for every complete
   width, and clearly lower (by >= 0.2) for every undercomplete one.
2. Grandmother cells: at the complete width ``M = d``, with non-negative (ReLU) units, an
   activity (energy) penalty and weight decay on the read-out, the fraction of active units
   whose |Pearson correlation| with a single latent exceeds 0.9, against the same
   architecture without those constraints (linear units, no penalty). Claim: the
   constrained model's fraction is larger by >= 0.2 on average, its mean selectivity
   (``max_j corr_j^2 / sum_j corr_j^2``) is higher, and it has more tuned units than the
   unconstrained model in at least 80% of the seeds.

The paper's theorems are about *optimal* encoders, so every model is the best of
``n_restarts`` trainings (different initialisations and batch orders), chosen by its final
training objective (cross-entropy plus the penalties it was trained with), never by a
score against the latents. The Bayes-optimal cross-entropy of the DGP is reported beside
the trained models' so one can see how close to optimal they are.

The paper's text is not available beyond its abstract, so these setups and thresholds are
**[actkit]** choices that test its stated claims; its numbers cannot be compared.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from matplotlib.ticker import MaxNLocator
from scipy.special import logsumexp, ndtr

from actkit.synthetic import _api
from actkit.report import pyplot
from actkit.synthetic._result import Claim, ExperimentResult, save_figure
from actkit.synthetic._training import train_classifier
from actkit.synthetic.dgp import generative_dgp

NAME = "complete"
TITLE = "Zhou & Klindt: complete vs undercomplete representations (generative DGP)"

N_LATENTS = 3
LEVELS = 3
SIGMA = 0.25
BOX = 1.0
QUICK = dict(widths=(3, 2), n_samples=20000, n_steps=3000, n_seeds=1, n_restarts=2,
             gm_seeds=2)
FULL = dict(widths=(8, 4, 3, 2, 1), n_samples=20000, n_steps=4000, n_seeds=3, n_restarts=4,
            gm_seeds=5)
LR = 1e-2
RESTART_STRIDE = 1000  # torch seed of restart r of seed s: random_state + s + 1000 r
R2_COMPLETE = 0.85
R2_GAP = 0.2
TUNED_CORR = 0.9
GM_GAIN = 0.2
GM_SEED_SHARE = 0.8
GM_WIDTH = N_LATENTS
GM_SETTINGS = dict(representation="relu", energy=1e-3, weight_decay=1e-3,
                   representation_bias=1.0)


def truncated_generative_dgp(n_samples, *, n_latents=N_LATENTS, levels=LEVELS, sigma=SIGMA,
                             box=BOX, n_features=None, alpha=0.2, random_state=None,
                             mixing_state=0):
    """Labels cause latents, ``z | y ~ N(mu_y, sigma^2 I)`` truncated to ``[-box, box]^d``.

    **[actkit]** As :func:`actkit.synthetic.dgp.generative_dgp` (a factorial grid of class
    means: digit ``y_i`` of the label sits at an evenly spaced value in [-1, 1] on axis
    ``i``), but each latent is truncated to ``[-box, box]``, so the latents are
    independent with a *rectangular* (bounded, product) support, the condition under which
    non-negativity plus energy efficiency single out axis-aligned codes (Whittington et
    al., 2023). With ``box = 1`` the corner classes sit on the corners of the support.
    Truncation only changes class-dependent normalisers, so ``log p(y | z)`` stays affine in
    ``z`` (rank ``d``), as the linear-identifiability theorem needs.

    Parameters and returns are those of :func:`~actkit.synthetic.dgp.generative_dgp`
    (``box``: half-width of the support on every axis, ``>= 1``); the defaults are this
    experiment's (``d`` = N_LATENTS, LEVELS, SIGMA, BOX), and ``Z`` lies in ``[-box, box]``.
    """
    return generative_dgp(n_samples, n_latents=n_latents, levels=levels, sigma=sigma,
                          n_features=n_features, alpha=alpha, random_state=random_state,
                          mixing_state=mixing_state, box=box)


def bayes_cross_entropy(Z, y, info):
    """Mean cross-entropy of the Bayes-optimal classifier ``p(y | z)`` (nats).

    The optimum any encoder of ``x = g(z)`` can reach (``g`` is invertible).
    """
    levels, sigma, box = info["levels"], info["sigma"], info["box"]
    values = np.linspace(-1.0, 1.0, levels)
    digits = np.stack(np.unravel_index(y, (levels,) * Z.shape[1]), axis=1)
    logp = (-(Z[:, :, None] - values) ** 2 / (2 * sigma ** 2)
            - np.log(ndtr((box - values) / sigma) - ndtr((-box - values) / sigma)))
    logp -= logsumexp(logp, axis=2, keepdims=True)
    return float(-np.take_along_axis(logp, digits[:, :, None], axis=2).sum(1).mean())


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


def _best_of(X, y, *, n_restarts, seed, score, cache, **kwargs):
    """Train ``n_restarts`` classifiers; keep the one with the lowest training objective.

    ``score(represent)`` is evaluated for every restart only to *report* it (the JSON lists
    each restart's objective and score); the selection never looks at it. ``cache`` (a
    dict) reuses a training with identical settings (the width sweep's ``M = d`` models
    are the grandmother baseline's).
    """
    best, restarts = None, []
    for r in range(n_restarts):
        key = repr(sorted((k, v) for k, v in kwargs.items() if k != "desc")) + f"seed={seed}+{r}"
        if key not in cache:
            cache[key] = train_classifier(X, y, seed=seed + RESTART_STRIDE * r, **kwargs)
        rep, _, hist = cache[key]
        restarts.append({"objective": hist["final_objective"], "score": score(rep)})
        if best is None or hist["final_objective"] < best[1]["final_objective"]:
            best = (rep, hist, r)
    return best[0], best[1], {"chosen": best[2], "restarts": restarts}


CONVENTIONS = {
    "dgp": "[actkit] z_i = grid level of digit y_i + N(0, sigma^2) truncated to "
           "[-box, box] (rectangular support), K = levels^d classes, "
           "x = invertible leaky MLP(z)",
    "classifier": "MLP x-64-64-M (LeakyReLU 0.2) -> linear read-out, cross-entropy, "
                  "Adam (lr 1e-2) with cosine schedule [actkit]",
    "restarts": "each model is the best of n_restarts trainings by final training "
                "objective (cross-entropy + penalties); never selected by R^2 or "
                "tuning; every restart's objective and score are in extra.restarts",
    "grandmother": "width M = d; ReLU units (initial bias +1 so none starts dead), "
                   "energy 1e-3 * mean |h|^2, read-out weight decay 1e-3; baseline: "
                   "same network, linear units, no penalty",
    "linear_r2": "actkit.metrics.linear_r2(h, z) on held-out rows (its own 50/50 split)",
    "tuned": f"active unit (std > 1e-3) with max_j |corr(h, z_j)| > {TUNED_CORR}",
    "bayes_ce": "cross-entropy of the Bayes-optimal p(y | z) on the fit rows",
    "paper": "numbers not available (abstract only): claims tested qualitatively",
}


class _Data(NamedTuple):
    """The experiment's data: inputs ``X`` (n, p), latents ``Z`` (n, d), labels ``y`` (n,),
    the DGP's ``info``, the fit and evaluation row indices, and the Bayes cross-entropy
    (nats) on the fit rows."""

    X: np.ndarray
    Z: np.ndarray
    y: np.ndarray
    info: dict
    fit: np.ndarray
    ev: np.ndarray
    bayes_ce: float


def run(*, quick=False, device="cpu", random_state=0):
    """Run the experiment; returns an :class:`~actkit.synthetic._result.ExperimentResult`."""
    cfg = dict(QUICK if quick else FULL)
    t0 = time.perf_counter()
    data = _data(cfg["n_samples"], random_state)
    # one cache for every training: the width sweep's M = d models are the grandmother baseline's
    common = dict(n_classes=data.info["n_classes"], lr=LR, n_steps=cfg["n_steps"],
                  n_restarts=cfg["n_restarts"], device=device, cache={})
    rows, selection = _width_sweep(data, cfg, common, random_state)
    gm = {}
    for label, kw in (("unconstrained", {}), ("relu+energy", GM_SETTINGS)):
        gm[label], selection[label], row = _grandmother(data, cfg, common, random_state, label, kw)
        rows.append(row)
    runtime = time.perf_counter() - t0
    return ExperimentResult(
        name=NAME, title=TITLE,
        columns=["model", "regime", "linear_r2", "train_acc", "train_ce", "bayes_ce",
                 "frac_tuned", "selectivity", "n_active"],
        rows=rows, claims=_claims(rows, gm), runtime_s=runtime, plot=_plot,
        extra={"grandmother": gm, "restarts": selection},
        settings={"quick": quick, "device": str(device), "random_state": random_state,
                  "n_latents": N_LATENTS, "dgp": dict(data.info), **cfg, "lr": LR,
                  "gm_width": GM_WIDTH, "grandmother_settings": GM_SETTINGS},
        conventions=dict(CONVENTIONS))


def _data(n_samples, random_state):
    """``n_samples`` rows of :func:`truncated_generative_dgp` (mixing seeded by
    ``random_state`` too), split into fit and evaluation rows: a :class:`_Data`."""
    X, Z, y, info = truncated_generative_dgp(n_samples, random_state=random_state,
                                             mixing_state=random_state)
    fit, ev = _api.split_indices(len(X), random_state=random_state)
    return _Data(X, Z, y, info, fit, ev, bayes_cross_entropy(Z[fit], y[fit], info))


def _width_sweep(data, cfg, common, random_state):
    """Claim 1's models: for each width of ``cfg["widths"]``, ``cfg["n_seeds"]`` classifiers
    (each the best of its restarts, trained with ``common``), scored by held-out linear
    R^2. Returns ``(rows, selection)``: one table row per width, and per width the restart
    chosen for each seed."""
    X, Z, ev = data.X, data.Z, data.ev

    def r2_of(rep):
        return _api.linear_r2(rep(X[ev]), Z[ev], random_state=random_state)

    rows, selection = [], {}
    for width in cfg["widths"]:
        r2s, accs, ces, sel = [], [], [], []
        for seed in range(cfg["n_seeds"]):
            rep, hist, chosen = _best_of(X[data.fit], data.y[data.fit], width=width,
                                         seed=random_state + seed, score=r2_of,
                                         desc=f"classifier M={width}", **common)
            r2s.append(r2_of(rep))
            accs.append(hist["train_accuracy"])
            ces.append(hist["final_loss"])
            sel.append(chosen)
        selection[f"M={width}"] = sel
        rows.append({"model": f"M={width}", "width": width,
                     "regime": "complete" if width >= N_LATENTS else "undercomplete",
                     "linear_r2": float(np.mean(r2s)), "linear_r2_sd": float(np.std(r2s)),
                     "linear_r2_per_seed": [float(v) for v in r2s],
                     "train_acc": float(np.mean(accs)), "train_ce": float(np.mean(ces)),
                     "bayes_ce": data.bayes_ce})
    return rows, selection


def _grandmother(data, cfg, common, random_state, label, kw):
    """Claim 2's models of one arm (``label``; ``kw``: its training settings, ``{}`` for
    the baseline): ``cfg["gm_seeds"]`` classifiers of width M = d, tuning measured on the
    held-out rows. Returns ``(summary, selection, row)``: the arm's ``extra.grandmother``
    entry, the restart chosen per seed, and its table row."""
    X, Z, ev = data.X, data.Z, data.ev
    fracs, sels, n_act, r2s, accs, ces, sel, corr = [], [], [], [], [], [], [], None

    def tuned_of(rep):
        return tuning(rep(X[ev]), Z[ev])["fraction_tuned"]

    for seed in range(cfg["gm_seeds"]):
        rep, hist, chosen = _best_of(X[data.fit], data.y[data.fit], width=GM_WIDTH,
                                     seed=random_state + seed, score=tuned_of,
                                     desc=f"classifier {label}", **common, **kw)
        H = rep(X[ev])
        t = tuning(H, Z[ev])
        fracs.append(t["fraction_tuned"])
        sels.append(t["selectivity"])
        n_act.append(t["n_active"])
        r2s.append(_api.linear_r2(H, Z[ev], random_state=random_state))
        accs.append(hist["train_accuracy"])
        ces.append(hist["final_loss"])
        sel.append(chosen)
        corr = t["corr"] if corr is None else corr
    summary = {"fraction_tuned": float(np.mean(fracs)), "n_active": float(np.mean(n_act)),
               "fraction_tuned_per_seed": fracs, "selectivity": float(np.mean(sels)),
               "selectivity_per_seed": sels, "linear_r2": float(np.mean(r2s)),
               "corr_seed0": corr}
    row = {"model": f"M={GM_WIDTH} {label}", "width": GM_WIDTH,
           "regime": "grandmother" if kw else "baseline",
           "linear_r2": float(np.mean(r2s)), "train_acc": float(np.mean(accs)),
           "train_ce": float(np.mean(ces)), "bayes_ce": data.bayes_ce,
           "frac_tuned": float(np.mean(fracs)), "selectivity": float(np.mean(sels)),
           "n_active": float(np.mean(n_act)),
           "frac_tuned_per_seed": [float(v) for v in fracs]}
    return summary, sel, row


def _claims(rows, gm):
    """The three claims (a list of :class:`Claim`) from the table ``rows`` and the
    grandmother summaries ``gm`` (keyed ``"unconstrained"``, ``"relu+energy"``)."""
    comp = [r["linear_r2"] for r in rows if r["regime"] == "complete"]
    under = [r["linear_r2"] for r in rows if r["regime"] == "undercomplete"]
    con, unc = gm["relu+energy"], gm["unconstrained"]
    wins = [a > b for a, b in zip(con["fraction_tuned_per_seed"],
                                  unc["fraction_tuned_per_seed"])]
    per_seed = ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(con["fraction_tuned_per_seed"],
                                                           unc["fraction_tuned_per_seed"]))
    return [
        Claim("complete widths are linear in the latents", min(comp) >= R2_COMPLETE,
              f"min R^2 over M >= d={N_LATENTS}: {min(comp):.3f} (target >= {R2_COMPLETE})"),
        Claim("undercomplete widths are clearly less linear", max(under) <= min(comp) - R2_GAP,
              f"max R^2 over M < d: {max(under):.3f} vs min complete {min(comp):.3f} "
              f"(gap target >= {R2_GAP})"),
        Claim("non-negativity + energy give grandmother cells",
              con["fraction_tuned"] >= unc["fraction_tuned"] + GM_GAIN
              and con["selectivity"] > unc["selectivity"]
              and np.mean(wins) >= GM_SEED_SHARE,
              f"fraction of active units with |corr| > {TUNED_CORR} to one latent: "
              f"{con['fraction_tuned']:.2f} constrained vs {unc['fraction_tuned']:.2f} "
              f"unconstrained (gain target >= {GM_GAIN}); selectivity "
              f"{con['selectivity']:.2f} vs {unc['selectivity']:.2f}; per seed "
              f"(constrained/unconstrained) {per_seed}: constrained ahead in "
              f"{sum(wins)}/{len(wins)} seeds (target >= {GM_SEED_SHARE:.0%})"),
    ]


def _plot(result, out):
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.5))
    sweep = [r for r in result.rows if r["regime"] in ("complete", "undercomplete")]
    ax = axes[0]
    for i, r in enumerate(sweep):
        ax.plot([r["width"]] * len(r["linear_r2_per_seed"]), r["linear_r2_per_seed"], "k.",
                alpha=0.5, label="per seed" if i == 0 else None)
    ax.plot([r["width"] for r in sweep], [r["linear_r2"] for r in sweep], marker="o", label="mean")
    n_latents = result.settings["n_latents"]
    ax.axvline(n_latents - 0.5, ls="--", c="gray", label=f"complete from M = {n_latents}")
    ax.set_xlabel("representation width M")
    ax.set_ylabel("linear identifiability R^2")
    ax.set_ylim(0, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title("latents linearly decodable", fontsize=9)
    gm = result.extra["grandmother"]
    ax = axes[1]
    n = len(gm["unconstrained"]["fraction_tuned_per_seed"])
    for i, label in enumerate(("unconstrained", "relu+energy")):
        values = gm[label]["fraction_tuned_per_seed"]
        bars = ax.bar(np.arange(n) + (i - 0.5) * 0.4, values, 0.4, label=label)
        ax.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=7, padding=1)  # zeros show as 0.00
    ax.set_xticks(np.arange(n))
    ax.set_xlabel("seed")
    ax.set_ylabel("fraction of tuned units")
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("grandmother cells", fontsize=9)
    for ax, label in zip(axes[2:], ("unconstrained", "relu+energy")):
        im = ax.imshow(np.asarray(gm[label]["corr_seed0"]), vmin=0, vmax=1, cmap="viridis",
                       aspect="auto")
        ax.set_title(f"{label} (seed 0): |corr|", fontsize=9)
        ax.set_xlabel("latent")
        ax.set_ylabel("unit")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(im, ax=axes[3], label="|corr|")
    fig.suptitle(TITLE, fontsize=9)
    fig.subplots_adjust(wspace=0.45, top=0.83)
    return [save_figure(fig, out / f"{NAME}.png")]
