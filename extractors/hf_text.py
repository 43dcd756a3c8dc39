"""Language models from ``transformers`` (GPT-NeoX / Pythia and other causal or masked LMs).

Text is tokenised once, up front (so the store knows its exact row count), with the
checkpoint's own tokenizer and ``add_special_tokens=True``; ``max_length`` truncates.
Batches are right-padded: with a causal model the real tokens never attend to padding and
keep positions ``0..len-1``, so their activations equal an unpadded forward pass. The pad
id is the tokenizer's pad token, else its EOS token, else 0 (tokenizers without a pad
token, like Pythia's, work; the padded positions are masked and never stored).
"""

from __future__ import annotations


import numpy as np
import torch
from tqdm.auto import tqdm

from actkit.errors import InputError
from actkit.store import text_record
from actkit._warn import warn_user

from ._base import Adapter, Batch
from ._spans import encode
from .windows import pack_windows, quiet_logs


def special_ids(tokenizer) -> list:
    """The ids of the tokenizer's special tokens."""
    return sorted(set(int(i) for i in getattr(tokenizer, "all_special_ids", []) or []))


def tokenize(tokenizer, texts, step: int = 1024):
    """``(ids, spans)``: the token ids of every text (``add_special_tokens=True``, untruncated)
    and each token's character span (:func:`actkit.extractors._spans.encode`; None for a slow
    tokenizer), with a bar."""
    ids, spans = [], []
    with tqdm(total=len(texts), desc="tokenising", unit="samples", disable=None, leave=False) as bar:
        for start in range(0, len(texts), step):
            i, s = encode(tokenizer, texts[start : start + step], add_special_tokens=True)
            ids.extend(i)
            spans = None if s is None else spans + s
            bar.update(min(step, len(texts) - start))
    return ids, spans


