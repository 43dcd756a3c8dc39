"""Validation, once: hyperparameters with scikit-learn's ``_parameter_constraints``, and
input arrays / fitted state with scikit-learn's checks, raising actkit's errors.

Each estimator declares ``_parameter_constraints`` (scikit-learn's vocabulary:
``Interval``, ``StrOptions``, types, ``None``, ``"boolean"``, ...); :func:`validate_params`
checks its current parameters against them at ``fit`` and raises
:class:`~actkit.errors.ParameterError` (a ``ValueError``) with scikit-learn's message.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils._param_validation import (  # noqa: F401  (re-exported vocabulary)
    Interval,
    InvalidParameterError,
    Options,
    StrOptions,
    validate_parameter_constraints,
)

from actkit.errors import NotFittedError, ParameterError, ValidationError

__all__ = ["validate_params", "validate_input", "check_input_array", "check_fitted", "fit_input", "transform_input", "Interval",
           "Options", "StrOptions"]


def validate_params(estimator) -> None:
    """Check ``estimator.get_params(deep=False)`` against its ``_parameter_constraints``."""
    constraints = getattr(estimator, "_parameter_constraints", None)
    if not constraints:
        return
    try:
        validate_parameter_constraints(constraints, estimator.get_params(deep=False),
                                       caller_name=type(estimator).__name__)
    except InvalidParameterError as exc:
        raise ParameterError(str(exc)) from None


def validate_input(estimator, X, **kwargs):
    """scikit-learn's ``validate_data``, raising :class:`~actkit.errors.ValidationError`."""
    from sklearn.utils.validation import validate_data

    try:
        return validate_data(estimator, X, **kwargs)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def check_input_array(X, **kwargs):
    """scikit-learn's ``check_array``, raising :class:`~actkit.errors.ValidationError`."""
    from sklearn.utils import check_array

    try:
        return check_array(X, **kwargs)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def check_fitted(estimator) -> None:
    """scikit-learn's ``check_is_fitted``, raising :class:`~actkit.errors.NotFittedError`."""
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    from sklearn.utils.validation import check_is_fitted

    try:
        check_is_fitted(estimator)
    except SklearnNotFittedError as exc:
        raise NotFittedError(str(exc)) from None


def fit_input(estimator, X, *, min_rows=1, purpose="to fit"):
    """The rows an estimator's ``fit`` reads: a stream as it is, anything else validated.

    Returns
    -------
    X : ndarray or streaming source
    streaming : bool
    n, d : int
        Rows and features (``estimator.n_features_in_`` is set to ``d``).
    dtype : numpy dtype
        float32 for float32 input, else float64 (what the fitted attributes get).
    """
    from actkit._data import as_input, is_streaming
    from actkit.runners import is_chunked

    X = as_input(X)
    if is_streaming(X) or is_chunked(X):  # a chunked array: read by its runner's tasks (actkit.runners)
        n, d = int(X.shape[0]), int(X.shape[1])
        if n < min_rows:
            raise ValidationError(f"need at least {min_rows} rows {purpose}, got {n}")
        estimator.n_features_in_ = d
        dtype = np.dtype(np.float32 if np.dtype(X.dtype) == np.float32 else np.float64)
        return X, True, n, d, dtype
    X = validate_input(estimator, X, dtype=[np.float64, np.float32], ensure_min_samples=min_rows)
    return X, False, X.shape[0], X.shape[1], X.dtype


def transform_input(estimator, X, block_rows, n_out, **kwargs):
    """What an estimator's ``transform`` starts with: ``(X, None)`` with ``X`` validated in
    memory, or ``(None, result)`` for a stream, transformed block by block (on Dask for a
    chunked array, lazily, or with the estimator's ``scheduler``: :func:`actkit.runners.lazy_transform`)."""
    from actkit._data import as_input, is_streaming, transform_blocks
    from actkit.runners import lazy_transform

    check_fitted(estimator)
    X = as_input(X)
    remote = lazy_transform(estimator, X, n_out, block_rows)
    if remote is not None:
        return None, remote
    if is_streaming(X):
        return None, transform_blocks(estimator, X, block_rows, n_out)
    return validate_input(estimator, X, dtype=[np.float64, np.float32], reset=False, **kwargs), None
