"""The ICA sources ``compare`` fitted for one side of a pair, as a fitted transformer that
:func:`actkit.units` and :func:`actkit.match_units` take as ``basis=``
(:meth:`CompareResult.ica_basis`)."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin

from actkit.errors import InputError

__all__ = ["ICASources"]


class ICASources(TransformerMixin, BaseEstimator):
    """One side's ICA sources of a :func:`~actkit.compare` fit: ``s = (x - mean_) @ unmixing_.T``.

    Made fitted by ``CompareResult.ica_basis`` (:meth:`fitted`): :meth:`fit` changes nothing.
    :func:`actkit.transform_store` writes its sources as an ``actkit ica`` store (``unmixing``,
    ``mixing``, ``mean`` in its params), a ``--basis`` for ``actkit units`` on the command line. Source ``i`` is the source
    ``i`` of ``CompareResult.ica_pairs()`` (``"a"`` / ``"b"`` numbers), unoriented (its sign
    as FastICA left it; :func:`actkit.units` orients it to positive skew and says so).

    Attributes
    ----------
    side : {"a", "b"}
    unmixing_ : ndarray of shape (k, n_features)
        A's whitening followed by its FastICA rotation (``ICAAlignment.unmixing_a_``).
    mixing_ : ndarray of shape (n_features, k)
        Each source's direction in the layer's space (``mixing_a_``).
    mean_ : ndarray of shape (n_features,)
        The fit rows' mean (the sources' centre; correlations do not depend on it).
    n_features_in_, n_components_ : int
    """

    def __init__(self, side="a"):
        self.side = side

    @classmethod
    def fitted(cls, side, unmixing, mixing, mean):
        """The sources of one side of a fitted ``ICAAlignment`` (its ``unmixing_<side>_``,
        ``mixing_<side>_``, ``mean_<side>_``)."""
        est = cls(side)
        est.unmixing_ = np.asarray(unmixing, np.float64)
        est.mixing_ = np.asarray(mixing, np.float64)
        est.mean_ = np.asarray(mean, np.float64)
        est.n_components_, est.n_features_in_ = est.unmixing_.shape
        return est

    def fit(self, X=None, y=None):
        """Nothing to fit (``compare`` fitted the sources); returns self."""
        return self

    def transform(self, X):
        """Sources of rows ``X`` (n, n_features) -> (n, k) float64."""
        X = np.asarray(X, np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise InputError(f"ICASources: rows of {self.n_features_in_} features expected, "
                             f"got shape {X.shape}")
        return (X - self.mean_) @ self.unmixing_.T

    def __repr__(self):
        return f"ICASources(side={self.side!r}, {self.n_components_} sources of {self.n_features_in_} features)"
