"""The moments passes of an alignment: each side's cached moments, and a pair's cross moments.

A :class:`Side` is one representation with its moments on the fit rows and on the held-out
(eval) rows (two :class:`~actkit.stats.RunningMoments` about one shift), the rows kept in
memory for FastICA and for the diameter, and its cached ICA fits: ``compare_many`` reads
each representation for these once and reuses them in every pair. A :class:`Pair` adds the
cross moments (:class:`~actkit.stats.CrossMoments`) of two sides, on the fit and the eval
rows, in one pass (:func:`pair_pass`, a :class:`~actkit.runners.RowPass` over paired blocks
run by the local runner), and the held-out errors of fitted alignments in another.
"""

from __future__ import annotations

import numpy as np

from actkit._data import iter_blocks
from actkit._groups import SampleGroups, check_same_rows
from actkit._threads import current_threads, map_ordered, small_linalg
from actkit.alignment._diameter import summed_l2
from actkit.alignment._inputs import (MOMENT_ROWS, blocks, check_finite, compute_dtype,
                                      default_block_rows, n_features, n_rows, progress_bar)
from actkit.runners import LOCAL, RowPass
from actkit.stats import CrossMoments, RunningMoments, first_block_shift
from actkit.errors import ValidationError


def _f64(block):
    """A block as float64 for the moments: products summed in float64 give the same second
    moments (to ~1e-16) on any BLAS kernel and thread count, where float32 GEMMs left an
    error of ~1e-6 of the largest variance that moved the closed-form columns (mean CCA by
    0.008) between machines (docs/definitions.md, "Closed-form columns")."""
    return block if block.dtype == np.float64 else block.astype(np.float64)


class Side:
    """One representation with its split-aware moments, sample rows and ICA fits (cached)."""

    def __init__(self, X, name, eval_mask, sample_rows, diam_rows, dtype, shift=None, groups=None):
        self.X, self.name, self.dtype = X, name, dtype
        self.n, self.d = n_rows(X), n_features(X, name)
        self.eval_mask = eval_mask
        self.sample_rows = sample_rows      # sorted global rows kept in memory for FastICA
        self.diam_rows = diam_rows          # sorted global eval rows kept for the diameter
        self.shift = shift                  # (D,) float64; None: the first block's (first_block_shift)
        self.groups = groups                # (n,) input-sample id of every row, or None (one row each)
        self.fit = self.eval = None
        self.sample = []
        self.diam = []
        self._ica = {}
        self.done = False

    def add(self, start, block):
        stop = start + block.shape[0]
        check_finite(block, self.name, start)
        if self.fit is None:
            if self.shift is None:
                self.shift = first_block_shift(block)
            self.fit = RunningMoments(self.d, check_finite=False, shift=self.shift)
            self.eval = RunningMoments(self.d, check_finite=False, shift=self.shift)
        em = self.eval_mask[start:stop]
        wide = _f64(block)
        for sel, moments in ((~em, self.fit), (em, self.eval)):
            if sel.any():
                moments.add(wide if sel.all() else wide[sel])
        for rows, out in ((self.sample_rows, self.sample), (self.diam_rows, self.diam)):
            lo, hi = np.searchsorted(rows, [start, stop])
            if hi > lo:
                out.append(np.array(block[rows[lo:hi] - start], dtype=self.dtype))

    def fresh(self):
        """An empty side over the same rows, with this side's shift (a partial of a pass)."""
        return Side(self.X, self.name, self.eval_mask, self.sample_rows, self.diam_rows, self.dtype,
                    shift=self.shift, groups=self.groups)

    def merged(self, other):
        """A new unfinished side: this side's rows, then ``other``'s (same shift); neither is
        modified."""
        out = self.fresh()
        parts = [s for s in (self, other) if s.fit is not None]
        if parts:
            out.fit = RunningMoments(self.d, check_finite=False, shift=out.shift)
            out.eval = RunningMoments(self.d, check_finite=False, shift=out.shift)
            for s in parts:
                out.fit.merge(s.fit)
                out.eval.merge(s.eval)
                out.sample += s.sample
                out.diam += s.diam
        return out

    def finish(self):
        self.sample = (np.concatenate(self.sample) if self.sample
                       else np.zeros((0, self.d), self.dtype))
        self.diam = (np.concatenate(self.diam) if self.diam
                     else np.zeros((0, self.d), self.dtype))
        self.done = True

    def run(self, block_rows, bar=None):
        """Read every row once (moments, sample rows, diameter rows)."""
        start = 0
        with small_linalg():        # bitwise at any thread count (see Pair.fit_moments)
            for block in blocks(self.X, block_rows, self.dtype):
                self.add(start, block)
                start += block.shape[0]
                if bar is not None:
                    bar.update(block.shape[0])
        self.finish()

    # --- derived
    @property
    def n_fit(self):
        return self.fit.n_samples_

    @property
    def mean_fit(self):
        return self.fit.mean_

    def scatter_fit(self):
        return self.fit.scatter()

    def sample_groups(self):
        """The input-sample id of each FastICA sample row (``sample`` order), or None."""
        return None if self.groups is None else np.asarray(self.groups)[self.sample_rows]

    def ica(self, k, random_state, ica_params, fit_side):
        """``fit_side(side, k, random_state, ica_params)``, cached."""
        key = (k, random_state, tuple(sorted(ica_params.items())))
        if key not in self._ica:
            self._ica[key] = fit_side(self, k, random_state, ica_params)
        return self._ica[key]


