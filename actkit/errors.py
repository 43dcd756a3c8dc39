"""Errors that describe a user mistake.

Every user mistake raises an :class:`ActkitError` subclass; the CLI prints
``actkit: error: <message>`` on one line and exits 2 for exactly those, never a traceback
(set ``ACTKIT_DEBUG=1`` to see it anyway). Any other exception is a bug in actkit and shows
its traceback. The subclasses that describe a bad value also subclass ``ValueError``, as
scikit-learn users expect (:class:`NotFittedError` is a ``ValueError`` and an
``AttributeError``, like scikit-learn's). Importing this module imports nothing else.
"""

from __future__ import annotations

__all__ = ["ActkitError", "ValidationError", "ParameterError", "NotFittedError", "StoreError",
           "StoreIncompleteError", "InputError", "ModelError", "LayerError"]


class ActkitError(Exception):
    """A problem with the user's input, files or environment (not a bug in actkit)."""

    exit_code = 2


class ValidationError(ActkitError, ValueError):
    """An argument or an input array is invalid (shape, NaN, row counts, too few rows...)."""


class ParameterError(ValidationError, TypeError):
    """A hyperparameter is out of its domain (checked against ``_parameter_constraints``)."""


class NotFittedError(ActkitError, ValueError, AttributeError):
    """An estimator is used before ``fit``."""


class StoreError(ActkitError):
    """A store is missing, unreadable, incomplete, or does not match the request."""


class StoreIncompleteError(StoreError):
    """The store is still being written (or its writer was killed): resume it first."""


class InputError(ActkitError):
    """Inputs (text files, images, arrays) are missing, empty or unreadable."""


class ModelError(ActkitError):
    """A model id, directory or checkpoint cannot be loaded."""


class LayerError(ActkitError):
    """A requested layer does not exist in the model or the store."""


class SchedulerError(ActkitError):
    """A Dask scheduler cannot be reached or started, or a worker cannot read a store."""
