"""The extraction options (pooling, dtypes) and the output path, checked before any work."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from actkit.errors import ActkitError

from ._base import DTYPES

POOLS = ("none", "mean", "last", "cls")
STORAGE_DTYPES = ("float32", "float16")
FINAL_HIDDEN = "final_hidden"


def check_options(pool, batch_size, dtype, storage_dtype, compression):
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
    """Fail early (before loading a model) when ``out`` cannot be written."""
    if out.is_dir():
        raise ActkitError(f"output path {out} is a directory; give a file name like {out}/store.h5")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ActkitError(f"cannot write {out}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ActkitError(f"cannot write {out}: folder {parent} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ActkitError(f"cannot write {out}: the file is not writable")
