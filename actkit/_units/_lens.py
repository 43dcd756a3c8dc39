"""The logit lens of a unit: its direction in the residual stream read through the model's
final norm and unembedding, as sae_vis's logit tables (the tokens whose logits the unit raises
most and lowers most).

sae_vis reads a feature's direction through a TransformerLens model loaded with its final
LayerNorm folded into the unembedding (``fold_ln``: ``W_U <- diag(w_ln) W_U``) and the
residual stream's writes centred (``center_writing_weights``), so its table is the
direction's effect through the LayerNorm's linear part. actkit does the same from what the
extraction recorded (``--unembedding`` keeps the final norm's gain as the store parameter
``final_norm_gain``, its module and kind in the provenance's ``final_norm``)::

    logits = (gain * (d - mean(d))) @ W_U.T      # a LayerNorm
    logits = (gain * d) @ W_U.T                  # an RMSNorm

A layer that is the final norm's output already (``final_hidden``, the norm module itself) is
read raw, ``d @ W_U.T``, as is every layer with ``lens_raw=True`` (``--lens-raw``) or a store
that recorded no final norm (the lens of earlier versions).
"""

from __future__ import annotations

import numpy as np

__all__ = ["TOKENS", "add_lens", "lens_fold", "logit_lens"]

#: promoted and suppressed tokens listed per unit
TOKENS = 10


def logit_lens(directions, unembedding, units, n_tokens=TOKENS, gain=None, center=False):
    """``{unit: (promoted ids, promoted logits, suppressed ids, suppressed logits)}``.

    Parameters
    ----------
    directions : ndarray (n_units, D) or None
        Each unit's direction (None: the layer's own coordinates, unit j = basis vector j).
    unembedding : ndarray (vocab, D)
        ``W_U`` as the store keeps it (``store.params["unembedding"]``, the lm_head rows).
    units : sequence of int
        The units to read (in chunks, so a large vocabulary never makes a units x vocab matrix).
    gain : ndarray (D,), optional
        The final norm's gain, folded in (None: the raw lens).
    center : bool, default=False
        Centre each direction first (a LayerNorm subtracts the mean of its input).
    """
    W = np.asarray(unembedding, np.float64)
    out = {}
    units = list(units)
    for s in range(0, len(units), 64):
        chunk = units[s:s + 64]
        dirs = np.eye(W.shape[1])[chunk] if directions is None else np.asarray(directions, np.float64)[chunk]
        if center:
            dirs = dirs - dirs.mean(axis=1, keepdims=True)
        if gain is not None:
            dirs = dirs * np.asarray(gain, np.float64)
        logits = dirs @ W.T
        m = min(n_tokens, logits.shape[1])
        for u, row in zip(chunk, logits):
            order = np.argsort(-row, kind="stable")
            top, bottom = order[:m], order[::-1][:m]
            out[u] = (top, row[top], bottom, row[bottom])
    return out


def lens_fold(store, layer, raw=False) -> dict:
    """How the lens reads ``layer`` of ``store``: ``{"folded": bool, "norm": module or None,
    "kind": "layernorm" | "rmsnorm" | None}`` and, folded, the gain (``"gain"``, not for the report)."""
    norm = dict((getattr(store, "provenance", None) or {}).get("final_norm") or {})
    gain = store.params.get("final_norm_gain") if hasattr(store, "params") else None
    after = layer in ("final_hidden", norm.get("module"))
    folded = not raw and gain is not None and not after
    out = {"folded": bool(folded), "norm": norm.get("module"), "kind": norm.get("kind")}
    if folded:
        out["gain"] = np.asarray(gain, np.float64)
    return out


def add_lens(unit_dicts, basis, store, layer, flip, inputs, raw=False):
    """Give each unit dict its ``"logits"`` table (oriented as the report: ``flip``) where the
    store holds an unembedding of the layer's width; returns the report's ``lens`` entry
    (:func:`lens_fold`) or None where there is no lens."""
    W = store.params.get("unembedding") if hasattr(store, "params") else None
    if W is None or int(np.asarray(W).shape[1]) != int(store[layer].shape[1]):
        return None
    dirs = basis.directions()
    if dirs is not None:
        dirs = np.where(flip[:, None], -dirs, dirs)
    elif basis.kind != "neuron":
        return None
    how = lens_fold(store, layer, raw)
    vocab = getattr(inputs, "vocab", None) if inputs is not None else None
    lens = logit_lens(dirs, W, [u["unit"] for u in unit_dicts], gain=how.pop("gain", None),
                      center=how["folded"] and how["kind"] == "layernorm")
    for u in unit_dicts:
        up, lp, down, ld = lens[u["unit"]]
        name = (lambda i: str(vocab[i]) if vocab is not None and i < len(vocab) else None)
        u["logits"] = {"promoted": [[int(i), name(i), float(v)] for i, v in zip(up, lp)],
                       "suppressed": [[int(i), name(i), float(v)] for i, v in zip(down, ld)]}
    return how
