"""What every input reader returns: :class:`Inputs` (the samples, in store order) and the
content digest of texts. No reader lives here, so that :mod:`.inputs` (which dispatches to
the readers) and :mod:`.hf_datasets` (a reader) both build on this module and not on each
other."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from actkit.errors import InputError

__all__ = ["Inputs", "short_error", "text_digest"]


def short_error(exc: BaseException) -> str:
    """An exception's message on one line (its type when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass
class Inputs:
    """Samples to extract, in store order.

    Attributes
    ----------
    kind : {"text", "image"}
    source : str
        The path the samples were read from.
    texts : list of str or None
        The text samples (``kind == "text"``).
    image_files : list of Path or None
        Image files (image folder), in sample order.
    array : ndarray of shape (N, H, W, 3), uint8, or None
        Images from a ``.npy`` file (memory-mapped).
    digest : str
        sha256 (hex) over the content of the samples (texts, file bytes and relative
        paths, array bytes and shape); see :meth:`rows_digest` (datasets compute it lazily).
    image_values : sequence or None
        Images of a dataset column (encoded bytes, ``{"bytes", "path"}`` dicts or PIL images).
    column : str or None
        The dataset column the samples come from.
    decode_fn : callable or None
        ``decode_fn(value, i)``: row ``i`` of ``image_values`` as an RGB ``PIL.Image`` (set by
        the reader that made ``image_values``).
    """

    kind: str
    source: str
    texts: list | None = None
    image_files: list | None = None
    array: np.ndarray | None = None
    digest: str = ""
    root: Path | None = field(default=None, repr=False)
    image_values: object = field(default=None, repr=False)
    column: str | None = None
    digest_fn: object = field(default=None, repr=False)
    decode_fn: object = field(default=None, repr=False)

    def __len__(self) -> int:
        if self.texts is not None:
            return len(self.texts)
        if self.image_files is not None:
            return len(self.image_files)
        if self.image_values is not None:
            return len(self.image_values)
        return int(self.array.shape[0])

    def rows_digest(self, n_rows: int | None = None) -> str:
        """sha256 (hex) over the content of the first ``n_rows`` samples (default: all)."""
        if n_rows is None and self.digest:
            return self.digest
        if self.digest_fn is None:
            if n_rows is not None and n_rows != len(self):
                raise ValueError("a digest of a prefix needs text inputs")
            return self.digest
        value = self.digest_fn(n_rows)
        if n_rows is None:
            self.digest = value
        return value

    def image(self, i: int):
        """Return sample ``i`` as an RGB ``PIL.Image`` (image inputs only)."""
        if self.array is not None:
            return Image.fromarray(np.ascontiguousarray(self.array[i]))
        if self.image_values is not None:
            return self.decode_fn(self.image_values[i], i)
        path = self.image_files[i]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except Exception as exc:  # PIL raises many types for a bad file
            raise InputError(f"cannot read image {path}: {short_error(exc)}") from None

    def sources(self) -> tuple[list, dict]:
        """Where each image sample came from: ``(sources, location)``, a path relative to the
        input folder or ``"i"`` (row ``i`` of the ``.npy`` array or dataset) per sample, and
        the input's location (``{"type": "folder" | "npy" | "dataset", "path": ...}``)."""
        if self.image_files is not None:
            return ([Path(f).relative_to(self.root).as_posix() for f in self.image_files],
                    {"type": "folder", "path": os.path.abspath(self.root)})
        kind = "npy" if self.array is not None else "dataset"
        where = os.path.abspath(self.source) if kind == "npy" or Path(self.source).exists() else self.source
        location = {"type": kind, "path": where, **({"column": self.column} if self.column else {})}
        return [str(i) for i in range(len(self))], location

    def images(self, start: int, stop: int) -> list:
        """Samples ``start:stop`` as RGB ``PIL.Image`` objects."""
        return [self.image(i) for i in range(start, stop)]


def text_digest(texts, n_rows: int | None = None) -> str:
    """sha256 (hex) of the first ``n_rows`` texts (all by default), each length-prefixed UTF-8."""
    h = hashlib.sha256(b"text\0")
    n = len(texts) if n_rows is None else min(int(n_rows), len(texts))
    for start in range(0, n, 4096):
        for t in texts[start : min(n, start + 4096)]:
            b = t.encode("utf-8")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()
