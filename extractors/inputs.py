"""Input readers: text files, JSON lines, image folders and uint8 image arrays.

Every reader returns an :class:`Inputs` holding the samples in a fixed order (the
order of the rows in the store), and a content digest used for the inputs fingerprint.

* ``.txt`` -- one sample per line; blank (whitespace-only) lines are skipped, so sample
  ``i`` is the ``i``-th non-blank line.
* ``.jsonl`` -- one JSON object per line with a string field ``"text"``; blank lines skipped.
* a folder -- every image below it (recursively; ``.png .jpg .jpeg .webp .bmp .gif .tif
  .tiff``), in sorted order of the path relative to the folder.
* ``.npy`` -- a ``uint8`` array of shape ``(N, H, W, 3)`` (RGB images).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actkit.errors import InputError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")


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
        paths, array bytes and shape).
    """

    kind: str
    source: str
    texts: list | None = None
    image_files: list | None = None
    array: np.ndarray | None = None
    digest: str = ""
    root: Path | None = field(default=None, repr=False)

    def __len__(self) -> int:
        if self.texts is not None:
            return len(self.texts)
        if self.image_files is not None:
            return len(self.image_files)
        return int(self.array.shape[0])

    def image(self, i: int):
        """Return sample ``i`` as an RGB ``PIL.Image`` (image inputs only)."""
        from PIL import Image

        if self.array is not None:
            return Image.fromarray(np.ascontiguousarray(self.array[i]))
        path = self.image_files[i]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except Exception as exc:  # PIL raises many types for a bad file
            raise InputError(f"cannot read image {path}: {_short(exc)}") from None

    def images(self, start: int, stop: int) -> list:
        """Samples ``start:stop`` as RGB ``PIL.Image`` objects."""
        return [self.image(i) for i in range(start, stop)]


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def read_inputs(path, max_samples: int | None = None) -> Inputs:
    """Read the samples named by ``path``.

    Parameters
    ----------
    path : str or Path
        A ``.txt`` / ``.jsonl`` file, a folder of images or a uint8 ``.npy`` array.
    max_samples : int, optional
        Keep only the first ``max_samples`` samples.

    Returns
    -------
    Inputs

    Raises
    ------
    InputError
        The path is missing, empty, of an unknown type, or holds an unreadable sample.
    """
    if max_samples is not None and int(max_samples) < 1:
        raise InputError(f"--max-samples must be a positive integer, got {max_samples}")
    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"inputs not found: {p}")
    if p.is_dir():
        inputs = _read_image_folder(p, max_samples)
    elif p.suffix.lower() == ".txt":
        inputs = _read_text(p, max_samples, jsonl=False)
    elif p.suffix.lower() == ".jsonl":
        inputs = _read_text(p, max_samples, jsonl=True)
    elif p.suffix.lower() == ".npy":
        inputs = _read_npy(p, max_samples)
    elif p.suffix.lower() in IMAGE_SUFFIXES:
        raise InputError(f"inputs {p} is a single image; put images in a folder and pass the folder")
    else:
        raise InputError(
            f"unsupported inputs {p}: expected a .txt or .jsonl file, a folder of images or a uint8 .npy array"
        )
    if len(inputs) == 0:
        raise InputError(f"inputs {p} hold no samples")
    return inputs


def _read_text(p: Path, max_samples, jsonl: bool) -> Inputs:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read inputs {p}: {_short(exc)}") from None
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"inputs {p} are not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    texts = []
    for lineno, line in enumerate(content.splitlines(), start=1):
        if max_samples is not None and len(texts) >= max_samples:
            break
        if not line.strip():
            continue
        if jsonl:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{p}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise InputError(f'{p}:{lineno}: expected an object with a string field "text"')
            line = record["text"]
            if not line.strip():
                continue
        texts.append(line)
    h = hashlib.sha256(b"text\0")
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return Inputs(kind="text", source=str(p), texts=texts, digest=h.hexdigest())


def _read_image_folder(p: Path, max_samples) -> Inputs:
    from PIL import Image

    files = sorted(
        (f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES),
        key=lambda f: f.relative_to(p).as_posix(),
    )
    if not files:
        raise InputError(f"inputs folder {p} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    if max_samples is not None:
        files = files[:max_samples]
    h = hashlib.sha256(b"images\0")
    for f in files:
        try:
            data = f.read_bytes()
            with Image.open(io.BytesIO(data)) as img:
                img.verify()
        except Exception as exc:
            raise InputError(f"cannot read image {f}: {_short(exc)}") from None
        rel = f.relative_to(p).as_posix().encode("utf-8")
        h.update(len(rel).to_bytes(8, "little"))
        h.update(rel)
        h.update(hashlib.sha256(data).digest())
    return Inputs(kind="image", source=str(p), image_files=files, digest=h.hexdigest(), root=p)


def _read_npy(p: Path, max_samples) -> Inputs:
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as exc:
        raise InputError(f"cannot read {p} as a .npy array: {_short(exc)}") from None
    if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
        raise InputError(
            f"{p}: expected a uint8 array of shape (N, H, W, 3), got {arr.dtype} {tuple(arr.shape)}"
        )
    if max_samples is not None:
        arr = arr[:max_samples]
    h = hashlib.sha256(b"npy\0")
    h.update(np.asarray(arr.shape, dtype=np.int64).tobytes())
    step = 256
    for start in range(0, arr.shape[0], step):
        h.update(np.ascontiguousarray(arr[start : start + step]).tobytes())
    return Inputs(kind="image", source=str(p), array=arr, digest=h.hexdigest())


def inputs_fingerprint(inputs: Inputs, preprocessing: dict) -> str:
    """sha256 (hex) over the inputs' content and the preprocessing options.

    Parameters
    ----------
    inputs : Inputs
    preprocessing : dict
        JSON-serialisable preprocessing options (the extraction driver passes the user's
        choices, e.g. ``max_length``; the model's own tokenizer / image processor settings
        are kept out so that stores of different models on the same inputs agree).
    """
    h = hashlib.sha256()
    h.update(inputs.digest.encode())
    h.update(json.dumps(preprocessing, sort_keys=True, default=str).encode())
    return h.hexdigest()
