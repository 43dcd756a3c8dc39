"""A unit's example rows turned back into their inputs (the store's recorded inputs,
:class:`actkit.store.RecordedInputs`): text as the original characters of the row's token and
``context`` tokens either side (the recorded text and each token's character span), images as
the picture (a PNG data URI, once per sample) with the row's patch or map position as a box,
pooled rows (position -1) as the whole input. Every string is kept as data (the input's own
characters, the tokenizer's own pieces); nothing here is markup.
"""

from __future__ import annotations

import base64
import io

import numpy as np

__all__ = ["Renderer", "png_data_uri"]


def png_data_uri(image) -> str:
    """An (H, W, 3) uint8 image as a ``data:image/png;base64,...`` URI (PIL's encoder)."""
    from PIL import Image  # PIL: only where an image is shown

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(np.asarray(image, np.uint8)[..., :3]), "RGB").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def joined_pieces(tokens):
    """``(text, spans)`` of inputs that record no text: the token pieces joined by one space
    (each piece its own span), so that no two pieces run together."""
    spans, at = np.zeros((len(tokens), 2), np.int64), 0
    for i, t in enumerate(tokens):
        spans[i] = at, at + len(t)
        at += len(t) + 1
    return " ".join(tokens), spans


def _grid(inputs, n_positions, layer_attrs):
    """``(extra, rows, cols)``: leading positions that are no patch (a CLS token) and the grid."""
    for key in ("grid", "spatial", "patch_grid"):
        g = layer_attrs.get(key) if layer_attrs else None
        if g is not None and len(g) == 2:
            return n_positions - int(g[0]) * int(g[1]), int(g[0]), int(g[1])
    g = getattr(inputs, "patch_grid", None)  # a ViT: prefix tokens (CLS), then the patches row by row
    if g is not None and n_positions == int(getattr(inputs, "prefix_tokens", 0) or 0) + int(g[0]) * int(g[1]):
        return n_positions - int(g[0]) * int(g[1]), int(g[0]), int(g[1])
    side = int(round(np.sqrt(n_positions)))
    if side * side == n_positions:
        return 0, side, side
    side = int(round(np.sqrt(n_positions - 1)))
    return (1, side, side) if side * side == n_positions - 1 else (n_positions, 0, 0)


