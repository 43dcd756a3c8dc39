"""Representation similarity: linear CKA (plain and debiased), mean CCA, linear R^2.

Formulas follow ``shared/spec/science.md`` §3. Everything here works in *feature space*:
CKA and CCA are computed from the (D x D) second moments of the two representations, never
from (N x N) Gram matrices of samples, so they cost O(N D^2) time and O(D^2) memory and can
be accumulated block by block over data that does not fit in memory
(:class:`PairedMoments`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["linear_cka", "mean_cca", "linear_r2", "PairedMoments"]


def _check_pair(X, Y, name_x="X", name_y="Y"):
    X = _as_2d(X, name_x)
    Y = _as_2d(Y, name_y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"{name_x} and {name_y} must have the same number of rows (the same inputs), "
            f"got {X.shape[0]} and {Y.shape[0]}"
        )
    return X, Y


def _as_2d(X, name):
    if hasattr(X, "detach"):  # torch tensor
        X = X.detach().cpu().numpy()
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_samples, n_features), got shape {X.shape}")
    if X.dtype.kind not in "fiub":
        raise ValueError(f"{name} must be numeric, got dtype {X.dtype}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


class PairedMoments:
    """Streaming first and second moments of two representations of the same rows.

    Accumulates, in float64 from blocks of rows (each block's products are computed in the
    block's own dtype, so float32 data runs float32 GEMMs), everything that linear CKA (plain
    and debiased), CCA, Procrustes and least squares need: ``n``, the column sums, the
    scatter matrices ``X^T X``, ``Y^T Y``, ``X^T Y``, and the row-norm terms of the debiased
    HSIC estimator. Rows are shifted by the first block's mean before any product, which
    keeps float32 products accurate for data far from the origin (every quantity derived here
    is shift invariant).

    Parameters
    ----------
    compute_xx, compute_yy : bool, default=True
        Skip ``X^T X`` (or ``Y^T Y``) when not needed.
    debiased_terms : bool, default=True
        Also accumulate the row-norm terms needed by the debiased CKA.
    shift_x, shift_y : ndarray of shape (p,) and (q,), optional
        Fixed shifts (default: the first block's means). Moments can only be merged when
        they share their shifts.
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
            self.shift_x = X.mean(axis=0, dtype=np.float64)
        if self.shift_y is None:
            self.shift_y = Y.mean(axis=0, dtype=np.float64)
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

    def add(self, X, Y):
        """Add a block of paired rows ``X`` (n, p) and ``Y`` (n, q)."""
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
        if self.xx is not None:
            self.xx += Xs.T @ Xs
        if self.yy is not None:
            self.yy += Ys.T @ Ys
        self.xy += Xs.T @ Ys
        if self.debiased_terms:
            dx = np.einsum("ij,ij->i", Xs, Xs, dtype=np.float64)
            dy = np.einsum("ij,ij->i", Ys, Ys, dtype=np.float64)
            self.sum_dx += dx.sum()
            self.sum_dy += dy.sum()
            self.sum_dx2 += dx @ dx
            self.sum_dy2 += dy @ dy
            self.sum_dxdy += dx @ dy
            dxt, dyt = dx.astype(dt), dy.astype(dt)
            self.x_dx += dxt @ Xs
            self.x_dy += dyt @ Xs
            self.y_dx += dxt @ Ys
            self.y_dy += dyt @ Ys
        return self

    def merge(self, other):
        """Return the moments of the union of the rows of ``self`` and ``other``."""
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        if not (np.array_equal(self.shift_x, other.shift_x)
                and np.array_equal(self.shift_y, other.shift_y)):
            raise ValueError("can only merge PairedMoments that share a shift")
        out = PairedMoments(compute_xx=self.compute_xx and other.compute_xx,
                            compute_yy=self.compute_yy and other.compute_yy,
                            debiased_terms=self.debiased_terms and other.debiased_terms)
        out.n = self.n + other.n
        out.shift_x, out.shift_y = self.shift_x, self.shift_y
        names = ["sx", "sy", "xy"]
        if out.compute_xx:
            names.append("xx")
        if out.compute_yy:
            names.append("yy")
        if out.debiased_terms:
            names += ["sum_dx", "sum_dy", "sum_dx2", "sum_dy2", "sum_dxdy",
                      "x_dx", "x_dy", "y_dx", "y_dy"]
        for name in names:
            setattr(out, name, getattr(self, name) + getattr(other, name))
        if not out.compute_xx:
            out.xx = None
        if not out.compute_yy:
            out.yy = None
        return out

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
        """Linear CKA of the accumulated rows (see :func:`linear_cka`)."""
        if not debiased:
            sxy = self.scatter_xy()
            num = np.sum(sxy * sxy)
            den = np.linalg.norm(self.scatter_xx()) * np.linalg.norm(self.scatter_yy())
            return float(num / den) if den > 0 else float("nan")
        if not self.debiased_terms:
            raise ValueError("debiased CKA needs PairedMoments(debiased_terms=True)")
        n = self.n
        if n < 4:
            raise ValueError("debiased CKA needs at least 4 rows")
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


def single_thread_linalg():
    """Context manager: run BLAS/LAPACK on one thread.

    Dense (D x D) decompositions (eigh, svd, solve) of a few hundred dimensions run *slower*
    with several OpenBLAS threads on a busy machine (10x measured on a shared 2-core box);
    large GEMMs keep their threads outside this context.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _whitener_from_scatter(S, eps=1e-10):
    """Return (W, rank): W (rank, p) with W S W^T = I on the kept eigen-directions."""
    evals, evecs = np.linalg.eigh(S)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    top = evals[0] if evals.size and evals[0] > 0 else 0.0
    keep = evals > eps * top if top > 0 else np.zeros(evals.shape, bool)
    rank = int(keep.sum())
    W = evecs[:, :rank].T / np.sqrt(evals[:rank])[:, None]
    return W, rank


def canonical_correlations(sxx, syy, sxy, *, n_components=None, eps=1e-10):
    """Canonical correlations from scatter matrices, sorted decreasing, shape (k,)."""
    with single_thread_linalg():
        return _canonical_correlations(sxx, syy, sxy, n_components, eps)


def _canonical_correlations(sxx, syy, sxy, n_components, eps):
    Wx, rx = _whitener_from_scatter(sxx, eps)
    Wy, ry = _whitener_from_scatter(syy, eps)
    k = min(rx, ry)
    if n_components is not None:
        if n_components < 1:
            raise ValueError(f"n_components must be >= 1, got {n_components}")
        k = min(k, int(n_components))
    if k == 0:
        return np.zeros(0)
    rho = np.linalg.svd(Wx @ sxy @ Wy.T, compute_uv=False)[:k]
    return np.clip(rho, 0.0, 1.0)


def linear_cka(X, Y, *, debiased=False):
    """Linear centred kernel alignment (Kornblith et al. 2019).

    ``CKA = |Xc^T Yc|_F^2 / (|Xc^T Xc|_F |Yc^T Yc|_F)`` with Xc, Yc column-centred; the
    debiased form replaces each HSIC by its unbiased U-statistic estimator (Song et al.
    2012; Kornblith et al.'s ``center_gram(unbiased=True)``), computed from feature moments.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_x)
    Y : array-like of shape (n_samples, n_features_y)
        Two representations of the same rows.
    debiased : bool, default=False
        Use the debiased (unbiased HSIC) estimator; needs at least 4 rows.

    Returns
    -------
    float
        In [0, 1] (the debiased value can be slightly negative). Invariant to orthogonal
        transforms, isotropic scaling and shifts of either side.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> round(linear_cka(X, 3 * X + 1), 6)
    1.0
    """
    X, Y = _check_pair(X, Y)
    m = PairedMoments(debiased_terms=debiased).add(X, Y)
    return m.cka(debiased=debiased)


def mean_cca(X, Y, *, n_components=None, eps=1e-10):
    """Mean canonical correlation of two representations (in-sample).

    The mean of the top ``n_components`` canonical correlations, i.e. the mean Pearson
    correlation of the paired canonical variates, as ``sklearn.cross_decomposition.CCA``
    computes them (at convergence) -- but in closed form: the singular values of
    ``Sxx^{-1/2} Sxy Syy^{-1/2}``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features_x)
    Y : array-like of shape (n_samples, n_features_y)
    n_components : int, optional
        Number of canonical pairs; default ``min(rank(X), rank(Y))``.
    eps : float, default=1e-10
        Eigen-directions with variance below ``eps * largest`` are dropped (rank deficiency).

    Returns
    -------
    float
        In [0, 1]; 1 when Y is an invertible affine function of X.
    """
    X, Y = _check_pair(X, Y)
    m = PairedMoments(debiased_terms=False).add(X, Y)
    rho = canonical_correlations(m.scatter_xx(), m.scatter_yy(), m.scatter_xy(),
                                 n_components=n_components, eps=eps)
    return float(rho.mean()) if rho.size else float("nan")


def linear_r2(Z, S, *, alpha=0.0, test_fraction=0.5, random_state=0, per_latent=False):
    """Linear identifiability: R^2 of an affine map Z -> S fitted on one half, scored on the other.

    Parameters
    ----------
    Z : array-like of shape (n_samples, n_features)
        The representation.
    S : array-like of shape (n_samples, n_latents)
        The (true) latents.
    alpha : float, default=0.0
        Ridge penalty on the weights (not the intercept).
    test_fraction : float, default=0.5
        Share of rows held out for scoring.
    random_state : int, default=0
        Seed of the random split.
    per_latent : bool, default=False
        Also return the R^2 of each latent.

    Returns
    -------
    float or (float, ndarray of shape (n_latents,))
        Mean over latents of ``1 - SSE / SST`` on the held-out rows (sklearn's ``r2_score``
        with ``multioutput='uniform_average'``).
    """
    Z, S = _check_pair(Z, S, "Z", "S")
    n = Z.shape[0]
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = int(round(n * test_fraction))
    if n_test < 2 or n - n_test < 2:
        raise ValueError(f"too few rows ({n}) for a fit/test split")
    perm = np.random.default_rng(random_state).permutation(n)
    test, fit = perm[:n_test], perm[n_test:]
    Zf, Sf = Z[fit].astype(np.float64), S[fit].astype(np.float64)
    mz, ms = Zf.mean(0), Sf.mean(0)
    Zc = Zf - mz
    G = Zc.T @ Zc
    if alpha:
        G = G + alpha * np.eye(G.shape[0])
    W = np.linalg.lstsq(G, Zc.T @ (Sf - ms), rcond=None)[0]
    pred = (Z[test].astype(np.float64) - mz) @ W + ms
    St = S[test].astype(np.float64)
    sse = ((St - pred) ** 2).sum(0)
    sst = ((St - St.mean(0)) ** 2).sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(sst > 0, 1.0 - sse / sst, np.where(sse > 0, 0.0, 1.0))
    score = float(r2.mean())
    return (score, r2) if per_latent else score