def position_limit(config) -> int | None:
    """The longest input the model's position table takes (``max_position_embeddings``)."""
    n = getattr(config, "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


class TextAdapter(Adapter):
    """Adapter for ``AutoModel`` / ``AutoModelForCausalLM`` language models.

    Parameters
    ----------
    tokenizer : transformers tokenizer
    causal : bool
        The model is a ``*ForCausalLM`` (enables ``final_hidden`` and ``unembedding``).
    """

    def __init__(self, *, model, name, device, info, tokenizer, causal: bool):
        super().__init__(kind="text", model=model, name=name, device=device, info=info)
        self.tokenizer = tokenizer
        self.causal = causal
        self._ids: list | None = None
        self._text = None  # (texts, spans): what each sample's tokens cover, or None
        self._windows = None  # (W, L) int64 ids with --context-length
        self.packing: dict | None = None
        self._max_length = None
        self._skip = False  # --skip-special-tokens
        self._special = np.asarray(special_ids(tokenizer), dtype=np.int64)
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id
        self.pad_id = int(pad) if pad is not None else 0

    def preprocessing(self) -> dict:
        tok = self.tokenizer
        return {
            "tokenizer": type(tok).__name__,
            "vocab_size": len(tok),
            "add_special_tokens": True,
            "max_length": self._max_length,
            "truncation_side": getattr(tok, "truncation_side", "right"),
        }

    def _model_max(self) -> int | None:
        return position_limit(self.model.config)

    def prepare(self, inputs, max_length, tokenized=None):
        """Tokenise every text (``tokenized``: what :func:`tokenize` already gave, reused)."""
        if max_length is not None and int(max_length) < 1:
            raise InputError(f"--max-length must be a positive integer, got {max_length}")
        model_max = self._model_max()
        limit = None if max_length is None else int(max_length)
        if model_max is not None and (limit is None or limit > model_max):
            limit = model_max  # longer inputs than the position table: truncate (and say so)
        self._max_length = limit
        texts = inputs.texts
        with quiet_logs():  # "sequence longer than ..." is reported below, once
            ids, spans = tokenize(self.tokenizer, texts) if tokenized is None else tokenized
            ids = list(ids)
            long = [i for i, seq in enumerate(ids) if limit is not None and len(seq) > limit]
            if long:
                enc, cut = encode(self.tokenizer, [texts[i] for i in long], add_special_tokens=True,
                                  truncation=True, max_length=limit)
                for n, i in enumerate(long):
                    ids[i] = enc[n]
                    if spans is not None:
                        spans[i] = cut[n]
        if long and (max_length is None or int(max_length) > limit):
            warn_user(
                f"{len(long)} of {len(texts)} samples are longer than the model's {limit} positions "
                f"and were truncated to {limit} tokens (`actkit extract --max-length` sets a lower one)",
            )
        for i, seq in enumerate(ids):
            if len(seq) == 0:
                raise InputError(f"sample {i} of {inputs.source} gives no tokens: {texts[i][:40]!r}")
        self._ids = ids
        self._text = None if spans is None else (list(texts), spans)

    def prepare_windows(self, inputs, context_length, max_tokens=None, progress=True):
        """Pack the texts into token windows (:func:`actkit.extractors.windows.pack_windows`)."""
        self._windows, self.packing, self._text = pack_windows(
            self.tokenizer, inputs.texts, context_length, max_tokens, model_positions=self._model_max(),
            progress=progress, record_text=True)
        self._max_length = int(context_length)

    @property
    def windows(self):
        """(W, L) int64 token ids of the windows (after :meth:`prepare_windows`), else None."""
        return self._windows

    def n_samples(self, inputs) -> int:
        return len(inputs) if self._windows is None else int(self._windows.shape[0])

    def lengths(self):
        if self._windows is not None:
            return np.full(self._windows.shape[0], self._windows.shape[1], np.int64)
        return np.fromiter((len(s) for s in self._ids), dtype=np.int64, count=len(self._ids))

    def skip_special_tokens(self) -> None:
        self._skip = True

    def _sequences(self) -> list:
        return list(self._windows) if self._windows is not None else self._ids

    def kept_positions(self):
        if not self._skip:
            return None
        return [np.flatnonzero(~np.isin(np.asarray(s, np.int64), self._special)) for s in self._sequences()]

    def _keep(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
        """(B, T) bool: the real tokens that are not special tokens (``skip_special_tokens``)."""
        if not self._skip:
            return None
        keep = ~torch.isin(ids, torch.from_numpy(self._special).to(ids.device))
        return keep if mask is None else keep & mask

    def record_inputs(self, inputs) -> dict:
        """The token ids of every sample (windows with ``--context-length``), each sample's text
        and its tokens' character spans (a fast tokenizer's offset mapping), the tokenizer's
        identity and its vocabulary (:func:`tokenizer_record`)."""
        texts, spans = self._text if self._text is not None else (None, None)
        return text_record([np.asarray(s, np.int64) for s in self._sequences()], texts=texts, spans=spans,
                           **tokenizer_record(self.tokenizer, self.info.get("revision")))

    def _pack(self, seqs) -> Batch:
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.int64)
        width = int(lengths.max())
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.int64)
        for row, seq in enumerate(seqs):
            ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.int64)
        mask = torch.arange(width)[None, :] < lengths[:, None]
        kwargs = {
            "input_ids": ids.to(self.device),
            "attention_mask": mask.to(self.device, dtype=torch.int64),
        }
        if self.causal:
            kwargs["use_cache"] = False
        return Batch(kwargs=kwargs, size=len(seqs), mask=mask.to(self.device), lengths=lengths.to(self.device),
                     keep=None if not self._skip else self._keep(ids, mask).to(self.device))

    def batch_of(self, inputs, ids):
        return self._pack([self._ids[int(i)] for i in ids])

    def batch(self, inputs, start, stop):
        if self._windows is not None:  # full windows: no padding, no mask
            ids = torch.from_numpy(self._windows[start:stop]).to(self.device)
            kwargs = {"input_ids": ids}
            if self.causal:
                kwargs["use_cache"] = False
            return Batch(kwargs=kwargs, size=int(ids.shape[0]), keep=self._keep(ids, None))
        return self._pack(self._ids[start:stop])

    def dummy_batch(self):
        ids = self.tokenizer("Hello world, this is a probe.", add_special_tokens=True)["input_ids"]
        return self._pack([ids or [self.pad_id]])

    def final_module(self):
        """The module whose output is ``last_hidden_state``: the decoder of a causal LM
        (``get_decoder()``: OPT's head calls ``model.decoder``, not ``model``), else its base
        model; the (encoder) model itself otherwise."""
        if not self.causal:
            return self.model
        decoder = self.model.get_decoder() if callable(getattr(self.model, "get_decoder", None)) else None
        return decoder if isinstance(decoder, torch.nn.Module) else self.model.base_model

    def unembedding(self):
        if not self.causal:
            return super().unembedding()
        head = self.model.get_output_embeddings()
        if head is None or getattr(head, "weight", None) is None:
            return super().unembedding()
        return head.weight.detach().to("cpu", torch.float32).numpy().copy()

    def final_norm(self) -> dict | None:
        """The norm a causal LM applies before its unembedding, which the logit lens folds in:
        ``{"module": dotted name, "kind": "layernorm" | "rmsnorm", "gain": (D,) float32}`` (the
        last norm child of the decoder: GPT-NeoX's ``final_layer_norm``, GPT-2's ``ln_f``,
        Llama's ``norm``; a Gemma norm's gain is ``1 + weight``), or None."""
        if not self.causal:
            return None
        decoder = self.final_module()
        norms = [m for _, m in decoder.named_children() if "norm" in type(m).__name__.lower()
                 and isinstance(getattr(m, "weight", None), torch.Tensor) and m.weight.ndim == 1]
        if not norms:
            return None
        norm = norms[-1]
        name = next(n for n, m in self.model.named_modules() if m is norm)
        gain = norm.weight.detach().to("cpu", torch.float32).numpy().copy()
        if "gemma" in type(norm).__name__.lower():
            gain = gain + 1.0
        kind = "layernorm" if isinstance(norm, torch.nn.LayerNorm) else "rmsnorm"
        return {"module": name, "kind": kind, "gain": gain}


