"""Text tables of compare results: the Table-1-style table and a pairwise matrix.

``format_table(results, labels)`` is what ``str(CompareResult)`` prints and what
``actkit compare`` and ``actkit demo`` print; :mod:`actkit.report` re-exports both.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from actkit.errors import ValidationError

__all__ = ["format_table", "format_matrix", "value_of", "row_labels"]


def value_of(res, key):
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    v = d.get(key)
    return float("nan") if v is None else float(v)


def _fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def row_labels(results, labels):
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(results):
            raise ValidationError(f"{len(labels)} labels for {len(results)} results")
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
    labels = row_labels(results, labels)
    header = ["pair", "Permutation", "Rigid", "Linear", "ICA (% eff.)", "CKA", "CCA"]
    rows = []
    for lab, r in zip(labels, results):
        eff = value_of(r, "ica_efficiency")
        ica = _fmt(value_of(r, "ica"), digits)
        if not math.isnan(eff) and ica != "-":
            ica = f"{ica} ({eff:.0%})"
        rows.append([lab, _fmt(value_of(r, "permutation"), digits), _fmt(value_of(r, "rigid"), digits),
                     _fmt(value_of(r, "linear"), digits), ica, _fmt(value_of(r, "linear_cka"), digits),
                     _fmt(value_of(r, "mean_cca"), digits)])
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
