"""Downstream evaluation of post-processed embeddings (Nelson et al., Tables 3, 4 and 6).

``evaluate_postprocessing(X, y, control=..., groups=...)`` scores four versions of the same
embeddings (Base, PCA-whitened, PCA+ICA, PCA+random rotation) on label classification
tasks with LightGBM (the paper's Table 6) or a logistic probe: cross-validated AUROC, Hoyer
sparsity and the concentration of the between-class variance in the top 25% of features.
``read_labels`` reads one label per row from a ``.npy``/``.txt`` file, a parquet or
``datasets`` column, or a store's recorded label column.
"""

from actkit.evaluation._labels import read_labels
from actkit.evaluation._protocol import evaluate_postprocessing, haar_rotation
from actkit.evaluation._result import DEFINITIONS, LABELS, METRICS, TITLES, VERSIONS, EvaluationResult

#: the name issue 41 gives the result of ``actkit evaluate`` (``EvaluateResult.to_frame()``): the same class
EvaluateResult = EvaluationResult
from actkit.evaluation._scores import (
           LIGHTGBM_PARAMS,
           between_class_variance,
           concentration,
)

__all__ = [
           "DEFINITIONS",
           "LABELS",
           "METRICS",
           "TITLES",
           "LIGHTGBM_PARAMS",
           "VERSIONS",
           "EvaluationResult",
           "EvaluateResult",
           "between_class_variance",
           "concentration",
           "evaluate_postprocessing",
           "haar_rotation",
           "read_labels",
]
