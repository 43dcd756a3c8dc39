"""The logit lens of a unit: its direction in the residual stream read through the model's
unembedding, as sae_vis's logit tables (``direction @ W_U``: the tokens whose logits the unit
raises most and lowers most; no final layer norm)."""

from __future__ import annotations

import numpy as np

__all__ = ["TOKENS", "logit_lens"]

#: promoted and suppressed tokens listed per unit
TOKENS = 10


def logit_lens(directions, unembedding, units, n_tokens=TOKENS):
    """``{unit: (promoted ids, promoted logits, suppressed ids, suppressed logits)}``.

    Parameters
    ----------
    directions : ndarray (n_units, D) or None
        Each unit's direction (None: the layer's own coordinates, unit j = basis vector j).
    unembedding : ndarray (vocab, D)
        ``W_U`` as the store keeps it (``store.params["unembedding"]``, the lm_head rows).
    units : sequence of int
        The units to read (in chunks, so a large vocabulary never makes a units x vocab matrix).
    """
    W = np.asarray(unembedding, np.float64)
    out = {}
    units = list(units)
    for s in range(0, len(units), 64):
        chunk = units[s:s + 64]
        logits = W[:, chunk].T if directions is None else np.asarray(directions, np.float64)[chunk] @ W.T
        m = min(n_tokens, logits.shape[1])
        for u, row in zip(chunk, logits):
            order = np.argsort(-row, kind="stable")
            top, bottom = order[:m], order[::-1][:m]
            out[u] = (top, row[top], bottom, row[bottom])
    return out
