"""The moments passes of an alignment: each side's cached moments, and a pair's cross moments.

A :class:`Side` is one representation with its moments on the fit rows and on the held-out
(eval) rows (two :class:`~actkit.stats.RunningMoments` about one shift), the rows kept in
memory for FastICA and for the diameter, and its cached ICA fits: ``compare_many`` reads
each representation for these once and reuses them in every pair. A :class:`Pair` adds the
cross moments (:class:`~actkit.stats.CrossMoments`) of two sides, on the fit and the eval
rows, in one pass, and the held-out errors of fitted alignments in another.
"""

from __future__ import annotations

import numpy as np

from actkit._threads import small_linalg
from actkit.alignment._diameter import summed_l2
from actkit.alignment._inputs import (blocks, check_finite, compute_dtype, default_block_rows,
                                      n_features, n_rows, progress_bar)
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

    def __init__(self, X, name, eval_mask, sample_rows, diam_rows, dtype):
        self.X, self.name, self.dtype = X, name, dtype
        self.n, self.d = n_rows(X), n_features(X, name)
        self.eval_mask = eval_mask
        self.sample_rows = sample_rows      # sorted global rows kept in memory for FastICA
        self.diam_rows = diam_rows          # sorted global eval rows kept for the diameter
        self.shift = None
        self.fit = self.eval = None
        self.sample = []
        self.diam = []
        self._ica = {}
        self.done = False

    def add(self, start, block):
        stop = start + block.shape[0]
        check_finite(block, self.name, start)
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

    def ica(self, k, random_state, ica_params, fit_side):
        """``fit_side(sample, mean, scatter, n, k, random_state, ica_params)``, cached."""
        key = (k, random_state, tuple(sorted(ica_params.items())))
        if key not in self._ica:
            self._ica[key] = fit_side(self.sample, self.mean_fit, self.scatter_fit(),
                                      self.n_fit, k, random_state, ica_params)
        return self._ica[key]


