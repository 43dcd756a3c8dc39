"""Streaming moments: mean and covariance in float64, resumable and mergeable.

:class:`RunningMoments` is the primitive under out-of-core whitening (and any future
distributed reduction): feed it row blocks with :meth:`RunningMoments.add`, combine partial
results with :meth:`RunningMoments.merge`, save and restore it with
:meth:`RunningMoments.state_dict` / :meth:`RunningMoments.load_state_dict`.

Numerics: every block is centred on a fixed shift (the mean of the first block) before its
cross-product is formed, so the float64 accumulators never suffer the catastrophic
cancellation of the textbook ``E[xx'] - E[x]E[x]'`` formula. The per-block product
``Xc.T @ Xc`` runs in the block's own dtype (float32 blocks use BLAS ``ssyrk``, about twice
as fast as float64) and is accumulated in float64; pass ``precision="float64"`` to form
the block products in float64 as well.

:func:`iter_row_blocks` iterates the rows of any supported source (numpy, torch, h5py
dataset, store layer) through ``actkit._data``, which reads on-disk sources one block ahead
in a background thread while the caller computes on the current one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RunningMoments", "iter_row_blocks", "default_block_rows", "small_linalg", "gather_rows"]

_BLOCK_BYTES = 32 * 2**20  # aim for ~32 MiB row blocks


def default_block_rows(n_features: int, itemsize: int = 4) -> int:
    """Rows per block so that one block holds about 32 MiB (at least 256 rows)."""
    return int(max(256, _BLOCK_BYTES // max(1, n_features * itemsize)))


def small_linalg():
    """Context manager: one BLAS/LAPACK thread for small dense algebra (k x k solves, eigh,
    expm). Multi-threaded LAPACK on small matrices is up to 10x slower on a busy machine;
    big GEMMs over the data stay multi-threaded."""
    global _CONTROLLER
    if _CONTROLLER is None:  # scanning the loaded BLAS libraries is slow: do it once
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1)


_CONTROLLER = None


def _is_streaming(X) -> bool:
    from actkit import _data

    return bool(_data.is_streaming(X))


def iter_row_blocks(X, block_rows: int | None = None, dtype=None, *, prefetch: bool = True):
    """Yield the rows of ``X`` as 2-D numpy blocks, in order.

    Parameters
    ----------
    X : ndarray, torch.Tensor, h5py.Dataset or store Layer of shape (n_rows, n_features)
    block_rows : int, optional
        Rows per block (default: about 32 MiB per block).
    dtype : numpy dtype, optional
        Cast every block to this dtype.
    prefetch : bool, default=True
        For on-disk sources, read the next block in a background thread while the caller
        computes on the current one (h5py and BLAS both release the GIL).

    Yields
    ------
    ndarray of shape (rows_in_block, n_features)
    """
    from actkit import _data

    if hasattr(X, "detach") and hasattr(X, "cpu"):
        X = X.detach().cpu().numpy()
    if block_rows is None:
        block_rows = default_block_rows(int(X.shape[1]))
    yield from _data.iter_blocks(X, block_rows=block_rows, dtype=dtype, prefetch=prefetch)


def gather_rows(X, idx, block_rows: int | None = None) -> np.ndarray:
    """Rows ``idx`` (sorted, increasing) of any source, read in one sequential pass.

    Returns
    -------
    ndarray of shape (len(idx), n_features)
    """
    idx = np.asarray(idx)
    out = []
    start = 0
    for block in iter_row_blocks(X, block_rows):
        lo, hi = np.searchsorted(idx, [start, start + len(block)])
        if hi > lo:
            out.append(np.asarray(block[idx[lo:hi] - start]))
        start += len(block)
    return np.concatenate(out) if out else np.empty((0, int(X.shape[1])))


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

    def __init__(self, n_features: int | None = None, *, precision: str = "auto", check_finite: bool = True):
        if precision not in ("auto", "float64"):
            raise ValueError(f"precision must be 'auto' or 'float64', got {precision!r}")
        self.precision = precision
        self.check_finite = check_finite
        self.n_features_ = None if n_features is None else int(n_features)
        self.n_samples_ = 0
        self._shift = None  # (D,) float64
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

                with _dask.use_scheduler(scheduler) as runner:
                    m, _ = moments(runner, Xd, block_rows=default_block_rows(int(Xd.shape[1])),
                                   precision=self.precision, check_finite=self.check_finite, progress=False)
                if self.n_features_ is not None and m.n_features_ is not None and m.n_features_ != self.n_features_:
                    raise ValueError(f"block has {m.n_features_} features but earlier blocks had {self.n_features_}")
                return self.merge(m)
        if hasattr(X, "detach"):
            X = X.detach().cpu().numpy()
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"expected a 2-D block of rows, got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.floating):
            X = X.astype(np.float64)
        given = X
        if self.precision == "float64" or X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64, copy=False)
        n, d = X.shape
        if self.n_features_ is None:
            self.n_features_ = d
        elif d != self.n_features_:
            raise ValueError(f"block has {d} features but earlier blocks had {self.n_features_}")
        if n == 0:
            return self
        if self.check_finite and not np.isfinite(X).all():
            raise ValueError("the data contain NaN or infinite values")
        if self._shift is None:
            # a shift exactly representable in the block dtype keeps sums and mean consistent
            self._shift = X.mean(axis=0, dtype=np.float64).astype(X.dtype).astype(np.float64)
            self._s1 = np.zeros(d)
            self._s2 = np.zeros((d, d))
        if X is not given and X.flags.c_contiguous:  # our own converted copy: centre it in place
            X -= self._shift.astype(X.dtype)
            Xc = X
        else:
            Xc = np.ascontiguousarray(X - self._shift.astype(X.dtype))
        self._s1 += Xc.sum(axis=0, dtype=np.float64)
        self._s2 += Xc.T @ Xc  # numpy dispatches A.T @ A to BLAS syrk
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
            raise ValueError(f"cannot merge moments of {other.n_features_} features into {self.n_features_}")
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
            raise ValueError("no rows have been added yet")

    @property
    def mean_(self) -> np.ndarray:
        self._check_any()
        return self._shift + self._s1 / self.n_samples_

    def covariance(self, ddof: int = 1) -> np.ndarray:
        """Covariance matrix (float64), ``sum (x - mean)(x - mean)' / (n - ddof)``.

        Returns
        -------
        ndarray of shape (D, D)
        """
        self._check_any()
        n = self.n_samples_
        if n - ddof <= 0:
            raise ValueError(f"need more than {ddof} rows for a covariance with ddof={ddof}, got {n}")
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
            self._shift = self._s1 = self._s2 = None
        else:
            self._shift = np.array(state["shift"], dtype=np.float64)
            self._s1 = np.array(state["s1"], dtype=np.float64)
            self._s2 = np.array(state["s2"], dtype=np.float64)
        return self

    def __repr__(self) -> str:
        return f"RunningMoments(n_features={self.n_features_}, n_samples={self.n_samples_})"


def transform_blocks(estimator, X, block_rows, n_out):
    """Apply ``estimator.transform`` to a streaming source block by block.

    Checks the feature count once (as scikit-learn's ``validate_data`` would) and returns
    the stacked result, an ndarray of shape (n_samples, n_out).
    """
    if int(X.shape[1]) != estimator.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(estimator).__name__} was fitted on "
            f"{estimator.n_features_in_}"
        )
    parts = [estimator.transform(b) for b in iter_row_blocks(X, block_rows)]
    return np.concatenate(parts) if parts else np.empty((0, n_out))
