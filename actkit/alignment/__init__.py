"""Cross-model alignment (Nelson et al., Table 1): :func:`align`, :func:`compare`,
:func:`compare_many`, :func:`compare_stores`.

``docs/definitions.md`` §1 and §3 define every quantity here. Four transform classes map
rows of ``A`` (N x Da) onto the rows of ``B`` (N x Db) that come from the same inputs:

=================  =============================================================  =========
method             map h(a)                                                       fitted on
=================  =============================================================  =========
``permutation``    (a - mu_A) P + mu_B, P a signed permutation (Hungarian)        paired rows
``rigid``          (a - mu_A) R + mu_B, R = U V^T from the SVD of A_c^T B_c       paired rows
``linear``         a W + c, affine least squares (optional ridge)                 paired rows
``ica``            mixing_B P unmixing_A (a - mu_A) + mu_B: whitening + FastICA   each side alone
=================  =============================================================  =========

Every fit is closed form from second moments (accumulated block by block in float64 from
float32 GEMMs), so the data never has to fit in memory; only FastICA sees rows, a bounded
random sample of them (``ica_max_rows``).

:func:`compare` fits all four on a fit split and reports the mean l2 error on held-out rows
divided by the diameter of B's held-out rows, the ICA efficiency, linear CKA (plain and
debiased), mean CCA and the held-out correlations of the ICA-matched sources.
:func:`compare_many` gives a pairwise matrix over several representations, whitening and
ICA-fitting each one once.

Layout (one idea a file): ``_inputs`` (row sources), ``_assignment`` (signed permutation),
``_diameter``, ``_sides`` (the moments passes), ``_maps`` (the three closed-form maps),
``_ica_map`` (the ICA map and the rows rule), ``_split`` (fit/eval split), ``_result``
(:class:`CompareResult`), ``_table`` (text tables), ``_compare`` (the entry points),
``steps`` (public: :mod:`actkit.alignment.steps`, compare's steps in the order it runs
them, each callable alone: ``resolve_request``, ``split_by_sample``, ``moment_pass``,
``fit_maps``, ``heldout_errors``, ``ica_report``, ``similarities``, ``matched_sources``,
``resample``, ``result_info``, ``result``).
"""

from actkit.alignment._assignment import signed_permutation
from actkit.alignment._compare import DIAMETER_MAX_ROWS, align, compare, compare_many
from actkit.alignment._diameter import diameter
from actkit.alignment._layer_map import LayerMap, compare_layers
from actkit.alignment._ica_map import ICAAlignment, ica_min_rows, ica_rows
from actkit.alignment._ica_sources import ICASources
from actkit.alignment._measure import measure
from actkit.alignment._maps import Alignment, LinearAlignment, PermutationAlignment, RigidAlignment
from actkit.alignment._result import CONVENTIONS, MATRIX_METRICS, METHODS, CompareResult
from actkit.alignment._split import split
from actkit.alignment._stores import StoreComparison, StoreMatrices, compare_store_matrix, compare_stores
from actkit._groups import check_same_rows
from actkit.alignment._table import format_matrix, format_table, ica_summary, row_labels, value_of
from actkit.alignment._tasks import compare_pairs

__all__ = [
    "align",
    "compare",
    "compare_many",
    "compare_layers",
    "LayerMap",
    "measure",
    "compare_pairs",
    "compare_stores",
    "StoreComparison",
    "compare_store_matrix",
    "StoreMatrices",
    "check_same_rows",
    "CompareResult",
    "Alignment",
    "PermutationAlignment",
    "RigidAlignment",
    "LinearAlignment",
    "ICAAlignment",
    "ICASources",
    "signed_permutation",
    "diameter",
    "ica_min_rows",
    "ica_rows",
    "split",
    "format_table",
    "ica_summary",
    "format_matrix",
    "row_labels",
    "value_of",
    "METHODS",
    "MATRIX_METRICS",
    "CONVENTIONS",
    "DIAMETER_MAX_ROWS",
]
