"""The extraction options (pooling, dtypes) and the output path, checked before any work."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from actkit.errors import ActkitError
from actkit.store import unwritable_reason

from ._base import DTYPES

POOLS = ("none", "mean", "last", "cls")
STORAGE_DTYPES = ("float32", "float16")
FINAL_HIDDEN = "final_hidden"


def check_options(pool, batch_size, dtype, storage_dtype, compression, checkpoint_every=5.0):
    try:
        every = float(checkpoint_every)
    except (TypeError, ValueError):
        every = -1.0
    if not math.isfinite(every) or every < 0:
        raise ActkitError(f"--checkpoint-every must be a number of seconds >= 0 (0: after every batch), "
                          f"got {checkpoint_every}")
    if pool not in POOLS:
        raise ActkitError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ActkitError(f"--batch-size must be a positive integer, got {batch_size}")
    if dtype not in DTYPES:
        raise ActkitError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if storage_dtype is None:
        storage_dtype = dtype if dtype in STORAGE_DTYPES else "float32"
    if storage_dtype not in STORAGE_DTYPES:
        raise ActkitError(f"unknown storage dtype {storage_dtype!r}; choose float32 or float16")
    if compression not in (None, "gzip", "lzf"):
        raise ActkitError(f"unknown compression {compression!r}; choose gzip or lzf")
    return storage_dtype


def check_output_path(out: Path) -> None:
    """Fail early (before loading a model) when ``out`` cannot be written (a file is made and
    removed in its folder: :func:`actkit.store.unwritable_reason`)."""
    if out.is_dir():
        raise ActkitError(f"output path {out} is a directory; give a file name like {out}/store.h5")
    why = unwritable_reason(out)
    if why:
        raise ActkitError(f"cannot write {out}: {why}")
    if out.exists() and not os.access(out, os.W_OK):
        raise ActkitError(f"cannot write {out}: the file is not writable")


def check_window_options(context_length, max_tokens, max_length) -> None:
    """``--context-length`` / ``--max-tokens`` / ``--max-length`` that fit together."""
    if max_tokens is not None and context_length is None:
        raise ActkitError("--max-tokens bounds a run of token windows; give --context-length too")
    if context_length is not None:
        if not isinstance(context_length, (int, np.integer)) or context_length < 1:
            raise ActkitError(f"--context-length must be a positive integer, got {context_length}")
        if max_length is not None:
            raise ActkitError("--max-length truncates texts; token windows (--context-length) have a fixed length")
    if max_tokens is not None and (not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1):
        raise ActkitError(f"--max-tokens must be a positive integer, got {max_tokens}")
