"""Re-attaching the inputs of a store that did not record them (older formats, embedding files).

A store of ``actkit-store/4`` records what each input sample was (``store.inputs``). For an
older store, an embedding file or a store whose source is gone, :func:`record_inputs` reads
the inputs again and prepares them as the extraction did, with the store's recorded model
(its tokenizer or image processor), and checks that they are the store's inputs (equal
inputs fingerprints; a store without one, such as an embedding file, needs the same number
of samples). Nothing is written: the result is attached to the open store
(:meth:`actkit.store.Store.attach_inputs`) and returned.
"""

from __future__ import annotations

import numpy as np

from actkit.errors import ActkitError
from actkit.store import RecordedInputs

from . import registry
from .inputs import read_inputs

__all__ = ["decoded_text", "record_inputs"]


def _extraction_provenance(store) -> dict:
    """The provenance of the extraction behind ``store`` (a derived store: its source's)."""
    prov = dict(getattr(store, "provenance", {}) or {})
    while "source_provenance" in prov:
        prov = dict(prov["source_provenance"] or {})
    return prov


def _check_early(store, data, fingerprint, n, where):
    """One line unless ``data`` can be the inputs of ``store``: as many samples, and (where the
    store has one) the same inputs fingerprint, which hashes the raw samples and the options,
    not their tokens."""
    if n and len(data) != n:
        raise ActkitError(f"--inputs {where} hold {len(data)} samples, {store.path} has {n}; give the inputs it "
                          "was computed from")
    mine = str(getattr(store, "inputs_fingerprint", "") or "")
    if mine and fingerprint != mine:
        raise ActkitError(f"--inputs {where} are not the inputs of {store.path} (their inputs fingerprint "
                          f"{fingerprint[:12]} differs from the store's {mine[:12]}); give the inputs and options "
                          "the store was extracted from")


