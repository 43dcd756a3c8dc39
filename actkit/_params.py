"""Validation, once: hyperparameters against each estimator's ``_parameter_constraints``, and
input arrays / fitted state with scikit-learn's checks, raising actkit's errors.

Each estimator declares ``_parameter_constraints`` in scikit-learn's vocabulary
(:class:`Interval`, :class:`StrOptions`, :class:`Options`, a type, ``None``, ``"boolean"``,
``"verbose"``, ``"random_state"``, ``"array-like"``, ``callable``; ``"no_validation"`` for a
parameter left alone); :func:`validate_params` checks its current parameters against them at
``fit`` and raises :class:`~actkit.errors.ParameterError` (a ``ValueError``) with
scikit-learn's message. The vocabulary is written here: scikit-learn's own lives in a private
module (``sklearn.utils._param_validation``) that may change without notice.
"""

from __future__ import annotations

import operator
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from actkit._data import as_input, is_streaming, transform_blocks
from actkit.errors import NotFittedError, ParameterError, ValidationError
from actkit.runners import is_chunked, lazy_transform

__all__ = ["FloatTransformer", "warmup_size", "validate_params", "validate_input", "check_input_array", "check_fitted", "fit_input", "transform_input", "Interval",
           "Options", "StrOptions"]


def _type_name(t) -> str:
    if t.__module__ == "builtins":
        return t.__qualname__
    return {Real: "float", Integral: "int"}.get(t, f"{t.__module__}.{t.__qualname__}")


class Options:
    """Values of ``type`` among ``options`` (a set)."""

    def __init__(self, type, options):
        self.type, self.options = type, options

    def is_satisfied_by(self, val) -> bool:
        return isinstance(val, self.type) and val in self.options

    def __str__(self):
        return f"a {_type_name(self.type)} among {{{', '.join(repr(o) for o in self.options)}}}"


class StrOptions(Options):
    """Strings among ``options`` (a set)."""

    def __init__(self, options):
        super().__init__(str, options)


class Interval:
    """Numbers of ``type`` (``numbers.Integral`` or ``numbers.Real``) between ``left`` and
    ``right`` (None: unbounded); ``closed`` is ``"left"``, ``"right"``, ``"both"`` or ``"neither"``."""

    def __init__(self, type, left, right, *, closed):
        if type not in (Integral, Real) or closed not in ("left", "right", "both", "neither"):
            raise ValueError(f"Interval({type}, closed={closed!r}): type Integral or Real, closed left, right, "
                             "both or neither")
        self.type, self.left, self.right, self.closed = type, left, right, closed

    def is_satisfied_by(self, val) -> bool:
        if not isinstance(val, self.type) or (not isinstance(val, Integral) and np.isnan(val)):
            return False
        below = operator.lt if self.closed in ("left", "both") else operator.le
        above = operator.gt if self.closed in ("right", "both") else operator.ge
        return not (below(val, -np.inf if self.left is None else self.left)
                    or above(val, np.inf if self.right is None else self.right))

    def __str__(self):
        real = self.type is not Integral
        left = "-inf" if self.left is None else float(self.left) if real else self.left
        right = "inf" if self.right is None else float(self.right) if real else self.right
        return (f"{'a float' if real else 'an int'} in the range {'[' if self.closed in ('left', 'both') else '('}"
                f"{left}, {right}{']' if self.closed in ('right', 'both') else ')'}")


class _Is:
    """A named test: ``None``, a type, ``callable``, ``"array-like"``."""

    def __init__(self, test, text):
        self.is_satisfied_by, self.text = test, text

    def __str__(self):
        return self.text


class _AnyOf:
    """The shorthands ``"boolean"``, ``"verbose"``, ``"random_state"``: any of several."""

    def __init__(self, *constraints):
        self.constraints = constraints

    def is_satisfied_by(self, val) -> bool:
        return any(c.is_satisfied_by(val) for c in self.constraints)

    def __str__(self):
        return _alternatives(self.constraints)


def _instance_of(t):
    return _Is(lambda v: isinstance(v, t), f"an instance of {_type_name(t)!r}")


def _constraint(c):
    if c is None:
        return _Is(lambda v: v is None, "None")
    if c is callable:
        return _Is(callable, "a callable")
    if isinstance(c, type):
        return _instance_of(c)
    if c == "array-like":
        return _Is(lambda v: (hasattr(v, "__len__") or hasattr(v, "shape") or hasattr(v, "__array__"))
                   and not np.isscalar(v), "an array-like")
    if c == "boolean":
        return _AnyOf(_instance_of(bool), _instance_of(np.bool_))
    if c == "verbose":
        return _AnyOf(Interval(Integral, 0, None, closed="left"), _instance_of(bool), _instance_of(np.bool_))
    if c == "random_state":
        return _AnyOf(Interval(Integral, 0, 2**32 - 1, closed="both"), _instance_of(np.random.RandomState),
                      _constraint(None))
    if isinstance(c, (Interval, Options)):
        return c
    raise ValueError(f"unknown parameter constraint {c!r}")


def _alternatives(constraints) -> str:
    texts = [str(c) for c in constraints]
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"


def validate_params(estimator) -> None:
    """Check ``estimator.get_params(deep=False)`` against its ``_parameter_constraints``
    (scikit-learn's rule and message: the first constraint a value satisfies accepts it)."""
    constraints = getattr(estimator, "_parameter_constraints", None)
    if not constraints:
        return
    for name, value in estimator.get_params(deep=False).items():
        allowed = constraints.get(name, "no_validation")
        if allowed == "no_validation":
            continue
        allowed = [_constraint(c) for c in allowed]
        if not any(c.is_satisfied_by(value) for c in allowed):
            raise ParameterError(f"The {name!r} parameter of {type(estimator).__name__} must be "
                                 f"{_alternatives(allowed)}. Got {value!r} instead.")


def validate_input(estimator, X, **kwargs):
    """scikit-learn's ``validate_data``, raising :class:`~actkit.errors.ValidationError`."""
    try:
        return validate_data(estimator, X, **kwargs)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def check_input_array(X, **kwargs):
    """scikit-learn's ``check_array``, raising :class:`~actkit.errors.ValidationError`."""
    try:
        return check_array(X, **kwargs)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


def check_fitted(estimator) -> None:
    """scikit-learn's ``check_is_fitted``, raising :class:`~actkit.errors.NotFittedError`."""
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
    check_fitted(estimator)
    X = as_input(X)
    remote = lazy_transform(estimator, X, n_out, block_rows)
    if remote is not None:
        return None, remote
    if is_streaming(X):
        return None, transform_blocks(estimator, X, block_rows, n_out)
    return validate_input(estimator, X, dtype=[np.float64, np.float32], reset=False, **kwargs), None


class FloatTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """The base of actkit's transformers (``Whitener``, ``FastICA``, ``SparseDictionary``):
    scikit-learn's transformer whose output keeps a float32 or float64 input's dtype."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def warmup_size(warmup_rows, n, auto) -> int:
    """Rows of an estimator's warm-up subsample of ``n`` rows: ``warmup_rows`` (``"auto"``:
    ``auto`` rows when the data have more than twice that many); 0, no warm-up, for None, 0 or
    at least ``n`` rows."""
    w = warmup_rows
    if w is None or (not isinstance(w, str) and int(w) <= 0):
        return 0
    if isinstance(w, str):
        if w != "auto":
            raise ValidationError(f"warmup_rows must be 'auto', a positive int or None, got {w!r}")
        return auto if n > 2 * auto else 0
    w = int(w)
    return w if w < n else 0
