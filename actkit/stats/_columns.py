"""Streaming higher moments of every column: :class:`ColumnMoments`. See :mod:`actkit.stats`."""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = ["ColumnMoments", "pebay_merge"]

#: values per slab of a block (a slab's float64 temporaries stay in a core's cache)
SLAB = 1 << 17


def pebay_merge(a, b):
    """Pébay's exact merge of two ``(n, mean, M2, M3, M4)`` (``M_p``: sums of the p-th powers
    of the deviations from the mean; arrays of one shape, ``n`` an int): the tuple of the
    union of their rows. Neither is modified."""
    na, ma, m2a, m3a, m4a = a
    nb, mb, m2b, m3b, m4b = b
    if nb == 0:
        return a
    if na == 0:
        return b
    n = na + nb
    delta = mb - ma
    mean = ma + delta * nb / n
    m2 = m2a + m2b + delta ** 2 * na * nb / n
    m3 = m3a + m3b + delta ** 3 * na * nb * (na - nb) / n ** 2 + 3 * delta * (na * m2b - nb * m2a) / n
    m4 = (m4a + m4b + delta ** 4 * na * nb * (na * na - na * nb + nb * nb) / n ** 3
          + 6 * delta ** 2 * (na * na * m2b + nb * nb * m2a) / n ** 2 + 4 * delta * (na * m3b - nb * m3a) / n)
    return n, mean, m2, m3, m4


