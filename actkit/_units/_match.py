"""``match_units``: the units of two stores over the same inputs, matched one to one.

The correlation of every unit of A with every unit of B over all rows comes from one streamed
pass of cross moments (:mod:`actkit._units._match_pass`, :meth:`actkit.stats.CrossMoments.correlation`);
the matching maximises the summed |correlation| (Hungarian: :func:`actkit.metrics.match_columns`).
Each pair's p-value comes from re-pairing whole input samples (a sample of A with another
sample of B of the same length, row by row), on up to ``max_rows`` rows of whole samples that
can be re-paired (:mod:`actkit._units._match_null`): every pair's |correlation| is standardised
by its own null mean and SD and the null of the largest standardised value over *all* pairs
(Westfall-Young max-T) gives each pair a p-value that accounts for the choice of partner and
the number of pairs. The same rows, resampled by input sample, give each pair's |correlation|
a bootstrap interval. A pair is *shared* when ``p < alpha`` and ``|corr| >= min_corr``: beyond
chance, and strong enough to call the two units the same unit.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from actkit._frames import frame_html
from actkit._matching import match_columns
from actkit._warn import warn_user
from actkit.errors import InputError, ValidationError
from actkit.inference import bootstrap_floor_error
from actkit._units._api import open_units_store
from actkit._units._basis import resolve_basis
from actkit._units._match_null import abs_corr_intervals, max_t_null, null_rows
from actkit._units._match_pass import PairedRows, match_pass
from actkit._units._report import UnitReport

__all__ = ["COLUMNS", "UnitMatch", "check_match", "match_units", "min_permutations"]

#: the columns of :meth:`UnitMatch.to_frame` (and the keys of each pair)
COLUMNS = ("a", "b", "corr", "abs_corr", "ci_low", "ci_high", "p_value", "shared")


class UnitMatch:
    """Matched units of A and B (:func:`actkit.match_units`).

    Attributes
    ----------
    pairs : list of dict
        ``{"a", "b", "corr", "abs_corr", "ci_low", "ci_high", "p_value", "shared"}``, largest
        |corr| first: the correlation over the rows (signed), its absolute value, the
        bootstrap interval of the absolute value by input sample, the max-T p-value and
        whether ``p_value < alpha and abs_corr >= min_corr``.
    corr : ndarray of shape (units of A, units of B)
        Correlation over all rows, or over ``rows=`` (sign as stored; A's flipped ICA units
        flipped when a report was given).
    null_max : ndarray of shape (re-pairings,)
        The largest standardised |correlation| of any pair under each re-pairing of the samples.
    info : dict
        The other store, layers, ``alpha``, ``min_corr``, ``rule``, ``permutations``,
        ``exact`` (every re-pairing enumerated), ``bootstrap``, ``confidence`` and the rows used.
    report : UnitReport or None
        A's report (when one was given) with each unit's match: a new report, the one given is
        not changed.
    """

    def __init__(self, pairs, corr, null_max, info, report=None):
        self.pairs, self.corr, self.null_max, self.info = pairs, corr, null_max, info
        self.report = None if report is None else _with_matches(report, self)

    @property
    def shared(self) -> list:
        """The shared pairs ``(a, b)``."""
        return [(p["a"], p["b"]) for p in self.pairs if p["shared"]]

    def to_dict(self) -> dict:
        return {**self.info, "pairs": [dict(p) for p in self.pairs], "shared": len(self.shared),
                "null_max": [float(x) for x in self.null_max]}

    def to_frame(self):
        """A pandas DataFrame, one row per pair (columns :data:`COLUMNS`), largest |corr| first."""
        import pandas as pd  # pandas: only for a DataFrame

        return pd.DataFrame(self.pairs, columns=list(COLUMNS))

    def _repr_html_(self) -> str:
        """A notebook's view: the first pairs of :meth:`to_frame` under the summary line."""
        return frame_html(self.to_frame().head(20), caption=repr(self))

    def __repr__(self):
        i = self.info
        return (f"UnitMatch: {len(self.pairs)} pairs, {len(self.shared)} shared ({i['rule']}); "
                f"{'all ' if i['exact'] else ''}{i['permutations']} re-pairings of {i['null_samples']} samples")