class Pair:
    """Two sides plus their cross moments on the fit and eval rows."""

    def __init__(self, A, B, *, eval_mask, sample_rows, block_rows=None, progress=None,
                 diam_rows=None, side_a=None, side_b=None, groups=None):
        check_same_rows([A, B], ["A", "B"])
        self.A, self.B = A, B
        self.n = n_rows(A)
        if self.n < 2:
            raise ValidationError(f"need at least 2 rows, got {self.n}")
        self.dtype = compute_dtype(A, B)
        self.eval_mask = np.zeros(self.n, bool) if eval_mask is None else eval_mask
        diam_rows = np.zeros(0, np.int64) if diam_rows is None else diam_rows
        self.block_rows = block_rows or default_block_rows(
            max(n_features(A, "A"), n_features(B, "B")))
        self.progress = progress
        self.a = side_a or Side(A, "A", self.eval_mask, sample_rows, diam_rows, self.dtype, groups=groups)
        self.b = side_b or Side(B, "B", self.eval_mask, sample_rows, diam_rows, self.dtype, groups=groups)

    def fit_moments(self):
        """One pass (:func:`pair_pass` on the local runner): side moments (unless cached) and
        cross moments, fit and eval rows."""
        a, b = self.a, self.b
        shifts = (self._shift(a), self._shift(b))

        def paired(bar):
            for xa, xb in zip(blocks(self.A, self.block_rows, self.dtype),
                              blocks(self.B, self.block_rows, self.dtype)):
                yield xa, xb
                bar.update(xa.shape[0])

        # one BLAS thread for the products: OpenBLAS splits a (Da x rows) @ (rows x Db)
        # product over its rows with 2 threads, which changed the last bits of the cross
        # scatter, and so of mean CCA, with the thread count
        with progress_bar(self.n, "compare: moments", self.progress) as bar, small_linalg():
            a, b, pm_fit, pm_eval = LOCAL.run(self.A, pair_pass(self, shifts), blocks=paired(bar),
                                              progress=False)
        for side in (a, b):
            if not side.done:
                side.finish()
        self.a, self.b = a, b
        self.fit_pm = pm_fit.attach_sides(a.fit, b.fit)
        self.eval_pm = pm_eval.attach_sides(a.eval, b.eval) if pm_eval.n else pm_eval
        return self

    def _shift(self, side):
        """The side's shift: a cached side's own, else its first fixed block's mean (what
        :meth:`Side.add` would take), read ahead so every partial of the pass shares it."""
        if side.shift is not None:
            return side.shift
        first = np.concatenate(list(iter_blocks(side.X, block_rows=self.block_rows, dtype=self.dtype,
                                                start=0, stop=min(self.n, MOMENT_ROWS), prefetch=False)))
        side.shift = first_block_shift(first)
        return side.shift

    def eval_errors(self, alignments, keep=()):
        """``(sums, row_errors)``: the sum over eval rows of ||h(a_i) - b_i|| for each
        alignment, and the per-row errors (shape (n_eval,)) of permutation, rigid and those
        named in ``keep``.

        Each block's predictions run at one BLAS thread (the blocks on the budget's threads,
        :func:`~actkit._threads.map_ordered`) and the sums are added in block order: OpenBLAS
        splits a float32 (rows x Da) @ (Da x Db) product between 2 threads with other kernels
        at the edges, which moved the rigid and linear errors by ~1e-9 (relative) with the
        thread count. Here they have the same bits at any thread count."""
        em = self.eval_mask
        sums = dict.fromkeys(alignments, 0.0)
        # per-row errors of these two: the noise of the ICA efficiency's denominator (and
        # of those the bootstrap resamples)
        row_errors = {k: [] for k in alignments if k in ("permutation", "rigid") or k in keep}

        def held_out(item):
            start, xa, xb = item
            sel = em[start:start + xa.shape[0]]
            ya, yb = (xa, xb) if sel.all() else (xa[sel], xb[sel])
            out = {}
            for name, h in alignments.items():
                pred = h.predict_block(ya, self.dtype)
                if name in row_errors:
                    diff = pred - yb
                    out[name] = np.sqrt(np.einsum("ij,ij->i", diff, diff, dtype=np.float64))
                else:
                    out[name] = summed_l2(pred, yb)
            return out

        def eval_blocks(bar):
            start = 0
            for xa, xb in zip(blocks(self.A, self.block_rows, self.dtype),
                              blocks(self.B, self.block_rows, self.dtype)):
                stop = start + xa.shape[0]
                if em[start:stop].any():
                    yield start, xa, xb
                start = stop
                bar.update(xa.shape[0])

        with progress_bar(self.n, "compare: held-out errors", self.progress) as bar, small_linalg():
            for out in map_ordered(held_out, eval_blocks(bar), current_threads()):
                for name, value in out.items():
                    if name in row_errors:
                        row_errors[name].append(value)
                        sums[name] += float(value.sum())
                    else:
                        sums[name] += value
        return sums, {k: np.concatenate(v) if v else np.zeros(0) for k, v in row_errors.items()}


