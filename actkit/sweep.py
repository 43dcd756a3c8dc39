"""Compare across training revisions: how a representation converges over training.

:func:`sweep` (``actkit sweep``) extracts the same layers of a model at several training
revisions (hub revisions such as Pythia's ``step1000``, or local checkpoint folders) on the
same inputs, once each into a work folder, and compares

* ``against="final"``: every revision with the last one (the largest step);
* ``against="previous"``: every revision with the one before it;
* ``against=MODEL2``: the model with a second model (e.g. another seed) at each revision,

with every method of :func:`actkit.compare`. A store already complete for the same request
is reused, so a rerun, or a sweep with one more revision, extracts only what is missing. The
result (``sweep.json``) keeps every numeric key of each comparison's ``to_dict()``;
:func:`plot_sweep` draws each metric against the training step, with the ICA error's spread
over FastICA restarts (``ica_std``) as a band. See ``docs/sweep.md``.

Like :mod:`actkit.pipeline`, this module sits above extraction and analysis.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Sequence

from tqdm.auto import tqdm

from actkit._atomic import save_figure_atomic
from actkit.alignment import compare
from actkit.errors import ActkitError, InputError
from actkit.report import pyplot
from actkit.store import open_store

__all__ = ["sweep", "plot_sweep", "step_of", "check_revisions"]

_STEP = re.compile(r"(?:step|checkpoint|ckpt|iter)[-_]?(\d+)$", re.IGNORECASE)


def step_of(name: str) -> int | None:
    """The training step a revision or folder name says (``step1000``, ``checkpoint-500``,
    ``step_20``), else None."""
    m = _STEP.search(Path(str(name).rstrip("/")).name)
    return int(m.group(1)) if m else None


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))[-80:]


def _points(model, revisions, checkpoints, steps):
    """``[(label, step, model, revision)]`` in training order."""
    if bool(revisions) == bool(checkpoints):
        raise ActkitError("give the revisions to sweep: --revisions REV1,REV2,... (hub) or --checkpoints "
                          "DIR1,DIR2,... (local folders)")
    names = list(revisions or checkpoints)
    if steps is not None:
        steps = [int(s) for s in steps]
        if len(steps) != len(names):
            raise ActkitError(f"--steps has {len(steps)} numbers for {len(names)} revisions")
    else:
        steps = [step_of(n) for n in names]
        missing = [n for n, s in zip(names, steps) if s is None]
        if missing:
            raise ActkitError(f"cannot tell the training step of {', '.join(missing)}; give --steps N1,N2,...")
    if len(set(steps)) != len(steps):
        raise ActkitError(f"two revisions have the same step ({steps})")
    if revisions:
        if not model:
            raise ActkitError("--revisions needs MODEL (the hub id or folder they are revisions of)")
        pts = [(str(r), s, str(model), str(r)) for r, s in zip(names, steps)]
    else:
        for d in names:
            if not Path(d).is_dir():
                raise InputError(f"checkpoint folder not found: {d}")
        pts = [(Path(d).resolve().name, s, str(d), None) for d, s in zip(names, steps)]
        if len({p[0] for p in pts}) != len(pts):
            raise ActkitError("two checkpoint folders have the same name; their stores would collide in --work-dir")
    if len(pts) < 2:
        raise ActkitError("a sweep needs at least two revisions")
    return sorted(pts, key=lambda p: p[1])


def check_revisions(model: str, revisions: Sequence[str]) -> None:
    """Offline (``HF_HUB_OFFLINE``), refuse at once, in one line, a revision that the local
    Hugging Face cache does not hold (before any extraction); online the hub answers."""
    if Path(model).is_dir():
        raise ActkitError(f"{model} is a local folder, which has no hub revisions; sweep local checkpoints "
                          "with --checkpoints DIR1,DIR2,...")
    from huggingface_hub import constants, try_to_load_from_cache  # huggingface_hub: not a dependency of ours (it comes with transformers); only hub revisions need it

    if not constants.HF_HUB_OFFLINE:
        return
    missing = [r for r in revisions if not isinstance(try_to_load_from_cache(model, "config.json", revision=r), str)]
    if missing:
        refs = Path(constants.HF_HUB_CACHE) / f"models--{model.replace('/', '--')}" / "refs"
        have = sorted(p.name for p in refs.iterdir()) if refs.is_dir() else []
        raise ActkitError(f"revision {', '.join(missing)} of {model} is not in the local Hugging Face cache "
                          f"({'cached: ' + ', '.join(have) if have else 'no revision cached'}) and HF_HUB_OFFLINE "
                          "is set; run once online to cache it")


def _pairs(points, against):
    """``[(point, reference point)]`` to compare."""
    if against == "final":
        return [(p, points[-1]) for p in points[:-1]]
    if against == "previous":
        return [(points[i], points[i - 1]) for i in range(1, len(points))]
    return None


def _numeric(d: dict) -> dict:
    """Every number (None for NaN) and flag (``ica_identifiable``, ``ica_converged``,
    ``<method>_fit_rows_ok``: what compare's table marks) of a result's ``to_dict()``."""
    out = {}
    for k, v in d.items():
        if isinstance(v, (bool, int, float)) or v is None:
            out[k] = None if isinstance(v, float) and math.isnan(v) else v
    return out


def sweep(model: str | None = None, inputs=None, *, layers: Sequence[str], revisions: Sequence[str] | None = None,
          checkpoints: Sequence[str] | None = None, steps: Sequence[int] | None = None, against: str = "final",
          work_dir, extract_kwargs: dict | None = None, progress: bool = True, echo=None,
          **compare_kwargs) -> dict:
    """Extract ``layers`` at every revision once (into ``work_dir``) and compare them.

    Parameters
    ----------
    model : str, optional
        Hub id or folder; required with ``revisions``.
    inputs : path
        The inputs every revision is run on (rows pair up across the stores).
    layers : sequence of str
    revisions : sequence of str, optional
        Hub revisions (branches, tags, commits) of ``model``, e.g. ``["step1000", "step143000"]``.
    checkpoints : sequence of path, optional
        Local checkpoint folders instead of ``revisions``.
    steps : sequence of int, optional
        Training step of each revision / folder (default: read from names like ``step1000``,
        ``checkpoint-500``).
    against : {"final", "previous"} or str
        Reference of each comparison; any other value is a second model, compared with
        ``model`` at each revision (needs ``revisions``).
    work_dir : path
        Where the stores are kept (``<model>@<revision>.h5``, ``<checkpoint folder name>.h5``);
        complete ones are reused.
    extract_kwargs : dict, optional
        Passed to :func:`actkit.extract` (``pool``, ``batch_size``, ``device``, ``max_samples``, ...).
    progress : bool, default True
        A progress bar over the revisions.
    echo : callable, optional
        Called with one line per extraction (the CLI prints them).
    **compare_kwargs
        Passed to :func:`actkit.compare` (``methods``, ``random_state``, ``ica_restarts``, ...).

    Returns
    -------
    dict
        ``{"model", "against", "inputs", "layers", "stores": [{label, step, model, revision,
        path, extracted}], "comparisons": [{step, revision, reference, reference_step, layer,
        <every numeric and boolean key of CompareResult.to_dict()>}]}`` (what ``sweep.json``
        holds; ``actkit sweep`` prints ``comparisons`` with compare's table).
    """
    from actkit.extractors import extract as extract_mod  # torch, transformers: only when a sweep runs

    if not layers:
        raise ActkitError("a sweep needs --layers L1,L2,... (see `actkit layers MODEL`)")
    points = _points(model, revisions, checkpoints, steps)
    pairs = _pairs(points, against)
    if pairs is None and not revisions:
        raise ActkitError("--against MODEL2 compares two models at the same hub revisions: use it with --revisions")
    if revisions:
        for m in [model] + ([against] if pairs is None else []):
            check_revisions(m, revisions)
    folder = Path(work_dir)
    folder.mkdir(parents=True, exist_ok=True)
    kw = dict(extract_kwargs or {})
    kw.setdefault("progress", False)
    compare_kwargs.setdefault("progress", False)  # one bar: the sweep's
    stores: dict = {}

    def store_of(point, which_model=None):
        label, step, mdl, rev = point
        mdl = which_model or mdl
        key = (mdl, label)
        if key not in stores:
            # hub revisions: <model>@<revision>.h5; checkpoint folders: <folder name>.h5
            out = folder / (f"{_safe(mdl)}@{_safe(label)}.h5" if rev else f"{_safe(label)}.h5")
            if echo is not None and not out.exists():
                echo(f"extracting {mdl}" + (f" @ {rev}" if rev else "") + f" -> {out}")
            extract_mod.extract(mdl, inputs, out, layers=list(layers), revision=rev, **kw)
            stores[key] = {"label": label, "step": step, "model": mdl, "revision": rev, "path": str(out),
                           "extracted": extract_mod.LAST_RUN.get("outcome") != "complete"}
        return stores[key]["path"]

    if pairs is None:
        pairs = [(p, p) for p in points]
    comparisons = []
    bar = tqdm(total=len(points), desc="sweep", unit="revision", disable=None if progress else True, leave=False)
    done = set()
    try:
        for point, ref in pairs:
            path_a = store_of(point)
            path_b = store_of(ref, against if ref is point else None)
            with open_store(path_a) as sa, open_store(path_b) as sb:
                for layer in layers:
                    res = compare(sa[layer], sb[layer], **compare_kwargs)
                    comparisons.append({"step": point[1], "revision": point[0],
                                        "reference": ref[0] if ref is not point else against,
                                        "reference_step": ref[1], "layer": layer, **_numeric(res.to_dict())})
            for p in (point, ref):
                if p[0] not in done:
                    done.add(p[0])
                    bar.update(1)
    finally:
        bar.close()
    return {"model": model, "against": against, "inputs": None if inputs is None else str(inputs),
            "layers": list(layers), "stores": sorted(stores.values(), key=lambda s: (s["step"], s["model"])),
            "comparisons": comparisons}


def plot_sweep(result: dict, path, *, metrics: Sequence[str] | None = None) -> Path:
    """A line plot of each metric against the training step, one panel per metric group and
    one row per layer: the alignment errors (the ICA error with its restart spread
    ``ica +- ica_std`` as a band, its largest value in the legend, since it can be thinner
    than the line), the similarities, and the ICA efficiency (with its band and a dashed
    line at 1, where ICA is as close as the rigid map, and a dotted one at 0, as close as the
    permutation). Few revisions: every step is a tick.

    Parameters
    ----------
    result : dict
        What :func:`sweep` returns (or ``sweep.json``).
    path : path
        The PNG to write.
    metrics : sequence of str, optional
        Keys to draw (default: the errors of the four methods, ``linear_cka``, ``mean_cca``
        and ``ica_efficiency``, those present).
    """
    plt = pyplot()
    rows = result["comparisons"]
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    present = [k for k in (metrics or ("permutation", "rigid", "linear", "ica", "linear_cka", "mean_cca",
                                        "ica_efficiency"))
               if any(r.get(k) is not None for r in rows)]
    groups = [("held-out error / diam(B)", [k for k in present if k in ("permutation", "rigid", "linear", "ica")]),
              ("similarity", [k for k in present if k in ("linear_cka", "mean_cca", "linear_cka_debiased")]),
              ("ICA efficiency", [k for k in present if k == "ica_efficiency"])]
    groups += [(k, [k]) for k in present if not any(k in g for _, g in groups)]
    groups = [g for g in groups if g[1]]
    ylabels = {"held-out error / diam(B)": "error (lower: closer)", "similarity": "similarity (higher: closer)",
               "ICA efficiency": "(perm - ica) / (perm - rigid)\n1 (dashed): as rigid, 0 (dotted): as perm"}
    bands = {"ica": "ica_std", "ica_efficiency": "ica_efficiency_std"}
    fig, axes = plt.subplots(len(layers), len(groups), figsize=(4.6 * len(groups), 3.4 * len(layers)),
                             squeeze=False)
    against = result.get("against")
    for i, layer in enumerate(layers):
        mine = sorted((r for r in rows if r["layer"] == layer), key=lambda r: r["step"])
        steps = [r["step"] for r in mine]
        for j, (title, keys) in enumerate(groups):
            ax = axes[i][j]
            for k in keys:
                ys = [r.get(k) for r in mine]
                vals = [math.nan if y is None else y for y in ys]
                line, = ax.plot(steps, vals, marker="o", label=k)
                sd = [r.get(bands[k]) for r in mine] if k in bands else []
                if any(x is not None for x in sd):  # the spread over FastICA restarts, as a band
                    sd = [x or 0.0 for x in sd]
                    ax.fill_between(steps, [v - s for v, s in zip(vals, sd)], [v + s for v, s in zip(vals, sd)],
                                    color=line.get_color(), alpha=0.25,
                                    label=f"{'ica' if k == 'ica' else ''} ± {bands[k]} (largest {max(sd):.2g})".strip())
            if title == "ICA efficiency":  # the scale's two landmarks
                ax.axhline(1.0, color="0.3", ls="--", lw=0.8)
                ax.axhline(0.0, color="0.3", ls=":", lw=0.8)
            if against == "final" and mine:  # where the reference sits on the step axis
                ax.axvline(mine[0]["reference_step"], color="0.5", ls=":", lw=1)
            ticks = sorted(set(steps) | ({mine[0]["reference_step"]} if against == "final" and mine else set()))
            if steps and min(steps) > 0 and max(r["reference_step"] for r in mine) / min(steps) >= 20:
                ax.set_xscale("log")  # checkpoints are usually log-spaced (Pythia: 1, 2, 4, ..., 1000, 2000, ...)
            if 0 < len(ticks) <= 8:  # few revisions: tick each step (the final one too)
                ax.set_xticks(ticks, [str(t) for t in ticks], fontsize=8)
                ax.minorticks_off()
            ax.set_title(f"{layer}: {title}", fontsize=9)
            ax.set_xlabel("training step" + (" (dotted: the final revision)" if against == "final" else ""))
            ax.set_ylabel(ylabels.get(title, title), fontsize=8)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    what = {"final": "each revision vs the final one", "previous": "each revision vs the previous one"}.get(
        against, f"vs {against} at the same revision")
    ref = {r["reference"] for r in rows} if against == "final" else set()
    fig.suptitle(f"{result.get('model') or 'checkpoints'}: {what}" + (f" ({', '.join(sorted(ref))})" if ref else "")
                 + "; band: ica ± ica_std over FastICA restarts", fontsize=10)
    fig.tight_layout()

    path = Path(path)
    save_figure_atomic(fig, path, dpi=110)  # beside, then renamed into place; closes the figure
    return path

