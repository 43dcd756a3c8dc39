"""``match_units``: the units of two stores over the same inputs, matched one to one.

The correlation of every unit of A with every unit of B over all rows comes from one streamed
pass of cross moments (:class:`actkit.stats.CrossMoments`); the matching maximises the summed
|correlation| (Hungarian: :func:`actkit.metrics.match_columns`). Each pair's p-value comes
from re-pairing whole input samples (``actkit.inference``'s permutations: a sample of A with
another sample of B of the same length, row by row), on up to ``max_rows`` rows of whole
samples that can be re-paired (samples whose length no other sample has are left out: they
would keep their pairing). Every pair's |correlation| is standardised by its own null mean and
SD (a unit that depends on the position alone keeps part of its correlation under any
re-pairing), and the null of the largest standardised value over *all* pairs (Westfall-Young
max-T) gives each pair a p-value that accounts for the choice of partner and the number of
pairs. Pairs with ``p < alpha`` are the shared units; a Gaussian control has none (in
1 - alpha of runs).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from actkit._data import iter_blocks
from actkit._matching import match_columns
from actkit._progress import progress_bar
from actkit.errors import InputError, ValidationError
from actkit.inference import Samples, permutation_draws
from actkit.stats import CrossMoments
from actkit.units._api import open_units_store
from actkit.units._basis import resolve_basis
from actkit.units._report import UnitReport

__all__ = ["UnitMatch", "match_units"]


class UnitMatch:
    """Matched units of A and B.

    Attributes
    ----------
    pairs : list of dict
        ``{"a", "b", "corr", "p_value", "shared"}``, largest |corr| first.
    corr : ndarray of shape (units of A, units of B)
        Correlation over all rows, or over ``rows=`` (sign as stored; A's flipped ICA units
        flipped when a report was given).
    null_max : ndarray of shape (permutations,)
        The largest standardised |correlation| of any pair under each re-pairing of the samples.
    """

    def __init__(self, pairs, corr, null_max, info):
        self.pairs, self.corr, self.null_max, self.info = pairs, corr, null_max, info

    @property
    def shared(self) -> list:
        """The shared pairs ``(a, b)``."""
        return [(p["a"], p["b"]) for p in self.pairs if p["shared"]]

    def to_dict(self) -> dict:
        return {**self.info, "pairs": [dict(p) for p in self.pairs], "shared": len(self.shared),
                "null_max": [float(x) for x in self.null_max]}

    def to_frame(self):
        import pandas as pd  # pandas: only for a DataFrame

        return pd.DataFrame(self.pairs, columns=["a", "b", "corr", "p_value", "shared"])

    def __repr__(self):
        return (f"UnitMatch: {len(self.pairs)} pairs, {len(self.shared)} shared (p < {self.info['alpha']}), "
                f"{self.info['permutations']} re-pairings of {self.info['null_samples']} samples")


def _side(x, layer, basis, device):
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
    store, layer, opened = open_units_store(x, layer)
    return store, layer, opened, resolve_basis(basis, store, layer, device=device), flip


@contextlib.contextmanager
def _pair(store_a, layer, basis, store_b, layer_b, basis_b, device):
    """Both sides (:func:`_side`: store, layer, opened, basis, flips), each store opened here
    closed again on leaving, in any case."""
    with contextlib.ExitStack() as stack:
        a = _side(store_a, layer, basis, device)
        if a[2]:
            stack.callback(a[0].close)
        b = _side(store_b, layer_b or a[1], basis_b, device)
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
        raise InputError(f"match_units: layers {la} and {lb} do not hold the same rows (samples and positions)")
    return ia


def _null_rows(index, max_rows, random_state):
    """Rows of whole samples that can be re-paired (another sample of the same length is among
    them), at most ``max_rows`` (sorted global row numbers). Rows of a sample that cannot move
    would keep their pairing under every re-pairing and make the null as large as the data."""
    groups = index[:, 0]
    ids, counts = np.unique(groups, return_counts=True)
    lengths, per_length = np.unique(counts, return_counts=True)
    movable = np.isin(counts, lengths[per_length >= 2])
    ids, counts = ids[movable], counts[movable]
    rng = np.random.default_rng([int(random_state), 3])
    order = rng.permutation(ids.size)
    keep = order[np.cumsum(counts[order]) <= max_rows]
    lengths, per_length = np.unique(counts[keep], return_counts=True)
    keep = keep[np.isin(counts[keep], lengths[per_length >= 2])]
    return np.flatnonzero(np.isin(groups, ids[keep]))


def _stream(ba, bb, picks, progress, keep=None):
    """Cross moments of the two sides' unit activations (over ``keep``, sorted row numbers;
    None: all rows) and the rows ``picks`` of each."""

    n = int(ba.rows.shape[0])
    rows = int(max(64, min(16384, (16 << 20) // (4 * max(ba.n_units, bb.n_units, 1)))))
    cm = CrossMoments(debiased_terms=False)
    got_a, got_b = [], []
    s = 0
    with progress_bar(n, "match units", progress) as bar:
        for xa, xb in zip(iter_blocks(ba.rows, rows), iter_blocks(bb.rows, rows)):
            a = np.asarray(ba.activations(xa, s), np.float64)
            b = np.asarray(bb.activations(xb, s), np.float64)
            if keep is None:
                cm.add(a, b)
            else:
                lo, hi = np.searchsorted(keep, [s, s + len(a)])
                if hi > lo:
                    cm.add(a[keep[lo:hi] - s], b[keep[lo:hi] - s])
            lo, hi = np.searchsorted(picks, [s, s + len(a)])
            got_a.append(a[picks[lo:hi] - s])
            got_b.append(b[picks[lo:hi] - s])
            s += len(a)
            bar.update(len(a))
    return cm, np.concatenate(got_a), np.concatenate(got_b)


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


def _corr(cm):
    n = cm.n
    sx, sy = cm.sx / n, cm.sy / n
    cov = cm.xy / n - np.outer(sx, sy)
    vx = np.diag(cm.xx) / n - sx ** 2
    vy = np.diag(cm.yy) / n - sy ** 2
    den = np.sqrt(np.outer(np.clip(vx, 0, None), np.clip(vy, 0, None)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, cov / den, 0.0)


def _null(A, B, groups, permutations, random_state):
    """Westfall-Young max-T over all pairs of units under re-pairings of whole samples.

    Each pair's |correlation| is standardised by its own null mean and SD (a unit that depends
    on the position alone, such as one firing on every [CLS], keeps part of its correlation
    under any re-pairing); the null of the largest standardised value over all pairs gives
    every pair a p-value that accounts for the choice of partner and the number of pairs.
    Returns ``(p-value matrix (Ua, Ub), null max (permutations,), share movable, samples)``."""
    S = Samples(A, B, groups, norms=False)
    sd_a, sd_b = S.A.std(axis=0), S.B.std(axis=0)
    sd_a[sd_a == 0] = np.inf
    sd_b[sd_b == 0] = np.inf
    Az, Bz = S.A / sd_a, S.B / sd_b
    observed = np.abs(Az.T @ Bz) / S.n
    perms, movable = permutation_draws(S.n_s, permutations, random_state)

    def permuted(perm):
        return np.abs(Az.T @ Bz[S.offsets[perm[S.sample_of_row]] + S.position]) / S.n

    total, total2 = np.zeros_like(observed), np.zeros_like(observed)
    for perm in perms:  # each pair's null mean and SD
        c = permuted(perm)
        total += c
        total2 += c * c
    mu = total / len(perms)
    sd = np.sqrt(np.clip(total2 / len(perms) - mu * mu, 0, None))
    sd = np.maximum(sd, 1e-12 + 1e-9 * mu)
    null = np.array([((permuted(perm) - mu) / sd).max() for perm in perms])  # the same draws again
    t = (observed - mu) / sd
    at_least = null.size - np.searchsorted(np.sort(null), t - 1e-9, side="left")  # nulls >= t, per pair
    p = (1 + at_least) / (1 + null.size)
    return p, null, movable, S.G


def match_units(report_or_store_a, store_b, *, layer=None, layer_b=None, basis=None, basis_b=None,
                permutations=200, max_rows=20000, alpha=0.05, random_state=0, rows=None, device="cpu",
                progress=None) -> UnitMatch:
    """Match the units of A (a :class:`UnitReport` or a store) with those of ``store_b``.

    Parameters
    ----------
    report_or_store_a : UnitReport, str or Store
        A report (its store, layer and basis are reused, and its units get their matches) or
        a store.
    store_b : str or Store
        The other store, over the same inputs (equal inputs fingerprints and row index).
    layer, layer_b, basis, basis_b
        As :func:`actkit.units` (``layer_b`` defaults to ``layer``; ``basis_b`` to none).
    permutations : int, default=200
        Re-pairings of whole input samples for the null.
    max_rows : int, default=20000
        Rows (of whole samples) the null is computed on.
    alpha : float, default=0.05
        Pairs with ``p_value < alpha`` are shared.
    rows : array of int or bool mask, optional
        Only these rows (row numbers of both layers) for the correlations and the null, e.g.
        ``CompareResult.heldout_rows``, the rows ``compare`` reports its source correlations on
        (docs/units.md, "From compare to match_units"). Default: every row.

    Returns
    -------
    UnitMatch
    """
    if isinstance(permutations, bool) or not isinstance(permutations, (int, np.integer)) or permutations < 1:
        raise InputError(f"permutations must be a positive integer, got {permutations!r}")
    if not 0 < float(alpha) < 1:
        raise InputError(f"alpha must be in (0, 1), got {alpha!r}")
    with _pair(report_or_store_a, layer, basis, store_b, layer_b, basis_b, device) as (a, b):
        (sa, la, _, ba, flip), (sb, lb, _, bb, _) = a, b
        index = _check_pair(sa, la, sb, lb)
        sel = _rows(rows, index.shape[0])
        picks = (_null_rows(index, int(max_rows), random_state) if sel is None
                 else sel[_null_rows(index[sel], int(max_rows), random_state)])
        cm, A, B = _stream(ba, bb, picks, progress, sel)
    corr = _corr(cm)
    if flip is not None:
        corr = np.where(flip[:, None], -corr, corr)
    ia, ib, _ = match_columns(corr)
    if picks.size == 0:
        raise ValidationError("match_units: no two input samples have the same number of rows; whole samples "
                              "cannot be re-paired for the null")
    pv, null, movable, n_samples = _null(A, B, index[picks, 0], int(permutations), random_state)
    if movable == 0:
        raise ValidationError("match_units: no two input samples have the same number of rows; whole samples "
                              "cannot be re-paired for the null")
    pairs = []
    for i, j in zip(ia, ib):
        p = float(pv[i, j])
        pairs.append({"a": int(i), "b": int(j), "corr": float(corr[i, j]), "p_value": p, "shared": bool(p < alpha)})
    pairs.sort(key=lambda p: -abs(p["corr"]))
    info = {"other": str(getattr(sb, "path", "")), "layer": la, "layer_b": lb, "permutations": int(permutations),
            "alpha": float(alpha), "null_rows": int(picks.size), "null_samples": int(n_samples),
            "movable": float(movable), "rows": int(index.shape[0] if sel is None else sel.size)}
    match = UnitMatch(pairs, corr, null, info)
    if not isinstance(report_or_store_a, (str,)) and hasattr(report_or_store_a, "_data"):
        _attach(report_or_store_a, match)
    return match


def _attach(report, match):
    by_a = {p["a"]: p for p in match.pairs}
    for u in report._data["units"]:
        p = by_a.get(u["unit"])
        u["match"] = None if p is None else {"unit": p["b"], "corr": p["corr"], "p_value": p["p_value"],
                                             "shared": p["shared"]}
    report._data["matches"] = match.to_dict()


def check_match(store_a, store_b, *, layer=None, layer_b=None, basis=None, basis_b=None, device="cpu") -> None:
    """The checks :func:`match_units` makes before reading rows (layers, bases, the same inputs
    and rows), for a command that runs a report first: one-line errors, nothing computed."""
    with _pair(store_a, layer, basis, store_b, layer_b, basis_b, device) as ((sa, la, *_), (sb, lb, *_)):
        _check_pair(sa, la, sb, lb)