def _side(x, layer, basis, device, side):
    flip = None
    if isinstance(x, UnitReport):
        d = x._data
        if basis is None and d["basis"]["kind"] != "neuron":
            if not os.path.exists(d["basis"]["source"]):
                raise InputError(f"match_units: the report's basis was given as an object "
                                 f"({d['basis']['source']}); pass basis= again")
            basis = d["basis"]["source"]
        layer = d["layer"] if layer is None else layer
        flip = np.zeros(d["basis"]["n_units"], bool)
        flip[d["flipped"]] = True
        x = d["store"]
    flag = "--layer" if side == "a" else "--layer-b"
    store, layer, opened = open_units_store(x, layer, flag=flag)
    try:
        return store, layer, opened, resolve_basis(basis, store, layer, device=device, side=side), flip
    except BaseException:
        if opened:
            store.close()
        raise


@contextlib.contextmanager
def _pair(store_a, layer, basis, store_b, layer_b, basis_b, device):
    """Both sides (:func:`_side`: store, layer, opened, basis, flips), each store opened here
    closed again on leaving, in any case."""
    with contextlib.ExitStack() as stack:
        a = _side(store_a, layer, basis, device, "a")
        if a[2]:
            stack.callback(a[0].close)
        b = _side(store_b, layer_b or a[1], basis_b, device, "b")
        if b[2]:
            stack.callback(b[0].close)
        yield a, b


def _check_pair(sa, la, sb, lb):
    fa, fb = str(getattr(sa, "inputs_fingerprint", "")), str(getattr(sb, "inputs_fingerprint", ""))
    if not fa or fa != fb:
        raise InputError(f"match_units: {sb.path} was not computed on the same inputs as {sa.path} "
                         f"(inputs fingerprints {fa or 'none'} and {fb or 'none'})")
    ia, ib = np.asarray(sa[la].index), np.asarray(sb[lb].index)
    if ia.shape != ib.shape or not np.array_equal(ia, ib):
        raise InputError(f"match_units: layers {la} and {lb} (--layer-b) do not hold the same rows "
                         "(samples and positions)")
    return ia


def _rows(rows, n):
    """``rows`` as sorted unique int64 row numbers in ``[0, n)`` (None stays None); one line
    for anything else."""
    if rows is None:
        return None
    r = np.asarray(rows)
    if r.ndim != 1 or r.size < 2 or not (np.issubdtype(r.dtype, np.integer) or r.dtype == bool):
        raise InputError(f"match_units: rows must be two or more row numbers (e.g. a CompareResult's "
                         f"heldout_rows), got {type(rows).__name__} of shape {r.shape}")
    if r.dtype == bool:
        if r.size != n:
            raise InputError(f"match_units: a row mask of {r.size} values for {n} rows")
        return np.flatnonzero(r)
    r = np.unique(r.astype(np.int64))
    if r[0] < 0 or r[-1] >= n:
        raise InputError(f"match_units: rows must lie in [0, {n}) (the layer's rows), got {r[0]} .. {r[-1]}")
    return r


def min_permutations(alpha) -> int:
    """The fewest re-pairings with which a pair can be shared at ``alpha``: the smallest ``N``
    with ``1 / (N + 1) < alpha`` (20 at 0.05)."""
    return int(math.floor(round(1.0 / float(alpha), 9)))


