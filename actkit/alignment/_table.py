"""Text tables of compare results: the Table-1-style table and a pairwise matrix.

``format_table(results, labels)`` is what ``str(CompareResult)`` prints and what
``actkit compare`` and ``actkit demo`` print; :mod:`actkit.report` re-exports both.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from actkit.errors import ValidationError

__all__ = ["format_table", "format_matrix", "value_of", "row_labels", "ica_cell",
           "table_footnotes", "ica_summary"]


def value_of(res, key):
    d = res.to_dict() if hasattr(res, "to_dict") else dict(res)
    v = d.get(key)
    return float("nan") if v is None else float(v)


def _fmt(x, digits=3):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _spread(x, std, digits, pct=False, step=1):
    """``x`` with ``±std`` when the spread shows at the printed precision (``pct``: a
    percentage rounded to multiples of ``step``). With a spread, the spread is rounded to
    one significant digit and both are printed only to that digit's decimal (never more
    than ``digits``): 0.459 ± 0.011 prints ``0.46±0.01``, 69 ± 15 % prints ``70±20%``, and
    66 ± 10.6 % and 69 ± 9.7 % both print ``70±10%`` -- the digits another machine,
    landing elsewhere within the spread, reproduces."""
    scale, places = (100, 0) if pct else (1, digits)
    value = scale * x
    if pct and step != 1:
        value = step * round(value / step)
    unit = "%" if pct else ""
    if std is None or math.isnan(std) or scale * std < 0.5 * max(step if pct else 0, 10 ** -places):
        return _no_minus_zero(f"{value:.{places}f}") + unit
    spread = scale * std
    lead = math.floor(math.log10(spread))
    lead = math.floor(math.log10(_round_half_up(spread, -lead)))   # 9.7 rounds to 10: one place up
    keep = min(places, -lead)                                 # < 0: round to tens, hundreds
    shown = max(keep, 0)
    return (f"{_no_minus_zero(f'{_round_half_up(value, keep):.{shown}f}')}\u00b1"
            f"{_round_half_up(spread, keep):.{shown}f}{unit}")


def _round_half_up(x, places):
    """``x`` rounded to ``places`` decimals (negative: tens, hundreds), halves away from 0."""
    q = 10.0 ** places
    return math.copysign(math.floor(abs(x) * q + 0.5) / q, x)


def _no_minus_zero(text: str) -> str:
    """``-0.4%`` rounds to ``"0%"``, never ``"-0%"``."""
    return text.lstrip("-") if float(text) == 0 else text


def _dict(r):
    return r.to_dict() if hasattr(r, "to_dict") else dict(r)


def _ran_ica(d):
    return "ica_std" in d or "ica_restarts" in d


def ica_cell(r, digits=3, eff_step=1):
    """The ICA column: error (``±`` its spread over the restarts), efficiency in
    parentheses (in percent, rounded to multiples of ``eff_step``), ``(–)`` where the
    efficiency is undefined, ``*`` where FastICA did not converge, ``‡`` where the
    reproducibility check failed (``ica_identifiable`` false). A cell marked ``‡`` prints no
    digits (:data:`UNIDENTIFIABLE_CELL`): the error is then one of several optima, and a
    perturbation of the rows by 1e-6 moves it by more than its ``±``; ``to_dict()`` keeps
    the numbers."""
    ica, eff = value_of(r, "ica"), value_of(r, "ica_efficiency")
    if math.isnan(ica):
        return "-"
    d = _dict(r)
    if d.get("ica_identifiable") is False:
        # one of several FastICA optima: 1e-6 of rounding (another CPU, another extraction
        # batch size) lands on another one, so no digit of it would reproduce
        return UNIDENTIFIABLE_CELL + ("*" if d.get("ica_converged") is False else "") + NOT_IDENTIFIABLE_MARK
    cell = _spread(ica, d.get("ica_std"), digits)
    if not math.isnan(eff):
        cell += f" ({_spread(eff, d.get('ica_efficiency_std'), digits, pct=True, step=eff_step)})"
    elif _ran_ica(d) and d.get("permutation") is not None and d.get("rigid") is not None:
        cell += " (\u2013)"
    if d.get("ica_converged") is False:
        cell += "*"
    if d.get("ica_identifiable") is False:
        cell += NOT_IDENTIFIABLE_MARK
    return cell


#: the mark of an ICA cell whose reproducibility check failed (``ica_identifiable`` false)
NOT_IDENTIFIABLE_MARK = "\u2021"

#: what such a cell prints instead of digits
UNIDENTIFIABLE_CELL = "not identifiable"


#: the mark of a rigid or linear error fitted on too few rows (``<method>_fit_rows_ok`` false)
FEW_ROWS_MARK = "\u2020"


def closed_form_cell(r, name, digits=3, compact=False):
    """A permutation, rigid or linear error, marked where its map had too few fit rows."""
    cell = _fmt(value_of(r, name), digits)
    if _dict(r).get(f"{name}_fit_rows_ok") is False:
        cell += FEW_ROWS_MARK
    return cell if compact else cell + uncertainty_text(r, name)


def similarity_cell(r, name, digits=3, compact=False):
    """CKA or CCA with its chance level in brackets (``<name>_chance``) where measured; with
    resampling (and not ``compact``) its interval and p-value instead."""
    cell = _fmt(value_of(r, name), digits)
    extra = "" if compact else uncertainty_text(r, name)
    if extra and cell != "-":
        return cell + extra
    chance = _dict(r).get(f"{name}_chance")
    if chance is not None and cell != "-":
        cell += f" [{_fmt(float(chance), digits)}]"
    return cell


def _resampled(d):
    return bool(d.get("permutations") or d.get("bootstrap"))


def uncertainty_text(r, name):
    """`` [0.69, 0.73] p<0.001``: the bootstrap interval (``<name>_ci_low/_ci_high``, two
    decimals, three where two would print the same ends) and the permutation p-value
    (``<name>_p``) of a measure, those measured; ``""`` without."""
    d = _dict(r)
    out = ""
    lo, hi = d.get(f"{name}_ci_low"), d.get(f"{name}_ci_high")
    if lo is not None and hi is not None:
        places = 2 if f"{lo:.2f}" != f"{hi:.2f}" else 3
        out += f" [{_no_minus_zero(f'{lo:.{places}f}')}, {_no_minus_zero(f'{hi:.{places}f}')}]"
    p = d.get(f"{name}_p")
    if p is not None:
        out += " p<0.001" if p < 0.001 else f" p={p:.3f}"
    return out


def table_footnotes(results, cells=(), compact=False):
    """One line per mark :func:`format_table` printed (``–``, ``*``, ``±``; ``cells``: the
    printed ICA cells)."""
    ds = [_dict(r) for r in results]
    notes = []
    if any("(\u2013)" in cell for cell in cells):
        notes.append("\u2013: ICA efficiency undefined: permutation - rigid is not above noise")
    if any(d.get("ica_converged") is False for d in ds):
        notes.append("*: FastICA did not converge within ica_max_iter on at least one side")
    if any(d.get("ica_identifiable") is False for d in ds):
        notes.append(f"{NOT_IDENTIFIABLE_MARK}: ica_identifiable is false: the two halves of the restarts find "
                     "different sources, or the self floor is comparable to permutation - rigid; the "
                     "ICA error is one of several optima, not a reproducible measurement, so no digits "
                     "are printed (the JSON keeps ica and ica_efficiency)")
    if any(d.get(f"{m}_fit_rows_ok") is False for d in ds for m in ("rigid", "linear")):
        notes.append(f"{FEW_ROWS_MARK}: too few fit rows for this map (rigid: 5 max(Da, Db), "
                     f"linear: 10 Da); its error is unreliable")
    if any(_resampled(d) for d in ds) and not compact:
        d = next(d for d in ds if _resampled(d))
        parts = []
        if d.get("bootstrap"):
            parts.append(f"[low, high]: {100 * d.get('confidence', 0.95):g}% bootstrap interval "
                         f"({d.get('interval', 'basic')}) over {d['bootstrap']} resamples of the "
                         "input samples (errors: of the held-out samples, maps fixed)"
                         + ("; fewer than 100 resamples: its ends are noisy" if d["bootstrap"] < 100 else ""))
        if d.get("permutations"):
            parts.append(f"p: permutation p-value, {d['permutations']} shuffles of B's input samples "
                         "against A's (one-sided, more similar)"
                         + (f"; it cannot fall below 1/{d['permutations'] + 1}" if d["permutations"] < 19 else ""))
        notes.extend(parts)
    if any((d.get("linear_cka_chance") is not None or d.get("mean_cca_chance") is not None)
           and (compact or not _resampled(d)) for d in ds):
        notes.append("[ ]: chance level: the same CKA / CCA with B's input samples re-paired against "
                     "A's (whole samples, as the p-values; seeded); a value near it is noise")
    if any("\u00b1" in cell for cell in cells):
        notes.append("\u00b1: standard deviation of the ICA error (and efficiency) over the "
                     "pairings of FastICA restarts (best: all R x R; consensus: the restart pairs)")
    return notes


def ica_summary(results, labels):
    """One line per compared pair with ICA: the components fitted, the estimator, how many
    sources were matched, and what is mapped as the permutation maps it (only where
    something is; docs/definitions.md, "ICA alignment")."""
    out = []
    for lab, r in zip(labels, results):
        d = _dict(r)
        if d.get("ica_identified_a") is None:
            continue
        k = d["ica_n_components"]
        width = min(d.get("n_features_a") or k, d.get("n_features_b") or k)
        fitted = f"{k} of {width} components" + (" (rows rule)" if d.get("ica_n_components_reason") == "rows"
                                                  else "")
        if d.get("ica_method", "consensus") == "best":
            line = (f"ica {lab}: {fitted}, best-contrast fit of {d['ica_restarts']} restarts per side, "
                    f"{d['ica_matched']} sources matched")
            if d.get("ica_shared_halves") is not None:
                line += (f"; halves share {d['ica_shared_halves_a']} (A) / {d['ica_shared_halves_b']} (B), "
                         f"self floor {_fmt(d.get('ica_self_floor'))}, identifiable: "
                         f"{'yes' if d.get('ica_identifiable') else 'no'}")
                if d.get("ica_identifiable") is False and d.get("ica") is not None:
                    eff = d.get("ica_efficiency")
                    line += (f"; the error of this run, {_fmt(d['ica'])}"
                             + ("" if eff is None or math.isnan(eff) else f" ({100 * eff:.0f}%)")
                             + " is one of several optima, not a measurement (not in the table)")
        else:
            line = (f"ica {lab}: {fitted}, {d['ica_identified_a']} sources identified on A, "
                    f"{d['ica_identified_b']} on B ({d['ica_restarts']} restarts), {d['ica_matched']} matched")
        if d["ica_matched"] < width:
            line += "; the rest mapped as the permutation maps it"
        out.append(line)
    return out


def row_labels(results, labels):
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(results):
            raise ValidationError(f"{len(labels)} labels for {len(results)} results")
        return labels
    out = []
    for i, r in enumerate(results):
        d = r.to_dict() if hasattr(r, "to_dict") else dict(r)
        a, b = d.get("layer_a"), d.get("layer_b")
        out.append(f"{a} -> {b}" if a and b else f"pair {i + 1}")
    return out


def format_table(results, labels: Sequence[str] | None = None, *, digits: int = 3,
                 title: str | None = None, ica_digits: int | None = None,
                 eff_step: int = 1, compact: bool = False) -> str:
    """A Table-1-style text table: one row per compared pair.

    Columns: permutation, rigid, linear (held-out mean l2 error / diam(B)), ICA with its
    efficiency in parentheses (as in Nelson et al., Table 1), linear CKA and mean CCA, then
    each measure asked for with ``compare(measures=...)`` under its name. The
    ICA cell (:func:`ica_cell`) adds ``±`` the spread over the restarts where it shows at
    the printed precision, ``(–)`` for an undefined efficiency and ``*`` for a fit that did
    not converge; a footnote line under the table explains each mark used.

    Parameters
    ----------
    results : list of CompareResult (or of their ``to_dict()`` dicts)
    labels : list of str, optional
        Row labels, e.g. ``"gpt_neox.layers.3"`` or ``"seed0 -> seed1"``; default from the
        results' layer names.
    digits : int, default=3
    title : str, optional
    ica_digits : int or None, default=None
        Decimals of measured ICA errors (None: ``digits``); rows without ICA restarts (e.g.
        a paper's numbers) keep ``digits``.
    eff_step : int, default=1
        Measured efficiencies are printed in percent rounded to multiples of this.
    compact : bool, default=False
        Hide the bootstrap intervals and p-values of a resampled result (``value [low,
        high] p<0.001`` otherwise; the chance levels then show as without resampling).

    Returns
    -------
    str

    Examples
    --------
    >>> print(format_table([{"permutation": .219, "rigid": .150, "linear": .131,
    ...                      "ica": .202, "ica_efficiency": .25, "linear_cka": .9,
    ...                      "mean_cca": .8}], ["Pythia-160M-0 -> 1"]))  # doctest: +NORMALIZE_WHITESPACE
    pair                Permutation  Rigid  Linear  ICA (% eff.)    CKA    CCA
    ------------------  -----------  -----  ------  ------------  -----  -----
    Pythia-160M-0 -> 1        0.219  0.150   0.131   0.202 (25%)  0.900  0.800
    """
    results = list(results)
    labels = row_labels(results, labels)
    extra = measure_columns(results)
    header = ["pair", "Permutation", "Rigid", "Linear", "ICA (% eff.)", "CKA", "CCA",
              *(column_header(results, name) for name in extra)]
    rows = []
    for lab, r in zip(labels, results):
        rows.append([lab, closed_form_cell(r, "permutation", digits, compact),
                     closed_form_cell(r, "rigid", digits, compact),
                     closed_form_cell(r, "linear", digits, compact),
                     ica_cell(r, *((digits, 1) if not _ran_ica(_dict(r)) else
                                   (digits if ica_digits is None else ica_digits, eff_step))),
                     similarity_cell(r, "linear_cka", digits, compact),
                     similarity_cell(r, "mean_cca", digits, compact),
                     *(_fmt(value_of(r, name), digits) + ("" if compact else uncertainty_text(r, name))
                       for name in extra)])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    def line(cells):
        first = cells[0].ljust(widths[0])
        return "  ".join([first] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:])]).rstrip()
    out = [] if title is None else [title]
    out += [line(header), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in rows]
    out += table_footnotes(results, [row[4] for row in rows], compact)
    return "\n".join(out)


#: measures the table always shows (as the columns above)
_SHOWN = ("permutation", "rigid", "linear", "ica", "ica_efficiency", "linear_cka", "mean_cca")


def measure_columns(results):
    """The asked-for measures (``compare(measures=...)``) not already a column, in order."""
    out = []
    for r in results:
        for name in _dict(r).get("measures") or ():
            if name not in _SHOWN and name not in out:
                out.append(name)
    return out


def column_header(results, name):
    """An asked-for measure's column header: its name and the parameters it ran with where
    not the defaults (``mutual_knn k=5``, ``shape_metric alpha=0.5``)."""
    for r in results:
        params = (_dict(r).get("measure_params") or {}).get(name)
        if params is not None:
            base = name.partition(":")[0]
            return " ".join([base] + [f"{k}={v}" for k, v in params.items()])
    return name


def format_matrix(matrix, labels: Sequence[str] | None = None, *, metric: str = "",
                  digits: int = 3) -> str:
    """Text rendering of a (K, K) pairwise matrix (rows: A, columns: B)."""
    matrix = np.asarray(matrix, dtype=float)
    K = matrix.shape[0]
    labels = [str(x) for x in (labels or [str(i + 1) for i in range(K)])]
    cells = [[_fmt(v, digits) for v in row] for row in matrix]
    w0 = max(len(metric), *(len(x) for x in labels))
    w = max(max(len(x) for x in labels), digits + 3)
    out = [metric.ljust(w0) + "  " + "  ".join(x.rjust(w) for x in labels)]
    for lab, row in zip(labels, cells):
        out.append(lab.ljust(w0) + "  " + "  ".join(c.rjust(w) for c in row))
    return "\n".join(out)
