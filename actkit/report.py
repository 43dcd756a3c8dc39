"""Readable reports of :func:`actkit.compare` results: text tables and PNG figures.

``format_table(results, labels)``      Table-1-style text table (Nelson et al.)
``format_matrix(matrix, labels)``      pairwise matrix of one metric (``compare_many``)
``plot_compare(results, labels, path)`` errors per method per layer + matched-source
                                        correlation matrices, one PNG
``plot_errors``, ``plot_source_correlation``, ``plot_matrix``  the single panels

matplotlib is imported inside the plotting functions with the non-interactive ``Agg``
backend, so ``import actkit.report`` stays cheap and works without a display.
"""

from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np

__all__ = ["format_table", "format_matrix", "plot_compare", "plot_errors",
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


def compare_notes(caught, result=None):
    """Short notes for what ``compare`` warned about, one per distinct message.

    ``caught`` are the warnings recorded around one ``compare`` call; FastICA's per-side
    ``ConvergenceWarning``s become one note from ``result`` (its ``to_dict()``), when given.
    Used by ``actkit compare`` and ``actkit demo`` to print one line per note."""
    from sklearn.exceptions import ConvergenceWarning

    notes = []
    if result is not None and result.get("ica_converged") is False:
        notes.append(f"FastICA did not converge within {result['ica_max_iter']} iterations on at "
                     f"least one side; the ica error is not that of converged sources")
    for w in caught:
        msg = str(w.message)
        if not issubclass(w.category, ConvergenceWarning) and msg not in notes:
            notes.append(msg)
    return notes


def _value(res, key):
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    v = d.get(key)
    return float("nan") if v is None else float(v)


def _fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _labels(results, labels):
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(results):
            raise ValueError(f"{len(labels)} labels for {len(results)} results")
        return labels
    out = []
    for i, r in enumerate(results):
        d = r.to_dict() if hasattr(r, "to_dict") else dict(r)
        a, b = d.get("layer_a"), d.get("layer_b")
        out.append(f"{a} -> {b}" if a and b else f"pair {i + 1}")
    return out


def format_table(results, labels: Sequence[str] | None = None, *, digits: int = 3,
                 title: str | None = None) -> str:
    """A Table-1-style text table: one row per compared pair.

    Columns: permutation, rigid, linear (held-out mean l2 error / diam(B)), ICA with its
    efficiency in parentheses (as in Nelson et al., Table 1), linear CKA and mean CCA.

    Parameters
    ----------
    results : list of CompareResult (or of their ``to_dict()`` dicts)
    labels : list of str, optional
        Row labels, e.g. ``"gpt_neox.layers.3"`` or ``"seed0 -> seed1"``; default from the
        results' layer names.
    digits : int, default=3
    title : str, optional

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_table([{"permutation": .219, "rigid": .150, "linear": .131,
    ...                      "ica": .202, "ica_efficiency": .25, "linear_cka": .9,
    ...                      "mean_cca": .8}], ["Pythia-160M-0 -> 1"]))  # doctest: +NORMALIZE_WHITESPACE
    pair                Permutation  Rigid  Linear  ICA (% eff.)    CKA    CCA
    ------------------  -----------  -----  ------  ------------  -----  -----
    Pythia-160M-0 -> 1        0.219  0.150   0.131   0.202 (25%)  0.900  0.800
    """
    results = list(results)
    labels = _labels(results, labels)
    header = ["pair", "Permutation", "Rigid", "Linear", "ICA (% eff.)", "CKA", "CCA"]
    rows = []
    for lab, r in zip(labels, results):
        eff = _value(r, "ica_efficiency")
        ica = _fmt(_value(r, "ica"), digits)
        if not math.isnan(eff) and ica != "-":
            ica = f"{ica} ({eff:.0%})"
        rows.append([lab, _fmt(_value(r, "permutation"), digits), _fmt(_value(r, "rigid"), digits),
                     _fmt(_value(r, "linear"), digits), ica, _fmt(_value(r, "linear_cka"), digits),
                     _fmt(_value(r, "mean_cca"), digits)])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    def line(cells):
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()
    out = [] if title is None else [title]
    out += [line(header), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in rows]
    return "\n".join(out)


def format_matrix(matrix, labels: Sequence[str] | None = None, *, metric: str = "",
                  digits: int = 3) -> str:
    """Text rendering of a (K, K) pairwise matrix (rows: A, columns: B)."""
    matrix = np.asarray(matrix, dtype=float)
    K = matrix.shape[0]
    labels = [str(x) for x in (labels or [str(i + 1) for i in range(K)])]
    cells = [[_fmt(v, digits) for v in row] for row in matrix]
    w0 = max(len(metric), *(len(x) for x in labels))
    w = max(max(len(x) for x in labels), digits + 3)
    out = [metric.ljust(w0) + "  " + "  ".join(x.rjust(w) for x in labels)]
    for lab, row in zip(labels, cells):
        out.append(lab.ljust(w0) + "  " + "  ".join(c.rjust(w) for c in row))
    return "\n".join(out)


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
    labels = _labels(results, labels)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4, 1.2 * len(results) + 2), 3.5))
    if len(results) == 1:
        values = [_value(results[0], m) for m in _METHODS]
        shown = [(m, v) for m, v in zip(_METHODS, values) if v is not None and np.isfinite(v)]
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        x = np.arange(len(shown))
        bars = ax.bar(x, [v for _, v in shown], color=[colors[_METHODS.index(m)] for m, _ in shown])
        ax.bar_label(bars, labels=[_fmt(v) for _, v in shown], fontsize=8, padding=2)
        ax.set_xticks(x)
        ax.set_xticklabels([m for m, _ in shown])
        ax.set_xlabel(labels[0], fontsize=8)
        ax.margins(y=0.15)
    else:
        x = np.arange(len(results))
        for m, marker in zip(_METHODS, "osD^"):
            y = [_value(r, m) for r in results]
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
    """Heat map of a pairwise matrix from :func:`actkit.align.compare_many`."""
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
    path = os.fspath(path)
    tmp = f"{path}.partial.png"
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format="png")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
        _plt().close(fig)
    return path


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
    labels = _labels(results, labels)
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
