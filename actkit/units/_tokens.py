"""The tokens a unit's top rows carry: their counts (``top_tokens``), the token purity and a
one-line description.

``token_purity`` is the share of a unit's top rows (the report's ``k``; fewer where a sparse
unit has fewer active rows) whose key -- token id, or patch cell for images -- is the most
common key among them (docs/definitions.md, section 7). Pooled rows have no key and count as
their own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["describe", "key_namer", "purity", "top_tokens", "unit_tokens"]

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


def key_namer(inputs, grid=None):
    """``name(key) -> str`` for descriptions: a text token as Python's ``repr`` of its string
    (spaces and escapes visible), an image key (a position) as its patch cell ``cell (row,
    col)`` of ``grid`` (``(prefix positions, rows, cols)``) or ``[CLS]``; -1 (a pooled row) as
    the whole input."""
    vocab = inputs.vocab if inputs is not None and getattr(inputs, "kind", None) == "text" else None
    extra, _, cols = grid if grid is not None else (0, 0, 0)

    def name(key):
        key = int(key)
        if key < 0:
            return "(whole input)"
        if vocab is not None:
            return repr(str(vocab[key])) if key < len(vocab) else f"#{key}"
        if key < extra:
            return "[CLS]"
        if not cols:
            return f"position {key}"
        r, c = divmod(key - extra, cols)
        return f"cell ({r}, {c})"
    return name


def unit_tokens(keys, values, k, name):
    """``(purity, description)`` of every unit from its top rows: ``keys``, ``values`` (K,
    units), row -1 as key -2 for an empty slot; the first ``k`` filled rows of each."""
    purities, descriptions = np.full(keys.shape[1], np.nan), [""] * keys.shape[1]
    for j in range(keys.shape[1]):
        kj = keys[:, j]
        keep = np.flatnonzero(kj > -2)[:k]
        if keep.size == 0:
            continue
        purities[j] = purity(kj[keep])
        descriptions[j] = describe(top_tokens(kj[keep], values[keep, j]), name, keep.size)
    return purities, descriptions