def check_options(permutations, alpha, min_corr, bootstrap, confidence, flags=False) -> None:
    """One-line errors for match_units' numbers (``flags``: name them as the command line does)."""
    name = (lambda s: "--" + s.replace("_", "-")) if flags else (lambda s: s)
    for key, v in (("permutations", permutations), ("bootstrap", bootstrap)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name(key)} must be a positive integer, got {v!r}")
    if not 0 < float(alpha) < 1:
        raise InputError(f"{name('alpha')} must be in (0, 1), got {alpha!r}")
    if not 0 <= float(min_corr) <= 1:
        raise InputError(f"{name('min_corr')} must be in [0, 1] (a |correlation|), got {min_corr!r}")
    if not 0 < float(confidence) < 1:
        raise InputError(f"{name('confidence')} must be in (0, 1), got {confidence!r}")
    floor = bootstrap_floor_error(int(bootstrap), float(confidence), asked=name("bootstrap") + " {}")
    if floor:
        raise InputError(floor)
    need = min_permutations(alpha)
    if permutations < need:
        raise InputError(f"{name('permutations')} {permutations} cannot make any pair shared at alpha {alpha:g}: the "
                         f"smallest p-value is 1 / ({permutations} + 1); ask for at least {need}")


def match_units(report_or_store_a, store_b, *, layer=None, layer_b=None, basis=None, basis_b=None,
                permutations=200, max_rows=20000, alpha=0.05, min_corr=0.5, bootstrap=200, confidence=0.95,
                random_state=0, rows=None, device="cpu", progress=None, scheduler=None) -> UnitMatch:
    """Match the units of A (a :class:`UnitReport` or a store) with those of ``store_b``.

    Parameters
    ----------
    report_or_store_a : UnitReport, str, Store or Layer
        A report (its store, layer and basis are reused; the match carries a copy of it with
        each unit's match, :attr:`UnitMatch.report`) or a store.
    store_b : str, Store or Layer
        The other store, over the same inputs (equal inputs fingerprints and row index).
    layer, layer_b, basis, basis_b
        As :func:`actkit.units` (``layer_b`` defaults to ``layer``; ``basis_b`` to none).
    permutations : int, default=200
        Re-pairings of whole input samples for the null (every re-pairing when there are no
        more than this many: an exact test). At least :func:`min_permutations` (20 at
        ``alpha=0.05``): with fewer, no pair could be shared.
    max_rows : int, default=20000
        Rows (of whole samples) the null and the bootstrap are computed on.
    alpha : float, default=0.05
    min_corr : float in [0, 1], default=0.5
        A pair is shared when ``p_value < alpha`` and ``|corr| >= min_corr``.
    bootstrap : int, default=200
        Resamples of the input samples for each pair's interval of |corr| (percentile); at
        least ``2 / (1 - confidence)`` (40 at 0.95).
    confidence : float, default=0.95
        Of the intervals.
    rows : array of int or bool mask, optional
        Only these rows (row numbers of both layers) for the correlations and the null, e.g.
        ``CompareResult.heldout_rows``, the rows ``compare`` reports its source correlations on
        (docs/units.md, "From compare to match_units"). Default: every row.
    scheduler : None, str or distributed.Client
        Run the pass on Dask (``docs/dask.md``); the same result as here.

    Returns
    -------
    UnitMatch
    """
    check_options(permutations, alpha, min_corr, bootstrap, confidence)
    with _pair(report_or_store_a, layer, basis, store_b, layer_b, basis_b, device) as (a, b):
        (sa, la, _, ba, flip), (sb, lb, _, bb, _) = a, b
        index = _check_pair(sa, la, sb, lb)
        sel = _rows(rows, index.shape[0])
        picks = (null_rows(index, int(max_rows), random_state) if sel is None
                 else sel[null_rows(index[sel], int(max_rows), random_state)])
        if picks.size == 0:
            raise ValidationError("match_units: no two input samples have the same number of rows; whole samples "
                                  "cannot be re-paired for the null")
        cm, A, B = _stream(ba, bb, sel, picks, scheduler, progress)
    info = {"other": str(getattr(sb, "path", "")), "layer": la, "layer_b": lb, "alpha": float(alpha),
            "min_corr": float(min_corr), "rule": f"p < {alpha:g} and |corr| >= {min_corr:g}",
            "bootstrap": int(bootstrap), "confidence": float(confidence), "null_rows": int(picks.size),
            "rows": int(index.shape[0] if sel is None else sel.size)}
    return _result(cm.correlation(), flip, A, B, index[picks, 0], permutations, random_state, info,
                   report_or_store_a if isinstance(report_or_store_a, UnitReport) else None)


