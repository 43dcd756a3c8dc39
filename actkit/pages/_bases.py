"""The page of a basis comparison (:func:`actkit.compare_bases`, schema ``actkit-bases/1``):
one self-contained file with the table of every basis's scores and intervals, the verdicts,
each basis's score distributions as histograms, and the best and worst units of each basis drawn
by the units page's own cards (``bases.js`` captures ``units.js``'s page and draws it once per
basis, on that basis's units in :func:`actkit.pages.units_data`'s form)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from actkit.pages._render import check_page_path, render_page, write_page
from actkit.pages._units import units_data

__all__ = ["bases_data", "bases_page", "bases_preview"]

PAGE_SCHEMA = "actkit-bases-page/1"
#: histogram bins of a score's distribution over units
BINS = 20


def _histogram(values, score):
    v = np.asarray([x for x in values if x is not None], np.float64)
    v = v[np.isfinite(v)]
    lo = 0.0 if score in ("token_purity", "label_auroc") else float(min(0.0, v.min())) if v.size else 0.0
    counts, edges = np.histogram(np.clip(v, lo, 1.0), bins=BINS, range=(lo, 1.0))
    return {"counts": counts.tolist(), "edges": [float(f"{e:.6g}") for e in edges]}


def _cards(d, b):
    """A basis's best and worst units as a unit report's data (the units page's input)."""
    labels = None
    if b.get("labels") is not None:
        labels = {"names": d.get("labels") or [], **b["labels"]}
    units = [dict(u, rank=i) for i, u in enumerate(list(b.get("best") or []) + list(b.get("worst") or []))]
    report = {"store": d.get("store"), "layer": d.get("layer"),
              "basis": {"kind": b["kind"], "source": b["source"], "n_units": b["n_units"]},
              "n_rows": d.get("n_rows"), "n_samples": d.get("n_samples"), "k": d.get("k"), "context": None,
              "order": "the five best, then the five worst, by token purity and token R^2",
              "flipped": b.get("flipped") or [], "dead": b.get("dead") or [], "inputs": d.get("inputs") or {},
              "logit_lens": False, "labels": labels, "matches": None, "units": units}
    return units_data(report, title=b["name"])


def bases_data(d: dict, *, title: str = "", subtitle: str = "") -> dict:
    """The page's form of a comparison's ``to_dict()``: its table and verdicts as they are,
    per basis the histogram of each score over its units and its cards' data."""
    bases = []
    for b in d.get("bases") or []:
        hist = {s: _histogram(b["units"].get(s) or [], s) for s in b.get("scores") or {}}
        bases.append({k: v for k, v in b.items() if k not in ("units", "best", "worst")} |
                     {"hist": hist, "cards": _cards(d, b)})
    head = {k: v for k, v in d.items() if k not in ("bases", "inputs", "split")}
    split = {k: v for k, v in (d.get("split") or {}).items() if k != "heldout_samples"}
    return {"schema": PAGE_SCHEMA, "title": title, "subtitle": subtitle, "report": head, "split": split,
            "bases": bases, "verdicts": [{"pair": f"{v['a']} vs {v['b']}", "text": v["text"]}
                                         for v in d.get("verdicts") or []]}


def _title(d):
    title = f"actkit bases: {len(d.get('bases') or [])} bases of {d.get('layer')} ({Path(str(d.get('store'))).name})"
    sub = (f"{d.get('n_rows', 0):,} rows, top {d.get('k')} rows per unit, {d.get('bootstrap')} resamples of input "
           f"samples, {100 * float(d.get('confidence') or 0):g}% {d.get('interval')} intervals")
    return title, sub


def bases_page(comparison, path, *, title: str | None = None, overwrite: bool = False) -> Path:
    """Write the page of a :class:`~actkit.BasisComparison` (or its ``to_dict()``)."""
    check_page_path(path, overwrite=overwrite, flag="path")
    d = comparison.to_dict() if hasattr(comparison, "to_dict") else dict(comparison)
    t, sub = _title(d)
    return write_page(path, "bases", bases_data(d, title=title or t, subtitle=sub), title or t, overwrite=overwrite,
                      uses=("units",))


def bases_preview(comparison, *, height: int = 720) -> str:
    """The page in an ``<iframe srcdoc>`` (a notebook's view; the page's CSP and escaping hold)."""
    d = comparison.to_dict() if hasattr(comparison, "to_dict") else dict(comparison)
    t, sub = _title(d)
    page = render_page("bases", bases_data(d, title=t, subtitle=sub), t, uses=("units",))
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
            f'style="width:100%;height:{int(height)}px;border:1px solid #ccc"></iframe>')
