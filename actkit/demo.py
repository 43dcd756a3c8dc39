"""The demo pipeline: Nelson et al.'s Table 1 protocol on pairs of checkpoints.

For each pair of checkpoints (by default the two training seeds of each family in the
shipped zoo, :mod:`actkit.zoo`): extract one layer of both on the same inputs, fit every
alignment (permutation, rigid, linear, and whitening + FastICA on each side alone) on 80%
of the input samples, and report the held-out errors, the ICA efficiency and linear CKA
beside the paper's Table 1 numbers for real checkpoints.

``actkit demo`` runs :func:`run_demo`; ``actkit reproduce table1`` reuses it. To run the
same protocol on hub checkpoints, give :func:`run_demo` your own :class:`DemoPair` list
(see ``docs/zoo.md``), e.g.::

    DemoPair("Pythia-160M seed0->seed1", "EleutherAI/pythia-160m",
             "EleutherAI/pythia-160m-seed1", inputs="texts.txt",
             layer="final_hidden", pool="none", max_length=64,
             paper=PAPER_TABLE1["pythia"])
"""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import actkit
from actkit import zoo
from actkit._atomic import write_json_atomic
from actkit.alignment import ica_summary
from actkit.errors import ActkitError
from actkit.report import format_table as _table, library_versions, pyplot

__all__ = ["DemoPair", "PAPER_TABLE1", "default_out", "zoo_pairs", "run_demo", "format_table", "plot_demo"]

#: Nelson et al., Table 1: held-out l2 error / diameter for real checkpoint pairs.
PAPER_TABLE1 = {
    "pythia": {"pair": "Pythia-160M-0 -> Pythia-160M-1", "permutation": 0.219, "rigid": 0.150,
               "linear": 0.131, "ica": 0.202, "ica_efficiency": 0.25},
    "mae": {"pair": "MAE-timm -> MAE-original", "permutation": 0.197, "rigid": 0.109,
            "linear": 0.036, "ica": 0.145, "ica_efficiency": 0.59},
    "resnet": {"pair": "ResNet-18-fc-1 -> ResNet-18-fc-2", "permutation": 0.382, "rigid": 0.206,
               "linear": 0.175, "ica": 0.312, "ica_efficiency": 0.40},
    # the paper has no plain-ViT row; its remaining row is the nearest (two vision encoders)
    "vit": {"pair": "CheXpert-small -> CheXpert-base", "permutation": 0.218, "rigid": 0.104,
            "linear": 0.048, "ica": 0.175, "ica_efficiency": 0.38},
}

COLUMNS = ("permutation", "rigid", "linear", "ica", "ica_efficiency", "linear_cka")
# with each row's ICA numbers: their spread over the restarts, the components fitted and
# matched, the reproducibility check (ica_identifiable), the paper's single fit
# (ica_classic +- SE) and whether every FastICA fit converged (the table marks one that did
# not); and the chance levels of CKA and mean CCA (printed in brackets)
SPREAD_COLUMNS = ("ica_std", "ica_efficiency_std", "ica_identified", "ica_converged",
                  "ica_n_components", "ica_matched", "ica_shared_halves", "ica_self_floor",
                  "ica_identifiable", "ica_classic", "ica_classic_se", "ica_classic_efficiency",
                  "ica_classic_efficiency_se", "linear_cka_chance", "mean_cca_chance")
# the FastICA settings of each form (full, quick): every fit converges within max_iter on
# the zoo pairs; the full form keeps 5000 rows per side (>= ica_min_rows(k) for k <= 100),
# so every zoo row has >= 50 FastICA rows per component: Pythia 79, MAE and ViT 52,
# ResNet 51 (its 1640 fit rows support 32 of 64 components: compare's rows rule fits
# those, k'). 10000 rows cost twice the FastICA time (the demo took 2 min 28 s under load)
DEMO_ICA = {"ica_max_iter": 1000, "ica_max_rows": 5000}
QUICK_ICA = {"ica_max_iter": 1000, "ica_max_rows": 2000}
# quick mode: (texts, images) per model. Images are cheap to extract through the tiny
# models; 512 keeps >= ~20 FastICA fit rows per component on every zoo row (run_demo).
# 200 texts give Pythia-tiny 8,978 token rows, so its FastICA sample is the full 2000 rows
# (40 components by the rows rule); 32 texts gave 1,184 fit rows (23 components) and an ICA
# error above the permutation's (0.625 vs 0.601), 100 texts 10% and 200 texts 22% efficiency
_QUICK_SAMPLES = (200, 512)


