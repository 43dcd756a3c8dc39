"""Row sources: one way to read a matrix whatever holds it.

Analysis code accepts a numpy array, a torch tensor, an ``h5py.Dataset`` or a store
:class:`~actkit.store.Layer`.  The last two are *streaming* sources: they are read in row
blocks and never loaded whole.  Blocks from streaming sources are prefetched on a background
thread so disk reads overlap with the caller's computation.
"""

from __future__ import annotations

import queue
import sys
import threading
from typing import Iterator

import numpy as np

from actkit._rows import block_rows as default_block_rows
from actkit._threads import prefetch_allowed
from actkit.errors import ValidationError


def _is_layer(X) -> bool:
    """A store :class:`~actkit.store.Layer` (checked without importing the store: a layer
    exists only once ``actkit.store`` has been imported)."""
    store = sys.modules.get("actkit.store")
    return store is not None and isinstance(X, store.Layer)


def _is_h5(X) -> bool:
    try:
        import h5py  # h5py: ~40 ms at import (measured), only to recognise an h5py.Dataset
    except ImportError:  # pragma: no cover
        return False
    return isinstance(X, h5py.Dataset)


def _is_torch(X) -> bool:
    mod = type(X).__module__
    return mod.startswith("torch") and hasattr(X, "detach")


def is_streaming(X) -> bool:
    """True for sources read block by block (h5py datasets, store layers, embedding files)."""
    return _is_layer(X) or _is_h5(X) or bool(getattr(X, "actkit_streaming", False))


def _shape(X) -> tuple[int, ...]:
    return tuple(int(s) for s in X.shape)


def n_rows(X) -> int:
    """Number of rows (samples) of a 2-D source."""
    return _shape(X)[0]


def n_features(X) -> int:
    """Number of columns (features) of a 2-D source."""
    shape = _shape(X)
    if len(shape) != 2:
        raise ValidationError(f"expected a 2-D matrix (rows, features), got shape {shape}")
    return shape[1]


def source_dtype(X) -> np.dtype:
    if _is_torch(X):
        import torch  # torch: ~1 s at import; `import actkit` stays torch-free

        return np.dtype(str(X.dtype).replace("torch.", "")) if X.dtype != torch.bfloat16 else np.dtype("float32")
    return np.dtype(X.dtype)


def as_array(X, dtype=None) -> np.ndarray:
    """Load the whole source as a numpy array (``dtype`` None keeps the stored dtype)."""
    if _is_torch(X):
        import torch  # torch: ~1 s at import; `import actkit` stays torch-free

        t = X.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        arr = t.cpu().numpy()
    elif _is_layer(X) or getattr(X, "actkit_streaming", False):
        arr = X.to_numpy()
    elif _is_h5(X):
        arr = X[()]
    else:
        arr = np.asarray(X)
    return arr if dtype is None else arr.astype(dtype, copy=False)


def iter_blocks(X, block_rows: int | None = None, dtype=None, *, start: int = 0,
                stop: int | None = None, prefetch: bool = True) -> Iterator[np.ndarray]:
    """Yield consecutive 2-D row blocks of ``X`` (rows ``start:stop``).

    In-memory sources yield views (no copy unless ``dtype`` differs); streaming sources
    read ``block_rows`` rows at a time (default: :func:`actkit._rows.block_rows`, about
    32 MiB a block), one block ahead on a background thread when the thread budget is 2 or
    more (:mod:`actkit._threads`).
    """
    if _is_torch(X):
        X = as_array(X)
    n = n_rows(X)
    stop = n if stop is None else min(stop, n)
    f = n_features(X)
    if block_rows is None:
        block_rows = default_block_rows(f, source_dtype(X).itemsize)
    elif isinstance(block_rows, bool) or not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
        raise ValidationError(f"block_rows must be a positive integer, got {block_rows!r}")
    block_rows = int(block_rows)
    if not is_streaming(X):
        arr = as_array(X)
        for s in range(start, stop, block_rows):
            block = arr[s : min(stop, s + block_rows)]
            yield block if dtype is None else block.astype(dtype, copy=False)
        return

    dataset = X  # a store Layer reads its rows itself: h5py errors become one-line StoreErrors

    def read(s):
        block = dataset[s : min(stop, s + block_rows)]
        return block if dtype is None else block.astype(dtype, copy=False)

    starts = list(range(start, stop, block_rows))
    if not prefetch or len(starts) <= 1 or not prefetch_allowed():
        for s in starts:
            yield read(s)
        return
    yield from _prefetched(read, starts)


_DONE = object()


def _prefetched(read, starts) -> Iterator[np.ndarray]:
    q: queue.Queue = queue.Queue(maxsize=1)
    stop_flag = threading.Event()

    def worker():
        try:
            for s in starts:
                if stop_flag.is_set():
                    return
                q.put(read(s))
            q.put(_DONE)
        except BaseException as exc:  # forwarded to the consumer
            q.put(exc)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop_flag.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.05)


def prefetched(read, starts) -> Iterator[np.ndarray]:
    """``read(s)`` for every ``s`` of ``starts``, in order, one result ahead on a thread."""
    return _prefetched(read, starts)


def gather_rows(X, idx, block_rows: int | None = None) -> np.ndarray:
    """Rows ``idx`` (sorted, increasing) of any source, read in one sequential pass.

    Returns
    -------
    ndarray of shape (len(idx), n_features)
    """
    idx = np.asarray(idx)
    out = []
    start = 0
    for block in iter_blocks(X, block_rows):
        lo, hi = np.searchsorted(idx, [start, start + len(block)])
        if hi > lo:
            out.append(np.asarray(block[idx[lo:hi] - start]))
        start += len(block)
    return np.concatenate(out) if out else np.empty((0, int(X.shape[1])))


def transform_blocks(estimator, X, block_rows, n_out):
    """Apply ``estimator.transform`` to a streaming source block by block.

    Checks the feature count once (as scikit-learn's ``validate_data`` would) and returns
    the stacked result, an ndarray of shape (n_samples, n_out).
    """
    if int(X.shape[1]) != estimator.n_features_in_:
        raise ValidationError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} was fitted on "
            f"{estimator.n_features_in_}"
        )
    parts = [estimator.transform(b) for b in iter_blocks(X, block_rows)]
    return np.concatenate(parts) if parts else np.empty((0, n_out))


def as_input(X):
    """Torch tensors become numpy arrays; streaming sources are returned unchanged."""
    if hasattr(X, "detach") and hasattr(X, "cpu"):
        return X.detach().cpu().numpy()
    return X
