"""What each input sample of a store was: the ``/inputs`` group (``actkit-store/4``) and
:class:`RecordedInputs`, its reader.

A store records its inputs once, when it is created, so that a row ``[sample, position]`` can
be shown as the text or image it came from without the model:

* **text**: the token ids of every sample as the model saw them (ragged: ``offsets``,
  ``(n_samples + 1,)`` int64, and ``token_ids``, int64; sample ``i`` is
  ``token_ids[offsets[i]:offsets[i + 1]]`` and a row's position indexes into it), since
  ``actkit-store/5`` each sample's original text and every token's character span in it
  (``texts``: UTF-8; ``token_spans``: ``[start, end)`` in characters, aligned with
  ``token_ids``: the tokenizer's offset mapping), the tokenizer's identity (``name_or_path``, ``revision``, class: enough for
  ``transformers.AutoTokenizer.from_pretrained``), and the tokenizer's vocabulary decoded
  once (the readable string of every id, ``decode([id])``, and the raw token,
  ``convert_ids_to_tokens``) with a per-id ``special`` flag, so that the store alone shows
  tokens (nothing here imports transformers);
* **images**: each sample's source (a path relative to the input folder, ``"i"`` for row
  ``i`` of a ``.npy`` array or of a dataset), the input's location, and the model's
  preprocessing geometry: the size ``(H, W)`` it feeds the model, how it got there (resize,
  centre crop) and the patch grid of a ViT.

Strings are stored as UTF-8 bytes (``uint8``) with int64 offsets (no variable-length strings,
see ``_integrity``); every dataset's sha256 is in the checksummed ``/meta`` document
(``recorded_inputs``), and the group's datasets are checked when first read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from actkit.errors import ActkitError, StoreError
from actkit.store import _integrity as integrity

__all__ = ["RecordedInputs", "text_record", "image_record", "META_KEY", "GROUP"]

GROUP = "inputs"
META_KEY = "recorded_inputs"
KINDS = ("text", "image")


# ----------------------------------------------------------------------------- strings
def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets (n + 1,) int64, bytes (total,) uint8)``: the UTF-8 of each string, concatenated."""
    raw = [str(s).encode("utf-8", "surrogatepass") for s in strings]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(b) for b in raw], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(raw), dtype=np.uint8).copy()


