"""Small finished stores for tests: :func:`write_store`."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_store(path, layers, index, *, fingerprint="inputs-1", params=None, inputs=None, request=None) -> Path:
    """A finished store at ``path`` of ``layers`` (``{name: array (rows, features)}``, stored as
    float32) sharing the row ``index`` (int64, (rows, 2): sample, position); ``n_samples`` is
    one more than the largest sample id. ``inputs``: a recorded-inputs record
    (:func:`actkit.store.text_record`); ``request`` defaults to one naming the path."""
    from actkit.store import LayerSpec, create_store

    index = np.asarray(index, dtype=np.int64)
    n_samples = int(index[:, 0].max()) + 1
    specs = [LayerSpec(name, X.shape[0], X.shape[1], index=index) for name, X in layers.items()]
    w = create_store(path, specs, n_samples=n_samples, request=request or {"p": str(path)},
                     inputs_fingerprint=fingerprint, params=params, inputs=inputs)
    for name, X in layers.items():
        w.append(name, np.asarray(X, np.float32))
    w.checkpoint(n_samples)
    w.finalize()
    return Path(path)
