"""Input readers: text files, JSON lines, image folders, uint8 image arrays and Hugging Face datasets.

Every reader returns an :class:`Inputs` holding the samples in a fixed order (the
order of the rows in the store), and a content digest used for the inputs fingerprint.

* ``.txt`` -- one sample per line; blank (whitespace-only) lines are skipped, so sample
  ``i`` is the ``i``-th non-blank line. A line ends at ``\n``, ``\r\n`` or ``\r`` only
  (:func:`lines`): U+2028, U+2029, form feeds and the other characters ``str.splitlines``
  breaks at stay inside their sample.
* ``.jsonl`` -- one JSON object per line with a string field ``"text"``; blank lines skipped.
* a folder -- every image below it (recursively; ``.png .jpg .jpeg .webp .bmp .gif .tif
  .tiff``), in sorted order of the path relative to the folder.
* ``.npy`` -- a ``uint8`` array of shape ``(N, H, W, 3)`` (RGB images).
* a ``save_to_disk`` folder, ``.parquet`` / ``.arrow`` files (or a glob), ``hf:NAME`` --
  Hugging Face datasets, one column (``--column``); see :mod:`actkit.extractors.hf_datasets`.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path

import numpy as np
from PIL import Image

from actkit.errors import InputError
from actkit.matrix_files import check_npy_header

from ._samples import Inputs, short_error, text_digest
from .hf_datasets import is_hf_inputs, read_hf

__all__ = ["IMAGE_SUFFIXES", "Inputs", "inputs_fingerprint", "read_inputs", "text_digest"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def lines(content: str) -> list:
    """The lines of a text file as a text editor shows them: broken at ``\n``, ``\r\n`` and
    ``\r`` (not at U+2028, U+2029, ``\f``, ``\v``, U+0085 or U+001C-U+001E, where
    ``str.splitlines`` breaks: they are characters of a sample); no empty last line."""
    out = _LINE_BREAK.split(content)
    return out[:-1] if out and out[-1] == "" else out


def read_inputs(path, max_samples: int | None = None, *, column: str | None = None, split: str | None = None,
                config: str | None = None) -> Inputs:
    """Read the samples named by ``path``.

    Parameters
    ----------
    path : str or Path
        A ``.txt`` / ``.jsonl`` file, a folder of images, a uint8 ``.npy`` array, a
        ``save_to_disk`` folder, a ``.parquet`` / ``.arrow`` file or glob, or ``hf:NAME``.
    max_samples : int, optional
        Keep only the first ``max_samples`` samples.
    column : str, optional
        Dataset column (default ``text``, else ``image`` / ``img``); datasets only.
    split : str, optional
        Dataset split (default ``train``); ``hf:NAME`` and saved ``DatasetDict`` folders.
    config : str, optional
        Dataset configuration name; ``hf:NAME`` only.

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
    if is_hf_inputs(path):
        inputs = read_hf(path, column=column, split=split, config=config, max_samples=max_samples)
        if len(inputs) == 0:
            raise InputError(f"inputs {path} hold no samples")
        return inputs
    if column is not None or config is not None or split is not None:
        raise InputError("--column, --split and --config apply to Hugging Face datasets "
                         "(a save_to_disk folder, .parquet/.arrow files or hf:NAME)")
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
            f"unsupported inputs {p}: expected a .txt or .jsonl file, a folder of images, a uint8 .npy array, "
            "a Hugging Face dataset (save_to_disk folder, .parquet, .arrow) or hf:NAME"
        )
    if len(inputs) == 0:
        raise InputError(f"inputs {p} hold no samples")
    return inputs


def _read_text(p: Path, max_samples, jsonl: bool) -> Inputs:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read inputs {p}: {short_error(exc)}") from None
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"inputs {p} are not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    texts = []
    for lineno, line in enumerate(lines(content), start=1):
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
    return Inputs(kind="text", source=str(p), texts=texts, digest=text_digest(texts),
                  digest_fn=lambda n=None: text_digest(texts, n))


def _read_image_folder(p: Path, max_samples) -> Inputs:
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
            raise InputError(f"cannot read image {f}: {short_error(exc)}") from None
        rel = f.relative_to(p).as_posix().encode("utf-8")
        h.update(len(rel).to_bytes(8, "little"))
        h.update(rel)
        h.update(hashlib.sha256(data).digest())
    return Inputs(kind="image", source=str(p), image_files=files, digest=h.hexdigest(), root=p)


def _read_npy(p: Path, max_samples) -> Inputs:
    check_npy_header(p, "the images")
    try:
        arr = np.load(p, mmap_mode="r", allow_pickle=False)
    except Exception as exc:
        raise InputError(f"cannot read {p} as a .npy array: {short_error(exc)}") from None
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


def inputs_fingerprint(inputs: Inputs, preprocessing: dict, digest: str | None = None) -> str:
    """sha256 (hex) over the inputs' content and the preprocessing options.

    Parameters
    ----------
    inputs : Inputs
    preprocessing : dict
        JSON-serialisable preprocessing options (the extraction driver passes the user's
        choices, e.g. ``max_length``; the model's own tokenizer / image processor settings
        are kept out so that stores of different models on the same inputs agree).
    digest : str, optional
        The content digest of the rows used, when not all of them are (token windows).
    """
    h = hashlib.sha256()
    h.update((digest or inputs.rows_digest()).encode())
    h.update(json.dumps(preprocessing, sort_keys=True, default=str).encode())
    return h.hexdigest()
