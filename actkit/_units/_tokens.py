"""The tokens a unit fires on: over its ``k_tokens`` highest rows, each distinct token with its
count and mean activation, most frequent first, and the share of those rows the first covers
(Neuronpedia's and sae_vis's "top tokens" list; issue 50's ``token_purity`` and
``description`` are read from it).

:func:`top_tokens` is a plain function of the rows' token ids and values;
:func:`unit_top_tokens` gathers those for the shown units of a report (text: the token id at
each row; images: the patch cell; pooled rows: the whole input).
"""

from __future__ import annotations

import numpy as np

__all__ = ["K_TOKENS", "WHOLE", "add_top_tokens", "top_tokens", "unit_top_tokens"]

#: rows per unit the top tokens are counted over (``k_tokens``)
K_TOKENS = 200
#: the key of a row that is a whole input (a pooled row, position -1)
WHOLE = -1


def top_tokens(ids, values) -> dict | None:
    """The distinct tokens of a unit's highest rows.

    Parameters
    ----------
    ids : array-like of int, shape (n,)
        The token id of each row (any integer key: a patch cell, :data:`WHOLE` for a whole
        input).
    values : array-like of float, shape (n,)
        The unit's (oriented) activation at each row.

    Returns
    -------
    dict or None
        None for no rows; else ``{"rows": n, "share": count of the first / n, "tokens":
        [{"id", "count", "mean"}, ...]}``: every distinct id, by count (largest first), then
        mean activation (largest first), then id.
    """
    ids, values = np.asarray(ids, np.int64).ravel(), np.asarray(values, np.float64).ravel()
    if ids.size == 0:
        return None
    # token coding (token ids, not input samples: those are actkit._groups')
    uniq, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    means = np.bincount(inverse.ravel(), values, minlength=uniq.size) / counts
    order = np.lexsort((uniq, -means, -counts))
    tokens = [{"id": int(uniq[i]), "count": int(counts[i]), "mean": float(means[i])} for i in order]
    return {"rows": int(ids.size), "share": tokens[0]["count"] / ids.size, "tokens": tokens}


def _keys(inputs, samples, positions, image_cell):
    """The key of each row: its token id (text), its patch (images: ``image_cell(position)``),
    :data:`WHOLE` for a pooled row; None without inputs."""
    if inputs is None:
        return None
    if str(inputs.kind) == "image":
        return np.array([image_cell(int(p)) for p in positions], np.int64)
    token_at = getattr(inputs, "token_at", None)
    if token_at is not None:
        return token_at(samples, positions)
    return np.array([int(inputs.token_ids(int(s))[int(p)]) if p >= 0 else WHOLE
                     for s, p in zip(samples, positions)], np.int64)


def unit_top_tokens(values, rows, index, inputs, names, image_cell=None) -> list:
    """``top_tokens`` of each shown unit.

    Parameters
    ----------
    values, rows : ndarray (K, m)
        The m shown units' K highest (oriented) values and their rows (row -1: an empty slot).
    index : ndarray (n_rows, 2)
        The layer's ``[sample, position]`` of each row.
    inputs : RecordedInputs or None
    names : callable
        ``names(key) -> str``: the readable token of a key.
    image_cell : callable, optional
        Images: the key of a position (its patch; :data:`WHOLE` for the whole image).

    Returns
    -------
    list of dict or None, one per unit (None without inputs or rows); each token also
    carries ``"token"``, its readable string.
    """
    rows = np.asarray(rows, np.int64)
    if inputs is None:
        return [None] * rows.shape[1]
    flat = rows[rows >= 0]
    keys = np.full(rows.shape, WHOLE, np.int64)
    keys[rows >= 0] = _keys(inputs, index[flat, 0], index[flat, 1], image_cell)
    out = []
    for j in range(rows.shape[1]):
        ok = rows[:, j] >= 0
        tops = top_tokens(keys[ok, j], values[ok, j])
        if tops is not None:
            for t in tops["tokens"]:
                t["token"] = names(t["id"])
        out.append(tops)
    return out


def add_top_tokens(unit_dicts, top, k_tokens, sparse, index, renderer) -> None:
    """Each unit dict's ``"top_tokens"`` (:func:`top_tokens` over its ``k_tokens`` highest
    rows; ``top``: the oriented (values, rows), each (K, n_units), K >= ``k_tokens``; a sparse
    unit's rows are its active ones)."""
    ids = [u["unit"] for u in unit_dicts]
    values, rows = (np.asarray(a)[:k_tokens][:, ids] for a in top[:2])
    if sparse:
        rows = np.where(values > 0, rows, -1)
    found = unit_top_tokens(values, rows, index, renderer.inputs, renderer.key_name, renderer.cell_key)
    for u, t in zip(unit_dicts, found):
        u["top_tokens"] = t
