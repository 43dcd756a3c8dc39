"""Readable reports of :func:`actkit.compare` results: text tables and PNG figures.

``format_table(results, labels)``      Table-1-style text table (Nelson et al.)
``ica_summary(results, labels)``       per pair: the sources ICA identified and matched
``format_matrix(matrix, labels)``      pairwise matrix of one metric (``compare_many``)
``plot_compare(results, labels, path)`` errors per method per layer + matched-source
                                        correlation matrices, one PNG
``plot_errors``, ``plot_source_correlation``, ``plot_matrix``  the single panels

matplotlib is imported inside the plotting functions with the non-interactive ``Agg``
backend, so ``import actkit.report`` stays cheap and works without a display.
"""

from __future__ import annotations

import os

import numpy as np

from actkit._atomic import save_figure_atomic
from actkit.alignment import format_matrix, format_table, ica_summary, row_labels, value_of

__all__ = ["format_table", "format_matrix", "ica_summary", "plot_compare", "plot_errors",
           "plot_source_correlation", "plot_matrix"]

_METHODS = ("permutation", "rigid", "linear", "ica")
_VERSIONED = ("actkit", "numpy", "scipy", "scikit-learn", "torch", "transformers", "timm", "h5py", "matplotlib")


def library_versions() -> dict:
    """Installed versions of actkit and the libraries that shape its numbers (``None`` for a
    library that is not installed), from package metadata (nothing is imported)."""
    from importlib import metadata

    out = {}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


# ------------------------------------------------------------------------------ figures
def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def plot_errors(results, labels=None, ax=None):
    """Held-out error of each method for each compared pair / layer.

    Several pairs: one line per method across the pairs (x axis, in the given order, e.g. by
    depth). One pair: one bar per method with its value written on it (a line needs two
    points)."""
    plt = _plt()
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
    plt = _plt()
    C = getattr(result, "source_correlation", None)
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 3.5))
    if C is None:
        ax.text(0.5, 0.5, "no ICA sources", ha="center", va="center")
        ax.set_axis_off()
        return ax
    C = np.abs(C[:max_components, :max_components])
    from matplotlib.ticker import MaxNLocator

    im = ax.imshow(C, vmin=0, vmax=1, cmap="viridis", interpolation="nearest")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04).set_label("|correlation|", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # sources are numbered, not continuous
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("source of B (matched order)")
    ax.set_ylabel("source of A")
    k = result.source_correlation.shape[0]
    shown = f" (first {C.shape[0]} of {k})" if k > C.shape[0] else ""
    ax.set_title(title or f"matched-source |corr|{shown}", fontsize=9)
    return ax


def plot_matrix(matrix, labels=None, *, metric="", ax=None):
    """Heat map of a pairwise matrix from :func:`actkit.alignment.compare_many`."""
    plt = _plt()
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
    plt = _plt()
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


def save_matrix_plot(matrix, labels, path, *, metric=""):
    """Write the heat map of a pairwise matrix to ``path`` (PNG, atomically)."""
    ax = plot_matrix(matrix, labels, metric=metric)
    return _save(ax.figure, path)
