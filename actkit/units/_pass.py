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
  unit may be flipped, :mod:`actkit.units._hist`);
* ``top`` / ``bottom`` -- the k largest and smallest values and their rows (``bottom``: dense
  units only);
* ``sample`` -- a uniform sample of :data:`SAMPLE` active rows: the rows of smallest
  priority ``frac(p_row + c_unit)`` (``p_row``, ``c_unit``: splitmix64 numbers of the row,
  the unit and the seed), so two units share a row only by chance;
* ``tail`` (and ``tail_neg`` for units that may be flipped) -- the :data:`TAIL` rows of
  smallest priority among the active rows at or above ``tau`` (below ``-tau_neg``): a
  uniform sample of the unit's upper (lower) tail, whatever the blocks. ``tau`` is fixed
  before the pass from the first rows (:func:`tail_thresholds`), so the states are the same
  at any block size, thread count or scheduler.

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
from actkit.units._hist import add_hist, add_hist_entries, flipped, merge_hist, new_hist
from actkit.units._topk import Ranked, dense_entries

__all__ = ["SAMPLE", "STATES", "TAIL", "Setup", "UnitStats", "finish", "oriented", "priority", "setup",
           "tail_thresholds", "unit_pass"]

#: active rows kept per unit in the uniform sample the 50-90 % and 90-99 % bands come from
SAMPLE = 256
#: rows kept per unit in the sample of its tail (the 99-100 % band)
TAIL = 64
#: the tail's threshold: this quantile of the unit's active values in the first rows
TAIL_QUANTILE = 0.95
#: values (rows x units) of the first rows read for the tails' thresholds
PREFIX_VALUES = 1 << 22
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