def _byte_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2, GPT-NeoX, Pythia): the printable character that
    stands for each of the 256 bytes in a raw token. Printable Latin-1 bytes stand for
    themselves; the others are shifted to code points 256 and above, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
            *range(ord("\u00ae"), ord("\u00ff") + 1)]
    shifted = [b for b in range(256) if b not in kept]
    return {**{chr(b): b for b in kept}, **{chr(256 + n): b for n, b in enumerate(shifted)}}


_BYTES = _byte_alphabet()


def _partial_bytes(readable: str, token) -> str:
    """A byte-level token that is part of a multi-byte character decodes alone to U+FFFD; show
    its bytes instead (``'\\xe2\\x80'``), so that tokens stay told apart on a page. Any other
    string is kept as the tokenizer decodes it."""
    if "\ufffd" not in readable or not token or any(c not in _BYTES for c in str(token)):
        return readable
    return bytes(_BYTES[c] for c in str(token)).decode("utf-8", "backslashreplace")


def tokenizer_record(tokenizer, revision=None) -> dict:
    """The tokenizer's identity (``name_or_path``, ``revision``, ``class``: what
    ``transformers.AutoTokenizer.from_pretrained`` needs) and its vocabulary decoded once:
    the readable string of every id (``decode([id])``; a byte-level token that is only part of
    a character, which decodes to U+FFFD alone, as its escaped bytes), its raw token
    (``convert_ids_to_tokens``) and whether it is a special token (the keywords of
    :func:`actkit.store.text_record` besides the ids)."""
    size = len(tokenizer)
    ids = list(range(size))
    with quiet_logs():
        readable = decode_each(tokenizer, ids)
        raw = tokenizer.convert_ids_to_tokens(ids)
    readable = [_partial_bytes(text, token) for text, token in zip(readable, raw)]
    special = np.zeros(size, bool)
    specials = [i for i in (getattr(tokenizer, "all_special_ids", None) or []) if 0 <= int(i) < size]
    special[specials] = True
    identity = {"name_or_path": str(getattr(tokenizer, "name_or_path", "") or ""), "revision": revision,
                "class": type(tokenizer).__name__}
    return {"tokenizer": identity, "vocab": [str(t) for t in readable],
            "vocab_tokens": ["" if t is None else str(t) for t in raw], "special": special}


def decode_each(tokenizer, ids) -> list:
    """``batch_decode([[i] for i in ids])`` without clean-up: the readable string of each id.

    A fast tokenizer whose ``_decode`` is the library's own decodes in its Rust backend in one
    call (the same strings; 6x faster on a 30,522-token vocabulary, a fixed cost of every text
    extraction); any other tokenizer goes through ``batch_decode``.
    """
    from transformers import PreTrainedTokenizerFast  # measured import cost (seconds): loaded with a text model

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if isinstance(tokenizer, PreTrainedTokenizerFast) and type(tokenizer)._decode is PreTrainedTokenizerFast._decode \
            and backend is not None:
        return backend.decode_batch([[int(i)] for i in ids], skip_special_tokens=False)
    return tokenizer.batch_decode([[int(i)] for i in ids], skip_special_tokens=False,
                                  clean_up_tokenization_spaces=False)
