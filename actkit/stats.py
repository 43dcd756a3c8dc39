"""Streaming moments: mean and covariance in float64, resumable and mergeable.

Two accumulators, one rule (the model is baukit's ``runningstats``: ``add``, ``merge``,
``state_dict``):

* :class:`RunningMoments` -- one representation: count, mean, covariance. Out-of-core
  whitening, FastICA's whitening pass and ``compare``'s per-side cache are built on it.
* :class:`CrossMoments` -- two representations of the same rows: the cross scatter
  ``X'Y`` (and the row-norm terms of the debiased HSIC) beside each side's sums. Linear CKA,
  CCA, Procrustes and least squares are all functions of it.

Numerics: every block is centred on a fixed shift (the mean of the first block, rounded to
the block's dtype, see :func:`first_block_shift`) before its cross-product is formed, so the
float64 accumulators never suffer the catastrophic cancellation of the textbook
``E[xx'] - E[x]E[x]'`` formula. The per-block product ``Xc.T @ Xc`` runs in the block's own
dtype (float32 blocks use BLAS ``ssyrk``, about twice as fast as float64) and is
accumulated in float64; pass ``precision="float64"`` to form the block products in float64.

:func:`iter_row_blocks` iterates the rows of any supported source (numpy, torch, h5py
dataset, store layer); on-disk sources are read one block ahead on a background thread.
"""

from __future__ import annotations

import numpy as np

from actkit._data import iter_blocks as iter_row_blocks
from actkit._threads import fixed_order_sum, small_linalg
from actkit.errors import ValidationError

__all__ = ["RunningMoments", "CrossMoments", "iter_row_blocks", "first_block_shift"]


def first_block_shift(X) -> np.ndarray:
    """The shift of a fresh accumulator: the first block's mean, exactly representable in the
    block's dtype (so sums and mean stay consistent), as float64, shape (D,)."""
    X = np.asarray(X)
    dt = X.dtype if X.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    return X.mean(axis=0, dtype=np.float64).astype(dt).astype(np.float64)


