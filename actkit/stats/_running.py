"""Streaming moments of one representation: :class:`RunningMoments` and its pass
(:func:`moments_pass`). See :mod:`actkit.stats`."""

from __future__ import annotations

import numpy as np

from actkit._data import is_streaming
from actkit._data import iter_blocks as iter_row_blocks
from actkit._data import n_features
from actkit._rows import block_rows
from actkit._threads import fixed_order_sum
from actkit.errors import ValidationError
from actkit.runners import RowPass, is_chunked, run

__all__ = ["RunningMoments", "first_block_shift", "iter_row_blocks", "moments_pass"]


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
    def add(self, X, *, scheduler=None) -> RunningMoments:
        """Add a block of rows.

        Parameters
        ----------
        X : array-like of shape (n_rows, D)
            An in-memory block is folded here. A source (store layer, h5py dataset, chunked
            array) is handed to :func:`actkit.runners.run` as one :func:`moments_pass` (blocks
            folded in order, partials merged exactly); the runners decide where it runs.
        scheduler : None, str or distributed.Client, optional
            For a source: the scheduler the runners may use (``docs/dask.md``).

        Returns
        -------
        self
        """
        if is_streaming(X) or is_chunked(X):  # a source, not a block: one pass on the runner
            return self._add_pass(X, scheduler)  # that actkit.runners.run chooses
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

    def _add_pass(self, X, scheduler):
        """Fold every row of a source (a stream or chunked array, shape (n, D)) through
        :func:`moments_pass` on the runner :func:`actkit.runners.run` chooses."""
        d = n_features(X)
        if self.n_features_ is not None and d != self.n_features_:
            raise ValidationError(f"block has {d} features but earlier blocks had {self.n_features_}")
        m, _ = run(X, moments_pass(block_rows(d), precision=self.precision, check_finite=self.check_finite,
                                   shift=self._shift), scheduler=scheduler)
        return self.merge(m)

    def merge(self, other: RunningMoments) -> RunningMoments:
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

    def load_state_dict(self, state: dict) -> RunningMoments:
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

def moments_pass(rows, *, precision="float64", check_finite=True, collect_rows=None, shift=None,
                 name="covariance"):
    """The pass of :class:`RunningMoments` for any runner (:mod:`actkit.runners`): blocks of
    ``rows`` rows added in order, partials merged. Result: ``(moments, blocks)``, the blocks
    of the rows ``collect_rows`` (sorted global indices) copied out in the pass, or None.
    ``shift`` (shape (D,)): every partial's fixed shift (default: its first block's)."""
    picks = None if collect_rows is None else np.asarray(collect_rows)
    return RowPass(_moments_new, _moments_add, _moments_merge, (precision, check_finite, picks, shift), int(rows),
                   name=name)


def _moments_new(precision, check_finite, picks, shift):
    return (RunningMoments(precision=precision, check_finite=check_finite, shift=shift),
            None if picks is None else [])


def _moments_add(acc, block, start, precision, check_finite, picks, shift):
    acc[0].add(block)
    lo, hi = np.searchsorted(picks, [start, start + len(block)]) if picks is not None else (0, 0)
    if hi > lo:
        acc[1].append(np.array(block[picks[lo:hi] - start]))
    return acc


def _moments_merge(a, b):
    m = RunningMoments(precision=a[0].precision, check_finite=a[0].check_finite).load_state_dict(a[0].state_dict())
    return m.merge(b[0]), None if a[1] is None else [*a[1], *b[1]]