@dataclass
class DemoPair:
    """One row of the table: two checkpoints, one layer, the shared inputs.

    Parameters
    ----------
    name : str
        Row label, e.g. ``"Pythia-tiny seed0->seed1"``.
    model_a, model_b : str
        Anything ``actkit.extract`` accepts (hub id, local directory, ``timm:...``); A is
        mapped onto B.
    inputs : str
        Inputs both models see (``.txt``, ``.jsonl``, image folder, ``.npy``).
    layer : str
        Module path extracted from both (both models must have it).
    pool : {"none", "mean", "last", "cls"}
        Row pooling (see ``actkit.extract``).
    max_length : int or None
        Text truncation in tokens.
    paper : dict or None
        The paper's numbers to print beside ours (keys of :data:`COLUMNS` and ``pair``).
    layer_b : str or None
        Layer of model B when its name differs from ``layer``.
    """

    name: str
    model_a: str
    model_b: str
    inputs: str
    layer: str
    pool: str = "none"
    max_length: int | None = None
    paper: dict | None = None
    layer_b: str | None = None
    extract_kwargs: dict = field(default_factory=dict)


def zoo_pairs() -> list[DemoPair]:
    """The default rows: seed 0 -> seed 1 of each zoo family, on the shipped inputs.

    ====================  ===================  ==========  =====================================
    row                   layer                rows        why
    ====================  ===================  ==========  =====================================
    Pythia-tiny           ``final_hidden``     per token   last-layer (after final norm)
    MAE-tiny              ``encoder.layer.3``  per patch   last encoder block, every patch
    ResNet-tiny           ``layer3``           per position  2x2 positions x 512 images (*)
    ViT-tiny              ``encoder.layer.3``  per token   last encoder block, CLS + patches
    ====================  ===================  ==========  =====================================

    (*) The paper compares ResNet-18 "fc" features; the zoo's pooled ``layer4`` features
    (128-d) come with only 512 held-out images, too few rows for a 128-component ICA
    (measured: ICA error 0.53 > permutation 0.47), so the row uses ``layer3``'s 2048 rows.
    Their 1640 fit rows support 32 of its 64 components by compare's rows rule
    (``ica_min_rows``), so ICA fits the leading 32 whitened components (k') and maps the
    rest as the permutation maps it; ``layer2`` (8192 rows of 32) was tried instead and
    gave a less reproducible fit (the restart halves shared 25 of 32 sources).
    """
    text, images = str(zoo.text_inputs()), str(zoo.image_inputs())
    return [
        DemoPair("Pythia-tiny seed0->seed1", zoo.model_spec("pythia-tiny-seed0"),
                 zoo.model_spec("pythia-tiny-seed1"), text, "final_hidden", "none", 64,
                 PAPER_TABLE1["pythia"]),
        DemoPair("MAE-tiny seed0->seed1", zoo.model_spec("mae-tiny-seed0"),
                 zoo.model_spec("mae-tiny-seed1"), images, "encoder.layer.3", "none", None,
                 PAPER_TABLE1["mae"]),
        DemoPair("ResNet-tiny seed0->seed1", zoo.model_spec("resnet-tiny-seed0"),
                 zoo.model_spec("resnet-tiny-seed1"), images, "layer3", "none", None,
                 PAPER_TABLE1["resnet"]),
        DemoPair("ViT-tiny seed0->seed1", zoo.model_spec("vit-tiny-seed0"),
                 zoo.model_spec("vit-tiny-seed1"), images, "encoder.layer.3", "none", None,
                 PAPER_TABLE1["vit"]),
    ]


def _store_name(model: str, layer: str, pool: str, tag: str) -> str:
    base = model.rstrip("/").replace("timm:local-dir:", "").replace("timm:", "timm-")
    base = Path(base).name if os.sep in base or "/" in base else base
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{base}.{layer}.{pool}")
    return f"{safe}{tag}.h5"


def _extract(model, pair: DemoPair, layer: str, stores: Path, tag: str, max_samples,
             device, progress) -> Path:
    out = stores / _store_name(model, layer, pair.pool, tag)
    return actkit.extract(model, pair.inputs, out, layers=[layer], pool=pair.pool,
                          max_length=pair.max_length, max_samples=max_samples, device=device,
                          progress=progress, **pair.extract_kwargs)


def default_out(quick: bool = False) -> str:
    """The default output folder: ``actkit-demo``, ``actkit-demo-quick`` for the quick form
    (so the two forms never write the same ``report.json``)."""
    return "actkit-demo-quick" if quick else "actkit-demo"


