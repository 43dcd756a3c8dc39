"""FastICA: our own implementation (numpy on CPU, torch on GPUs), streaming-aware
(``docs/definitions.md`` §2).

The model is scikit-learn's ``FastICA`` (same hyperparameters where they make sense, same
fitted attributes, same contrast functions ``logcosh`` / ``exp`` / ``cube``), with a faster
solver underneath:

* ``algorithm="parallel"`` solves the symmetric FastICA problem (all components at once,
  under the orthogonality constraint on whitened data) with **Picard-O** (Ablin, Cardoso &
  Gramfort 2018): a preconditioned L-BFGS on the orthogonal group. Its fixed points are the
  fixed points of symmetric FastICA (both sub- and super-Gaussian sources, the sign of each
  component's contrast chosen from its stability coefficient as in extended Picard), but it
  converges in a few tens of passes where the fixed-point iteration can stall for hundreds.
  On large inputs it first solves on a random row subsample (warm-up), then refines on all
  rows.
* ``algorithm="deflation"`` is the classic one-unit fixed-point iteration with Gram-Schmidt
  deflation, as in scikit-learn.

Notation: whitened data ``Z`` (N x k, identity covariance), rotation ``W`` (k x k,
orthogonal), sources ``Y = Z W'``. With contrast ``G`` and ``g = G'``, the loss is
``L(W) = sum_i s_i E[G(y_i)]`` with ``s_i = -sign(kappa_i)``,
``kappa_i = E[y_i g(y_i)] - E[g'(y_i)]``; a step is ``W <- expm(D) W`` with ``D``
antisymmetric, the gradient is ``(SM - (SM)')`` with ``SM_ij = s_i E[g(y_i) y_j]`` and the
Hessian approximation on the pair ``(i, j)`` is ``s_i (E[g'_i] - E[y_i g_i]) + (i <-> j)``.

Two levels share one implementation: :class:`FastICA` and :func:`fastica`.

Layout (python-picard's): ``_contrast`` (the contrast functions), ``_source`` (whitened rows
and one pass over them), ``_rotations`` (expm, symmetric decorrelation), ``_picard``
(Picard-O), ``_fixed_point`` (symmetric and deflation fixed points), ``_init`` (starting
rotations, warm start), ``_estimator`` (:class:`FastICA`, :func:`fastica`), ``_trace`` (a
tracing hook for benchmarks), ``_gaussianity`` (whether whitened rows carry non-Gaussian
signal beyond chance: ``compare``'s check before its FastICA fits).
"""

from actkit.ica._estimator import FastICA, fastica
from actkit.ica._gaussianity import GAUSSIAN_Z, gaussianity, no_signal
from actkit.ica._reduce import whiten_rows
from actkit.ica._rows_rule import ica_min_rows, ica_supported_components

__all__ = ["FastICA", "GAUSSIAN_Z", "fastica", "gaussianity", "ica_min_rows", "ica_supported_components",
           "no_signal", "whiten_rows"]
