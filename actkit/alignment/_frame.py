"""The measures of a :class:`~actkit.alignment.CompareResult` as table rows: what its
``to_frame()``, its notebook display and its page (:mod:`actkit.pages`) all show, computed once
from ``to_dict()``."""

from __future__ import annotations

from actkit.measures import available, get_measure

__all__ = ["COLUMNS", "measure_rows"]

#: the columns of ``CompareResult.to_frame()`` (its index is ``measure``)
COLUMNS = ("kind", "value", "ci_low", "ci_high", "p", "null_mean", "null_sd", "note")

_ERRORS = ("permutation", "rigid", "linear", "ica")
_BUILT_IN = (*_ERRORS, "ica_efficiency", "linear_cka", "linear_cka_debiased", "mean_cca",
             "ica_matched_corr_mean", "ica_matched_corr_median", "ica_matched_corr_min",
             "linear_cka_chance", "mean_cca_chance")
_KINDS = {"ica_efficiency": "efficiency", "linear_cka_chance": "chance", "mean_cca_chance": "chance",
          **dict.fromkeys(_ERRORS, "error")}


def _kind(name):
    if name in _KINDS:
        return _KINDS[name]
    return get_measure(name).kind if name in available() else "similarity"


def _note(name, d):
    """What a reader must know about this one number (the result's notes hold the rest)."""
    if name in ("rigid", "linear") and d.get(f"{name}_fit_rows_ok") is False:
        return f"too few fit rows ({d.get('n_fit_rows')} < {d.get(f'{name}_min_fit_rows')}): an underdetermined fit"
    if name in ("ica", "ica_efficiency") and d.get("ica_identifiable") is False:
        return "ICA not identifiable: the halves of the starts disagree (ica_identifiable false)"
    if name == "ica_efficiency" and d.get(name) is None and d.get("permutation") is not None:
        return "undefined: permutation and rigid errors within noise"
    if name.startswith("ica_matched_corr") and d.get("ica_matched_corr_undefined"):
        return f"{d['ica_matched_corr_undefined']} matched pair(s) constant on held-out rows, left out"
    if d.get(f"{name}_rows"):
        return f"sampled measure: {d[f'{name}_rows']} rows"
    return ""


def measure_rows(d: dict) -> list[dict]:
    """One dict per measure of a ``CompareResult.to_dict()`` ``d`` (the built-in ones that were
    measured, then the ``measures=`` ones): ``measure``, then :data:`COLUMNS` (None where not
    measured: an interval without ``bootstrap``, a p-value without ``permutations``)."""
    names = [n for n in _BUILT_IN if d.get(n) is not None or (n == "ica_efficiency" and d.get("ica") is not None)]
    names += [n for n in d.get("measures", ()) if n not in names]
    out = []
    for name in names:
        row = {"measure": name, "kind": _kind(name), "value": d.get(name)}
        for key in ("ci_low", "ci_high", "p", "null_mean", "null_sd"):
            row[key] = d.get(f"{name}_{key}")
        row["note"] = _note(name, d)
        out.append(row)
    return out
