"""Per-unit token scores from the streaming passes of a unit report (docs/definitions.md, section 7).

Two passes, both :class:`~actkit.runners.RowPass` descriptions (so Dask runs them too):

1. **the units pass itself**, with the per-key sums folded in: each block's unit activations
   are computed once and handed both to the units pass (:func:`actkit._units._pass.unit_pass`,
   through a basis that returns them as they are) and to the fit split's sums of every unit
   over the rows of each token slot and each (previous token, token) slot, plus the fit total
   and, for k-sparse probing, each input sample's sum over its non-special rows. Per-token
   statistics are sums of rows grouped by slot, in float64: exact and mergeable.
2. **one more pass over the held-out rows**: each held-out row's prediction (its token's fit
   mean, its pair's fit mean backing off to the token's, an unseen token the fit mean), and per
   held-out input sample the sums of squared errors and of the activations (about the fit
   mean) and their squares: the held-out R^2 (``1 - SSE / SST``, SST about the held-out rows'
   own mean) and everything its bootstrap by input sample needs.

Memory: the per-key sums hold ``(n_tok + n_pair) x units`` float64 (only keys seen in both
splits have a slot: at most the held-out rows, whatever the vocabulary), the held-out sums
``4 x held-out samples x units``, the pooled rows ``scored samples x units`` (with labels), plus
the units pass's own state and one block. Where that exceeds :data:`SCORE_BYTES` the units are
scored in chunks (as many as fit): the first chunk inside the units pass, each further chunk
in a pass of its own (then its held-out pass), so the memory stays under the bound whatever
the vocabulary or the number of units.
"""

from __future__ import annotations

import functools

import numpy as np

from actkit.runners import RowPass
from actkit._units._score_plan import EVAL, FIT

__all__ = ["SCORE_BYTES", "Computed", "Entries", "fit_pass", "fused_pass", "heldout_pass", "r2", "unit_chunks"]

#: bytes of per-key, per-sample and pooled sums held at once (units scored in chunks beyond)
SCORE_BYTES = 512 << 20


class Computed:
    """The basis the units pass sees inside the scored pass: its blocks are the unit
    activations already computed (dense float32 rows, or a sparse basis's ``(n, r, u, v)``
    entries), returned as they are."""

    def __init__(self, basis):
        self.kind, self.n_units, self.sparse = basis.kind, basis.n_units, basis.sparse
        self.source, self.variance, self.sae, self.transformer = basis.source, basis.variance, None, None

    def activations(self, block, first_row=0):
        return block

    def entries(self, block, first_row=0):
        return block


class Entries(tuple):
    """A sparse basis's block entries ``(n, r, u, v)`` (:meth:`~actkit._units._basis.Basis.entries`)
    that read as a block of ``n`` rows (``shape[0]``), as the units pass reads its blocks."""

    @property
    def shape(self):
        return (int(self[0]),)


def activations(basis, block, first_row=0):
    """A block's unit activations as the units pass takes them: a sparse basis's non-zero
    entries ``(n, r, u, v)`` (:class:`Entries`), else dense float32 (n, units)."""
    if basis.sparse:
        return Entries(basis.entries(block, first_row))
    return np.ascontiguousarray(basis.activations(block, first_row), dtype=np.float32)


def _rows_of(item) -> int:
    return int(item[0]) if isinstance(item, tuple) else int(item.shape[0])


def _dense(item, lo, hi):
    """Units ``lo:hi`` of a block's activations as dense float64 (n, hi - lo)."""
    if not isinstance(item, tuple):
        return np.asarray(item[:, lo:hi], np.float64)
    n, r, u, v = item
    keep = (u >= lo) & (u < hi)
    out = np.zeros((int(n), hi - lo))
    out[r[keep], u[keep] - lo] = v[keep]
    return out


def _runs(s):
    """Where each run of equal values of ``s`` (sorted) starts."""
    return np.flatnonzero(np.r_[True, s[1:] != s[:-1]])


def group_sums(item, slots, lo, hi):
    """``(slots, sums)``: the sums of units ``lo:hi`` over a block's rows grouped by ``slots``
    (n,) (-1: left out), accumulated in float64; ``slots`` increasing, ``sums`` (m, hi - lo).
    Rows already in slot order (a held-out block's samples) are summed where they lie."""
    width = hi - lo
    if isinstance(item, tuple):                                   # a sparse basis's entries
        _, r, u, v = item
        s = slots[r]
        keep = (s >= 0) & (u >= lo) & (u < hi)
        uniq, inv = np.unique(s[keep], return_inverse=True)
        flat = inv.ravel() * width + (u[keep] - lo)
        return uniq, np.bincount(flat, v[keep].astype(np.float64), minlength=uniq.size * width).reshape(-1, width)
    rows = np.flatnonzero(slots >= 0)
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros((0, width))
    s = slots[rows]
    if np.any(s[1:] < s[:-1]):
        order = np.argsort(s, kind="stable")
        rows, s = rows[order], s[order]
    X = item[:, lo:hi] if rows.size == item.shape[0] else item[rows, lo:hi]
    starts = _runs(s)
    return s[starts], np.add.reduceat(X, starts, axis=0, dtype=np.float64)


