"""actkit: activations of pretrained models, onto disk, through identifiability-grade analysis.

The public API (everything a user needs fits on one screen)::

    actkit.extract(model, inputs, out, layers=...)      # checkpoint -> HDF5 store
    actkit.open_store(path)                             # store -> layers, array-like access
    actkit.Whitener, actkit.whiten                      # PCA / ZCA whitening (streaming)
    actkit.FastICA, actkit.fastica                      # FastICA (torch, streaming-aware)
    actkit.SparseDictionary, actkit.sparse_dictionary   # top-k / L1 dictionary learning
    actkit.transform_store(est, layer, out, scheduler=)  # transform on Dask -> sharded store
    actkit.align(A, B, method=...)                      # permutation | rigid | linear | ica
    actkit.compare(A, B)                                # every alignment + similarity metric
    actkit.metrics                                      # amari_distance, mcc, linear_cka, infomec, ...

Names are imported lazily, so ``import actkit`` is cheap and never imports torch,
transformers or timm until they are needed.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "extract": "actkit._extract_api",
    "open_store": "actkit.store",
    "Store": "actkit.store",
    "Layer": "actkit.store",
    "RunningMoments": "actkit.stats",
    "Whitener": "actkit.whitening",
    "whiten": "actkit.whitening",
    "FastICA": "actkit.ica",
    "fastica": "actkit.ica",
    "SparseDictionary": "actkit.dictionary",
    "sparse_dictionary": "actkit.dictionary",
    "transform_store": "actkit._shards",
    "align": "actkit.align",
    "compare": "actkit.align",
    "ActkitError": "actkit.errors",
}

__all__ = sorted([*_LAZY, "metrics", "__version__"])


def __getattr__(name: str):
    if name == "metrics":
        return importlib.import_module("actkit.metrics")
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'actkit' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
