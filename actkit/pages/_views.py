"""The data each page shows, taken from a result's own views (``to_dict()``, the rows of
``to_frame()``) and the figures :mod:`actkit.report` draws: nothing is computed twice."""

from __future__ import annotations

import base64
import io

import numpy as np

from actkit.alignment import row_labels
from actkit.evaluation import LABELS, METRICS, TITLES, VERSIONS
from actkit.report import plot_errors, plot_postprocessing, pyplot, source_cut

__all__ = ["compare_data", "evaluate_data", "figure_uri", "layer_map_data"]

#: ICA sources drawn per matrix at most (the report's figure cuts at the same size)
MAX_SOURCES = 64


def figure_uri(fig, dpi: int = 110) -> str:
    """A matplotlib figure as a ``data:image/png;base64,...`` URI (the figure is closed)."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        pyplot().close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _details(d: dict) -> dict:
    """Sizes, settings and timings of a result (its flat scalars that are not measures)."""
    skip = {"notes", "measures"}
    return {k: v for k, v in d.items() if not k.startswith("convention") and k not in skip
            and not isinstance(v, (list, dict))}


#: what the compare table prints for an ICA error whose restarts disagree (``ica_identifiable``
#: false; ``actkit.alignment``'s table cell): the page withholds the digits as the table does
WITHHELD = "not identifiable\u2021"
#: the rows of such a pair that carry no digit on the page
ICA_ROWS = ("ica", "ica_efficiency")


def _rows(result, d) -> list:
    """The measure rows as the page shows them: an ICA error and efficiency that are not
    identifiable keep no number (``shown`` says why), as in the terminal's table."""
    rows = result.measure_rows()
    if d.get("ica_identifiable") is not False:
        return rows
    out = []
    for r in rows:
        if r["measure"] in ICA_ROWS:
            r = {**{k: (None if k not in ("measure", "kind", "note") else v) for k, v in r.items()}, "shown": WITHHELD}
        out.append(r)
    return out


def _pair(result, label) -> dict:
    d = result.to_dict()
    names = {r["measure"] for r in result.measure_rows()}
    resampled = ("_p", "_ci_low", "_ci_high", "_null_mean", "_null_sd")
    details = {k: v for k, v in _details(d).items()
               if k not in names and not any(k.endswith(s) and k[: -len(s)] in names for s in resampled)}
    if d.get("ica_identifiable") is False:  # the details would print the withheld digits again
        details = {k: v for k, v in details.items() if k not in ("ica_std", "ica_efficiency_std")}
    out = {"label": label, "rows": _rows(result, d), "notes": [str(n) for n in result.notes],
           "details": details, "source_correlation": None}
    C = getattr(result, "source_correlation", None)
    if C is not None:
        C = np.abs(np.asarray(C, dtype=float))[:MAX_SOURCES, :MAX_SOURCES]
        out["source_correlation"] = {"matrix": np.round(C, 4), "caption": source_cut(result, MAX_SOURCES)}
    return out


def layer_map_data(layer_map, caption="layers of A (rows) x layers of B (columns)") -> dict:
    """A :class:`~actkit.alignment.LayerMap` (or any labelled matrix in one) for a heat map."""
    d = layer_map.to_dict()
    if layer_map.p is not None:
        caption += (f"; dashed cells and *: p > 0.05 ({layer_map.info.get('permutations')} permutations "
                    "of the input samples)")
    return {"measure": d["measure"], "layers_a": d["layers_a"], "layers_b": d["layers_b"],
            "matrix": d["matrix"], "p": d.get("p"), "caption": caption}


def compare_data(results=(), labels=None, *, maps=(), title="", subtitle="", figures=True) -> dict:
    """The compare page's data: every pair's measure rows, notes, details and source
    correlations; the errors figure (several pairs); the heat maps (``maps``: layer maps,
    or ``(LayerMap, caption)`` pairs); the conventions."""
    results = list(results)
    labels = row_labels(results, labels)
    maps = [layer_map_data(*m) if isinstance(m, tuple) else layer_map_data(m) for m in maps]
    out = {"title": title, "subtitle": subtitle, "pairs": [_pair(r, lab) for r, lab in zip(results, labels)],
           "figures": [], "maps": maps}
    if figures and len(results) > 1:
        ax = plot_errors(results, labels)
        out["figures"].append({"title": "Alignment error per method and pair", "src": figure_uri(ax.figure),
                               "caption": "held-out error / diam(B) of each alignment, one line per method"})
    if results:
        d = results[0].to_dict()
        out["conventions"] = {k: v for k, v in d.items() if k.startswith("convention")}
    return out


def evaluate_data(result, *, title="", subtitle="", figures=True) -> dict:
    """The evaluate page's data: the rows of ``to_frame()`` (each task and the mean), the
    verdict, settings, definitions and :func:`~actkit.report.plot_postprocessing`'s figure."""
    d = result.to_dict()
    rows = []
    for task in result.tasks:
        rows += [{"task": task.name, "version": v, **{k: x for k, x in d[v]["tasks"][task.name].items()}}
                 for v in VERSIONS]
    rows += [{"task": "(mean)", "version": v, "is_mean": True,
              **{k: x for k, x in d[v].items() if k != "tasks"}} for v in VERSIONS]
    notes = [f"FastICA did not converge in fold {i['fold']} (raise --ica-max-iter)"
             for i in result.ica if not i.get("converged", True)]
    out = {"title": title, "subtitle": subtitle, "rows": rows, "metrics": list(METRICS), "versions": list(VERSIONS),
           "labels": dict(LABELS), "titles": dict(TITLES), "verdict": result.verdict(), "notes": notes,
           "settings": {**d["settings"], "n_rows": d["n_rows"], "n_features": d["n_features"]},
           "definitions": d["definitions"], "figures": []}
    if figures:
        fig = plot_postprocessing(result)
        out["figures"].append({"title": "Scores of the four versions", "src": figure_uri(fig),
                               "caption": "bars: mean over tasks \u00b1 sd over folds; dots: tasks"})
    return out
