"""Each token's characters: the tokenizer's offset mapping, kept with the text it maps into.

A text store records every sample's original text and each token's ``[start, end)`` in it
(characters; :func:`actkit.store.text_record`), so that an example is shown as the text
itself, never rebuilt from token pieces. The spans are the fast tokenizer's
``offset_mapping``, with one rule of our own: a token without characters (``[CLS]``, ``[SEP]``,
BOS, EOS), which the tokenizer maps to ``(0, 0)`` wherever it stands, gets an empty span where
it stands (at the end of the token before it). A byte-level token that covers part of a character (one
byte of an emoji) is mapped by the tokenizer to the whole character, so two tokens may share
it.

Token windows (``--context-length``) record, per window, the characters its tokens cover: the
covered part of each text the window touches, joined by a newline (the line break between
two lines of a ``.txt`` file), the separators (EOS) and the BOS as empty spans.
"""

from __future__ import annotations

import numpy as np

__all__ = ["encode", "place_empty", "window_texts"]


def place_empty(spans) -> np.ndarray:
    """(T, 2) int64 spans with each empty span (a token without characters of its own: the
    tokenizer maps ``[CLS]``, ``[SEP]``, BOS, EOS to ``(0, 0)`` wherever they stand) moved
    where the token stands: to the end of the token before it (0 for the first). A token with
    characters keeps them, special or not (BERT's ``[UNK]`` covers the emoji it stands for)."""
    out = np.asarray(spans, np.int64).reshape(-1, 2).copy()
    flags = out[:, 1] <= out[:, 0]
    if flags.any():
        end = 0
        for t in range(out.shape[0]):
            if flags[t]:
                out[t] = end
            else:
                end = int(out[t, 1])
    return out


def encode(tokenizer, texts, **kwargs):
    """``(ids, spans)`` of ``texts`` (``tokenizer(texts, **kwargs)``): the token ids and, for a
    fast tokenizer, each token's character span (:func:`place_empty`); ``spans`` is None for
    a tokenizer without an offset mapping (a slow, Python tokenizer)."""
    fast = bool(getattr(tokenizer, "is_fast", False))
    enc = tokenizer(list(texts), return_offsets_mapping=fast, **kwargs)
    ids = enc["input_ids"]
    if not fast:
        return ids, None
    return ids, [place_empty(o) for o in enc["offset_mapping"]]


def window_texts(texts, doc, spans, count, body, bos):
    """The text and spans of each of ``count`` windows.

    Parameters
    ----------
    texts : sequence of str
        The texts the stream was made of (input order).
    doc : ndarray (stream,) int64
        The text each stream token came from.
    spans : ndarray (stream, 2) int64
        Each stream token's span in its text; ``-1`` for a separator (EOS).
    count, body : int
        Windows, and stream tokens per window.
    bos : bool
        Each window starts with a BOS token (an empty span at 0).

    Returns
    -------
    list of str, list of ndarray (L, 2) int64
    """
    out_texts, out_spans = [], []
    for w in range(int(count)):
        a, b = w * body, (w + 1) * body
        d, sp = doc[a:b], spans[a:b]
        res = np.zeros((b - a, 2), np.int64)
        parts, cur = [], 0
        for dd in np.unique(d):
            mine = d == dd
            real = mine & (sp[:, 0] >= 0)
            if real.any():
                lo, hi = int(sp[real, 0].min()), int(sp[real, 1].max())
                cur += 1 if parts else 0  # the newline between two texts
                res[real] = sp[real] + (cur - lo)
                parts.append(texts[int(dd)][lo:hi])
                cur += hi - lo
            res[mine & ~real] = cur  # the separator after the text
        out_texts.append("\n".join(parts))
        out_spans.append(np.concatenate([np.zeros((1, 2), np.int64), res]) if bos else res)
    return out_texts, out_spans
