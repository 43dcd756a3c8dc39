"""Lazy package attributes: ``import actkit`` (or ``actkit.metrics``) imports nothing heavy;
each public name is imported from its module on first use and then cached."""

from __future__ import annotations

import importlib
import sys

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, names: dict, modules=()):
    """``(__getattr__, __dir__, __all__)`` for ``package``.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    names : dict of str -> str
        Public name -> the module that defines it.
    modules : sequence of str
        Sub-modules reachable as attributes (``package.<name>``).
    """
    public = sorted([*names, *modules])

    def __getattr__(name: str):
        if name in modules:
            return importlib.import_module(f"{package}.{name}")
        try:
            module = names[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return public

    return __getattr__, __dir__, public
