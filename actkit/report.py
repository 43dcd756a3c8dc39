"""Readable reports of :func:`actkit.compare` results: text tables and PNG figures.

``format_table(results, labels)``      Table-1-style text table (Nelson et al.)
``ica_summary(results, labels)``       per pair: the sources ICA identified and matched
``format_matrix(matrix, labels)``      pairwise matrix of one metric (``compare_many``)
``plot_compare(results, labels, path)`` errors per method per layer + matched-source
                                        correlation matrices, one PNG
``plot_errors``, ``plot_source_correlation``, ``plot_matrix``  the single panels
``plot_postprocessing(result, path)``  evaluate_postprocessing: one panel per metric

matplotlib is imported inside the plotting functions with the non-interactive ``Agg``
backend, so ``import actkit.report`` stays cheap and works without a display.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from actkit._atomic import save_figure_atomic
from actkit._versions import library_versions  # noqa: F401  (re-exported: actkit.report.library_versions)
from actkit.alignment import format_matrix, format_table, ica_summary, row_labels, value_of
from actkit.evaluation._result import LABELS, METRICS, TITLES, VERSIONS

__all__ = ["pyplot", "format_table", "format_matrix", "ica_summary", "plot_compare", "plot_captions", "source_cut", "plot_errors",
           "plot_source_correlation", "plot_matrix", "plot_postprocessing", "plot_layer_map", "save_layer_map"]

_METHODS = ("permutation", "rigid", "linear", "ica")
# ``library_versions``: installed versions of actkit and the libraries that shape its numbers
# (``actkit/_versions.py``, the one record; re-exported here for reports)


# ------------------------------------------------------------------------------ figures
def pyplot():
    """``matplotlib.pyplot`` for every figure actkit draws (here, ``demo``, ``sweep``,
    ``synthetic``): the session's own where pyplot is already imported (a notebook keeps its
    backend), else on the non-interactive Agg backend, set when the first figure is drawn (never
    at import)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        return plt
    import matplotlib  # matplotlib: ~0.06 s at import (measured), only for a figure (Agg set before pyplot)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # matplotlib.pyplot: ~0.2 s at import (measured), only for a figure

    return plt


def plot_errors(results, labels=None, ax=None):
    """Held-out error of each method for each compared pair / layer.

    Several pairs: one line per method across the pairs (x axis, in the given order, e.g. by
    depth). One pair: one bar per method with its value written on it (a line needs two
    points)."""
    plt = pyplot()
    results = list(results)
    labels = row_labels(results, labels)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 1.2 * len(results) + 2), 3.5))
    if len(results) == 1:
        values = [value_of(results[0], m) for m in _METHODS]
        shown = [(m, v) for m, v in zip(_METHODS, values) if v is not None and np.isfinite(v)]
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        x = np.arange(len(shown))
        bars = ax.bar(x, [v for _, v in shown], color=[colors[_METHODS.index(m)] for m, _ in shown])
        ax.bar_label(bars, labels=[f"{v:.3f}" for _, v in shown], fontsize=8, padding=2)
        ax.set_xticks(x)
        ax.set_xticklabels([m for m, _ in shown])
        ax.set_xlabel(labels[0], fontsize=8)
        ax.margins(y=0.15)
    else:
        x = np.arange(len(results))
        for m, marker in zip(_METHODS, "osD^"):
            y = [value_of(r, m) for r in results]
            y = [np.nan if v is None else v for v in y]
            ax.plot(x, y, marker=marker, label=m)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=30 if len(results) > 3 else 0,
                           ha="right" if len(results) > 3 else "center", fontsize=8)
        ax.legend(fontsize=8, title="alignment", title_fontsize=8)
    ax.set_ylabel("held-out error / diam(B)")
    ax.set_ylim(bottom=0)
    ax.set_title("alignment error per method (lower: more alike)", fontsize=9)
    return ax