def _check_report(path: Path, quick: bool) -> None:
    """Refuse, before any work, to overwrite ``path`` unless it is this form's earlier report."""
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
        known = isinstance(old, dict) and str(old.get("title", "")).startswith("Nelson et al. Table 1")
    except (OSError, UnicodeDecodeError, ValueError):
        known = False
    if not known:
        raise ActkitError(f"{path} exists and is not an actkit demo report; give another --out")
    if bool(old.get("quick")) != bool(quick):
        mine, theirs = ("quick", "full") if quick else ("full", "quick")
        raise ActkitError(f"{path} holds the {theirs} demo's report; the {mine} demo would overwrite "
                          f"it: give another --out (the {mine} demo's default is ./{default_out(quick)})")


def run_demo(out: str | os.PathLike | None = None, *, quick: bool = False,
             pairs: list[DemoPair] | None = None, device: str = "cpu",
             random_state: int = 0, progress: bool | None = None, log=print,
             ica_restarts: int = 5, ica_seed: int = 0) -> dict:
    """Run the Table-1 protocol on pairs of checkpoints and write stores, JSON and a figure.

    Parameters
    ----------
    out : path, optional
        Output folder: ``stores/`` (one HDF5 store per model and layer), ``report.json``,
        ``table1.png``. Default :func:`default_out`: ``actkit-demo``, or ``actkit-demo-quick``
        with ``quick=True``. Rerunning reuses finished stores (extraction is a no-op then) and
        replaces the report; a folder whose ``report.json`` is the other form's (or not a demo
        report) raises :class:`~actkit.errors.ActkitError` before any work.
    quick : bool, default=False
        Reduced form for tests: 200 texts / 512 images per model and at most 2000 rows per
        side for FastICA (``QUICK_ICA``; the full form: ``DEMO_ICA``, 5000 rows), so the
        numbers are rougher. Both allow 1000 FastICA iterations; a row whose fits did not
        converge is marked ``*`` in the table and ``ours["ica_converged"] = False`` in the
        JSON. The image count keeps about 20
        or more FastICA fit rows per component on every zoo row: ResNet-tiny's ``layer3``
        has 4 rows per image, so 512 images give 1638 fit rows for 64 components (64 images
        gave 204, and FastICA then found sources that do not match across the seeds).
    pairs : list of DemoPair, optional
        Rows of the table; default :func:`zoo_pairs` (the shipped zoo, offline).
    device : str, default="cpu"
        Extraction device.
    random_state : int, default=0
        Seed of the fit/eval split.
    progress : bool or None
        Progress bars (None: only on a terminal).
    log : callable
        Receives one line of text per step (``print`` by default; ``None`` for silence).
    ica_restarts : int, default=5
        FastICA fits per side (see :func:`actkit.compare`: the best-contrast fit of each
        side is kept; the spread over the restarts is the ``±``).
    ica_seed : int, default=0
        Seed of the first FastICA start.

    Returns
    -------
    report : dict
        ``{"rows": [{"name", "model_a", "model_b", "layer", "pool", "n_rows", "n_samples",
        "dims", "ours": {column: value}, "paper": {...}, "ordering_holds": bool, ...}],
        "quick", "seconds", "files": {...}}``; also written to ``out/report.json``.
    """
    log = log or (lambda *_: None)
    t0 = time.perf_counter()
    out = Path(default_out(quick) if out is None else out)
    _check_report(out / "report.json", quick)
    try:
        (out / "stores").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ActkitError(f"cannot create output folder {out}: {exc.strerror or exc}") from None
    pairs = zoo_pairs() if pairs is None else list(pairs)
    if not pairs:
        raise ActkitError("no pairs to compare")
    tag = ".quick" if quick else ""
    text_samples, image_samples = _QUICK_SAMPLES if quick else (None, None)
    show = progress if progress is not None else None

    rows = []
    for i, pair in enumerate(pairs, 1):
        is_text = str(pair.inputs).endswith((".txt", ".jsonl"))
        max_samples = text_samples if is_text else image_samples
        log(f"[{i}/{len(pairs)}] {pair.name}: extracting {pair.layer} ({pair.pool})")
        t_pair = time.perf_counter()
        path_a = _extract(pair.model_a, pair, pair.layer, out / "stores", tag, max_samples,
                          device, show is not False)
        layer_b = pair.layer_b or pair.layer
        path_b = _extract(pair.model_b, pair, layer_b, out / "stores", tag, max_samples,
                          device, show is not False)
        A = actkit.open_store(path_a)[pair.layer]
        B = actkit.open_store(path_b)[layer_b]
        log(f"[{i}/{len(pairs)}] {pair.name}: {A.shape[0]} rows, {A.shape[1]} -> {B.shape[1]} "
            "features; fitting permutation, rigid, linear, whitening + ICA")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # the result's notes, logged below
            res = actkit.compare(A, B, random_state=random_state, progress=show,
                                 ica_restarts=ica_restarts, ica_seed=ica_seed,
                                 **(QUICK_ICA if quick else DEMO_ICA))
        d = res.to_dict()
        notes = list(res.notes)
        for note in notes:
            log(f"[{i}/{len(pairs)}] {pair.name}: note: {note}")

        for line in ica_summary([res], [pair.layer]):
            log(f"[{i}/{len(pairs)}] {pair.name}: {line}")
        ours = {c: d.get(c) for c in COLUMNS + SPREAD_COLUMNS}
        errs = [ours[m] for m in ("permutation", "ica", "rigid", "linear")]
        ordering = all(e is not None for e in errs) and all(
            errs[k] >= errs[k + 1] - 1e-12 for k in range(3))
        rows.append({
            "name": pair.name, "model_a": pair.model_a, "model_b": pair.model_b,
            "inputs": str(pair.inputs), "layer": pair.layer, "layer_b": layer_b,
            "pool": pair.pool, "n_rows": int(A.shape[0]), "dims": [int(A.shape[1]), int(B.shape[1])],
            "stores": [str(path_a), str(path_b)], "ours": ours, "paper": pair.paper,
            "ordering_holds": bool(ordering),
            "mean_cca": d.get("mean_cca"), "linear_cka_debiased": d.get("linear_cka_debiased"),
            "ica_matched_corr_mean": d.get("ica_matched_corr_mean"),
            "compare": d, "notes": notes, "seconds": round(time.perf_counter() - t_pair, 1),
        })

    report = {
        "title": "Nelson et al. Table 1 protocol: held-out l2 error / diam(B) after each alignment",
        "quick": bool(quick), "random_state": random_state, "ica_seed": ica_seed,
        "ica_restarts": ica_restarts, "rows": rows,
        "columns": list(COLUMNS),
        "conventions": {k: v for k, v in rows[0]["compare"].items() if k.startswith("convention")},
        "seconds": round(time.perf_counter() - t0, 1),
        "versions": {**library_versions(), "actkit": actkit.__version__},
    }
    fig_path = out / "table1.png"
    plot_demo(report, fig_path)
    json_path = out / "report.json"
    report["files"] = {"report": str(json_path), "figure": str(fig_path),
                       "stores": str(out / "stores")}
    write_json_atomic(json_path, report, indent=1)
    return report


