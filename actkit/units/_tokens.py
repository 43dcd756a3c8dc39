"""The tokens a unit's top rows carry: their counts (``top_tokens``), the token purity and a
one-line description.

``token_purity`` is the share of a unit's top rows (the report's ``k``; fewer where a sparse
unit has fewer active rows) whose key -- token id, or patch cell for images -- is the most
common key among them (docs/definitions.md, section 7). Pooled rows have no key and count as
their own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["describe", "purity", "top_tokens"]

#: distinct tokens a description names
DESCRIBED = 3


def top_tokens(keys, values) -> list:
    """``[(key, count, mean value)]`` of the distinct keys of the rows ``keys`` (in the order of
    their values, highest first) with their ``values``: most frequent first, ties by the
    highest row of each."""
    keys, values = np.asarray(keys, np.int64), np.asarray(values, np.float64)
    if keys.size == 0:
        return []
    uniq, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse.ravel(), values, minlength=uniq.size)
    order = np.lexsort((first, -counts))
    return [(int(uniq[i]), int(counts[i]), float(sums[i] / counts[i])) for i in order]


def purity(keys) -> float:
    """The share of ``keys`` equal to their most common value; NaN for none."""
    keys = np.asarray(keys, np.int64)
    if keys.size == 0:
        return float("nan")
    return float(np.unique(keys, return_counts=True)[1].max() / keys.size)


def describe(tokens, name, total) -> str:
    """One line from ``top_tokens``: the first :data:`DESCRIBED` keys as ``name(key)`` with
    their count of ``total`` rows, e.g. ``' argument' (17/20), ' arg' (2/20)``."""
    return ", ".join(f"{name(key)} ({count}/{total})" for key, count, _ in tokens[:DESCRIBED])


def example_names(inputs, keyed) -> dict:
    """``{key: name}`` of ``keyed``, ``(key, example)`` pairs of a unit, for :func:`describe`: a text token as
    Python's ``repr`` of its string (spaces and escapes visible), an image key as its patch
    cell (``cell (row, col)``) or ``[CLS]``; -1 (a pooled row) as the whole input."""
    out = {-1: "(whole input)"}
    vocab = inputs.vocab if inputs is not None and getattr(inputs, "kind", None) == "text" else None
    for key, e in keyed:
        key = int(key)
        if key in out:
            continue
        if vocab is not None:
            out[key] = repr(str(vocab[key])) if key < len(vocab) else f"#{key}"
            continue
        img = e.get("image") or {}
        cell = img.get("cell")
        out[key] = f"cell ({cell[0]}, {cell[1]})" if cell is not None else (
            "[CLS]" if img.get("token") == "cls" else f"position {e.get('position')}")
    return out