class Renderer:
    """Maps rows ``(sample, position)`` to what the report shows of their inputs.

    Parameters
    ----------
    inputs : RecordedInputs or None
        None: examples carry their row, sample and position only.
    context : int
        Tokens shown either side of a text row's token.
    n_positions : int
        Positions per sample in the layer (max position + 1), for the image grid.
    layer_attrs : dict
        The layer's attributes (a recorded feature-map grid, when there is one).
    """

    def __init__(self, inputs, context, n_positions=0, layer_attrs=None):
        self.inputs, self.context = inputs, int(context)
        self.kind = None if inputs is None else str(inputs.kind)
        self.images = {}
        self._tokens, self._vocab, self._special = {}, None, None
        self.grid = _grid(inputs, int(n_positions), layer_attrs or {}) if self.kind == "image" else None
        #: where a text example's characters come from: "recorded" (the input's own text),
        #: "decoded" (an older store: decoded from its token ids) or "pieces" (token pieces)
        self.text_source = None if self.kind != "text" else (
            "pieces" if not getattr(inputs, "has_text", False) else getattr(inputs, "text_source", "recorded"))

    def _load_vocab(self):
        """The vocabulary and special flags, read once (the inputs' properties check their kind
        at every call)."""
        if self._vocab is None:
            self._vocab = list(getattr(self.inputs, "vocab", None) or [])
            special = getattr(self.inputs, "special", None)
            self._special = None if special is None else np.asarray(special, bool)

    def _sample(self, sample):
        if sample not in self._tokens:
            self._load_vocab()
            ids = np.asarray(self.inputs.token_ids(sample))
            toks = [self._vocab[i] for i in ids.tolist()]
            flags = self._special[ids].tolist() if self._special is not None else None
            if self.text_source == "pieces":
                text, spans = joined_pieces(toks)
            else:
                text, spans = self.inputs.text(sample), np.asarray(self.inputs.token_spans(sample), np.int64)
            self._tokens[sample] = (toks, flags, text, spans.tolist())  # Python lists: sliced per example
        return self._tokens[sample]

    def _text(self, sample, position):
        """The text of a row: ``tokens`` (the tokenizer's pieces), ``highlight``, ``start``,
        ``special`` and the characters: ``context`` (the window's original text),
        ``span`` (the row's token in it) and ``token_spans`` (every window token's)."""
        toks, flags, text, spans = self._sample(sample)
        a, b = (0, len(toks)) if position < 0 else (max(0, position - self.context),
                                                     min(len(toks), position + self.context + 1))
        window = spans[a:b]
        lo, hi = (min(w[0] for w in window), max(w[1] for w in window)) if b > a else (0, 0)
        if position < 0:
            lo, hi = 0, len(text)
        out = {"tokens": toks[a:b], "highlight": None if position < 0 else position - a, "start": a,
               "context": text[lo:hi], "span": None if position < 0 else [x - lo for x in spans[position]],
               "token_spans": [[s - lo, e - lo] for s, e in window]}
        if flags is not None:
            out["special"] = flags[a:b]
        return out

    def _image(self, sample, position):
        if sample not in self.images:
            self.images[sample] = png_data_uri(self.inputs.image(sample))
        if position < 0:
            return {"sample": sample, "box": None}
        extra, gh, gw = self.grid
        if position < extra or gh == 0:
            return {"sample": sample, "box": None, "token": "cls" if position < extra else None}
        p = position - extra
        H, W = np.asarray(self.inputs.image(sample)).shape[:2] if not hasattr(self.inputs, "image_size") \
            else tuple(int(x) for x in np.broadcast_to(np.asarray(self.inputs.image_size), (2,)))
        r, c = divmod(p, gw)
        return {"sample": sample, "box": [r * H / gh, c * W / gw, (r + 1) * H / gh, (c + 1) * W / gw],
                "cell": [int(r), int(c)]}

    def cell_key(self, position) -> int:
        """Images: the key a row's position is counted under in a unit's top tokens: its patch
        ``r * gw + c``, -1 the whole image (a pooled row), -2 a token that is no patch (CLS)."""
        if position < 0:
            return -1
        extra, gh, _ = self.grid
        if gh == 0:
            return int(position)
        return -2 if position < extra else int(position - extra)

    def key_name(self, key) -> str:
        """The readable name of a top-token key: the token's string (text), ``patch (r, c)``,
        ``CLS token`` or ``whole image`` (images), ``whole input`` for a pooled text row."""
        key = int(key)
        if self.kind == "image":
            if key < 0:
                return "whole image" if key == -1 else "CLS token"
            extra, gh, gw = self.grid
            return f"position {key}" if gh == 0 else f"patch ({key // gw}, {key % gw})"
        if key < 0:
            return "whole input"
        self._load_vocab()
        return str(self._vocab[key]) if key < len(self._vocab) else f"#{key}"

    def example(self, row, value, sample, position):
        """One example's dict (see :class:`actkit.UnitReport`)."""
        ex = {"row": int(row), "value": float(value), "sample": int(sample), "position": int(position)}
        if self.kind == "text":
            ex["text"] = self._text(int(sample), int(position))
        elif self.kind == "image":
            ex["image"] = self._image(int(sample), int(position))
        return ex

    def payload(self) -> dict:
        """The report-level inputs: kind, and each shown image once (sample -> PNG data URI)."""
        out = {"kind": self.kind}
        if self.kind == "image":
            out["images"] = {str(s): uri for s, uri in sorted(self.images.items())}
        if self.kind == "text":
            out["tokenizer"] = dict(getattr(self.inputs, "tokenizer", None) or {})
            out["text"] = self.text_source
        return out
