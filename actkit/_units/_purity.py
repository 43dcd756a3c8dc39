"""Every unit's ``token_purity`` and ``description`` from its top rows (docs/definitions.md,
section 7), both read from :func:`actkit._units._tokens.top_tokens` over the report's ``k``
highest rows: the purity is the share of those rows the first token covers, the description
its first :data:`DESCRIBED` tokens with their counts, e.g. ``' argument' (17/20), ' arg' (2/20)``.
"""

from __future__ import annotations

import numpy as np

from actkit._units._tokens import top_tokens

__all__ = ["DESCRIBED", "key_namer", "unit_tokens"]

#: distinct tokens a description names
DESCRIBED = 3


def key_namer(renderer):
    """``name(key) -> str`` of a score's key: a text token as Python's ``repr`` of its string
    (spaces and escapes visible), an image row's position as its patch (the renderer's
    ``cell_key`` and ``key_name``: ``patch (r, c)``, ``CLS token``)."""
    if renderer.kind == "image":
        return lambda key: renderer.key_name(renderer.cell_key(int(key)))
    return lambda key: repr(renderer.key_name(int(key))) if key >= 0 else renderer.key_name(int(key))


def unit_tokens(keys, values, k, name):
    """``(purity (units,), descriptions)`` of every unit from its top rows: ``keys``,
    ``values`` (K, units) as oriented, key -2 for an empty slot; the first ``k`` filled rows of
    each; NaN and "" for a unit without rows."""
    purities, descriptions = np.full(keys.shape[1], np.nan), [""] * keys.shape[1]
    for j in range(keys.shape[1]):
        keep = np.flatnonzero(keys[:, j] > -2)[:k]
        tops = top_tokens(keys[keep, j], values[keep, j])
        if tops is None:
            continue
        purities[j] = tops["share"]
        descriptions[j] = ", ".join(f"{name(t['id'])} ({t['count']}/{tops['rows']})"
                                    for t in tops["tokens"][:DESCRIBED])
    return purities, descriptions
