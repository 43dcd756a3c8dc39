"""Warnings that point at the user's line, not at actkit's internals.

``warnings.warn(..., stacklevel=N)`` with a fixed ``N`` points wherever the call chain happens
to be N frames deep: behind a decorator (``actkit._threads.follows_thread_policy``), a
helper or a context manager it lands on an actkit file. :func:`warn_user` instead attributes the
warning to the first frame outside actkit (``actkit.*``, ``actkit.extractors`` included),
so ``python -W error``, warning filters by module and the printed ``file:line`` all name the
caller's code.
"""

from __future__ import annotations

import sys
import warnings

__all__ = ["warn_user"]

# frames that sit between two actkit frames: the stdlib's decorators and context managers, and
# scikit-learn's set_output wrapper of ``fit_transform`` / ``transform`` (TransformerMixin)
_SKIP = ("contextlib", "functools", "sklearn.utils._set_output")


def _internal(frame) -> bool:
    name = frame.f_globals.get("__name__", "")
    return name == "actkit" or name.startswith("actkit.") or name in _SKIP


def warn_user(message, category=UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first caller outside actkit.

    Where every frame is actkit's (a worker thread of actkit's own), the warning names the
    function that called :func:`warn_user`.
    """
    frame, level = sys._getframe(1), 2
    while frame is not None and _internal(frame):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level if frame is not None else 2)