def plot_source_correlation(result, ax=None, *, max_components=64, title=None):
    """|correlation| of A's and B's ICA sources on held-out rows, matched pairs on the diagonal."""
    plt = pyplot()
    C = getattr(result, "source_correlation", None)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))
    if C is None:
        ax.text(0.5, 0.5, "no ICA sources", ha="center", va="center")
        ax.set_axis_off()
        return ax
    C = np.abs(C[:max_components, :max_components])
    from matplotlib.ticker import MaxNLocator  # matplotlib: only for a figure (import actkit.report loads none)

    im = ax.imshow(C, vmin=0, vmax=1, cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("|correlation|", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # sources are numbered, not continuous
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("source of B (matched order)")
    ax.set_ylabel("source of A")
    cut = source_cut(result, max_components)
    ax.set_title(f"{title or 'matched-source |corr|'}\n{cut}", fontsize=9)
    return ax


def source_cut(result, max_components=64):
    """What :func:`plot_source_correlation` draws, in words: ``"first 64 of 381 sources
    (a diagonal cut), 0 matched pairs on the diagonal"``; "" without ICA sources."""
    C = getattr(result, "source_correlation", None)
    if C is None:
        return ""
    k_a, k_b = C.shape
    shown = min(max_components, k_a), min(max_components, k_b)
    h = getattr(result, "alignments", {}).get("ica")
    pairs = getattr(h, "pairs_", None)
    matched = int(pairs.shape[0]) if pairs is not None else 0
    on_diag = min(matched, shown[0], shown[1])
    if shown == (k_a, k_b):
        what = f"all {k_a} x {k_b} sources" if k_a != k_b else f"all {k_a} sources"
    else:
        what = f"first {shown[0]} of {max(k_a, k_b)} sources (a diagonal cut)"
    return f"{what}, {on_diag} matched pairs on the diagonal"


def plot_matrix(matrix, labels=None, *, metric="", ax=None):
    """Heat map of a pairwise matrix from :func:`actkit.alignment.compare_many`."""
    plt = pyplot()
    matrix = np.asarray(matrix, dtype=float)
    K = matrix.shape[0]
    labels = labels or [str(i + 1) for i in range(K)]
    if ax is None:
        _, ax = plt.subplots(figsize=(1 + 0.8 * K, 0.8 * K + 0.8))
    im = ax.imshow(matrix, cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label(metric.split(" [")[0] or "value", fontsize=8)
    ax.set_xticks(range(K))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(K))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("B", fontsize=8)
    ax.set_ylabel("A", fontsize=8)
    for i in range(K):
        for j in range(K):
            if np.isfinite(matrix[i, j]):
                dark = im.norm(matrix[i, j]) > 0.6  # viridis is light at the top: dark text there
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="k" if dark else "w")
    ax.set_title(metric)
    return ax


def plot_layer_map(layer_map, *, title=None, ax=None):
    """Heat map of :func:`actkit.compare_layers`: layers of A down, of B across, each cell's
    value printed; with p-values, cells with p > 0.05 hatched and marked ``n.s.``."""
    plt = pyplot()
    M = np.asarray(layer_map.matrix, dtype=float)
    ra, rb = M.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 0.55 * rb, 1.2 + 0.5 * ra))
    im = ax.imshow(M, cmap="viridis", interpolation="nearest", aspect="auto")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label(layer_map.measure, fontsize=8)
    ax.set_xticks(range(rb))
    ax.set_xticklabels(layer_map.layers_b, rotation=40, ha="right", fontsize=7)
    ax.set_yticks(range(ra))
    ax.set_yticklabels(layer_map.layers_a, fontsize=7)
    ax.set_xlabel("layer of B", fontsize=8)
    ax.set_ylabel("layer of A", fontsize=8)
    p = layer_map.p
    for i in range(ra):
        for j in range(rb):
            if not np.isfinite(M[i, j]):
                continue
            dark = im.norm(M[i, j]) > 0.6
            ns = p is not None and np.isfinite(p[i, j]) and p[i, j] > 0.05
            ax.text(j, i, f"{M[i, j]:.2f}" + ("\nn.s." if ns else ""), ha="center", va="center",
                    fontsize=6, color="k" if dark else "w")
            if ns:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="//",
                                           edgecolor="0.6", lw=0))
    ax.set_title(title or layer_map.measure, fontsize=9)
    ax.figure.tight_layout()
    return ax


def save_layer_map(layer_map, path, *, title=None):
    """Write :func:`plot_layer_map` to ``path`` (PNG, atomically)."""
    ax = plot_layer_map(layer_map, title=title)
    return _save(ax.figure, path)


def _save(fig, path):
    """Write atomically: a half-written PNG never appears at ``path``."""
    return save_figure_atomic(fig, os.fspath(path), dpi=120)


