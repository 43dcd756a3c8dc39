"""The registry of measures: every public module of ``actkit.measures`` states its
``MEASURES``; they are found on first use (a new measure is one new module, nothing else).
Kept apart from ``_protocol`` so that the measure modules, which import the protocol, are not
imported by it (no import circle)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import replace

from actkit.errors import ValidationError
from actkit.measures._protocol import Measure

__all__ = ["all_measures", "available", "format_param", "get_measure", "parse_measures", "variant_key"]

# ----- the registry: every public module of actkit.measures states its MEASURES -----
_REGISTRY: dict | None = None


def _registry() -> dict:
    global _REGISTRY
    if _REGISTRY is None:
        found = {}
        package = sys.modules[__name__.rpartition(".")[0]]     # actkit.measures: imported before us
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"actkit.measures.{info.name}")
            for m in getattr(module, "MEASURES", ()):
                if m.name in found:
                    raise RuntimeError(f"two measures named {m.name}")
                found[m.name] = m
        order = sorted(found.values(), key=lambda m: _rank(m.name))
        _REGISTRY = {m.name: m for m in order}
    return _REGISTRY


#: the issue's order for the table; a measure not listed here comes after, by module
_ORDER = ("permutation", "rigid", "linear", "ica", "ica_efficiency", "linear_cka",
          "linear_cka_debiased", "rbf_cka", "mean_cca", "svcca", "pwcca", "procrustes",
          "shape_metric", "bures", "rsa", "mutual_knn", "cknna", "jaccard_knn", "dcor", "linear_r2")


def _rank(name):
    return _ORDER.index(name) if name in _ORDER else len(_ORDER)


def all_measures() -> list:
    """Every registered :class:`Measure`, in the documented order."""
    return list(_registry().values())


def available() -> list:
    """The names of every measure (``compare(measures=...)``, ``--measures``)."""
    return list(_registry())


def get_measure(name) -> Measure:
    """The :class:`Measure` of ``name``; a one-line error naming the valid choices."""
    reg = _registry()
    if name not in reg:
        raise ValidationError(f"unknown measure {name!r}; choose from {', '.join(reg)}")
    return reg[name]


def parse_measures(spec) -> list:
    """``[(Measure, params), ...]`` from ``"procrustes,mutual_knn:k=5,shape_metric:alpha=0.5"``
    or a list of names, ``(name, params)`` pairs, or such strings; params checked.

    Variants of one measure with different parameters (``"shape_metric:alpha=0.5,
    shape_metric:alpha=1"``) are each a measure of their own, named by :func:`variant_key`
    (``"shape_metric:alpha=0.5"``, ``"shape_metric:alpha=1"``: the parameters in which the
    variants differ), the key of their value in ``compare``'s ``to_dict()``; a measure asked
    for once keeps its name. The same measure with the same parameters twice is an error."""
    if spec is None:
        return []
    if isinstance(spec, str):
        spec = _split_spec(spec)
    out = []
    for item in spec:
        if isinstance(item, str):
            name, _, rest = item.strip().partition(":")
            params = {}
            for part in filter(None, (x.strip() for x in rest.split(":"))):
                key, eq, value = part.partition("=")
                if not eq or not key.strip():
                    raise ValidationError(f"measure parameter {part!r} of {name} must be key=value "
                                          f"(e.g. mutual_knn:k=5)")
                params[key.strip()] = value.strip()
        else:
            name, params = item
        m = get_measure(name.strip())
        out.append((m, m.validate(params)))
    return _variants(out)


def _variants(chosen):
    """Each measure asked for with several parameter sets renamed to its :func:`variant_key`."""
    seen = set()
    for m, params in chosen:
        key = (m.name, tuple(sorted((k, repr(v)) for k, v in params.items())))
        if key in seen:
            raise ValidationError(f"measure {m.name} is asked for twice with the same parameters")
        seen.add(key)
    out = []
    for m, params in chosen:
        sets = [p for x, p in chosen if x.name == m.name]
        if len(sets) == 1:
            out.append((m, params))
            continue
        differ = [k for k in params if any(p.get(k) != params[k] for p in sets)]
        out.append((replace(m, name=variant_key(m.name, params, differ)), params))
    return out


def variant_key(name, params, which=None):
    """``name:k=v:...`` for the parameters ``which`` (default all) of ``params``: a variant's
    key (``shape_metric:alpha=0.5``). Floats print as ``%g``, booleans as true/false."""
    which = list(params) if which is None else which
    return ":".join([name] + [f"{k}={format_param(params[k])}" for k in which])


def format_param(v):
    """A parameter's value as ``--measures`` takes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _split_spec(text):
    """Split at commas that start a new measure (a comma followed by a ``key=`` stays with
    the measure before it: ``shape_metric:alpha=0.5,mutual_knn:k=5``)."""
    items = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        if items and "=" in part and ":" not in part:
            items[-1] += ":" + part
        else:
            items.append(part)
    return items
