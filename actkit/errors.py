"""Errors that describe a user mistake.

The CLI prints ``actkit: error: <message>`` on one line and exits non-zero for every
:class:`ActkitError` (and for ``ValueError`` raised by input validation), never a
traceback. Set ``ACTKIT_DEBUG=1`` to see the traceback anyway.
"""

from __future__ import annotations


class ActkitError(Exception):
    """A problem with the user's input, files or environment (not a bug in actkit)."""

    exit_code = 2


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
