"""compare's measures: its similarity columns and any asked-for measure of the protocol
(:mod:`actkit.measures`), from the moments of its one pass and one seeded row sample."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from actkit.alignment._result import METHODS
from actkit.errors import ValidationError
from actkit.inference import MeasureRecord
from actkit.measures import (Moments, canonical_correlations, check_max_rows, evaluate, get_measure, parse_measures,
                             rank_cut)

__all__ = ["MeasureValue", "resolve_measures", "pair_moments", "similarity_columns",
           "evaluate_asked", "finish_measures"]


@dataclass
class MeasureValue(MeasureRecord):
    """One measure of a :class:`~actkit.alignment.CompareResult` (``res.measures[name]``): a
    :class:`actkit.inference.MeasureRecord` with the parameters it ran with.

    Attributes
    ----------
    name : str
    value : float
    params : dict
        The parameters it ran with (defaults filled).
    rows : int or None
        Rows of the sample a row-based measure used (None: every row, from the moments).
    kind, p, null_mean, null_sd, ci_low, ci_high, permutations, bootstrap, confidence, interval
        With resampling (:class:`actkit.inference.MeasureRecord`; docs/compare.md,
        "Uncertainty"): the permutation p-value, the null's mean and sd, the bootstrap
        interval; None (0) where not measured.
    asked : bool
        False for a measure only resampled (the table's debiased CKA): its keys are in
        ``to_dict()``, but it is not in its "measures" list nor a column of the table.
    """

    # not measured until compare(permutations=, bootstrap=) attaches a record
    kind: str | None = None
    confidence: float | None = None
    interval: str | None = None
    params: dict = field(default_factory=dict)
    rows: int | None = None
    asked: bool = True

    def attach(self, record):
        """Take the resampling fields of a :class:`~actkit.inference.MeasureRecord` (not its
        name and value)."""
        for f in fields(MeasureRecord):
            if f.name not in ("name", "value"):
                setattr(self, f.name, getattr(record, f.name))
        return self


def resolve_measures(measures, methods, widths, n, max_rows):
    """``[(Measure, params)]`` of ``compare(measures=...)``, checked before any pass: the
    names, their parameters, their data checks (``k`` below the rows a sample can have,
    equal widths) and an alignment error's method among ``methods``."""
    chosen = parse_measures(measures)
    if any(m.sampled for m, _ in chosen):
        check_max_rows(max_rows)
    rows_cap = n if max_rows is None else min(n, max_rows)
    for m, params in chosen:
        if m.source == "alignment":
            missing = [x for x in methods_needed(m.name) if x not in methods]
            if missing:
                raise ValidationError(f"measure {m.name} needs the method(s) {', '.join(missing)} in "
                                      f"methods (or leave methods out)")
        m.check_data(params, widths, rows_cap if m.sampled else None)
    return chosen


def methods_needed(name):
    """The alignment methods (in :data:`METHODS` order) that the value ``name`` of
    :meth:`CompareResult.to_dict` needs fitted: a method's error its own, ``ica_efficiency``
    permutation, rigid and ICA, the ICA keys (``ica_matched_corr_mean``, ...) ICA; none for
    the similarities and the diameter (they come from the moments)."""
    if name in METHODS:
        return [name]
    if name == "ica_efficiency":
        return ["permutation", "rigid", "ica"]
    return ["ica"] if name.startswith("ica_") else []


def pair_moments(pair):
    """The :class:`~actkit.measures.Moments` of all rows of a fitted pair, with ``parts`` the
    (fit, eval) rows of its split."""
    all_pm = pair.fit_pm.copy().merge(pair.eval_pm)
    m = Moments.from_cross(all_pm, dtype=pair.dtype)
    if pair.fit_pm.n > 1 and pair.eval_pm.n > 1:
        m = m.with_parts(Moments.from_cross(pair.fit_pm, dtype=pair.dtype),
                         Moments.from_cross(pair.eval_pm, dtype=pair.dtype))
    return m


def similarity_columns(m, n, debiased=True):
    """compare's CKA, debiased CKA and mean CCA columns through their measures; also the
    number of canonical correlations (``cca_n_components``)."""
    out = {"linear_cka": get_measure("linear_cka").compute(m),
           "mean_cca": get_measure("mean_cca").compute(m)}
    if debiased:
        out["linear_cka_debiased"] = (get_measure("linear_cka_debiased").compute(m) if n >= 4
                                      else float("nan"))
    k = canonical_correlations(m.Saa, m.Sbb, m.Sab, eps=rank_cut(m.dtype)).size
    return out, k


def evaluate_asked(chosen, A, B, moments, *, groups, max_rows, random_state, device, methods):
    """The asked-for moment- and row-based measures (alignment ones come from the result)."""
    todo = [(m, p) for m, p in chosen if m.source != "alignment"]
    if not todo:
        return {}
    if any(m.needs_split for m, _ in todo) and moments.parts is None:
        raise ValidationError("linear_r2 needs fit and held-out rows")
    return evaluate(A, B, todo, groups=groups, max_rows=max_rows, random_state=random_state,
                    device=device, moments=moments, progress=False)


def finish_measures(res, chosen, asked):
    """Put every asked-for measure in ``res.measures`` (in the asked order)."""
    if not chosen:
        return res
    d = res.to_dict()
    for m, params in chosen:
        value = m.compute(d) if m.source == "alignment" else asked[m.name]
        res.measures[m.name] = MeasureValue(m.name, float(value), params=dict(params),
                                            rows=asked.get(f"{m.name}_rows"))
    return res