def _token_pair_sums(item, tok, pair, lo, hi):
    """The sums of units ``lo:hi`` by token slot ``tok`` and by pair slot ``pair`` (n,) (-1:
    none; a row with a pair slot has a token slot), from one gather: the rows sorted by (token,
    pair), summed by (token, pair) run, the runs summed by token."""
    rows = np.flatnonzero(tok >= 0)
    if rows.size == 0:
        return [(np.zeros(0, np.int64), np.zeros((0, hi - lo)))] * 2
    rows = rows[np.lexsort((pair[rows], tok[rows]))]
    t, p = tok[rows], pair[rows]
    starts = np.flatnonzero(np.r_[True, (t[1:] != t[:-1]) | (p[1:] != p[:-1])])
    inner = np.add.reduceat(item[rows, lo:hi], starts, axis=0, dtype=np.float64)
    t, p = t[starts], p[starts]
    outer = _runs(t)
    has = p >= 0
    return [(t[outer], np.add.reduceat(inner, outer, axis=0)), (p[has], inner[has])]


# ----------------------------------------------------------------------------- 1. the fit sums
def _fit_new(keys, lo, hi):
    w = hi - lo
    return {"sums": np.zeros((keys.n_tok + keys.n_pair, w)), "total": np.zeros((1, w)),
            "pool": np.zeros((keys.n_pooled, w)) if keys.n_pooled else None}


def _fit_map(item, first_row, keys, lo, hi):
    """A block's fit-split sums by token slot and by pair slot, its fit total and (``pool``)
    its samples' sums over their non-special rows."""
    sl = slice(first_row, first_row + _rows_of(item))
    fit = keys.role[sl] == FIT
    tok = np.where(fit, keys.tslot[sl], -1)
    pair = np.where(fit & (keys.pslot[sl] >= 0), keys.n_tok + keys.pslot[sl], -1)
    if isinstance(item, tuple):
        sums = [group_sums(item, tok, lo, hi), group_sums(item, pair, lo, hi)]
        total = group_sums(item, np.where(fit, 0, -1), lo, hi)
    else:
        sums = _token_pair_sums(item, tok, pair, lo, hi)
        total = (np.zeros(1, np.int64), np.add.reduce(item[:, lo:hi], axis=0, dtype=np.float64,
                                                      where=fit[:, None])[None])
    out = {"sums": sums, "total": [total]}
    if keys.n_pooled:
        out["pool"] = [group_sums(item, keys.pool_slot[sl], lo, hi)]
    return out


def _fit_add(acc, parts):
    for name, groups in parts.items():
        for slots, sums in groups:
            acc[name][slots] += sums
    return acc


def _fit_merge(a, b):
    return {k: None if a[k] is None else a[k] + b[k] for k in a}


def fit_pass(basis, keys, lo, hi, rows, threads=True) -> RowPass:
    """The fit sums of units ``lo:hi`` alone (a chunk of units beyond the first)."""
    return RowPass(_fit_only_new, _fit_only_add, _fit_merge, (basis, keys, lo, hi), int(rows), map=_fit_only_map,
                   threads=threads, name="scores")


def _fit_only_new(basis, keys, lo, hi):
    return _fit_new(keys, lo, hi)


def _fit_only_map(block, first_row, basis, keys, lo, hi):
    return _fit_map(activations(basis, block, first_row), first_row, keys, lo, hi)


def _fit_only_add(acc, parts, first_row, basis, keys, lo, hi):
    return _fit_add(acc, parts)


# ----------------------------------------------------------------------------- the units pass, scored
def _fused_new(up, basis, keys, lo, hi):
    return {"units": up.new(*up.args), "fit": _fit_new(keys, lo, hi)}


def _fused_map(block, first_row, up, basis, keys, lo, hi):
    item = activations(basis, block, first_row)
    units_item = up.map(item, first_row, *up.args) if up.map is not None else item
    return units_item, _fit_map(item, first_row, keys, lo, hi)