def plot_compare(results, labels=None, path=None, *, max_matrices=4, max_components=64):
    """One figure: errors per method per pair, and the matched-source correlation matrices.

    Parameters
    ----------
    results : list of CompareResult
    labels : list of str, optional
    path : str or Path, optional
        Write a PNG there (atomically) and return the path; else return the figure.
    max_matrices : int, default=4
        Correlation matrices drawn for at most this many pairs (the first ones).
    max_components : int, default=64
        Sources shown per matrix (the first matched ones).
    """
    plt = pyplot()
    results = list(results)
    labels = row_labels(results, labels)
    mats = [r for r in results if getattr(r, "source_correlation", None) is not None][:max_matrices]
    mat_labels = [lab for lab, r in zip(labels, results)
                  if getattr(r, "source_correlation", None) is not None][:max_matrices]
    ncols = 1 + len(mats)
    fig, axes = plt.subplots(1, ncols, figsize=(5 + 4 * len(mats), 4), squeeze=False)
    plot_errors(results, labels, ax=axes[0, 0])
    for ax, r, lab in zip(axes[0, 1:], mats, mat_labels):
        plot_source_correlation(r, ax=ax, max_components=max_components,
                                title=f"{lab}: matched-source |corr|")
    fig.tight_layout()
    if path is None:
        return fig
    return _save(fig, path)


def plot_captions(results, labels=None, *, max_matrices=4, max_components=64):
    """The lines ``actkit compare --plot`` prints: which cut of the sources each matrix of
    :func:`plot_compare` shows."""
    results = list(results)
    labels = row_labels(results, labels)
    out = []
    for lab, r in zip(labels, results):
        if getattr(r, "source_correlation", None) is None:
            continue
        if len(out) == max_matrices:
            break
        cut = source_cut(r, max_components)
        out.append(f"plot {lab}: matched-source |corr| of {'the ' if cut.startswith('first') else ''}{cut}")
    return out


def save_matrix_plot(matrix, labels, path, *, metric=""):
    """Write the heat map of a pairwise matrix to ``path`` (PNG, atomically)."""
    ax = plot_matrix(matrix, labels, metric=metric)
    return _save(ax.figure, path)


def plot_postprocessing(result, path=None, title=None):
    """:func:`actkit.evaluate_postprocessing`'s figure: one panel per metric (mean AUROC,
    sparsity, concentration), the four versions side by side: the mean over tasks as a bar
    with its sd over folds (PCA+Rand: over folds and rotations, the larger), each task a dot.

    Parameters
    ----------
    result : EvaluationResult
    path : str or Path, optional
        Write a PNG there (atomically) and return the path; else return the figure.
    title : str, optional
        A first title line (``actkit evaluate``: the embeddings and the labels).
    """
    plt = pyplot()
    d = result.to_dict()
    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.8), squeeze=False)
    colors = ["#8c8c8c", "#4c72b0", "#dd8452", "#55a868"]
    x = np.arange(len(VERSIONS))
    for ax, m in zip(axes[0], METRICS):
        means = [np.nan if d[v][m] is None else d[v][m] for v in VERSIONS]
        errs = [max(d[v][f"{m}_sd"] or 0.0, d[v].get(f"{m}_sd_rotations") or 0.0) for v in VERSIONS]
        ax.bar(x, means, yerr=errs, color=colors, capsize=4, alpha=0.85)
        shown = [v for v in means if np.isfinite(v)]
        for i, v in enumerate(VERSIONS):
            vals = [t[m] for t in d[v]["tasks"].values() if t[m] is not None]
            shown += vals
            jitter = np.linspace(-0.18, 0.18, len(vals)) if len(vals) > 1 else np.zeros(len(vals))
            ax.plot(i + jitter, vals, "o", color="black", ms=3, alpha=0.6)
        ax.set_xticks(x, [LABELS[v] for v in VERSIONS])
        ax.set_title(TITLES[m])
        if m == "auroc" and shown:  # every task's dot stays in view
            ax.set_ylim(max(0.0, min(shown) - 0.05), 1.005)
        ax.grid(axis="y", alpha=0.3)
    s = result.settings
    against = f"vs {s['control']}" if s["control"] is not None else "one-vs-rest"
    fig.suptitle((f"{title}\n" if title else "") +
                 f"{s['classifier']}, {s['n_splits']}-fold CV, {len(result.tasks)} task(s) {against}; "
                 f"bars: mean over tasks ± sd over folds; dots: tasks", fontsize=10)
    fig.tight_layout()
    if path is None:
        return fig
    return _save(fig, path)
