"""Results as pandas DataFrames and as notebook tables: the one place that imports pandas.

``pandas()`` returns the module or raises a one-line :class:`~actkit.errors.ActkitError`
naming the fix; ``frame_html(frame, notes=...)`` is the compact, escaped table that every
result's ``_repr_html_`` shows (pandas escapes every cell, index and column label).
"""

from __future__ import annotations

import html

from actkit.errors import ActkitError

__all__ = ["frame_html", "pandas"]


def pandas():
    """The pandas module (``to_frame()`` of every result needs it)."""
    try:
        import pandas as pd  # pandas: ~0.4 s at import (measured); only a DataFrame needs it
    except ImportError:
        raise ActkitError("to_frame() needs pandas, which is not installed: pip install pandas") from None
    return pd


def frame_html(frame, *, caption: str = "", notes=(), max_rows: int = 60, float_format="{:.4g}") -> str:
    """A notebook's compact table of ``frame``: its first ``max_rows`` rows, numbers to four
    significant digits, then the ``notes`` as a list; every string escaped."""
    table = frame.to_html(max_rows=max_rows, escape=True, border=0, na_rep="",
                          float_format=float_format.format, classes="actkit-table")
    head = f"<p><b>{html.escape(caption)}</b></p>" if caption else ""
    tail = "".join(f"<li>{html.escape(str(n))}</li>" for n in notes)
    return head + table + (f"<ul>{tail}</ul>" if tail else "")
