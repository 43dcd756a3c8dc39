"""Streaming moments of two representations of the same rows: :class:`CrossMoments`.
See :mod:`actkit.stats`."""

from __future__ import annotations

import numpy as np

from actkit._threads import fixed_order_sum
from actkit.errors import ValidationError
from actkit.stats._running import RunningMoments, first_block_shift

__all__ = ["CrossMoments"]

_DEBIASED = ("sum_dx", "sum_dy", "sum_dx2", "sum_dy2", "sum_dxdy", "x_dx", "x_dy", "y_dx", "y_dy")


class CrossMoments:
    """Streaming first and second moments of two representations of the same rows.

    The sibling of :class:`RunningMoments` for paired rows ``(x_i, y_i)``: it accumulates, in
    float64 from blocks of rows (each block's products are computed in the block's own dtype,
    so float32 data runs float32 GEMMs), everything that linear CKA (plain and debiased),
    CCA, Procrustes and least squares need (the measures take it as
    :meth:`actkit.measures.Moments.from_cross`): ``n``, the column sums, the scatter matrices
    ``X^T X``, ``Y^T Y``, ``X^T Y``, and the row-norm terms of the debiased HSIC estimator.
    Rows are shifted (:func:`first_block_shift`) before any product, which keeps float32
    products accurate for data far from the origin (every quantity derived here is shift
    invariant).

    Parameters
    ----------
    compute_xx, compute_yy : bool, default=True
        Skip ``X^T X`` (or ``Y^T Y``) when not needed, e.g. when each side's scatter is
        already held by a :class:`RunningMoments` (see :meth:`attach_sides`).
    debiased_terms : bool, default=True
        Also accumulate the row-norm terms needed by the debiased CKA.
    shift_x, shift_y : ndarray of shape (p,) and (q,), optional
        Fixed shifts (default: the first block's). Moments merge only when they share their
        shifts.

    Attributes
    ----------
    n : int
        Rows seen so far.
    shift_x, shift_y : ndarray of shape (p,), (q,)
    """

    def __init__(self, *, compute_xx=True, compute_yy=True, debiased_terms=True,
                 shift_x=None, shift_y=None):
        self.compute_xx = compute_xx
        self.compute_yy = compute_yy
        self.debiased_terms = debiased_terms
        self.shift_x = None if shift_x is None else np.asarray(shift_x, np.float64)
        self.shift_y = None if shift_y is None else np.asarray(shift_y, np.float64)
        self.n = 0

    def _init(self, X, Y):
        p, q = X.shape[1], Y.shape[1]
        if self.shift_x is None:
            self.shift_x = first_block_shift(X)
        if self.shift_y is None:
            self.shift_y = first_block_shift(Y)
        self.sx = np.zeros(p)
        self.sy = np.zeros(q)
        self.xx = np.zeros((p, p)) if self.compute_xx else None
        self.yy = np.zeros((q, q)) if self.compute_yy else None
        self.xy = np.zeros((p, q))
        if self.debiased_terms:
            self.sum_dx = self.sum_dy = 0.0
            self.sum_dx2 = self.sum_dy2 = self.sum_dxdy = 0.0
            self.x_dx = np.zeros(p)
            self.x_dy = np.zeros(p)
            self.y_dx = np.zeros(q)
            self.y_dy = np.zeros(q)

    def add(self, X, Y) -> CrossMoments:
        """Add a block of paired rows ``X`` (n, p) and ``Y`` (n, q). Returns self."""
        if X.shape[0] == 0:
            return self
        if self.n == 0:
            self._init(X, Y)
        dt = np.result_type(X.dtype, Y.dtype)
        Xs = (X - self.shift_x.astype(dt)).astype(dt, copy=False)
        Ys = (Y - self.shift_y.astype(dt)).astype(dt, copy=False)
        self.n += X.shape[0]
        self.sx += Xs.sum(axis=0, dtype=np.float64)
        self.sy += Ys.sum(axis=0, dtype=np.float64)
        products = [k for k in ("xx", "yy") if getattr(self, k) is not None] + ["xy"]
        names = products + (["sum_dx", "sum_dy", "sum_dx2", "sum_dy2", "sum_dxdy", "x_dx", "x_dy", "y_dx", "y_dy"]
                            if self.debiased_terms else [])

        def chunk(a, b):  # every sum over rows a:b (fixed chunks: the same bits at any thread count)
            x, y = Xs[a:b], Ys[a:b]
            pairs = {"xx": (x, x), "yy": (y, y), "xy": (x, y)}
            out = [pairs[k][0].T @ pairs[k][1] for k in products]
            if self.debiased_terms:
                dx = np.einsum("ij,ij->i", x, x, dtype=np.float64)
                dy = np.einsum("ij,ij->i", y, y, dtype=np.float64)
                dxt, dyt = dx.astype(dt), dy.astype(dt)
                out += [dx.sum(), dy.sum(), dx @ dx, dy @ dy, dx @ dy, dxt @ x, dyt @ x, dxt @ y, dyt @ y]
            return out

        for name, value in zip(names, fixed_order_sum(chunk, X.shape[0])):
            setattr(self, name, getattr(self, name) + value)
        return self

    def attach_sides(self, x: RunningMoments, y: RunningMoments) -> CrossMoments:
        """Take ``X^T X`` and ``Y^T Y`` from each side's own accumulator over the same rows.

        ``x`` and ``y`` must have seen exactly these rows about the same shifts (as
        ``compare``'s per-side cache does); afterwards every scatter is available. Returns
        self.
        """
        if self.n == 0:
            return self
        for side, shift, name in ((x, self.shift_x, "x"), (y, self.shift_y, "y")):
            if side.n_samples_ != self.n or not np.array_equal(side.shift_, shift):
                raise ValidationError(f"the {name} side's moments are not of these rows "
                                 f"({side.n_samples_} rows vs {self.n}, or another shift)")
        self.xx, self.yy = x.raw_scatter(), y.raw_scatter()
        self.compute_xx = self.compute_yy = True
        return self

    def merge(self, other: CrossMoments) -> CrossMoments:
        """Fold another accumulator's rows into this one (same shifts). Returns self."""
        if not isinstance(other, CrossMoments):
            raise TypeError("can only merge another CrossMoments")
        if other.n == 0:
            return self
        if self.n == 0:
            return self.load_state_dict(other.state_dict())
        if not (np.array_equal(self.shift_x, other.shift_x)
                and np.array_equal(self.shift_y, other.shift_y)):
            raise ValidationError("can only merge CrossMoments that share a shift")
        self.compute_xx = self.compute_xx and other.compute_xx
        self.compute_yy = self.compute_yy and other.compute_yy
        self.debiased_terms = self.debiased_terms and other.debiased_terms
        self.n += other.n
        for name in self._names():
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if not self.compute_xx:
            self.xx = None
        if not self.compute_yy:
            self.yy = None
        return self

    def copy(self) -> CrossMoments:
        """An independent copy."""
        return CrossMoments().load_state_dict(self.state_dict())

    def _names(self):
        names = ["sx", "sy", "xy"]
        if self.compute_xx:
            names.append("xx")
        if self.compute_yy:
            names.append("yy")
        if self.debiased_terms:
            names += list(_DEBIASED)
        return names

    def state_dict(self) -> dict:
        """Everything needed to resume or merge: numpy arrays, floats and flags."""
        state = {"n": np.int64(self.n), "compute_xx": self.compute_xx,
                 "compute_yy": self.compute_yy, "debiased_terms": self.debiased_terms,
                 "shift_x": self.shift_x, "shift_y": self.shift_y}
        if self.n:
            state.update({name: np.array(getattr(self, name), copy=True) for name in self._names()})
        return state

    def load_state_dict(self, state: dict) -> CrossMoments:
        """Restore from :meth:`state_dict` output. Returns self."""
        self.n = int(state["n"])
        self.compute_xx = bool(state["compute_xx"])
        self.compute_yy = bool(state["compute_yy"])
        self.debiased_terms = bool(state["debiased_terms"])
        for key in ("shift_x", "shift_y"):
            value = state[key]
            setattr(self, key, None if value is None else np.array(value, dtype=np.float64))
        if self.n:
            for name in self._names():
                value = np.array(state[name], dtype=np.float64)
                setattr(self, name, value if value.ndim else float(value))
            if not self.compute_xx:
                self.xx = None
            if not self.compute_yy:
                self.yy = None
        return self

    # ----- derived quantities (float64) -----
    @property
    def mean_x(self):
        """Column means of X, shape (p,)."""
        return self.shift_x + self.sx / self.n

    @property
    def mean_y(self):
        """Column means of Y, shape (q,)."""
        return self.shift_y + self.sy / self.n

    def scatter_xx(self):
        """Centred scatter ``sum_i (x_i - mean)(x_i - mean)^T``, shape (p, p)."""
        return self.xx - np.outer(self.sx, self.sx) / self.n

    def scatter_yy(self):
        """Centred scatter of Y, shape (q, q)."""
        return self.yy - np.outer(self.sy, self.sy) / self.n

    def scatter_xy(self):
        """Centred cross scatter ``sum_i (x_i - mx)(y_i - my)^T``, shape (p, q)."""
        return self.xy - np.outer(self.sx, self.sy) / self.n

    def correlation(self) -> np.ndarray:
        """Pearson correlation of every column of X with every column of Y, shape (p, q)
        (float64; 0 where a column is constant). Needs both sides' scatter (``compute_xx`` and
        ``compute_yy``, or :meth:`attach_sides`)."""
        if self.n == 0:
            raise ValidationError("no rows have been added yet")
        if self.xx is None or self.yy is None:
            raise ValidationError("correlation needs both sides' scatter (compute_xx=True, compute_yy=True)")
        vx = np.clip(np.diag(self.xx) - self.sx ** 2 / self.n, 0, None)
        vy = np.clip(np.diag(self.yy) - self.sy ** 2 / self.n, 0, None)
        den = np.sqrt(np.outer(vx, vy))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, self.scatter_xy() / np.where(den > 0, den, 1.0), 0.0)

    def __repr__(self) -> str:
        return f"CrossMoments(n={self.n})"