def _below(p, c, bound):
    """``(positions, units)`` of the entries whose rotated priority ``frac(p[i] + c[j])`` is
    below ``bound[j]`` (every entry of a unit whose bound is 1 or more): the candidates of
    each unit's sample, found by a binary search of the sorted ``p`` per unit."""
    order = np.argsort(p, kind="stable")
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
    offsets: np.ndarray  # (U,) each unit's priority offset
    tau: np.ndarray  # (U,) the upper tail's threshold (-inf: every active row)
    tau_neg: np.ndarray | None  # (U,) the lower tail's (units that may be flipped), else None

    @property
    def n_units(self) -> int:
        return int(self.basis.n_units)

    @property
    def warm(self) -> int:
        """Rows of the first chunk of a ranked state (:func:`~actkit.units._topk.growing_chunks`)."""
        return max(2 * self.k, 16384 // max(1, self.n_units))


def _prefix(basis):
    """The unit activations of the first rows, (m, U) float32."""
    n = int(basis.rows.shape[0])
    m = min(n, max(256, PREFIX_VALUES // max(1, basis.n_units)))
    return np.asarray(basis.activations(np.asarray(basis.rows[:m]), 0), np.float32)


def _threshold(values):
    """:data:`TAIL_QUANTILE` of each column's non-zero values (NaN elsewhere); -inf for a
    column with fewer than :data:`MIN_PREFIX`."""
    ok = np.isfinite(values)
    out = np.full(values.shape[1], -np.inf)
    enough = ok.sum(axis=0) >= MIN_PREFIX
    if enough.any():
        out[enough] = np.nanquantile(values[:, enough], TAIL_QUANTILE, axis=0)
    return out


def tail_thresholds(basis, flippable):
    """``(tau, tau_neg)``: per unit, the :data:`TAIL_QUANTILE` of its active values in the
    first rows (of the negated values for ``tau_neg``; None unless ``flippable``)."""
    A = _prefix(basis).astype(np.float64)
    A[A == 0] = np.nan
    return _threshold(A), (_threshold(-A) if flippable else None)


def setup(basis, k, *, labels=None, classes=1, random_state=0, flippable=False) -> Setup:
    """The :class:`Setup` of a pass over ``basis`` (reads its first rows for the tails)."""
    tau, tau_neg = tail_thresholds(basis, flippable)
    offsets = priority(np.arange(basis.n_units), random_state, salt=1)
    return Setup(basis, int(k), int(classes), labels, int(random_state), offsets, tau, tau_neg)


# ----------------------------------------------------------------------------- a block
class Block(NamedTuple):
    """``map``'s result for one block: its unit activations (dense ``A`` (n, U) float32, or the
    non-zero entries ``r``, ``u``, ``v`` of mostly-zero codes) and what needs no running
    state: moments, extremes, non-zero counts, the rows' priorities and labels."""

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


def _active(A):
    """Non-zero rows per column of a block (one count for the whole block when it has no zero)."""
    return np.full(A.shape[1], A.shape[0]) if not (A == 0).any() else np.count_nonzero(A, axis=0)


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
        return Block(n, None, r, u, v, ColumnMoments(st.n_units).add_entries(n, u, v), vmin, vmax, active, p, lab)
    A = np.ascontiguousarray(basis.activations(block, first_row), dtype=np.float32)
    return Block(A.shape[0], A, None, None, None, ColumnMoments().add(A), A.min(axis=0), A.max(axis=0),
                 _active(A), p, lab)


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


def _fold_sample(t: Ranked, b: Block, first_row, st, tau=None, sign=1.0):
    """The rows of smallest rotated priority among the active rows (with ``tau``: those whose
    ``sign * value >= tau``); scores ``1 - priority``, payloads the values."""
    for lo, hi in t.chunks(b.n, st.warm):
        if b.A is not None:
            rows, u = _below(b.p[lo:hi], st.offsets, 1.0 - t.threshold)
            v = b.A[lo:hi][rows, u]
        else:
            a, z = np.searchsorted(b.r, [lo, hi])
            rows, u, v = b.r[a:z] - lo, b.u[a:z], b.v[a:z]
        keep = v != 0
        if tau is not None:
            keep &= sign * v >= tau[u]
        rows, u, v = rows[keep], u[keep], v[keep]
        score = 1.0 - rotated(b.p[lo + rows], st.offsets[u])
        keep = score > t.threshold[u]
        t.offer((u[keep], score[keep], rows[keep].astype(np.int64) + first_row + lo, v[keep]))
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
    "hist": State(lambda st: new_hist(st.n_units, st.classes, edges=st.tau_neg is not None), _fold_hist,
                  merge_hist),
    "top": State(lambda st: Ranked(st.k, st.n_units), _fold_top, Ranked.merged),
    "bottom": State(lambda st: Ranked(st.k, st.n_units), lambda t, b, r, st: _fold_top(t, b, r, st, lower=True),
                    Ranked.merged, lambda st: not st.basis.sparse),
    "sample": State(lambda st: Ranked(SAMPLE, st.n_units), _fold_sample, Ranked.merged),
    "tail": State(lambda st: Ranked(TAIL, st.n_units), lambda t, b, r, st: _fold_sample(t, b, r, st, st.tau),
                  Ranked.merged),
    "tail_neg": State(lambda st: Ranked(TAIL, st.n_units),
                      lambda t, b, r, st: _fold_sample(t, b, r, st, st.tau_neg, -1.0), Ranked.merged,
                      lambda st: st.tau_neg is not None),
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
    each (size, U), score ``1 - priority``; ``tau``: the tail's threshold; ``hist``: the state of
    :mod:`actkit.units._hist`; ``flipped``: the units negated by :func:`oriented`.
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
    tail_neg: tuple | None
    tau: np.ndarray
    tau_neg: np.ndarray | None
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
                     tail_neg=acc["tail_neg"].final() if "tail_neg" in acc else None,
                     tau=st.tau, tau_neg=st.tau_neg, flipped=np.zeros(U, bool))


def _where(flip, a, b):
    """Per column: ``a`` where ``flip``, else ``b`` (arrays (..., U))."""
    return np.where(flip, a, b)


def oriented(s: UnitStats, flip) -> UnitStats:
    """The result of the units with ``flip`` (U,) bool negated (their top and bottom swapped,
    samples from the lower tail, histogram mirrored exactly): a new :class:`UnitStats`."""
    flip = np.asarray(flip, bool)
    if not flip.any():
        return s
    if s.bottom is None or s.tail_neg is None:
        raise ValueError("only dense units passed with a lower tail (setup(..., flippable=True)) can be flipped")
    (tv, tr), (bv, br) = s.top, s.bottom
    sign = np.where(flip, -1.0, 1.0)
    sample = (s.sample[0], s.sample[1], s.sample[2] * sign)
    tail = tuple(_where(flip, n, p) for n, p in zip(s.tail_neg, s.tail))
    return dataclasses.replace(
        s, mean=s.mean * sign, skewness=s.skewness * sign,
        vmin=_where(flip, -s.vmax, s.vmin), vmax=_where(flip, -s.vmin, s.vmax),
        top=(_where(flip, -bv, tv), _where(flip, br, tr)), bottom=(_where(flip, -tv, bv), _where(flip, tr, br)),
        sample=sample, tail=(tail[0], tail[1], tail[2] * sign), tau=_where(flip, s.tau_neg, s.tau),
        hist=flipped(s.hist, flip), flipped=flip | s.flipped)
