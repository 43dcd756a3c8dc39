"""``--max-batch-tokens`` checked against the texts before the model loads (their token counts
from the local tokenizer; the adapter reuses the token ids and spans)."""

from __future__ import annotations

import numpy as np

from actkit.errors import InputError

from . import registry
from ._batching import check_token_budget
from .hf_text import tokenize
from .windows import quiet_logs

__all__ = ["check_budget_before_load"]


def check_budget_before_load(model, data, max_batch_tokens, max_length, context_length, revision,
                             trust_remote_code):
    """``--max-batch-tokens`` that some input cannot fit: one line before the model loads.

    Returns the token ids of the texts and their spans when they were computed for the check
    (the adapter reuses them, :func:`~actkit.extractors.hf_text.tokenize`), else ``None``.
    """
    if max_batch_tokens is None or context_length is not None:
        return None
    if data.kind != "text":
        raise InputError(f"--max-batch-tokens cuts batches of text by tokens; {data.source} holds {data.kind}s")
    if max_length is not None and int(max_length) <= max_batch_tokens:
        return None  # every input is truncated to fit
    loaded = registry.load_tokenizer(model, revision=revision, trust_remote_code=trust_remote_code)
    if loaded is None:  # not local or cached: checked once the model is loaded
        return None
    tokenizer, limit = loaded
    with quiet_logs():  # "sequence longer than ..." is the model's limit: truncated (and said) later
        tokenized = tokenize(tokenizer, data.texts)
    ids = tokenized[0]
    if max_length is not None:
        limit = int(max_length) if limit is None else min(limit, int(max_length))
    lengths = np.fromiter((len(s) for s in ids), dtype=np.int64, count=len(ids))
    check_token_budget(lengths if limit is None else np.minimum(lengths, limit), max_batch_tokens, data.texts,
                       data.source)
    return tokenized