class Pair:
    """Two sides plus their cross moments on the fit and eval rows."""

    def __init__(self, A, B, *, eval_mask, sample_rows, block_rows=None, progress=None,
                 diam_rows=None, side_a=None, side_b=None):
        n_a, n_b = n_rows(A), n_rows(B)
        if n_a != n_b:
            raise ValidationError(f"A and B have different row counts ({n_a} and {n_b}); they must "
                             f"be activations of the same inputs, row for row")
        self.A, self.B = A, B
        self.n = n_a
        if self.n < 2:
            raise ValidationError(f"need at least 2 rows, got {self.n}")
        self.dtype = compute_dtype(A, B)
        self.eval_mask = np.zeros(self.n, bool) if eval_mask is None else eval_mask
        diam_rows = np.zeros(0, np.int64) if diam_rows is None else diam_rows
        self.block_rows = block_rows or default_block_rows(
            max(n_features(A, "A"), n_features(B, "B")))
        self.progress = progress
        self.a = side_a or Side(A, "A", self.eval_mask, sample_rows, diam_rows, self.dtype)
        self.b = side_b or Side(B, "B", self.eval_mask, sample_rows, diam_rows, self.dtype)

    def fit_moments(self):
        """One pass: side moments (unless cached) and cross moments, fit and eval rows."""
        a, b, em = self.a, self.b, self.eval_mask
        pm_fit = pm_eval = None
        start = 0
        # one BLAS thread for the products: OpenBLAS splits a (Da x rows) @ (rows x Db)
        # product over its rows with 2 threads, which changed the last bits of the cross
        # scatter, and so of mean CCA, with the thread count
        with progress_bar(self.n, "compare: moments", self.progress) as bar, small_linalg():
            for xa, xb in zip(blocks(self.A, self.block_rows, self.dtype),
                              blocks(self.B, self.block_rows, self.dtype)):
                if not a.done:
                    a.add(start, xa)
                else:
                    check_finite(xa, "A", start)
                if not b.done:
                    b.add(start, xb)
                else:
                    check_finite(xb, "B", start)
                if pm_fit is None:
                    kw = dict(compute_xx=False, compute_yy=False, shift_x=a.shift, shift_y=b.shift)
                    pm_fit, pm_eval = CrossMoments(**kw), CrossMoments(**kw)
                stop = start + xa.shape[0]
                sel = em[start:stop]
                wa, wb = _f64(xa), _f64(xb)
                if sel.all():
                    pm_eval.add(wa, wb)
                elif not sel.any():
                    pm_fit.add(wa, wb)
                else:
                    pm_fit.add(wa[~sel], wb[~sel])
                    pm_eval.add(wa[sel], wb[sel])
                start = stop
                bar.update(xa.shape[0])
        for side in (a, b):
            if not side.done:
                side.finish()
        self.fit_pm = pm_fit.attach_sides(a.fit, b.fit)
        self.eval_pm = pm_eval.attach_sides(a.eval, b.eval) if pm_eval.n else pm_eval
        return self

    def eval_errors(self, alignments):
        """Sum over eval rows of ||h(a_i) - b_i|| for each alignment."""
        em = self.eval_mask
        sums = dict.fromkeys(alignments, 0.0)
        # per-row errors of these two: the noise of the ICA efficiency's denominator
        self.row_errors = {k: [] for k in ("permutation", "rigid") if k in alignments}
        start = 0
        with progress_bar(self.n, "compare: held-out errors", self.progress) as bar:
            for xa, xb in zip(blocks(self.A, self.block_rows, self.dtype),
                              blocks(self.B, self.block_rows, self.dtype)):
                stop = start + xa.shape[0]
                sel = em[start:stop]
                if sel.any():
                    ya, yb = (xa, xb) if sel.all() else (xa[sel], xb[sel])
                    for name, h in alignments.items():
                        pred = h.predict_block(ya, self.dtype)
                        if name in self.row_errors:
                            diff = pred - yb
                            e = np.sqrt(np.einsum("ij,ij->i", diff, diff, dtype=np.float64))
                            self.row_errors[name].append(e)
                            sums[name] += float(e.sum())
                        else:
                            sums[name] += summed_l2(pred, yb)
                start = stop
                bar.update(xa.shape[0])
        return sums


#: The chance pass permutes B's rows within consecutive windows of about this many bytes of
#: float64 rows of A and B together (at least 2 rows): a fixed function of the shape, never
#: of ``block_rows`` or the thread count, so the chance levels are the same for any of them.
CHANCE_WINDOW_BYTES = 1 << 28


def chance_window(d_a, d_b):
    """Rows per window of :func:`chance_cross_scatter` for widths ``d_a`` and ``d_b``."""
    return max(2, CHANCE_WINDOW_BYTES // (8 * (int(d_a) + int(d_b))))


def chance_cross_scatter(A, B, random_state, *, block_rows=None, progress=None):
    """Centred cross scatter ``sum_i (a_i - mean a)(b_pi(i) - mean b)^T`` (Da x Db, float64)
    with B's rows permuted: within each window of :func:`chance_window` rows, by
    ``np.random.default_rng([random_state, w]).permutation`` for window ``w``.

    With the side scatters (unchanged by a permutation) it gives each similarity statistic
    of A against a B whose rows no longer pair with A's: ``linear_cka_chance`` and
    ``mean_cca_chance`` (docs/definitions.md, "Chance levels"). One more pass over the rows.
    """
    n, d_a, d_b = n_rows(A), n_features(A, "A"), n_features(B, "B")
    W = chance_window(d_a, d_b)
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
            perm = np.random.default_rng([int(random_state), w]).permutation(stop - start)
            xy += xa.T @ xb[perm]
            sa += xa.sum(axis=0)
            sb += xb.sum(axis=0)
            bar.update(stop - start)
    return xy - np.outer(sa, sb) / n


def blocks_between(X, start, stop, block_rows):
    """float64 blocks of rows ``start:stop`` of ``X``."""
    from actkit._data import iter_blocks

    return iter_blocks(X, block_rows=block_rows, dtype=np.float64, start=start, stop=stop,
                       prefetch=False)