class RunningMoments:
    """Streaming mean and covariance of row vectors, accumulated in float64.

    Parameters
    ----------
    n_features : int, optional
        Dimension D of the rows; inferred from the first block when omitted.
    precision : {"auto", "float64"}, default="auto"
        ``"auto"`` forms each block's cross-product in the block's dtype (float32 blocks
        use single-precision BLAS) and accumulates in float64; ``"float64"`` casts every
        block to float64 first.
    check_finite : bool, default=True
        Raise ``ValueError`` on a block with NaN or infinite values.
    shift : ndarray of shape (D,), optional
        A fixed shift (default: :func:`first_block_shift` of the first block). Accumulators
        that share a shift merge exactly; any two merge.

    Attributes
    ----------
    n_samples_ : int
        Rows seen so far.
    mean_ : ndarray of shape (D,), float64
    n_features_ : int or None

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(1000, 4))
    >>> m = RunningMoments()
    >>> for block in np.array_split(X, 7):
    ...     _ = m.add(block)
    >>> bool(np.allclose(m.covariance(), np.cov(X, rowvar=False)))
    True
    """

    def __init__(self, n_features: int | None = None, *, precision: str = "auto", check_finite: bool = True,
                 shift=None):
        if precision not in ("auto", "float64"):
            raise ValidationError(f"precision must be 'auto' or 'float64', got {precision!r}")
        self.precision = precision
        self.check_finite = check_finite
        self.n_features_ = None if n_features is None else int(n_features)
        self.n_samples_ = 0
        self._shift = None if shift is None else np.asarray(shift, dtype=np.float64)  # (D,)
        self._s1 = None  # (D,) float64: sum of (x - shift)
        self._s2 = None  # (D, D) float64: sum of (x - shift)(x - shift)'

    # ------------------------------------------------------------------ updates
    def add(self, X, *, scheduler=None) -> "RunningMoments":
        """Add a block of rows.

        Parameters
        ----------
        X : array-like of shape (n_rows, D)
            A dask array is reduced on Dask (a map over its chunks + exact merge), as is a
            store layer or h5py dataset when a ``scheduler`` is given.
        scheduler : None, str or distributed.Client, optional
            Where Dask runs (None: the active ``distributed.Client``, else Dask's default);
            see ``docs/dask.md``.

        Returns
        -------
        self
        """
        from actkit import _dask

        if scheduler is not None or _dask.is_dask(X):
            Xd = _dask.as_dask(X, scheduler)
            if Xd is not None:
                from actkit._dask_passes import moments
                from actkit._rows import block_rows

                with _dask.use_scheduler(scheduler) as runner:
                    m, _ = moments(runner, Xd, block_rows=block_rows(int(Xd.shape[1])),
                                   precision=self.precision, check_finite=self.check_finite, progress=False)
                if self.n_features_ is not None and m.n_features_ is not None and m.n_features_ != self.n_features_:
                    raise ValidationError(f"block has {m.n_features_} features but earlier blocks had {self.n_features_}")
                return self.merge(m)
        if hasattr(X, "detach"):
            X = X.detach().cpu().numpy()
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValidationError(f"expected a 2-D block of rows, got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            X = X.astype(np.float64)
        given = X
        if self.precision == "float64" or X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64, copy=False)
        n, d = X.shape
        if self.n_features_ is None:
            self.n_features_ = d
        elif d != self.n_features_:
            raise ValidationError(f"block has {d} features but earlier blocks had {self.n_features_}")
        if n == 0:
            return self
        if self.check_finite and not np.isfinite(X).all():
            raise ValidationError("the data contain NaN or infinite values")
        if self._shift is None:
            self._shift = first_block_shift(X)
        if self._s1 is None:
            self._s1 = np.zeros(d)
            self._s2 = np.zeros((d, d))
        if X is not given and X.flags.c_contiguous:  # our own converted copy: centre it in place
            X -= self._shift.astype(X.dtype)
            Xc = X
        else:
            Xc = np.ascontiguousarray(X - self._shift.astype(X.dtype))
        self._s1 += Xc.sum(axis=0, dtype=np.float64)
        # numpy dispatches A.T @ A to BLAS syrk; fixed row chunks: the same bits at any thread count
        self._s2 += fixed_order_sum(lambda a, b: (Xc[a:b].T @ Xc[a:b],), n)[0]
        self.n_samples_ += n
        return self

    def merge(self, other: "RunningMoments") -> "RunningMoments":
        """Fold another accumulator's rows into this one (order does not matter).

        Returns
        -------
        self
        """
        if not isinstance(other, RunningMoments):
            raise TypeError("can only merge another RunningMoments")
        if other.n_samples_ == 0:
            return self
        if self.n_samples_ == 0:
            self.load_state_dict(other.state_dict())
            return self
        if other.n_features_ != self.n_features_:
            raise ValidationError(f"cannot merge moments of {other.n_features_} features into {self.n_features_}")
        delta = other._shift - self._shift  # re-express other's sums around self's shift
        n2 = other.n_samples_
        s1 = other._s1 + n2 * delta
        s2 = other._s2 + np.outer(delta, other._s1) + np.outer(other._s1, delta) + n2 * np.outer(delta, delta)
        self._s1 += s1
        self._s2 += s2
        self.n_samples_ += n2
        return self

    # ------------------------------------------------------------------ results
    def _check_any(self):
        if self.n_samples_ == 0:
            raise ValidationError("no rows have been added yet")

    @property
    def mean_(self) -> np.ndarray:
        self._check_any()
        return self._shift + self._s1 / self.n_samples_

    @property
    def shift_(self) -> np.ndarray | None:
        """The fixed shift of the sums (float64, shape (D,)), None before the first block."""
        return self._shift

    def scatter(self) -> np.ndarray:
        """Centred scatter ``sum (x - mean)(x - mean)'`` (float64, shape (D, D))."""
        self._check_any()
        return self._s2 - np.outer(self._s1, self._s1) / self.n_samples_

    def raw_scatter(self) -> np.ndarray:
        """``sum (x - shift)(x - shift)'`` about :attr:`shift_` (float64, shape (D, D))."""
        self._check_any()
        return self._s2

    def covariance(self, ddof: int = 1) -> np.ndarray:
        """Covariance matrix (float64), ``sum (x - mean)(x - mean)' / (n - ddof)``.

        Returns
        -------
        ndarray of shape (D, D)
        """
        self._check_any()
        n = self.n_samples_
        if n - ddof <= 0:
            raise ValidationError(f"need more than {ddof} rows for a covariance with ddof={ddof}, got {n}")
        m = self._s1 / n
        c = (self._s2 - n * np.outer(m, m)) / (n - ddof)
        return (c + c.T) / 2.0

    def variance(self, ddof: int = 1) -> np.ndarray:
        """Per-feature variance, shape (D,)."""
        return np.diag(self.covariance(ddof)).copy()

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict:
        """Everything needed to resume: plain numpy arrays and ints (HDF5/np.savez friendly)."""
        d = self.n_features_ or 0
        return {
            "n_samples": np.int64(self.n_samples_),
            "n_features": np.int64(d),
            "shift": np.zeros(d) if self._shift is None else self._shift.copy(),
            "s1": np.zeros(d) if self._s1 is None else self._s1.copy(),
            "s2": np.zeros((d, d)) if self._s2 is None else self._s2.copy(),
        }

    def load_state_dict(self, state: dict) -> "RunningMoments":
        """Restore from :meth:`state_dict` output. Returns self."""
        self.n_samples_ = int(state["n_samples"])
        d = int(state["n_features"])
        self.n_features_ = d or None
        if self.n_samples_ == 0:
            self._s1 = self._s2 = None
        else:
            self._shift = np.array(state["shift"], dtype=np.float64)
            self._s1 = np.array(state["s1"], dtype=np.float64)
            self._s2 = np.array(state["s2"], dtype=np.float64)
        return self

    def __repr__(self) -> str:
        return f"RunningMoments(n_features={self.n_features_}, n_samples={self.n_samples_})"