def record_inputs(store, inputs, *, model: str | None = None, revision: str | None = None, checkpoint=None,
                  max_length: int | None = None, max_samples: int | None = None, column: str | None = None,
                  split: str | None = None, config: str | None = None, trust_remote_code: bool = False,
                  allow_pickle: bool = False) -> RecordedInputs:
    """The inputs of ``store`` read again from ``inputs`` and prepared as its extraction did.

    Parameters
    ----------
    store : Store or MatrixStore
        An open store (or embedding file) whose inputs were not recorded.
    inputs : str or path
        What ``actkit extract --inputs`` read (a ``.txt``/``.jsonl`` file, image folder,
        ``.npy``, dataset).
    model, revision : str, optional
        The model whose tokenizer / image processor prepared the inputs; default: the store's
        recorded model (a derived store: its source's). Needed for embedding files.
    checkpoint : path, optional
        ``timm:NAME`` weights (only their preprocessing is used).
    max_length, max_samples, column, split, config
        The reader options of the extraction; default: the store's recorded ones.

    Returns
    -------
    RecordedInputs
        Also attached to ``store`` when it is an actkit store (``store.inputs``).

    Raises
    ------
    ActkitError
        No model known, or the inputs are not the store's (another inputs fingerprint, or
        another number of samples): one line.
    """
    from ._records import samples_fingerprint  # the driver's fingerprint rule, once

    prov = _extraction_provenance(store)
    model = model or prov.get("model")
    if not model:
        raise ActkitError(f"{store.path} does not record the model that prepared its inputs; name it: --model MODEL "
                          "(actkit units), model=MODEL (actkit.extractors.record_inputs(store, inputs, model=...))")
    revision = revision if revision is not None else prov.get("revision")
    max_length = max_length if max_length is not None else prov.get("max_length")
    column = column or prov.get("inputs_column")
    split, config = split or prov.get("inputs_split"), config or prov.get("inputs_config")
    n = int(prov.get("n_samples") or getattr(store, "n_samples", 0) or 0)
    packing = prov.get("packing")
    if max_samples is None and n and not packing:
        max_samples = n
    data = read_inputs(inputs, max_samples=max_samples, column=column, split=split, config=config)
    if not packing:  # before any model or tokenizer loads: the count, and the fingerprint of the raw inputs
        _check_early(store, data, samples_fingerprint(data, None, max_length), n, inputs)
    elif packing.get("rows_used") and (len(data) < int(packing["rows_used"]) or (
            packing.get("max_tokens") is None and len(data) != int(packing["rows_used"]))):
        raise ActkitError(f"--inputs {inputs} hold {len(data)} texts; the windows of {store.path} were cut from "
                          f"{packing['rows_used']}; give the inputs it was computed from")
    adapter = registry.load_model(str(model), revision=revision, checkpoint=checkpoint, device="cpu",
                                  dtype="float32", trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
    adapter = adapter.for_inputs(data.kind)
    max_tokens = None
    if packing:
        max_tokens = packing.get("max_tokens")
        adapter.prepare_windows(data, int(packing["context_length"]), max_tokens, progress=False)
    else:
        adapter.prepare(data, max_length)
    recorded = adapter.record_inputs(data)
    fingerprint = samples_fingerprint(data, adapter, max_length, max_tokens, packing)
    reader = data.image if data.kind == "image" else None  # a dataset's images are read through it
    out = RecordedInputs.from_record(recorded, fingerprint=fingerprint, where=str(inputs), reader=reader)
    out.check_for(store)
    attach = getattr(store, "attach_inputs", None)
    if attach is not None:
        attach(out)
    return out


class DecodedText:
    """The recorded text inputs of an older store (``actkit-store/4``: token ids, no text),
    with each sample's text decoded from its ids by the recorded tokenizer and re-tokenized
    with offsets (:func:`decoded_text`); everything else is the recorded inputs'."""

    text_source = "decoded"
    has_text = True

    def __init__(self, recorded, tokenizer):
        self._recorded, self._tokenizer, self._done = recorded, tokenizer, {}

    def __getattr__(self, name):
        return getattr(self._recorded, name)

    def _decode(self, sample):
        if sample not in self._done:
            from ._spans import place_empty  # the stores' rule for the spans of tokens without characters

            ids = self._recorded.token_ids(sample)
            keep = ~self._recorded.special[ids]
            tok = self._tokenizer
            text = tok.decode(ids[keep].tolist(), skip_special_tokens=False, clean_up_tokenization_spaces=False)
            enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
            spans = np.zeros((ids.size, 2), np.int64)
            if enc["input_ids"] == ids[keep].tolist():
                spans[keep] = np.asarray(enc["offset_mapping"], np.int64).reshape(-1, 2)
            else:  # the decoded text tokenizes otherwise: each token's own decoding, one after another
                pieces = [tok.decode([int(i)], skip_special_tokens=False) for i in ids[keep]]
                ends = np.cumsum([len(p) for p in pieces], dtype=np.int64)
                spans[keep] = np.stack([ends - [len(p) for p in pieces], ends], axis=1) if pieces else spans[keep]
                text = "".join(pieces)
            self._done[sample] = (text, place_empty(spans))
        return self._done[sample]

    def text(self, sample) -> str:
        return self._decode(int(sample))[0]

    def token_spans(self, sample) -> np.ndarray:
        return self._decode(int(sample))[1]


def decoded_text(recorded):
    """``recorded`` text inputs with each sample's text: as they are when they record it, else
    (an ``actkit-store/4`` store) decoded from the token ids by the recorded tokenizer
    (:class:`DecodedText`; read from a local folder or the local Hugging Face cache only);
    unchanged when that tokenizer cannot be loaded or has no offset mapping."""
    if recorded is None or recorded.kind != "text" or getattr(recorded, "has_text", False):
        return recorded
    name = (getattr(recorded, "tokenizer", None) or {}).get("name_or_path")
    loaded = registry.load_tokenizer(name, revision=recorded.tokenizer.get("revision")) if name else None
    if loaded is None or not getattr(loaded[0], "is_fast", False):
        return recorded
    return DecodedText(recorded, loaded[0])
