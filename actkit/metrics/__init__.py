"""Metrics for judging representations, alignments and decompositions.

=====================  ==========================================================
``amari_distance``     unmixing W vs true mixing A, 0 = perfect up to scale/perm
``mcc``                mean Hungarian-matched |Pearson| correlation of latents
``match_columns``      one-to-one match of two sets of columns on |C| (Hungarian), with signs
``hoyer_sparsity``     (sqrt(n) - |x|_1/|x|_2) / (sqrt(n) - 1), per row or mean
``linear_cka``         linear CKA (Kornblith et al. 2019), ``debiased=`` option
``mean_cca``           mean canonical correlation (sklearn CCA convention)
``linear_r2``          linear-identifiability R^2 (affine map, held-out half)
``canonical_correlations``
                       canonical correlations from scatter matrices (sorted)
``infomec``            InfoM / InfoE / InfoC (Hsu et al. 2023)
``softmax_distances``  d_KL, d_LLV, d_SVD (Nielsen et al. 2025); ``softmax_distances_from_stores``
=====================  ==========================================================

Formulas follow ``docs/definitions.md``; each module cites its section.
"""

from __future__ import annotations

from actkit._lazy import lazy_attributes

_LAZY = {
    "amari_distance": "actkit.metrics._ica",
    "mcc": "actkit.metrics._ica",
    "match_columns": "actkit._matching",
    "hoyer_sparsity": "actkit.metrics._ica",
    "linear_cka": "actkit.metrics._similarity",
    "mean_cca": "actkit.metrics._similarity",
    "linear_r2": "actkit.metrics._similarity",
    "canonical_correlations": "actkit.metrics._similarity",
    "rank_cut": "actkit.metrics._similarity",
    "infomec": "actkit.metrics._infomec",
    "softmax_distances": "actkit.metrics._softmax",
    "softmax_distances_from_stores": "actkit.metrics._softmax",
}

__getattr__, __dir__, __all__ = lazy_attributes(__name__, _LAZY)
