"""A unit's example rows turned back into their inputs (the store's recorded inputs,
:class:`actkit.store.RecordedInputs`): text as the row's token inside ``context`` tokens either
side, images as the picture (a PNG data URI, once per sample) with the row's patch or map
position as a box, pooled rows (position -1) as the whole input. Every string is kept as data
(the tokenizer's own pieces); nothing here is markup.
"""

from __future__ import annotations

import base64
import struct
import zlib

import numpy as np

__all__ = ["Renderer", "png_data_uri"]


def png_data_uri(image) -> str:
    """An (H, W, 3) uint8 image as a ``data:image/png;base64,...`` URI (stdlib zlib only)."""
    img = np.ascontiguousarray(np.asarray(image, np.uint8)[..., :3])
    h, w = img.shape[:2]
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


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
        self._tokens = {}
        self.grid = _grid(inputs, int(n_positions), layer_attrs or {}) if self.kind == "image" else None

    def _text(self, sample, position):
        if sample not in self._tokens:
            toks = list(self.inputs.tokens(sample))
            special = getattr(self.inputs, "special", None)
            ids = np.asarray(self.inputs.token_ids(sample))
            flags = [bool(special[i]) for i in ids] if special is not None and len(ids) == len(toks) else None
            self._tokens[sample] = (toks, flags)
        toks, flags = self._tokens[sample]
        if position < 0:
            return {"tokens": toks, "highlight": None, "start": 0}
        a, b = max(0, position - self.context), min(len(toks), position + self.context + 1)
        out = {"tokens": toks[a:b], "highlight": position - a, "start": a}
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
        return out
