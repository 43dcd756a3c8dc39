"""Token windows: the text stream packed into consecutive windows of exactly L tokens.

The convention of sparse-autoencoder and interpretability work (TransformerLens
``tokenize_and_concatenate``, SAELens ``context_size``):

1. every text is tokenised without special tokens and followed by the tokenizer's EOS token
   (the document separator; none when the tokenizer has no EOS);
2. the texts are concatenated, in input order, into one token stream;
3. the stream is cut into consecutive pieces of ``L - 1`` tokens, each window being the
   tokenizer's BOS token followed by its piece -- or, for a tokenizer without a BOS token,
   pieces of ``L`` tokens; windows never overlap and the final partial piece is dropped;
4. with ``max_tokens = N`` there are at most ``N // L`` windows, and texts are read and
   tokenised only until those are filled (the rest of the corpus is never touched).

This runs as a pre-pass before the store exists, so the row count (``windows * L`` rows with
``--pool none``) is known before the first forward pass; the packed ids are held in memory
(4 bytes a token: 100 M tokens take 400 MB). Without ``--max-tokens`` the whole corpus is
tokenised in this pre-pass.
"""

from __future__ import annotations

import contextlib
import importlib

import numpy as np
from tqdm.auto import tqdm

from actkit._warn import warn_user
from actkit.errors import InputError

_CHUNK = 1024  # texts tokenised per tokenizer call (the first calls take fewer: 64, 128, ...)


@contextlib.contextmanager
def quiet_logs(library: str = "transformers"):
    """Only errors from ``library``'s logging (``transformers`` or ``datasets``) in the block:
    e.g. transformers' "sequence length is longer than the specified maximum ... indexing
    errors" while a tokenizer runs on texts actkit cuts itself, where it is expected."""
    logs = importlib.import_module(f"{library}.utils.logging")
    level = logs.get_verbosity()
    logs.set_verbosity_error()
    try:
        yield
    finally:
        logs.set_verbosity(level)


def _say_no_document_tokens(tokenizer, bos, eos) -> None:
    """One warning when the tokenizer marks documents with special tokens (BERT's [CLS] ...
    [SEP]) but has no BOS/EOS: its windows then join documents with no separator at all."""
    marks = [t for t in (getattr(tokenizer, "cls_token", None), getattr(tokenizer, "sep_token", None)) if t]
    if bos is None and eos is None and marks:
        warn_user(f"token windows: this tokenizer has no BOS/EOS token, so documents are joined with no "
                  f"separator and windows carry no {'/'.join(marks)} tokens (docs/extraction.md, "
                  "Token windows)")


def pack_windows(tokenizer, texts, context_length: int, max_tokens: int | None = None,
                 model_positions: int | None = None, progress: bool = True, record_text: bool = False):
    """Pack ``texts`` into windows of ``context_length`` token ids.

    Parameters
    ----------
    tokenizer : transformers tokenizer
    texts : sequence of str
        Supports ``len`` and slicing (lists, or lazy dataset columns).
    context_length : int
        L, tokens per window (BOS included).
    max_tokens : int, optional
        N: at most ``N // L`` windows.
    model_positions : int, optional
        The model's position table; ``L`` larger than it is refused.
    record_text : bool, default=False
        Also return each window's text and its tokens' character spans
        (:func:`actkit.extractors._spans.window_texts`; a fast tokenizer's offset mapping).

    Returns
    -------
    windows : ndarray of shape (W, L), int64
    packing : dict
        JSON-ready record of the packing (for the provenance): ``context_length``, ``bos``,
        ``separator``, ``max_tokens``, ``windows``, ``tokens``, ``rows_used`` (texts read),
        ``dropped_tokens`` (the unused tail of the stream that was tokenised).
    text : (list of str, list of ndarray (L, 2) int64) or None
        Only with ``record_text``: each window's text and spans (None for a slow tokenizer).

    Raises
    ------
    InputError
        ``L`` < 2 (with BOS) or < 1, ``L`` beyond the position table, ``N < L``, or fewer
        tokens than one window.
    """
    L = int(context_length)
    bos = tokenizer.bos_token_id
    eos = tokenizer.eos_token_id
    if L < (2 if bos is not None else 1):
        raise InputError(f"--context-length must be at least {2 if bos is not None else 1}, got {L}")
    if model_positions is not None and L > model_positions:
        raise InputError(f"--context-length {L} is larger than the model's position table "
                         f"({model_positions} positions)")
    if max_tokens is not None and int(max_tokens) < L:
        raise InputError(f"--max-tokens {max_tokens} is smaller than one window of {L} tokens")
    _say_no_document_tokens(tokenizer, bos, eos)
    body = L - 1 if bos is not None else L
    limit = None if max_tokens is None else int(max_tokens) // L  # windows
    need = None if limit is None else limit * body  # stream tokens
    pieces, have, rows = [], 0, 0
    fast = record_text and bool(getattr(tokenizer, "is_fast", False))
    where, used = [], []  # with the text: each piece's (doc, span) rows, and the texts read
    n = len(texts)
    bar = tqdm(total=need if need is not None else n, desc="packing token windows",
               unit="tokens" if need is not None else "texts", disable=None if progress else True, leave=False)
    try:
        start, step = 0, 64
        while start < n:
            if need is not None and have >= need:
                break
            chunk = list(texts[start : min(n, start + step)])
            start, step = start + step, min(_CHUNK, 2 * step)
            with quiet_logs():  # whole texts may exceed the model's limit: the windows cut them
                enc = tokenizer(chunk, add_special_tokens=False, return_offsets_mapping=fast)
            for n_seq, seq in enumerate(enc["input_ids"]):
                if need is not None and have >= need:
                    break
                rows += 1
                arr = np.asarray(seq + ([eos] if eos is not None else []), dtype=np.int64)
                if fast:
                    used.append(chunk[n_seq])
                    span = np.asarray(enc["offset_mapping"][n_seq], np.int64).reshape(-1, 2)
                    span = np.concatenate([span, np.full((arr.size - len(seq), 2), -1, np.int64)])
                    where.append(np.concatenate([np.full((arr.size, 1), rows - 1, np.int64), span], axis=1))
                pieces.append(arr)
                have += arr.size
                bar.update(arr.size if need is not None else 1)
    finally:
        bar.close()
    stream = np.concatenate(pieces) if pieces else np.empty(0, np.int64)
    count = stream.size // body if limit is None else min(limit, stream.size // body)
    if count == 0:
        raise InputError(f"the inputs give {stream.size} tokens, fewer than one window of {L} "
                         f"({body} text tokens{' after the BOS token' if bos is not None else ''})")
    windows = stream[: count * body].reshape(count, body)
    if bos is not None:
        windows = np.concatenate([np.full((count, 1), bos, np.int64), windows], axis=1)
    packing = {
        "context_length": L,
        "bos": None if bos is None else int(bos),
        "separator": None if eos is None else int(eos),
        "max_tokens": None if max_tokens is None else int(max_tokens),
        "windows": int(count),
        "tokens": int(count * L),
        "rows_used": int(rows),
        "dropped_tokens": int(stream.size - count * body),
        "convention": "texts + EOS separator concatenated; BOS + (L-1) stream tokens per window "
                      "(L tokens without BOS); tail dropped",
    }
    if not record_text:
        return windows, packing
    if not fast:
        return windows, packing, None
    from ._spans import window_texts  # the windows' characters: only where a store records them

    w = np.concatenate(where)
    return windows, packing, window_texts(used, w[:, 0], w[:, 1:], count, body, bos is not None)