def pair_pass(pair, shifts):
    """The read of a :class:`Pair` as a :class:`~actkit.runners.RowPass` over paired blocks
    ``(xa, xb)`` (row-aligned, of :func:`~actkit.alignment._inputs.blocks`): each unfinished
    side's moments and rows, and the cross moments of the fit and the eval rows. Partial
    result ``[side_a, side_b, fit CrossMoments, eval CrossMoments]``; a cached (finished)
    side is only checked for non-finite values. ``shifts``: the two sides' shifts, shared by
    every partial so that partials merge exactly."""
    return RowPass(_pair_new, _pair_add, _pair_merge, (pair.a, pair.b, pair.eval_mask, shifts),
                   pair.block_rows, name="compare: moments")


def _pair_new(a, b, eval_mask, shifts):
    kw = dict(compute_xx=False, compute_yy=False, shift_x=shifts[0], shift_y=shifts[1])
    return [a if a.done else a.fresh(), b if b.done else b.fresh(), CrossMoments(**kw), CrossMoments(**kw)]


def _pair_add(acc, block, start, a, b, eval_mask, shifts):
    xa, xb = block
    for side, x, name in ((acc[0], xa, "A"), (acc[1], xb, "B")):
        if side.done:
            check_finite(x, name, start)
        else:
            side.add(start, x)
    sel = eval_mask[start : start + xa.shape[0]]
    wa, wb = _f64(xa), _f64(xb)
    pm_fit, pm_eval = acc[2], acc[3]
    if sel.all():
        pm_eval.add(wa, wb)
    elif not sel.any():
        pm_fit.add(wa, wb)
    else:
        pm_fit.add(wa[~sel], wb[~sel])
        pm_eval.add(wa[sel], wb[sel])
    return acc