_DEBIASED = ("sum_dx", "sum_dy", "sum_dx2", "sum_dy2", "sum_dxdy", "x_dx", "x_dy", "y_dx", "y_dy")


class CrossMoments:
    """Streaming first and second moments of two representations of the same rows.

    The sibling of :class:`RunningMoments` for paired rows ``(x_i, y_i)``: it accumulates, in
    float64 from blocks of rows (each block's products are computed in the block's own dtype,
    so float32 data runs float32 GEMMs), everything that linear CKA (plain and debiased),
    CCA, Procrustes and least squares need: ``n``, the column sums, the scatter matrices
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

    def add(self, X, Y) -> "CrossMoments":
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

    def attach_sides(self, x: RunningMoments, y: RunningMoments) -> "CrossMoments":
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

    def merge(self, other: "CrossMoments") -> "CrossMoments":
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

    def copy(self) -> "CrossMoments":
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

    def load_state_dict(self, state: dict) -> "CrossMoments":
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

    def cka(self, debiased=False):
        """Linear CKA of the accumulated rows (see :func:`actkit.metrics.linear_cka`)."""
        with small_linalg():  # norms are BLAS dots: one thread, the same bits at any budget
            return self._cka(debiased)

    def _cka(self, debiased):
        if not debiased:
            sxy = self.scatter_xy()
            num = np.sum(sxy * sxy)
            den = np.linalg.norm(self.scatter_xx()) * np.linalg.norm(self.scatter_yy())
            return float(num / den) if den > 0 else float("nan")
        if not self.debiased_terms:
            raise ValidationError("debiased CKA needs CrossMoments(debiased_terms=True)")
        n = self.n
        if n < 4:
            raise ValidationError("debiased CKA needs at least 4 rows")
        hxy = self._hsic_u(self.xy, self.sx, self.sy, self.sum_dx, self.sum_dy,
                           self.sum_dxdy, self.x_dy, self.y_dx)
        hxx = self._hsic_u(self.xx, self.sx, self.sx, self.sum_dx, self.sum_dx,
                           self.sum_dx2, self.x_dx, self.x_dx)
        hyy = self._hsic_u(self.yy, self.sy, self.sy, self.sum_dy, self.sum_dy,
                           self.sum_dy2, self.y_dy, self.y_dy)
        den = np.sqrt(hxx * hyy) if hxx > 0 and hyy > 0 else 0.0
        return float(hxy / den) if den > 0 else float("nan")

    def _hsic_u(self, xy, sx, sy, sdx, sdy, sdxdy, x_dy, y_dx):
        """Unbiased HSIC (Song et al. 2012) of linear kernels, from feature moments.

        With K = X X^T, L = Y Y^T and tilde = zero diagonal:
        tr(K~L~) = |X^T Y|_F^2 - sum_i dx_i dy_i; 1^T K~ 1 = |s_x|^2 - sum_i dx_i;
        1^T K~ L~ 1 = s_x^T X^T Y s_y - s_x . sum_i x_i dy_i - s_y . sum_i y_i dx_i
        + sum_i dx_i dy_i.
        """
        n = self.n
        tr = np.sum(xy * xy) - sdxdy
        k1 = sx @ sx - sdx
        l1 = sy @ sy - sdy
        kl1 = sx @ xy @ sy - sx @ x_dy - sy @ y_dx + sdxdy
        return (tr + k1 * l1 / ((n - 1) * (n - 2)) - 2.0 * kl1 / (n - 2)) / (n * (n - 3))

    def __repr__(self) -> str:
        return f"CrossMoments(n={self.n})"