def _stream(ba, bb, keep, picks, scheduler, progress):
    """The pass (:func:`actkit._units._match_pass.match_pass`) on the runner ``scheduler`` names:
    ``(CrossMoments, A rows of picks, B rows of picks)``."""
    from actkit._rows import block_rows  # the row block of every pass
    from actkit.runners import runner_for  # the runner decides where the pass runs

    rows = block_rows(max(ba.n_units, bb.n_units, int(ba.rows.shape[1]) + int(bb.rows.shape[1])), itemsize=8,
                      max_rows=16384)
    threads = all(x.sae is None or str(getattr(x.sae, "device", "cpu")) == "cpu" for x in (ba, bb))
    with runner_for(PairedRows(ba.rows, bb.rows), scheduler, block_rows=rows) as (X, runner):
        cm, got_a, got_b = runner.run(X, match_pass(ba, bb, rows, keep, picks, threads=threads),
                                      desc="match units", progress=progress)
    return cm, np.concatenate(got_a), np.concatenate(got_b)


def _result(corr, flip, A, B, groups, permutations, random_state, info, report):
    """The :class:`UnitMatch` of the correlations ``corr`` and the rows ``A``, ``B`` of the null."""
    if flip is not None:  # |corr|, the null and the intervals do not see the sign
        corr = np.where(flip[:, None], -corr, corr)
    ia, ib, _ = match_columns(corr)
    pv, null, exact, movable, n_samples = max_t_null(A, B, groups, int(permutations), random_state)
    if movable == 0:
        raise ValidationError("match_units: no two input samples have the same number of rows; whole samples "
                              "cannot be re-paired for the null")
    if exact and null.size * info["alpha"] <= 1:
        warn_user(f"match_units: these samples allow only {null.size} re-pairings (all of them used), so no p-value "
                  f"falls below 1 / {null.size} and no pair can be shared at alpha {info['alpha']:g}; use more input "
                  "samples (more rows of equal length) for a chance level")
    lo, hi = abs_corr_intervals(A, B, groups, ia, ib, info["bootstrap"], info["confidence"], random_state)
    pairs = []
    for i, j, low, high in zip(ia, ib, lo, hi):
        c, p = float(corr[i, j]), float(pv[i, j])
        pairs.append({"a": int(i), "b": int(j), "corr": c, "abs_corr": abs(c), "ci_low": float(low),
                      "ci_high": float(high), "p_value": p,
                      "shared": bool(p < info["alpha"] and abs(c) >= info["min_corr"])})
    pairs.sort(key=lambda p: (-p["abs_corr"], p["a"]))
    info = {**info, "permutations": int(null.size), "exact": bool(exact), "null_samples": int(n_samples),
            "movable": float(movable)}
    return UnitMatch(pairs, corr, null, info, report)


def _with_matches(report, match):
    """A new :class:`UnitReport`: ``report``'s data with each unit's match and the match's data."""
    by_a = {p["a"]: p for p in match.pairs}
    d = report._data
    units = []
    for u in d["units"]:
        p = by_a.get(u["unit"])
        units.append({**u, "match": None if p is None else {
            "unit": p["b"], "corr": p["corr"], "abs_corr": p["abs_corr"], "ci": [p["ci_low"], p["ci_high"]],
            "p_value": p["p_value"], "shared": p["shared"]}})
    return UnitReport({**d, "units": units, "matches": match.to_dict()})


def check_match(store_a, store_b, *, layer=None, layer_b=None, basis=None, basis_b=None, device="cpu") -> None:
    """The checks :func:`match_units` makes before reading rows (layers, bases, the same inputs
    and rows), for a command that runs a report first: one-line errors, nothing computed."""
    with _pair(store_a, layer, basis, store_b, layer_b, basis_b, device) as ((sa, la, *_), (sb, lb, *_)):
        _check_pair(sa, la, sb, lb)