def unpack_strings(offsets: np.ndarray, data: np.ndarray) -> list[str]:
    raw = data.tobytes()
    return [raw[a:b].decode("utf-8", "replace") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def ragged(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets (n + 1,) int64, values int64)`` of a list of integer sequences."""
    offsets = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([len(s) for s in seqs], out=offsets[1:])
    values = np.fromiter((int(v) for s in seqs for v in s), dtype=np.int64, count=int(offsets[-1]))
    return offsets, values


# ----------------------------------------------------------------------------- records
def text_record(token_ids: Sequence[Sequence[int]], *, tokenizer: Mapping[str, Any], vocab: Sequence[str],
                special, vocab_tokens: Sequence[str] | None = None, texts: Sequence[str] | None = None,
                spans=None) -> dict:
    """What a text store records (the ``inputs=`` of :func:`~actkit.store.create_store`).

    Parameters
    ----------
    token_ids : sequence of int sequences
        The ids of every sample, as the model saw them (special tokens included).
    tokenizer : dict
        Its identity: ``name_or_path``, ``revision``, ``class`` (JSON values).
    vocab : sequence of str, length V
        The readable string of every id (``tokenizer.decode([id])``).
    special : sequence of bool, length V
        Whether each id is one of the tokenizer's special tokens.
    vocab_tokens : sequence of str, optional
        The raw token of every id (``convert_ids_to_tokens``); default ``vocab``.
    texts : sequence of str, optional
        Each sample's original text (a token window: the characters its tokens cover, see
        :func:`actkit.extractors.windows.pack_windows`); given with ``spans``.
    spans : sequence of (T_i, 2) int arrays, optional
        Each token's ``[start, end)`` in its sample's text, in characters (code points), as
        the tokenizer's offset mapping gives it; a token without characters of its own (most
        special tokens) has an empty span where it stands.
    """
    offsets, ids = ragged(token_ids)
    special = np.asarray(special, dtype=bool)
    if special.shape != (len(vocab),):
        raise StoreError(f"special flags: {special.shape}, expected ({len(vocab)},)")
    if ids.size and (ids.min() < 0 or ids.max() >= len(vocab)):
        raise StoreError(f"token ids outside the vocabulary of {len(vocab)} strings")
    v_off, v_bytes = pack_strings(vocab)
    t_off, t_bytes = pack_strings(vocab if vocab_tokens is None else vocab_tokens)
    arrays = {"offsets": offsets, "token_ids": ids, "vocab_offsets": v_off, "vocab_bytes": v_bytes,
              "vocab_token_offsets": t_off, "vocab_token_bytes": t_bytes, "special": special.astype(np.uint8)}
    if (texts is None) != (spans is None):
        raise StoreError("recorded text: give both texts and spans, or neither")
    if texts is not None:
        arrays.update(_text_arrays(texts, spans, offsets))
    info = {"tokenizer": dict(tokenizer), "vocab_size": len(vocab)}
    return {"kind": "text", "n_samples": len(token_ids), "info": info, "arrays": arrays}


def _text_arrays(texts, spans, offsets) -> dict:
    """``text_offsets``, ``text_bytes`` (each sample's UTF-8) and ``token_spans`` ((tokens, 2)
    int32, characters), checked: one span per token, inside its text."""
    if len(texts) != offsets.size - 1 or len(spans) != offsets.size - 1:
        raise StoreError(f"recorded text: {len(texts)} texts and {len(spans)} span lists for {offsets.size - 1} samples")
    t_off, t_bytes = pack_strings(texts)
    parts = [np.asarray(s, np.int64).reshape(-1, 2) for s in spans]
    for i, (sp, text) in enumerate(zip(parts, texts)):
        if sp.shape[0] != offsets[i + 1] - offsets[i] or (sp.size and (sp.min() < 0 or sp[:, 1].max() > len(text)
                                                                         or (sp[:, 1] < sp[:, 0]).any())):
            raise StoreError(f"recorded text: the spans of sample {i} do not fit its {offsets[i + 1] - offsets[i]} "
                             f"tokens and {len(text)} characters")
    flat = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
    if flat.size and flat.max() >= 2 ** 31:
        raise StoreError("recorded text: a sample of 2**31 characters or more")
    return {"text_offsets": t_off, "text_bytes": t_bytes, "token_spans": flat.astype(np.int32)}


def image_record(sources: Sequence[str], *, location: Mapping[str, Any], image_size, resize: Mapping[str, Any],
                 patch_grid=None, prefix_tokens: int = 0) -> dict:
    """What an image store records.

    Parameters
    ----------
    sources : sequence of str
        Each sample's source: a path relative to the input folder, or ``"i"`` (row ``i`` of a
        ``.npy`` array or of a dataset).
    location : dict
        ``{"type": "folder" | "npy" | "dataset", "path": ..., ...}`` (a dataset also its
        ``column``, ``split``, ``config``).
    image_size : (H, W)
        What the model's preprocessing feeds it.
    resize : dict
        ``{"shortest_edge": S}`` or ``{"height": H, "width": W}``, with its ``resample`` filter
        (``"bilinear"``, ``"bicubic"``, ...), then a centre crop to ``image_size`` (the model's
        own geometry; the colour normalisation is left out).
    patch_grid : (gh, gw), optional
        A ViT's grid of patches (token ``prefix_tokens + h * gw + w``).
    prefix_tokens : int
        Tokens before the patches (a ViT's CLS token: 1).
    """
    offsets, data = pack_strings(sources)
    info = {"location": dict(location), "image_size": [int(x) for x in image_size], "resize": dict(resize),
            "patch_grid": None if patch_grid is None else [int(x) for x in patch_grid],
            "prefix_tokens": int(prefix_tokens)}
    return {"kind": "image", "n_samples": len(sources), "info": info,
            "arrays": {"source_offsets": offsets, "source_bytes": data}}


def check_record(record: Mapping[str, Any], n_samples: int) -> None:
    if record.get("kind") not in KINDS:
        raise StoreError(f"recorded inputs of an unknown kind {record.get('kind')!r}")
    if int(record["n_samples"]) != int(n_samples):
        raise StoreError(f"recorded inputs hold {record['n_samples']} samples, the store {n_samples}")


def write_inputs(f, record: Mapping[str, Any]) -> None:
    """The ``/inputs`` group of a new store file ``f`` (its checksums are in ``meta_entry``)."""
    g = f.create_group(GROUP)
    g.attrs["kind"] = integrity.fixed(record["kind"])
    g.attrs["n_samples"] = np.int64(record["n_samples"])
    for key in sorted(record["arrays"]):
        g.create_dataset(key, data=np.ascontiguousarray(record["arrays"][key]))


def meta_entry(record: Mapping[str, Any]) -> dict:
    """``/meta["recorded_inputs"]``: kind, sample count, the JSON part and each dataset's sha256."""
    return {"kind": record["kind"], "n_samples": int(record["n_samples"]), **record["info"],
            "sha256": {k: integrity.array_sha256(np.ascontiguousarray(v)) for k, v in sorted(record["arrays"].items())}}


def planned_bytes(record: Mapping[str, Any] | None) -> int:
    if not record:
        return 0
    return sum(np.asarray(v).nbytes for v in record["arrays"].values()) + 4096 * (len(record["arrays"]) + 1)


# ----------------------------------------------------------------------------- reading
class RecordedInputs:
    """What each input sample of a store was (``store.inputs``).

    Attributes
    ----------
    kind : {"text", "image"}
    n_samples : int
    fingerprint : str
        The inputs fingerprint of the store they belong to.
    tokenizer : dict
        Text: the tokenizer's identity (``name_or_path``, ``revision``, ``class``).
    image_size : (H, W) or None
        Images: the size the model's preprocessing feeds it.
    patch_grid : (gh, gw) or None
        Images into a ViT: its grid of patches (row position ``prefix_tokens + h * gw + w``).
    prefix_tokens : int
        Images into a ViT: tokens before the patches (CLS: 1).
    info : dict
        Everything recorded besides the arrays (JSON).
    """

    def __init__(self, info: Mapping[str, Any], arrays, *, fingerprint: str = "", where: str = "",
                 base: str | os.PathLike | None = None, reader=None):
        """``arrays``: a dict of ndarrays, or an h5py group read (and checked against
        ``info["sha256"]``) on first use; ``base``: the folder a relative image location is
        relative to (the store's); ``reader(i)``: image ``i`` as a PIL image (datasets, read by
        :func:`actkit.extractors.record_inputs`)."""
        self.info = dict(info)
        self.kind = str(self.info["kind"])
        self.n_samples = int(self.info["n_samples"])
        self.fingerprint = str(fingerprint or "")
        self._where = where or "recorded inputs"
        self._source = arrays
        self._cache: dict = {}
        self._base = None if base is None else Path(base)
        self._strings: dict = {}
        self._array = None
        self._reader = reader

    @classmethod
    def from_record(cls, record: Mapping[str, Any], *, fingerprint: str = "", where: str = "",
                    reader=None) -> "RecordedInputs":
        """In-memory inputs from :func:`text_record` / :func:`image_record` (not in a store);
        ``reader(i)``: image ``i`` as a PIL image."""
        return cls(meta_entry(record), dict(record["arrays"]), fingerprint=fingerprint, where=where, reader=reader)

    def check_for(self, store) -> None:
        """One line unless these are the inputs of ``store`` (a store or embedding file): equal
        inputs fingerprints, or, where the store has none, as many samples."""
        check_attachable(store, self)

    # --- raw arrays, checked once
    def _get(self, name: str) -> np.ndarray:
        if name not in self._cache:
            if isinstance(self._source, dict):  # in memory (an h5py group is a Mapping too)
                arr = np.asarray(self._source[name])
            else:
                with integrity.h5_errors(self._where):
                    arr = self._source[name][()]
                digest = self.info.get("sha256", {}).get(name)
                if digest is None or integrity.array_sha256(arr) != digest:
                    raise StoreError(f"{self._where}: /inputs/{name} does not match its checksum; the file is "
                                     "corrupt; re-create it (rerun the command that wrote it with --overwrite)")
            self._cache[name] = arr
        return self._cache[name]

    def _check_sample(self, sample) -> int:
        i = int(sample)
        if not 0 <= i < self.n_samples:
            raise ActkitError(f"sample {sample} out of range: the inputs hold {self.n_samples} samples")
        return i

    def _require(self, kind: str, what: str) -> None:
        if self.kind != kind:
            raise ActkitError(f"{what} needs {kind} inputs; these are {self.kind} inputs")

    # --- text
    @property
    def tokenizer(self) -> dict:
        return dict(self.info.get("tokenizer") or {})

    def token_ids(self, sample: int) -> np.ndarray:
        """(T,) int64: the ids of ``sample`` as the model saw them (position p = entry p)."""
        self._require("text", "token_ids")
        i = self._check_sample(sample)
        off = self._get("offsets")
        return self._get("token_ids")[off[i]:off[i + 1]].copy()

    @property
    def lengths(self) -> np.ndarray:
        """(n_samples,) int64 tokens (text) of every sample."""
        self._require("text", "lengths")
        return np.diff(self._get("offsets"))

    def _vocab_list(self, key: str) -> list[str]:
        if key not in self._strings:
            self._strings[key] = unpack_strings(self._get(f"{key}_offsets"), self._get(f"{key}_bytes"))
        return self._strings[key]

    @property
    def vocab(self) -> list[str]:
        """The readable string of every token id (``decode([id])``), length = vocabulary size."""
        self._require("text", "vocab")
        return self._vocab_list("vocab")

    @property
    def vocab_tokens(self) -> list[str]:
        """The raw token of every id (``convert_ids_to_tokens``: ``Ġthe``, ``##ing``)."""
        self._require("text", "vocab_tokens")
        return self._vocab_list("vocab_token")

    @property
    def special(self) -> np.ndarray:
        """(V,) bool: whether each token id is a special token of the tokenizer."""
        self._require("text", "special")
        return self._get("special").astype(bool)

    def tokens(self, sample: int) -> list[str]:
        """The readable string of each token of ``sample``."""
        vocab = self.vocab
        return [vocab[i] for i in self.token_ids(sample).tolist()]

    @property
    def has_text(self) -> bool:
        """Whether the original text and the tokens' character spans are recorded (stores of
        ``actkit-store/5`` and inputs re-attached by :func:`actkit.extractors.record_inputs`)."""
        return self.kind == "text" and "token_spans" in (self.info.get("sha256") or self._source)

    def text(self, sample: int) -> str:
        """The original text of ``sample`` (a token window: the characters its tokens cover)."""
        self._require("text", "text")
        i = self._check_sample(sample)
        off = self._get("text_offsets")
        return self._get("text_bytes")[off[i]:off[i + 1]].tobytes().decode("utf-8", "surrogatepass")

    def token_spans(self, sample: int) -> np.ndarray:
        """(T, 2) int64: ``[start, end)`` of each token of ``sample`` in :meth:`text`
        (characters; empty where a token without characters, a special token, stands)."""
        self._require("text", "token_spans")
        i = self._check_sample(sample)
        off = self._get("offsets")
        return self._get("token_spans")[off[i]:off[i + 1]].astype(np.int64)

    def token_at(self, samples, positions) -> np.ndarray:
        """(rows,) int64: the token id at each ``[sample, position]`` (-1 for a pooled row,
        position -1, or a position past its sample)."""
        self._require("text", "token ids")
        samples, positions = np.asarray(samples, np.int64), np.asarray(positions, np.int64)
        off, ids = self._get("offsets"), self._get("token_ids")
        real = (positions >= 0) & (positions < off[samples + 1] - off[samples])
        out = np.full(samples.shape, -1, np.int64)
        out[real] = ids[off[samples[real]] + positions[real]]
        return out

    def is_special(self, samples, positions) -> np.ndarray:
        """(rows,) bool: whether the token at each ``[sample, position]`` is a special token
        (False for pooled rows, position -1)."""
        self._require("text", "special tokens")
        samples, positions = np.asarray(samples, np.int64), np.asarray(positions, np.int64)
        off, ids, special = self._get("offsets"), self._get("token_ids"), self.special
        lengths = off[samples + 1] - off[samples]
        real = (positions >= 0) & (positions < lengths)
        out = np.zeros(samples.shape, bool)
        out[real] = special[ids[off[samples[real]] + positions[real]]]
        return out

    # --- images
    @property
    def image_size(self):
        size = self.info.get("image_size")
        return None if size is None else tuple(size)

    @property
    def patch_grid(self):
        grid = self.info.get("patch_grid")
        return None if grid is None else tuple(grid)

    @property
    def prefix_tokens(self) -> int:
        return int(self.info.get("prefix_tokens", 0))

    def source(self, sample: int) -> str:
        """Where image ``sample`` came from: its path relative to the input folder, or ``"i"``
        (row ``i`` of the ``.npy`` array or dataset)."""
        self._require("image", "source")
        i = self._check_sample(sample)
        if "sources" not in self._strings:
            self._strings["sources"] = unpack_strings(self._get("source_offsets"), self._get("source_bytes"))
        return self._strings["sources"][i]

    def image(self, sample: int) -> np.ndarray:
        """(H, W, 3) uint8: image ``sample`` resized and cropped as the model's preprocessing
        did (``image_size``; its colour normalisation left out), read from its source."""
        from PIL import Image  # PIL: only to show an image (`import actkit.store` stays light)

        self._require("image", "image")
        src = self.source(sample)
        loc = self.info["location"]
        path = self._resolve(loc["path"])
        if self._reader is not None:
            pil = self._reader(int(sample)).convert("RGB")
        elif loc["type"] == "folder":
            try:
                with Image.open(path / src) as img:
                    pil = img.convert("RGB")
            except OSError as exc:
                raise ActkitError(f"cannot read image {path / src} of sample {sample}: {exc}; the inputs "
                                  "moved? re-attach them with --inputs") from None
        elif loc["type"] == "npy":
            if self._array is None:
                try:
                    self._array = np.load(path, mmap_mode="r", allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise ActkitError(f"cannot read {path}: {exc}; re-attach the inputs with --inputs") from None
            pil = Image.fromarray(np.ascontiguousarray(self._array[int(src)]))
        else:
            raise ActkitError(f"sample {sample} is row {src} of the dataset {loc.get('path')}; reading datasets "
                              "needs actkit.extractors.record_inputs(store, DATASET) (--inputs DATASET)")
        return preprocess_geometry(pil, self.info["resize"], self.image_size)

    def _resolve(self, path) -> Path:
        p = Path(path)
        if not p.is_absolute() and self._base is not None and not p.exists():
            p = self._base / p
        return p

    def as_record(self) -> dict:
        """These inputs as :func:`text_record` / :func:`image_record` give them (what
        :func:`~actkit.store.create_store` writes: a copy of a store keeps its inputs)."""
        names = sorted(self.info.get("sha256") or (self._source.keys() if isinstance(self._source, dict) else ()))
        info = {k: v for k, v in self.info.items() if k not in ("kind", "n_samples", "sha256")}
        return {"kind": self.kind, "n_samples": self.n_samples, "info": info,
                "arrays": {name: self._get(name) for name in names}}

    def __repr__(self):
        return f"<actkit RecordedInputs {self.kind}, {self.n_samples} samples>"


#: resampling filter names -> PIL's codes (the values of PIL.Image.Resampling)
_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


def preprocess_geometry(pil, resize: Mapping[str, Any], image_size) -> np.ndarray:
    """``pil`` resized (``{"shortest_edge": S}`` or ``{"height", "width"}``) and centre-cropped
    to ``image_size`` (H, W), as (H, W, 3) uint8."""
    from PIL import Image  # PIL: only to show an image (`import actkit.store` stays light)

    w, h = pil.size
    if "shortest_edge" in resize:
        s = int(resize["shortest_edge"])
        scale = s / min(w, h)
        new = (max(1, round(w * scale)), max(1, round(h * scale)))
    else:
        new = (int(resize["width"]), int(resize["height"]))
    if new != (w, h):
        pil = pil.resize(new, _RESAMPLE.get(str(resize.get("resample", "bicubic")), Image.BICUBIC))
    arr = np.asarray(pil.convert("RGB"), dtype=np.uint8)
    if image_size is not None:
        H, W = (int(x) for x in image_size)
        top, left = max(0, (arr.shape[0] - H) // 2), max(0, (arr.shape[1] - W) // 2)
        arr = arr[top:top + H, left:left + W]
    return np.ascontiguousarray(arr)


def read_recorded(store) -> RecordedInputs | None:
    """The recorded inputs of an open store, or None when its format did not record them."""
    entry = store.meta.get(META_KEY)
    if not entry:
        return None
    with integrity.h5_errors(store.path):
        if GROUP not in store.file:
            raise StoreError(f"cannot read {store.path}: the file is corrupt (its metadata names recorded inputs, "
                             "/inputs is missing)")
        group = store.file[GROUP]
    return RecordedInputs(entry, group, fingerprint=store.inputs_fingerprint, where=str(store.path),
                          base=store.path.parent)


def check_attachable(store, recorded: RecordedInputs, what: str = "--inputs") -> None:
    """One line unless ``recorded`` are the inputs of ``store`` (equal inputs fingerprints; a
    store without one, such as an embedding file, needs the same number of samples)."""
    mine = str(getattr(store, "inputs_fingerprint", "") or "")
    if mine:
        if recorded.fingerprint != mine:
            raise ActkitError(f"{what} are not the inputs of {store.path} (their inputs fingerprint "
                              f"{recorded.fingerprint[:12] or 'none'} differs from the store's {mine[:12]}); "
                              "give the inputs and options the store was extracted from")
    elif recorded.n_samples != int(store.n_samples):
        raise ActkitError(f"{what} hold {recorded.n_samples} samples, {store.path} has {store.n_samples}; give "
                          "the inputs it was computed from")
