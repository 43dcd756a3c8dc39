"""actkit: activations of pretrained models, onto disk, through identifiability-grade analysis.

The public API (everything a user needs fits on one screen)::

    actkit.extract(model, inputs, out, layers=...)      # checkpoint -> HDF5 store
    actkit.list_layers(model)                           # modules and their output shapes
    actkit.open_store(path)                             # store -> layers, array-like access
    actkit.Whitener, actkit.whiten                      # PCA / ZCA whitening (streaming)
    actkit.FastICA, actkit.fastica                      # FastICA (torch, streaming-aware)
    actkit.SparseDictionary, actkit.sparse_dictionary   # top-k / L1 dictionary learning
    actkit.transform_store(est, layer, out)             # fitted transform of a layer -> store
    actkit.load_sae(path), actkit.sae_metrics(sae, layer)  # SAELens / sparsify SAEs; L0, FVU, ...
    actkit.align(A, B, method=...)                      # permutation | rigid | linear | ica
    actkit.compare(A, B)                                # every alignment + similarity metric
    actkit.compare_many([A, B, C], metric=...)          # pairwise matrix -> (matrix, results)
    actkit.measure(A, B, "procrustes")                  # one measure (actkit.measures.available())
    actkit.compare_models(model_a, model_b, inputs, layers=[...])  # extract both, then compare
    actkit.evaluate_postprocessing(X, y, control=...)   # Base / PCA / PCA+ICA / PCA+Rand downstream
    actkit.RunningMoments, actkit.CrossMoments          # mergeable streaming moments
    actkit.metrics                                      # amari_distance, mcc, linear_cka, infomec, ...

Names are imported lazily, so ``import actkit`` is cheap and never imports torch,
transformers or timm until they are needed.
"""

from __future__ import annotations

from actkit._lazy import lazy_attributes

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "extract": "actkit.extractors.extract",
    "list_layers": "actkit.extractors.layers",
    "open_store": "actkit.store",
    "Store": "actkit.store",
    "Layer": "actkit.store",
    "RunningMoments": "actkit.stats",
    "CrossMoments": "actkit.stats",
    "Whitener": "actkit.whitening",
    "whiten": "actkit.whitening",
    "FastICA": "actkit.ica",
    "fastica": "actkit.ica",
    "SparseDictionary": "actkit.dictionary",
    "sparse_dictionary": "actkit.dictionary",
    "dictionary_stability": "actkit.dictionary",
    "DictionaryStability": "actkit.dictionary",
    "transform_store": "actkit._derived",
    "load_sae": "actkit.sae",
    "save_sae": "actkit.sae",
    "sae_metrics": "actkit.sae",
    "SparseAutoencoder": "actkit.sae",
    "compare_models": "actkit.pipeline",
    "align": "actkit.alignment",
    "compare": "actkit.alignment",
    "compare_many": "actkit.alignment",
    "compare_layers": "actkit.alignment",
    "measure": "actkit.alignment",
    "CompareResult": "actkit.alignment",
    "PermutationAlignment": "actkit.alignment",
    "RigidAlignment": "actkit.alignment",
    "LinearAlignment": "actkit.alignment",
    "ICAAlignment": "actkit.alignment",
    "evaluate_postprocessing": "actkit.evaluation",
    "ActkitError": "actkit.errors",
    "to_torch": "actkit.loader",
    "ActivationDataset": "actkit.loader",
    "export_store": "actkit.export",
    "units": "actkit._units",
    "match_units": "actkit._units",
    "UnitReport": "actkit._units",
    "UnitMatch": "actkit._units",
    "compare_bases": "actkit._units",
    "BasisComparison": "actkit._units",
}

# sub-packages reachable as attributes (``actkit.metrics.linear_cka``, ``actkit.alignment``)
_MODULES = ("metrics", "measures", "alignment", "report", "store", "stats", "errors", "zoo", "pipeline", "matrix_files",
            "evaluation", "loader", "sweep", "sae", "pages")

__getattr__, __dir__, __all__ = lazy_attributes(__name__, _LAZY, _MODULES)
__all__ = sorted([*__all__, "__version__"])