def _central(X, ref):
    """``(n, mean, M2, M3, M4)`` of a block's columns about ``ref`` (float64, two passes per
    slab of :data:`SLAB` values, slabs merged exactly)."""
    rows = max(1, SLAB // max(1, X.shape[1]))
    z = np.zeros(X.shape[1])
    out = (0, z, z, z, z)
    for s in range(0, X.shape[0], rows):
        d = np.subtract(X[s:s + rows], ref, dtype=np.float64)  # float64 before any product
        m = d.sum(axis=0) / d.shape[0]
        d -= m
        d2 = d * d
        m2 = d2.sum(axis=0)
        m3, m4 = np.einsum("ij,ij->j", d2, d), np.einsum("ij,ij->j", d2, d2)  # no temporary
        out = pebay_merge(out, (d.shape[0], m, m2, m3, m4))
    return out


class ColumnMoments:
    """Count, mean, variance, skewness and excess kurtosis of every column of a stream of
    row blocks, accumulated in float64 and merged exactly (Pébay 2008).

    Each column's values are shifted by a reference of its own (its first value) and every
    block is reduced in float64 in two passes
    (mean, then the powers of the deviations), so a near-constant column (values near 1e-31,
    or 1e6 +- 1e-3) gets the moments numpy computes in float64, and partial results of any
    blocks, threads or workers merge to the moments of their union.

    Parameters
    ----------
    n_columns : int, optional
        Width D (inferred from the first block).

    Attributes
    ----------
    n : int
        Rows seen.
    ref : ndarray of shape (D,) or None
        The per-column reference (None before the first block).

    Examples
    --------
    >>> import numpy as np, scipy.stats
    >>> X = np.random.default_rng(0).exponential(size=(1000, 3))
    >>> m = ColumnMoments()
    >>> for block in np.array_split(X, 7):
    ...     _ = m.add(block)
    >>> bool(np.allclose(m.skewness(), scipy.stats.skew(X)))
    True
    """

    def __init__(self, n_columns: int | None = None):
        self.n_columns = None if n_columns is None else int(n_columns)
        self.n = 0
        self.ref = None
        self._sums = None  # (mean about ref, M2, M3, M4), each (D,) float64

    def _start(self, d, ref):
        if self.n_columns is None:
            self.n_columns = int(d)
        elif int(d) != self.n_columns:
            raise ValidationError(f"block has {d} columns but earlier blocks had {self.n_columns}")
        if self.ref is None:
            self.ref = np.asarray(ref, np.float64)
            z = np.zeros(self.n_columns)
            self._sums = (z, z, z, z)

    def _fold(self, n, mean, m2, m3, m4, ref):
        """Fold moments of ``n`` rows whose ``mean`` is about ``ref``."""
        shift = (ref - self.ref) if ref is not self.ref else 0.0
        self.n, *sums = pebay_merge((self.n, *self._sums), (n, mean + shift, m2, m3, m4))
        self._sums = tuple(sums)
        return self

    def add(self, X) -> ColumnMoments:
        """Fold a block of rows ``X`` (n, D) (any float dtype; float32 stays float32 until each
        slab is shifted). Returns self."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValidationError(f"expected a 2-D block of rows, got shape {X.shape}")
        if X.shape[0] == 0:
            return self
        self._start(X.shape[1], X[0].astype(np.float64) if self.ref is None else None)
        n, mean, m2, m3, m4 = _central(X, self.ref)
        return self._fold(n, mean, m2, m3, m4, self.ref)

    def add_entries(self, n_rows: int, columns, values) -> ColumnMoments:
        """Fold a mostly-zero block of ``n_rows`` rows from its non-zero entries: ``columns``
        (m,) int and ``values`` (m,) (every other entry of the block is 0). Returns self."""
        if self.n_columns is None:
            raise ValidationError("add_entries needs n_columns (ColumnMoments(n_columns=D))")
        if n_rows == 0:
            return self
        self._start(self.n_columns, np.zeros(self.n_columns))
        D = self.n_columns
        u = np.asarray(columns, np.int64)
        x = np.asarray(values, np.float64) - self.ref[u]
        zero = -self.ref  # the zeros' value about the reference
        active = np.bincount(u, minlength=D)
        mean = (np.bincount(u, x, minlength=D) + (n_rows - active) * zero) / n_rows
        d = x - mean[u]
        d2 = d * d
        z, dz = n_rows - active, zero - mean
        return self._fold(n_rows, mean, np.bincount(u, d2, minlength=D) + z * dz ** 2,
                          np.bincount(u, d2 * d, minlength=D) + z * dz ** 3,
                          np.bincount(u, d2 * d2, minlength=D) + z * dz ** 4, self.ref)

    def merge(self, other: ColumnMoments) -> ColumnMoments:
        """Fold another accumulator's rows into this one (any references). Returns self."""
        if not isinstance(other, ColumnMoments):
            raise TypeError("can only merge another ColumnMoments")
        if other.n == 0:
            return self
        if self.n == 0:
            return self.load_state_dict(other.state_dict())
        if other.n_columns != self.n_columns:
            raise ValidationError(f"cannot merge moments of {other.n_columns} columns into {self.n_columns}")
        return self._fold(other.n, *other._sums, other.ref)

    def copy(self) -> ColumnMoments:
        """An independent copy."""
        return ColumnMoments().load_state_dict(self.state_dict())

    def state_dict(self) -> dict:
        """Everything needed to resume or merge: numpy arrays and ints."""
        D = self.n_columns or 0
        sums = self._sums or (np.zeros(D),) * 4
        return {"n": np.int64(self.n), "n_columns": np.int64(D),
                "ref": np.zeros(D) if self.ref is None else self.ref.copy(),
                **{k: np.array(v, np.float64) for k, v in zip(("mean", "m2", "m3", "m4"), sums)}}

    def load_state_dict(self, state: dict) -> ColumnMoments:
        """Restore from :meth:`state_dict` output. Returns self."""
        self.n = int(state["n"])
        self.n_columns = int(state["n_columns"]) or None
        if self.n == 0:
            self.ref, self._sums = None, None
        else:
            self.ref = np.array(state["ref"], np.float64)
            self._sums = tuple(np.array(state[k], np.float64) for k in ("mean", "m2", "m3", "m4"))
        return self

    # ----- results (float64, shape (D,)) -----
    def _check(self):
        if self.n == 0:
            raise ValidationError("no rows have been added yet")

    @property
    def mean_(self) -> np.ndarray:
        """Column means."""
        self._check()
        return self.ref + self._sums[0]

    @property
    def central_sums_(self) -> tuple:
        """``(M2, M3, M4)``: sums of the 2nd, 3rd and 4th powers of the deviations from the mean."""
        self._check()
        return self._sums[1:]

    def variance(self, ddof: int = 1) -> np.ndarray:
        """``M2 / (n - ddof)`` (0 where ``n <= ddof``)."""
        self._check()
        return self._sums[1] / max(self.n - ddof, 1)

    def skewness(self) -> np.ndarray:
        """``sqrt(n) M3 / M2^1.5`` (scipy.stats.skew, biased; 0 for a constant column)."""
        m2, m3, _ = self.central_sums_
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(m2 > 0, np.sqrt(self.n) * m3 / np.where(m2 > 0, m2, 1.0) ** 1.5, 0.0)

    def kurtosis(self) -> np.ndarray:
        """Excess kurtosis ``n M4 / M2^2 - 3`` (scipy.stats.kurtosis, biased; 0 for a constant
        column)."""
        m2, _, m4 = self.central_sums_
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(m2 > 0, self.n * m4 / np.where(m2 > 0, m2, 1.0) ** 2 - 3.0, 0.0)

    def __repr__(self) -> str:
        return f"ColumnMoments(n_columns={self.n_columns}, n={self.n})"
