"""``actkit.extract``: the public entry point of extraction.

The one bridge from ``actkit`` to ``extractors`` (the model adapters: torch, transformers,
timm). Importing this module imports nothing heavy; the attribute ``extract`` is resolved on
first use (module ``__getattr__``), so the analysis side never pays for those imports. The
function itself, with its full docstring, is :func:`extractors.extract.extract`.
"""

from __future__ import annotations

__all__ = ["extract"]


def __getattr__(name: str):
    if name == "extract":
        from extractors.extract import extract

        return extract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
