"""The versions of the libraries that shape actkit's numbers, one record for every output
(store provenance, the zoo's metadata, reports)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["VERSIONED", "library_versions"]

VERSIONED = ("actkit", "numpy", "scipy", "scikit-learn", "torch", "transformers", "timm", "h5py", "matplotlib")


def library_versions(names=VERSIONED) -> dict:
    """``{distribution: version}`` of installed distributions, from package metadata (nothing
    is imported; ``None`` for one that is not installed).

    Parameters
    ----------
    names : sequence of str, default=VERSIONED
        Distribution names (``"scikit-learn"``, not ``"sklearn"``).
    """
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out
