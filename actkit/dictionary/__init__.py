"""Sparse dictionary learning for activations: top-k and L1 codes, streaming-aware.

Model: ``x ~ a @ D`` with ``D`` (n_components x n_features, unit-norm rows = atoms) and a sparse
code ``a`` (n_components,) per row. Rows are not centred (activations are modelled as they are).

* ``code="topk"``: exactly ``k`` active atoms per row, chosen by orthogonal matching pursuit
  run for all rows at once (greedy: the atom most correlated with the residual, then a least
  squares refit on the support; only positive correlations and coefficients with
  ``positive=True``).
* ``code="l1"``: the lasso code ``argmin_a 1/2 |x - a D|^2 + alpha |a|_1`` (``a >= 0`` with
  ``positive=True``), solved by FISTA for all rows at once.

Training alternates a code step and a dictionary step. The dictionary step is the method
of optimal directions (MOD): with codes ``A`` the least-squares dictionary is
``(A'A)^{-1} A'X``, and ``A'A`` (n_components^2) and ``A'X`` (n_components x n_features) are sums over
row blocks, so a training epoch is one streaming pass (``batch_size`` rows at a time) and
memory does not grow with the number of rows. Atoms that no row uses, or that duplicate
another atom (|cos| > 0.95), are re-seeded with the worst-reconstructed rows. Training
starts on a random row subsample (the warm-up: many cheap epochs), then refines on all rows
for ``n_epochs`` passes.

Two levels share one implementation: :class:`SparseDictionary` and :func:`sparse_dictionary`.

Layout: ``_coding`` (numpy codes), ``_torch`` (torch codes and epoch), ``_epoch`` (one
epoch and the dictionary step), ``_estimator`` (:class:`SparseDictionary`,
:func:`sparse_dictionary`), ``_stability`` (:func:`dictionary_stability`: do restarts find the
same atoms?).
"""

from actkit.dictionary._estimator import SparseDictionary, sparse_dictionary
from actkit.dictionary._stability import DictionaryStability, dictionary_stability, match_atoms, match_codes

__all__ = ["SparseDictionary", "sparse_dictionary", "dictionary_stability", "DictionaryStability", "match_atoms",
           "match_codes"]
