"""The one streaming pass of a unit report, as declared states.

Every state of the pass is declared once (:data:`STATES`, the model is torchmetrics'
``add_state``): how it starts, how one block folds into it and how two partial states merge.
``new``, ``add`` and ``merge`` of the :class:`~actkit.runners.RowPass` are loops over the
declared states, so the same pass runs here (blocks mapped on the thread budget's workers)
or on Dask (chunks folded on workers, merged in a tree) with the same result. Per unit
(column of the unit activations):

* ``moments`` -- count, mean and central moment sums in float64 (:class:`actkit.stats.ColumnMoments`);
* ``extremes`` -- smallest and largest value; ``active`` -- rows with a non-zero value;
* ``hist`` -- the histogram (by label with labels; with the counts on bin edges where the
  unit may be flipped, :mod:`actkit._units._hist`);
* ``top`` / ``bottom`` -- the k largest and smallest values and their rows (``bottom``: dense
  units only);
* ``sample`` -- a uniform sample of :data:`SAMPLE` active rows: the rows of smallest
  priority ``frac(p_row + c_unit)`` (``p_row``, ``c_unit``: splitmix64 numbers of the row,
  the unit and the seed), so two units share a row only by chance;
* ``tail`` -- the :data:`TAIL` rows of smallest priority among the active rows at or above
  ``tau_hi`` (or, for units that may be flipped, at or below ``tau_lo``): a uniform sample of
  the unit's tails, whatever the blocks. The thresholds are fixed before the pass from rows
  spread over the layer (:func:`tail_thresholds`), so the states are the same at any block
  size, thread count or scheduler.

:func:`finish` turns the merged states into a frozen :class:`UnitStats`; :func:`oriented`
returns the one of the oriented units (a new object; nothing is changed in place).

Memory: O(units x (2 k + SAMPLE + 2 TAIL + histogram bins)) plus one block of rows and of unit
activations; never the rows x units matrix.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from actkit.runners import RowPass
from actkit.stats import ColumnMoments
from actkit._units._hist import add_hist, add_hist_entries, flipped, merge_hist, new_hist
from actkit._units._topk import Ranked, dense_entries

__all__ = ["SAMPLE", "STATES", "TAIL", "Setup", "UnitStats", "finish", "oriented", "priority", "setup",
           "tail_thresholds", "unit_pass"]

#: active rows kept per unit in the uniform sample the 50-90 % and 90-99 % bands come from
SAMPLE = 256
#: rows kept per unit in the sample of its tail (the 99-100 % band)
TAIL = 64
#: the tail's threshold: this quantile of the unit's active values in rows spread over the layer
TAIL_QUANTILE = 0.98
#: values (rows x units) read for the tails' thresholds (at least PREFIX_ROWS rows), in SLICES runs of rows
PREFIX_VALUES = 1 << 18
PREFIX_ROWS = 4096
SLICES = 32
#: a threshold needs at least this many active values in the first rows (else every active row is eligible)
MIN_PREFIX = 20


# ----------------------------------------------------------------------------- priorities
def priority(ids, random_state=0, salt=0) -> np.ndarray:
    """A uniform number in [0, 1) per id (splitmix64 of the id, the seed and ``salt``), a
    multiple of 2**-52, so that ``frac(p + c)`` of two of them is exact in float64."""
    with np.errstate(over="ignore"):
        z = np.asarray(ids, np.uint64) + np.uint64(0x9E3779B97F4A7C15) * np.uint64(int(random_state) + 1)
        z = z ^ np.uint64((int(salt) * 0xD1B54A32D192ED03) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(12)).astype(np.float64) * 2.0 ** -52


def rotated(p, c):
    """``frac(p + c)`` (exact for multiples of 2**-52 in [0, 1)): the priority of row ``p`` in
    the unit with offset ``c``; the sample keeps the rows of smallest priority."""
    t = p + c
    return t - (t >= 1.0)


def _below(p, c, bound, order=None):
    """``(positions, units)`` of the entries whose rotated priority ``frac(p[i] + c[j])`` is
    below ``bound[j]`` (every entry of a unit whose bound is 1 or more): the candidates of
    each unit's sample, found by a binary search of the sorted ``p`` per unit (``order``:
    ``np.argsort(p)``, when known)."""
    order = np.argsort(p, kind="stable") if order is None else order
    ps = p[order]
    start = 1.0 - c
    start = np.where(start >= 1.0, start - 1.0, start)  # q = 0 at p = start (mod 1)
    end = start + np.minimum(bound, 1.0)
    lo = np.searchsorted(ps, start)
    hi = np.searchsorted(ps, np.minimum(end, 1.0))
    wrap = np.searchsorted(ps, np.maximum(end - 1.0, 0.0))  # [0, end - 1) when the interval wraps
    firsts, counts = np.concatenate([lo, np.zeros_like(wrap)]), np.concatenate([hi - lo, wrap])
    units = np.repeat(np.tile(np.arange(c.size), 2), counts)
    ends = np.cumsum(counts)
    pos = np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(firsts - (ends - counts), counts)
    return order[pos], units


# ----------------------------------------------------------------------------- the setup
class Setup(NamedTuple):
    """What every state's ``new`` and ``fold`` read (picklable: it travels to Dask workers)."""

    basis: object
    k: int
    classes: int
    labels: np.ndarray | None
    random_state: int
    shifts: np.ndarray  # (U,) each unit's priority shift (its own sample: frac(p_row + shift))
    tau_hi: np.ndarray  # (U,) the tail sample holds the active rows at or above tau_hi (-inf: every one) ...
    tau_lo: np.ndarray  # (U,) ... or at or below tau_lo (-inf where the unit is never flipped)
    flippable: bool  # units may be flipped (ICA): their histograms count values on bin edges

    @property
    def n_units(self) -> int:
        return int(self.basis.n_units)

    @property
    def warm(self) -> int:
        """Rows of the first chunk of a ranked state (:func:`~actkit._units._topk.growing_chunks`)."""
        return max(2 * self.k, 16384 // max(1, self.n_units))


def _threshold(u, v, n_units, q):
    """The ``q`` quantile of each unit's values ``v`` (entries of units ``u``), linear between
    order statistics as ``np.quantile``; NaN for a unit with fewer than :data:`MIN_PREFIX` values."""
    order = np.argsort(v, kind="stable")  # by value, then (stable) by unit: lexsort's order, faster
    order = order[np.argsort(u[order], kind="stable")]
    u, v = u[order], v[order].astype(np.float64)
    count = np.bincount(u, minlength=n_units)
    start = np.cumsum(count) - count
    pos = q * np.maximum(count - 1, 0)
    i = np.floor(pos).astype(np.int64)
    enough = count >= MIN_PREFIX
    out = np.full(n_units, np.nan)
    a, b = start[enough] + i[enough], start[enough] + np.minimum(i[enough] + 1, count[enough] - 1)
    out[enough] = v[a] + (v[b] - v[a]) * (pos[enough] - i[enough])
    return out


def _spread(basis):
    """The unit activations of :data:`SLICES` runs of rows spread evenly over the layer (at
    least :data:`PREFIX_ROWS` rows in all, or :data:`PREFIX_VALUES` values; every row of a
    smaller layer): ``(m, U)`` float32 for dense units, entries ``(u, v)`` for codes."""
    n, U = int(basis.rows.shape[0]), basis.n_units
    m = max(PREFIX_ROWS, PREFIX_VALUES // max(1, U))
    per = n if m >= n else max(1, m // SLICES)
    starts = np.unique(np.linspace(0, max(n - per, 0), SLICES if m < n else 1).astype(np.int64)).tolist()
    blocks = [(s, np.asarray(basis.rows[s:min(n, s + per)])) for s in starts]
    if not basis.sparse:
        return np.concatenate([np.asarray(basis.activations(b, s), np.float32) for s, b in blocks])
    entries = [basis.entries(b, s) for s, b in blocks]
    return np.concatenate([e[2] for e in entries]), np.concatenate([e[3] for e in entries])


def tail_thresholds(basis, flippable):
    """``(tau_hi, tau_lo)`` (U,) each: the tail sample holds the active rows at or above
    ``tau_hi`` (the :data:`TAIL_QUANTILE` of the unit's active values in rows spread over the
    layer) or, where the unit may be flipped, at or below ``tau_lo`` (the ``1 - TAIL_QUANTILE``
    quantile; -inf otherwise). A unit with too few active values there takes every active row
    (``tau_hi`` = -inf)."""
    U = basis.n_units
    qs = (TAIL_QUANTILE, 1.0 - TAIL_QUANTILE) if flippable else (TAIL_QUANTILE,)
    out = np.full((len(qs), U), np.nan)
    got = _spread(basis)
    if basis.sparse:
        u, v = got
    else:
        zero = (got == 0).any(axis=0)  # most dense units have no zero: their quantiles at once
        if got.shape[0] >= MIN_PREFIX and (~zero).any():
            out[:, ~zero] = np.quantile(got[:, ~zero].astype(np.float64), qs, axis=0)
        r, c = np.nonzero(got[:, zero])
        u, v = np.flatnonzero(zero)[c], got[:, zero][r, c]
    for i, q in enumerate(qs):
        if v.size:
            part = _threshold(u, v, U, q)
            out[i] = np.where(np.isnan(out[i]), part, out[i])
    few = np.isnan(out[0])
    hi = np.where(few, -np.inf, out[0]).astype(np.float32)  # float32 values: block comparisons are exact
    hi = np.where(hi < out[0], np.nextafter(hi, np.float32(np.inf)), hi)
    if not flippable:
        return hi.astype(np.float64), np.full(U, -np.inf)
    lo = np.where(few, -np.inf, out[1]).astype(np.float32)
    lo = np.where(lo > out[1], np.nextafter(lo, np.float32(-np.inf)), lo)
    return hi.astype(np.float64), lo.astype(np.float64)


def setup(basis, k, *, labels=None, classes=1, random_state=0, flippable=False) -> Setup:
    """The :class:`Setup` of a pass over ``basis`` (reads rows spread over it for the tails)."""
    tau_hi, tau_lo = tail_thresholds(basis, flippable)
    shifts = priority(np.arange(basis.n_units), random_state, salt=1)
    return Setup(basis, int(k), int(classes), labels, int(random_state), shifts, tau_hi, tau_lo, bool(flippable))


# ----------------------------------------------------------------------------- a block
class Block(NamedTuple):
    """``map``'s result for one block: its unit activations (dense ``A`` (n, U) float32, or the
    non-zero entries ``r``, ``u``, ``v`` of mostly-zero codes) and what needs no running
    state: moments, extremes, non-zero counts, the rows' priorities and labels, and the
    entries of the units' tails ``(rows, units, values, scores)``, rows increasing."""

    n: int
    A: np.ndarray | None
    r: np.ndarray | None
    u: np.ndarray | None
    v: np.ndarray | None
    moments: ColumnMoments
    vmin: np.ndarray
    vmax: np.ndarray
    active: np.ndarray
    p: np.ndarray
    labels: np.ndarray | None
    tail: tuple
    sorted: dict  # (lo, hi) -> argsort of p[lo:hi], computed once per chunk

    def order(self, lo, hi):
        """``np.argsort(p[lo:hi])``, computed once per chunk (the whole block's in ``map``)."""
        if (lo, hi) not in self.sorted:
            self.sorted[(lo, hi)] = np.argsort(self.p[lo:hi], kind="stable")
        return self.sorted[(lo, hi)]

    def values(self, lo, rows, units):
        """The dense activations at block rows ``lo + rows`` of ``units`` (a flat gather)."""
        return np.take(self.A.reshape(-1), (rows + lo) * self.A.shape[1] + units)


def _active(A):
    """Non-zero rows per column of a block (one count for the whole block when it has no zero)."""
    return np.full(A.shape[1], A.shape[0]) if not (A == 0).any() else np.count_nonzero(A, axis=0)


def _tail(st, r, u, v, p):
    """The entries of the tails among block entries ``(r, u, v)``: active, at or above
    ``tau_hi`` or at or below ``tau_lo``; with their scores ``1 - priority``."""
    keep = (v != 0) & ((v >= st.tau_hi[u]) | (v <= st.tau_lo[u]))
    r, u, v = r[keep], u[keep], v[keep]
    return r, u, v, 1.0 - rotated(p[r], st.shifts[u])


def _map(block, first_row, st: Setup) -> Block:
    basis = st.basis
    lab = None if st.labels is None else st.labels[first_row:first_row + int(block.shape[0])]
    p = priority(np.arange(first_row, first_row + int(block.shape[0])), st.random_state)
    if basis.sparse:
        n, r, u, v = basis.entries(block, first_row)
        active = np.bincount(u, minlength=st.n_units)
        zero = np.where(active < n, np.float32(0), np.float32(np.nan))  # 0 is a value of a unit with a zero
        vmin, vmax = zero.copy(), zero.copy()
        np.fmin.at(vmin, u, v)
        np.fmax.at(vmax, u, v)
        if not np.isfinite(v).all():  # fmin / fmax skip NaN: the histogram's check must see it
            vmin[:] = np.nan
        return Block(n, None, r, u, v, ColumnMoments(st.n_units).add_entries(n, u, v), vmin, vmax, active, p, lab,
                     _tail(st, r, u, v, p), {})
    A = np.ascontiguousarray(basis.activations(block, first_row), dtype=np.float32)
    flags = A >= st.tau_hi.astype(np.float32)  # float32 thresholds: exact in the block's type
    if st.flippable:
        flags |= A <= st.tau_lo.astype(np.float32)
    r, u = np.divmod(np.flatnonzero(flags), A.shape[1])
    return Block(A.shape[0], A, None, None, None, ColumnMoments().add(A), A.min(axis=0), A.max(axis=0),
                 _active(A), p, lab, _tail(st, r, u, A[r, u], p), {(0, A.shape[0]): np.argsort(p, kind="stable")})


# ----------------------------------------------------------------------------- the states
class State(NamedTuple):
    """One state of the pass: ``new(setup)``, ``fold(value, block, first_row, setup) -> value``
    (may change ``value`` in place), ``merge(a, b)`` (changes neither), and ``kept(setup)``:
    whether a pass over this basis has it."""

    new: Callable
    fold: Callable
    merge: Callable
    kept: Callable = lambda st: True


def _fold_hist(h, b: Block, first_row, st):
    if b.A is not None:
        return add_hist(h, b.A, b.labels, extremes=(b.vmin, b.vmax))
    return add_hist_entries(h, b.n, b.r, b.u, b.v, b.labels, extremes=(b.vmin, b.vmax))


def _fold_top(t: Ranked, b: Block, first_row, st, lower=False):
    if b.A is not None:
        for lo, hi in t.chunks(b.n, st.warm):
            t.offer(dense_entries(t.state, b.A[lo:hi], first_row + lo, lower=lower))
    else:  # codes: the examples are active rows
        for lo, hi in t.chunks(b.n, st.warm):
            a, z = np.searchsorted(b.r, [lo, hi])
            u, v = b.u[a:z], b.v[a:z]
            keep = v > np.maximum(t.threshold, 0.0)[u]
            t.offer((u[keep], v[keep], b.r[a:z][keep] + first_row, v[keep]))
    t.seen += b.n
    return t


def _fold_sample(t: Ranked, b: Block, first_row, st):
    """The active rows of smallest rotated priority; scores ``1 - priority``, payloads the values."""
    for lo, hi in t.chunks(b.n, st.warm):
        if b.A is not None:  # the rows of small priority first (a binary search per unit)
            rows, u = _below(b.p[lo:hi], st.shifts, 1.0 - t.threshold, b.order(lo, hi))
            v = b.values(lo, rows, u)
        else:
            a, z = np.searchsorted(b.r, [lo, hi])
            rows, u, v = b.r[a:z] - lo, b.u[a:z], b.v[a:z]
        keep = v != 0
        rows, u, v = rows[keep], u[keep], v[keep]
        score = 1.0 - rotated(b.p[lo + rows], st.shifts[u])
        keep = score > t.threshold[u]
        t.offer((u[keep], score[keep], rows[keep].astype(np.int64) + first_row + lo, v[keep]))
    t.seen += b.n
    return t


def _fold_tail(t: Ranked, b: Block, first_row, st):
    """The rows of smallest rotated priority among the block's tail entries (``map`` found them)."""
    r, u, v, score = b.tail
    for lo, hi in t.chunks(b.n, st.warm):
        a, z = np.searchsorted(r, [lo, hi])
        keep = score[a:z] > t.threshold[u[a:z]]
        t.offer((u[a:z][keep], score[a:z][keep], r[a:z][keep].astype(np.int64) + first_row, v[a:z][keep]))
    t.seen += b.n
    return t


def _merge_moments(a, b):
    return a.copy().merge(b)


STATES = {
    "moments": State(lambda st: ColumnMoments(st.n_units), lambda m, b, r, st: m.merge(b.moments), _merge_moments),
    "extremes": State(lambda st: (np.full(st.n_units, np.inf), np.full(st.n_units, -np.inf)),
                      lambda e, b, r, st: (np.minimum(e[0], b.vmin), np.maximum(e[1], b.vmax)),
                      lambda a, b: (np.minimum(a[0], b[0]), np.maximum(a[1], b[1]))),
    "active": State(lambda st: np.zeros(st.n_units, np.int64), lambda a, b, r, st: a + b.active, np.add),
    "hist": State(lambda st: new_hist(st.n_units, st.classes, edges=st.flippable), _fold_hist, merge_hist),
    "top": State(lambda st: Ranked(st.k, st.n_units), _fold_top, Ranked.merged),
    "bottom": State(lambda st: Ranked(st.k, st.n_units), lambda t, b, r, st: _fold_top(t, b, r, st, lower=True),
                    Ranked.merged, lambda st: not st.basis.sparse),
    "sample": State(lambda st: Ranked(SAMPLE, st.n_units), _fold_sample, Ranked.merged),
    "tail": State(lambda st: Ranked(TAIL, st.n_units), _fold_tail, Ranked.merged),
}


def _new(st: Setup) -> dict:
    return {name: s.new(st) for name, s in STATES.items() if s.kept(st)}


def _add(acc: dict, block: Block, first_row: int, st: Setup) -> dict:
    for name in acc:
        acc[name] = STATES[name].fold(acc[name], block, first_row, st)
    return acc


def _merge(a: dict, b: dict) -> dict:
    return {name: STATES[name].merge(a[name], b[name]) for name in a}


def unit_pass(st: Setup, rows: int, *, threads=True) -> RowPass:
    """The pass over the rows that ``st.basis`` reads (``basis.activations(block, first_row)``
    -> (n, n_units)); its result goes through :func:`finish`."""
    return RowPass(_new, _add, _merge, (st,), int(rows), map=_map, threads=threads, name="units")


# ----------------------------------------------------------------------------- the result
@dataclasses.dataclass(frozen=True)
class UnitStats:
    """The pass's result, every queued candidate folded in (arrays of shape (U,) unless said).

    ``top`` / ``bottom``: ``(values, rows)`` each (k, U), highest (lowest) first, row -1 in an
    empty slot (``bottom`` None for codes); ``sample`` / ``tail``: ``(scores, rows, values)``
    each (size, U), score ``1 - priority``; the tail sample holds the active rows at or above
    ``tau_hi`` or at or below ``tau_lo``; ``hist``: the state of
    :mod:`actkit._units._hist`; ``flipped``: the units negated by :func:`oriented`.
    """

    n: int
    mean: np.ndarray
    variance: np.ndarray
    skewness: np.ndarray
    kurtosis: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    active: np.ndarray
    hist: dict
    top: tuple
    bottom: tuple | None
    sample: tuple
    tail: tuple
    tau_hi: np.ndarray
    tau_lo: np.ndarray
    flipped: np.ndarray

    @property
    def n_units(self) -> int:
        return int(self.mean.size)


def finish(acc: dict, st: Setup) -> UnitStats:
    """The frozen result of a pass's merged states (the states are not changed)."""
    m = acc["moments"]
    U = int(acc["active"].size)
    if m.n:
        mean, var, skew, kurt = m.mean_, m.variance(), m.skewness(), m.kurtosis()
    else:
        mean = var = skew = kurt = np.zeros(U)
    top = acc["top"].final()
    bottom = acc["bottom"].final() if "bottom" in acc else None
    return UnitStats(n=int(m.n), mean=mean, variance=var, skewness=skew, kurtosis=kurt,
                     vmin=acc["extremes"][0], vmax=acc["extremes"][1], active=acc["active"], hist=acc["hist"],
                     top=(top[2], top[1]), bottom=None if bottom is None else (bottom[2], bottom[1]),
                     sample=acc["sample"].final(), tail=acc["tail"].final(),
                     tau_hi=st.tau_hi, tau_lo=st.tau_lo, flipped=np.zeros(U, bool))


def _where(flip, a, b):
    """Per column: ``a`` where ``flip``, else ``b`` (arrays (..., U))."""
    return np.where(flip, a, b)


def oriented(s: UnitStats, flip) -> UnitStats:
    """The result of the units with ``flip`` (U,) bool negated (their top and bottom swapped,
    samples from the lower tail, histogram mirrored exactly): a new :class:`UnitStats`."""
    flip = np.asarray(flip, bool)
    if not flip.any():
        return s
    if s.bottom is None or s.hist["edges"] is None:
        raise ValueError("only dense units of a flippable pass (setup(..., flippable=True)) can be flipped")
    (tv, tr), (bv, br) = s.top, s.bottom
    sign = np.where(flip, -1.0, 1.0)
    return dataclasses.replace(
        s, mean=s.mean * sign, skewness=s.skewness * sign,
        vmin=_where(flip, -s.vmax, s.vmin), vmax=_where(flip, -s.vmin, s.vmax),
        top=(_where(flip, -bv, tv), _where(flip, br, tr)), bottom=(_where(flip, -tv, bv), _where(flip, tr, br)),
        sample=(s.sample[0], s.sample[1], s.sample[2] * sign), tail=(s.tail[0], s.tail[1], s.tail[2] * sign),
        tau_hi=_where(flip, -s.tau_lo, s.tau_hi), tau_lo=_where(flip, -s.tau_hi, s.tau_lo),
        hist=flipped(s.hist, flip), flipped=flip ^ s.flipped)