def _pair_merge(p, q):
    sides = [s if s.done else s.merged(t) for s, t in zip(p[:2], q[:2])]
    return [*sides, p[2].copy().merge(q[2]), p[3].copy().merge(q[3])]


#: The chance pass re-pairs B's input samples within consecutive windows of about this many
#: bytes of float64 rows of A and B together (at least 2 rows): a fixed function of the
#: shape, never of ``block_rows`` or the thread count, so the chance levels are the same for
#: any of them.
CHANCE_WINDOW_BYTES = 1 << 28


def chance_window(d_a, d_b):
    """Rows per window of :func:`chance_cross_scatter` for widths ``d_a`` and ``d_b``."""
    return max(2, CHANCE_WINDOW_BYTES // (8 * (int(d_a) + int(d_b))))


def chance_pairing(groups, random_state, window=0):
    """The row of B paired with each row of A in one re-pairing of whole input samples.

    Parameters
    ----------
    groups : ndarray of shape (n,)
        Input sample of each row.
    random_state : int
    window : int
        The window's number: its draw is ``np.random.default_rng([random_state, window])``.

    Returns
    -------
    ndarray of shape (n,)
        ``r[i]``: the row of B that row ``i`` of A meets. Sample ``s`` of A meets sample
        ``pi(s)`` of B, row by row in order, ``pi`` a permutation among samples with the same
        number of rows (the permutation p-values' scheme, :func:`actkit.inference.permutation_draws`);
        for ascending lengths, one ``rng.permutation`` of each class of at least two. With one
        row per sample this is ``rng.permutation(n)``, a permutation of the rows.
    """
    g = SampleGroups(groups)
    return g.paired_rows(g.one_permutation(random_state, window))


def chance_cross_scatter(A, B, random_state, *, groups=None, block_rows=None, progress=None):
    """Centred cross scatter ``sum_i (a_i - mean a)(b_r(i) - mean b)^T`` (Da x Db, float64)
    with B's input samples re-paired against A's: within each window of :func:`chance_window`
    rows, by :func:`chance_pairing` (whole samples among samples of equal length, drawn by
    ``np.random.default_rng([random_state, w])`` for window ``w``; a sample cut by a window's
    edge counts as two pieces).

    With the side scatters (unchanged by a re-pairing) it gives each similarity statistic
    of A against a B whose input samples no longer pair with A's: ``linear_cka_chance`` and
    ``mean_cca_chance`` (docs/definitions.md, "Chance levels"), one draw of the permutation
    test's null. With one row per sample (pooled rows) it permutes the rows. One more pass
    over the rows.
    """
    n, d_a, d_b = n_rows(A), n_features(A, "A"), n_features(B, "B")
    W = chance_window(d_a, d_b)
    groups = np.arange(n) if groups is None else np.asarray(groups)
    xy = np.zeros((d_a, d_b))
    sa, sb = np.zeros(d_a), np.zeros(d_b)
    shift_a = shift_b = None
    with progress_bar(n, "compare: chance levels", progress) as bar, small_linalg():
        for w, start in enumerate(range(0, n, W)):
            stop = min(n, start + W)
            xa = np.concatenate(list(blocks_between(A, start, stop, block_rows)))
            xb = np.concatenate(list(blocks_between(B, start, stop, block_rows)))
            if shift_a is None:
                shift_a, shift_b = first_block_shift(xa), first_block_shift(xb)
            xa -= shift_a
            xb -= shift_b
            xy += xa.T @ xb[chance_pairing(groups[start:stop], random_state, w)]
            sa += xa.sum(axis=0)
            sb += xb.sum(axis=0)
            bar.update(stop - start)
    return xy - np.outer(sa, sb) / n


def blocks_between(X, start, stop, block_rows):
    """float64 blocks of rows ``start:stop`` of ``X``."""
    return iter_blocks(X, block_rows=block_rows, dtype=np.float64, start=start, stop=stop,
                       prefetch=False)