def _fmt(x, pct=False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:.0f}%" if pct else f"{x:.3f}"


def format_table(report: dict) -> str:
    """The report as a Table-1-style text table, the paper's row beneath each of ours.

    Columns (``actkit.report.format_table``): permutation, rigid, linear (held-out l2 error /
    diam(B)), ICA with its efficiency, linear CKA and mean CCA (ours only).
    """
    results, labels = [], []
    for r in report["rows"]:
        results.append({**r["ours"], "mean_cca": r.get("mean_cca")})
        labels.append(r["name"])
        if r.get("paper"):
            results.append({k: v for k, v in r["paper"].items() if k != "pair"})
            labels.append(f"  paper: {r['paper'].get('pair', '')}")
    return _table(results, labels)


def plot_demo(report: dict, path: str | os.PathLike) -> Path:
    """Bar chart: per row, the four alignment errors, ours beside the paper's (PNG)."""
    plt = pyplot()
    rows = report["rows"]
    methods = ("permutation", "rigid", "linear", "ica")
    fig, axes = plt.subplots(1, len(rows), figsize=(3.2 * len(rows), 3.2), squeeze=False)
    x = np.arange(len(methods))
    for ax, r in zip(axes[0], rows):
        ours = [r["ours"][m] if r["ours"][m] is not None else np.nan for m in methods]
        ax.bar(x - 0.2, ours, 0.4, label="actkit (this run)", color="tab:blue")
        if r.get("paper"):
            ax.bar(x + 0.2, [r["paper"][m] for m in methods], 0.4, label="paper, Table 1",
                   color="tab:gray")
        ax.set_xticks(x, ["perm", "rigid", "linear", "ica"])
        eff = r["ours"]["ica_efficiency"]
        if r["ours"].get("ica_identifiable") is False:   # the table prints no digits of it
            ax.patches[3].set_hatch("//")
            ax.patches[3].set_alpha(0.5)
            ax.set_title(f"{r['name']}\nICA: not identifiable (one optimum shown)", fontsize=9)
        else:
            ax.set_title(f"{r['name']}\nICA eff. {_fmt(eff, True)}", fontsize=9)
        ax.set_ylabel("held-out l2 error / diam(B)")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