def _fused_add(acc, item, first_row, up, basis, keys, lo, hi):
    acc["units"] = up.add(acc["units"], item[0], first_row, *up.args)
    _fit_add(acc["fit"], item[1])
    return acc


def _fused_merge(units_merge, a, b):
    return {"units": units_merge(a["units"], b["units"]), "fit": _fit_merge(a["fit"], b["fit"])}


def fused_pass(up: RowPass, basis, keys, lo, hi) -> RowPass:
    """The units pass ``up`` (built over :class:`Computed`) with the fit sums of units
    ``lo:hi`` folded in: one read and one computation of the activations for both."""
    return RowPass(_fused_new, _fused_add, functools.partial(_fused_merge, up.merge), (up, basis, keys, lo, hi),
                   up.rows, map=_fused_map, threads=up.threads, name=up.name)


# ----------------------------------------------------------------------------- 2. the held-out rows
def predictions(fit, keys):
    """``(mean, token table, pair table)`` of a chunk's fit sums: the fit mean (1, w), each
    token slot's fit mean with the fit mean appended (the back-off of an unseen token), each
    pair slot's fit mean (None for images)."""
    count = np.maximum(keys.fit_count, 1.0)[:, None]
    means = fit["sums"] / count
    mean = fit["total"] / max(keys.n_fit, 1)
    tok = np.concatenate([means[:keys.n_tok], mean])
    return mean, tok, means[keys.n_tok:] if keys.has_context else None


def _heldout_map(block, first_row, basis, keys, tables, lo, hi):
    """Per held-out sample of a block: the sums of ``d = a - fit mean``, ``d^2``, the token
    model's and the context model's squared errors, units ``lo:hi`` side by side."""
    n = len(block)
    e = np.flatnonzero(keys.role[first_row:first_row + n] == EVAL)
    if e.size == 0:
        return None
    rows = first_row + e
    A = _dense(activations(basis, np.asarray(block)[e], int(rows[0])), lo, hi)
    mean, tok, pair = tables
    ts = keys.tslot[rows]
    P = tok[np.where(ts >= 0, ts, keys.n_tok)]
    D = A - mean
    parts = [D, D * D, np.square(A - P, out=P)]
    if pair is not None:
        hit = keys.pslot[rows] >= 0
        P = tok[np.where(ts >= 0, ts, keys.n_tok)]
        P[hit] = pair[keys.pslot[rows][hit]]
        parts.append(np.square(A - P, out=P))
    slots = keys.eslot[rows]
    sums = [group_sums(x, slots, 0, x.shape[1]) for x in parts]
    return sums[0][0], np.concatenate([x[1] for x in sums], axis=1)


def _heldout_new(basis, keys, tables, lo, hi):
    return np.zeros((keys.n_heldout, (4 if keys.has_context else 3) * (hi - lo)))


def _heldout_add(acc, item, first_row, basis, keys, tables, lo, hi):
    if item is not None:
        acc[item[0]] += item[1]
    return acc


def _add(a, b):
    return a + b


def heldout_pass(basis, keys, tables, lo, hi, rows, threads=True) -> RowPass:
    """The held-out pass of units ``lo:hi``: (held-out samples, parts x w) sums, the parts
    ``d``, ``d^2``, token SSE and (text) context SSE."""
    return RowPass(_heldout_new, _heldout_add, _add, (basis, keys, tables, lo, hi), int(rows), map=_heldout_map,
                   threads=threads, name="held-out rows")


def r2(sse, d1, d2, n):
    """``1 - SSE / SST`` per unit (last axis) from per-sample sums over the first axes (SST
    about the held-out rows' own mean, from sums of ``d = a - c``: ``sum d^2 - (sum d)^2 / n``);
    NaN where the unit is constant on the held-out rows (SST below 1e-12 of ``sum d^2``)."""
    sst = d2 - d1 * d1 / np.maximum(n, 1e-300)
    ok = (sst > 1e-12 * d2) & (d2 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, 1.0 - sse / np.where(ok, sst, 1.0), np.nan)


def unit_chunks(n_units, keys, budget=None):
    """``[(lo, hi)]``: the units in chunks whose per-key, per-sample and pooled sums fit
    ``budget`` bytes (:data:`SCORE_BYTES`); one chunk for all units where they fit."""
    budget = SCORE_BYTES if budget is None else budget
    per_unit = 8 * (2 * (keys.n_tok + keys.n_pair + 1) + 5 * keys.n_heldout + keys.n_pooled)
    size = int(max(1, min(n_units, budget // max(per_unit, 1))))
    return [(lo, min(n_units, lo + size)) for lo in range(0, n_units, size)]
