"""FastICA: our own implementation (numpy on CPU, torch on GPUs), streaming-aware (science.md §2).

The model is scikit-learn's ``FastICA`` (same hyperparameters where they make sense, same
fitted attributes, same contrast functions ``logcosh`` / ``exp`` / ``cube``), with a faster
solver underneath:

* ``algorithm="parallel"`` solves the symmetric FastICA problem (all components at once,
  under the orthogonality constraint on whitened data) with **Picard-O** (Ablin, Cardoso &
  Gramfort 2018): a preconditioned L-BFGS on the orthogonal group. Its fixed points are the
  fixed points of symmetric FastICA (both sub- and super-Gaussian sources, the sign of each
  component's contrast chosen from its stability coefficient as in extended Picard), but it
  converges in a few tens of passes where the fixed-point iteration can stall for hundreds.
  On large inputs it first solves on a random row subsample (warm-up), then refines on all
  rows.
* ``algorithm="deflation"`` is the classic one-unit fixed-point iteration with Gram-Schmidt
  deflation, as in scikit-learn.

Notation: whitened data ``Z`` (N x k, identity covariance), rotation ``W`` (k x k,
orthogonal), sources ``Y = Z W'``. With contrast ``G`` and ``g = G'``, the loss is
``L(W) = sum_i s_i E[G(y_i)]`` with ``s_i = -sign(kappa_i)``,
``kappa_i = E[y_i g(y_i)] - E[g'(y_i)]``; a step is ``W <- expm(D) W`` with ``D``
antisymmetric, the gradient is ``(SM - (SM)')`` with ``SM_ij = s_i E[g(y_i) y_j]`` and the
Hessian approximation on the pair ``(i, j)`` is ``s_i (E[g'_i] - E[y_i g_i]) + (i <-> j)``.

Two levels share one implementation: :class:`FastICA` and :func:`fastica`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from actkit.stats import transform_blocks, _is_streaming, iter_row_blocks, small_linalg
from actkit._device import check_device, is_accelerator as _is_accelerator
from actkit.whitening import _as_input, accumulate_moments, whitening_from_moments

__all__ = ["FastICA", "fastica"]

_LOG2 = math.log(2.0)
_DEBUG = None  # tracing hook for benchmarks/experiments: f(W, iteration, criterion, step, n_rows)


# ----------------------------------------------------------------------------- contrasts
# Each contrast returns column sums of G(Y) and g'(Y) (float64, shape (k,)) and g(Y) itself.
# ``xp`` is numpy (CPU: numpy's SIMD transcendental functions and OpenBLAS sgemm/ssyrk are
# markedly faster than torch's CPU kernels on this hardware) or torch (GPU).


def _colsum(A, xp):
    if xp is np:
        return A.sum(axis=0, dtype=np.float64)
    import torch

    return A.sum(0, dtype=torch.float64)


def _contrast(fun, alpha):
    """Return ``f(Y, xp) -> (sum_rows G(Y), g(Y), sum_rows g'(Y))`` (sklearn's contrasts)."""

    if fun == "logcosh":

        def f(Y, xp, need_loss=True):
            aY = Y if alpha == 1.0 else Y * alpha
            sG = None
            if need_loss:
                absY = xp.abs(aY)
                e = xp.exp(-2.0 * absY)
                # log cosh(u) = |u| + log1p(exp(-2|u|)) - log 2, stable for every u
                sG = (_colsum(absY, xp) + _colsum(xp.log1p(e), xp) - Y.shape[0] * _LOG2) / alpha
                del absY, e
            t = xp.tanh(aY)
            sgp = alpha * (Y.shape[0] - _colsum(t * t, xp))
            return sG, t, sgp

    elif fun == "exp":

        def f(Y, xp, need_loss=True):
            Y2 = Y * Y
            e = xp.exp(-0.5 * Y2)
            return -_colsum(e, xp), Y * e, _colsum(e - Y2 * e, xp)

    elif fun == "cube":

        def f(Y, xp, need_loss=True):
            Y2 = Y * Y
            return 0.25 * _colsum(Y2 * Y2, xp), Y2 * Y, 3.0 * _colsum(Y2, xp)

    else:  # pragma: no cover - validated earlier
        raise ValueError(fun)
    return f


# ----------------------------------------------------------------------------- data passes
class _Source:
    """Whitened rows ``Z`` (N x k) as blocks, in memory or re-whitened from a stream.

    On CPU blocks are numpy arrays; on other devices torch tensors. ``remote`` (an
    ``actkit._dask_passes.ICAPasses``) runs the passes on Dask instead."""

    remote = None

    def __init__(self, *, Z=None, X=None, mean=None, K=None, block_rows=None, dtype=np.float32, device="cpu"):
        self.device = device
        self.use_torch = _is_accelerator(device)
        self.np_dtype = np.dtype(dtype)
        self.Z, self.X, self.mean, self.K = Z, X, mean, K
        self.n = int(Z.shape[0]) if Z is not None else int(X.shape[0])
        self.k = int(Z.shape[1]) if Z is not None else int(K.shape[0])
        self.block_rows = block_rows or max(1024, min(16384, (2**22) // max(1, self.k)))

    @property
    def xp(self):
        if self.use_torch:
            import torch

            return torch
        return np

    def to_backend(self, A):
        """numpy (float64) k x k matrix -> backend array in the compute dtype."""
        A = np.ascontiguousarray(A, dtype=self.np_dtype)
        if self.use_torch:
            import torch

            return torch.from_numpy(A).to(self.device)
        return A

    def to_numpy(self, A):
        return A.cpu().numpy() if self.use_torch else A

    def blocks(self):
        if self.Z is not None:
            for s in range(0, self.n, self.block_rows):
                yield self.Z[s : s + self.block_rows]
            return
        mean = self.mean.astype(self.np_dtype)
        Kt = np.ascontiguousarray(self.K.T.astype(self.np_dtype))
        for block in iter_row_blocks(self.X, self.block_rows):
            Zb = (np.asarray(block, dtype=self.np_dtype) - mean) @ Kt
            yield self.to_backend(Zb) if self.use_torch else Zb

    def subset(self, rows):
        """In-memory source of the given rows (only for in-memory sources)."""
        if self.use_torch:
            import torch

            Zs = self.Z[torch.as_tensor(rows, device=self.device)]
        else:
            Zs = self.Z[rows]
        return _Source(Z=Zs, block_rows=self.block_rows, dtype=self.np_dtype, device=self.device)




def _on_device(Z, device):
    """numpy array -> itself on CPU, a torch tensor on another device."""
    if not _is_accelerator(device):
        return Z
    import torch

    return torch.from_numpy(Z).to(device)


def _pass(source, W, f, need_loss=True):
    """One pass over the data at rotation ``W`` (k x k, float64 numpy).

    Returns ``EG`` (k,), ``M`` (k x k) with ``M_ij = E[g(y_i) y_j]`` and ``Egp`` (k,), float64.

    On the CPU with ``t > 1`` BLAS threads, ``t`` blocks are processed at once, each by one
    worker thread with single-threaded BLAS: numpy's contrast functions (tanh, exp, ...) are
    single-threaded, so this keeps every core busy for the whole pass, not only in the
    GEMMs. Partial sums are added in block order (the result does not depend on timing)."""
    if source.remote is not None:
        return source.remote.pass_stats(W, need_loss)
    k = W.shape[0]
    xp = source.xp
    Wt = source.to_backend(W.T)
    EG = np.zeros(k)
    M = np.zeros((k, k))
    Egp = np.zeros(k)

    def block_stats(Zb):
        Y = Zb @ Wt
        sG, g, sgp = f(Y, xp, need_loss)
        return (source.to_numpy(sG) if need_loss else None), source.to_numpy(g.T @ Y), source.to_numpy(sgp)

    workers = 1 if source.use_torch or source.n <= source.block_rows else _blas_threads()
    if workers > 1:
        results = _map_blocks(block_stats, source.blocks(), workers)
    else:
        results = (block_stats(Zb) for Zb in source.blocks())
    for sG, Mb, sgp in results:
        if need_loss:
            EG += sG
        M += Mb
        Egp += sgp
    n = source.n
    return EG / n, M / n, Egp / n


def _blas_threads() -> int:
    """Threads the BLAS library may use now (respects ``threadpoolctl`` limits)."""
    from threadpoolctl import threadpool_info

    counts = [int(i.get("num_threads") or 1) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts, default=1)


def _map_blocks(fn, blocks, workers):
    """``fn`` over ``blocks`` on ``workers`` threads (single-threaded BLAS inside), results in
    order, at most ``2 * workers`` blocks in flight (streaming sources stay bounded)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        pending = deque()
        for Zb in blocks:
            pending.append(pool.submit(fn, Zb))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _expm_skew(D):
    """``expm`` of an antisymmetric matrix (float64): an exact rotation."""
    from scipy.linalg import expm

    with small_linalg():
        return expm(D)


def _sym_decorrelation(W):
    with small_linalg():
        return _sym_decorrelation_(W)


def _sym_decorrelation_(W):
    s, u = np.linalg.eigh(W @ W.T)
    s = np.clip(s, np.finfo(W.dtype).tiny, None)
    return (u * (1.0 / np.sqrt(s))) @ u.T @ W


class _PassCounter:
    def __init__(self, bar):
        self.bar = bar
        self.n = 0

    def tick(self, **postfix):
        self.n += 1
        if self.bar is not None:
            self.bar.update(1)
            if postfix:
                self.bar.set_postfix(**postfix, refresh=False)


def _picard_o(source, W, f, *, tol, max_iter, m=7, lambda_min=0.01, ls_tries=10, counter=None):
    """Preconditioned L-BFGS on the orthogonal group (Picard-O). Returns (W, n_iter, gnorm)."""
    EG, M, Egp = _pass(source, W, f)
    if counter:
        counter.tick()

    def signs_of(M, Egp):
        kappa = np.diag(M) - Egp
        s = -np.sign(kappa)
        s[s == 0] = 1.0
        return s

    def grad_hess(s, M, Egp):
        SM = s[:, None] * M
        G = SM - SM.T
        a = s * (Egp - np.diag(M))  # per-component curvature term (unit-variance sources)
        h = a[:, None] + a[None, :]
        return G, np.maximum(h, lambda_min)

    s = signs_of(M, Egp)
    loss = float(s @ EG)
    noise = 8.0 * float(np.finfo(source.np_dtype).eps)  # relative rounding noise of the loss
    G, h = grad_hess(s, M, Egp)
    mem = []
    gnorm = float(np.abs(G).max()) if G.size else 0.0
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        if gnorm < tol:
            n_iter -= 1
            break
        # L-BFGS two-loop recursion with the diagonal Hessian approximation as H0
        q = G.copy()
        alphas = []
        for sk, yk, rho in reversed(mem):
            a_ = rho * np.sum(sk * q)
            q -= a_ * yk
            alphas.append(a_)
        r = q / h
        for (sk, yk, rho), a_ in zip(mem, reversed(alphas)):
            b_ = rho * np.sum(yk * r)
            r += sk * (a_ - b_)
        D = -r
        if np.sum(D * G) >= 0:  # not a descent direction: restart from the preconditioned gradient
            mem.clear()
            D = -G / h
        biggest = np.abs(D).max()
        if biggest > 1.0:  # never rotate by more than ~57 degrees in one plane
            D = D / biggest
        accepted = False
        for attempt in range(2):
            step = 1.0
            for _ in range(ls_tries):
                W_try = _expm_skew(step * D) @ W
                EG_t, M_t, Egp_t = _pass(source, W_try, f)
                if counter:
                    counter.tick(grad=f"{gnorm:.1e}")
                loss_t = float(s @ EG_t)
                if loss_t < loss + 1e-12 * abs(loss):
                    accepted = True
                    break
                # near convergence the decrease falls below the rounding noise of a loss
                # summed from float32 values: accept a step within that noise when it
                # lowers the gradient (otherwise the search stops short of ``tol``)
                if loss_t <= loss + noise * abs(loss) and \
                        float(np.abs(grad_hess(s, M_t, Egp_t)[0]).max()) < gnorm:
                    accepted = True
                    break
                step /= 2.0
            if accepted or attempt == 1:
                break
            mem.clear()  # line search failed along the L-BFGS direction: use the gradient
            D = -G / h
            biggest = np.abs(D).max()
            if biggest > 1.0:
                D = D / biggest
        if not accepted:
            break
        W = W_try
        s_new = signs_of(M_t, Egp_t)
        G_new, h = grad_hess(s_new, M_t, Egp_t)
        if np.any(s_new != s):
            mem.clear()
        else:
            sk = step * D
            yk = G_new - G
            sy = np.sum(sk * yk)
            if sy > 1e-12:
                mem.append((sk, yk, 1.0 / sy))
                if len(mem) > m:
                    mem.pop(0)
        s, G = s_new, G_new
        loss = float(s @ EG_t)
        gnorm = float(np.abs(G).max())
        if _DEBUG is not None:
            _DEBUG(W, n_iter, gnorm, step * np.abs(D).max(), source.n)
    return W, n_iter, gnorm


def _fixed_point(source, W, f, *, tol, max_iter, counter=None, stall=None):
    """Symmetric fixed-point FastICA (sklearn's ``_ica_par``), sharing :func:`_pass`.

    With ``Y = Z W'`` and ``Z = Y W`` (W orthogonal), ``E[g(Y)' Z] = M W``, so the update
    ``W <- sym_decorrelation((M - diag(E[g'(Y)])) W)`` needs only the pass statistics.
    Stops when scikit-learn's criterion ``max | |diag(W_new W')| - 1 | < tol`` holds."""
    lim = np.inf
    it = 0
    for it in range(1, max_iter + 1):
        _, M, Egp = _pass(source, W, f, need_loss=False)
        if counter:
            counter.tick(lim=f"{lim:.1e}")
        W1 = _sym_decorrelation((M - np.diag(Egp)) @ W)
        lim = float(np.max(np.abs(np.abs(np.einsum("ij,ij->i", W1, W)) - 1.0)))
        W = W1
        if _DEBUG is not None:
            _DEBUG(W, it, lim, 0.0, source.n)
        if lim < tol:
            break
        if stall is not None and it >= stall and lim > 0.5:
            break  # still far from any fixed point (many sources, few rows): hand over to Picard-O
    return W, it, lim


def _data_init(source, rng, *, n_candidates=None, max_cos=0.5, chunk=256):
    """Initial rotation (k x k, orthogonal) from the whitened rows of largest norm.

    In a random rotation of many independent sources every estimated source is nearly
    Gaussian (central limit), the contrast is flat and the first tens of solver passes are
    spent leaving that flat region. A whitened row of unusually large norm is usually
    dominated by one large source value, so its direction overlaps that source far more
    than a random direction does (100,000 x 512 Laplace mixtures: Amari distance 0.16
    instead of 0.24 at the start, and half the passes to converge). The ``2k`` rows of
    largest norm are visited in decreasing norm; a row is kept when its |cos| with every
    row kept so far is below ``max_cos`` (repeated or near-repeated rows, common in
    activations, are skipped); missing rows are filled with Gaussian rows from ``rng``;
    the result is symmetrically decorrelated. One pass over the data (norms only)."""
    k, n = source.k, source.n
    rng = check_random_state(rng)
    m = min(n, n_candidates or 2 * k)
    best_rows = np.zeros((0, k), np.float64)
    best_norms = np.zeros(0)
    if source.remote is not None:
        best_rows, best_norms = source.remote.largest_rows(m)
    for Zb in source.blocks() if source.remote is None else ():
        Zb = np.asarray(source.to_numpy(Zb), dtype=np.float64)
        nb = np.einsum("ij,ij->i", Zb, Zb)
        rows = np.concatenate([best_rows, Zb])
        norms = np.concatenate([best_norms, nb])
        if norms.size > m:
            keep = np.argpartition(-norms, m - 1)[:m]
            rows, norms = rows[keep], norms[keep]
        best_rows, best_norms = rows, norms
    order = np.argsort(-best_norms, kind="stable")
    V = best_rows[order]
    V = V[best_norms[order] > 0]
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    chosen = np.zeros((0, k))
    for s in range(0, V.shape[0], chunk):
        if chosen.shape[0] >= k:
            break
        C = V[s : s + chunk]
        if chosen.shape[0]:
            C = C[np.abs(C @ chosen.T).max(axis=1) < max_cos]
        G = np.abs(C @ C.T)
        picked = []
        for i in range(C.shape[0]):
            if all(G[i, j] < max_cos for j in picked):
                picked.append(i)
                if chosen.shape[0] + len(picked) >= k:
                    break
        chosen = np.concatenate([chosen, C[picked]])
    if chosen.shape[0] < k:
        chosen = np.concatenate([chosen, rng.normal(size=(k - chosen.shape[0], k))])
    return _sym_decorrelation(chosen)


def _warm_start(Zs, W, f, *, tol, max_iter, dtype, device, block_rows, counter, rng=None):
    """Solve on a row subsample ``Zs`` (n_sub x k) and return a rotation for the full data.

    The subsample is re-whitened exactly (``C_s^{-1/2}``, symmetric) first: both the
    fixed-point and the orthogonal-group solver assume an identity covariance, and a
    subsample whitened with the full-data statistics is off by O(1/sqrt(n_sub)), enough to
    make the symmetric fixed point oscillate. The fixed point (cheap and fast on exactly
    white data) runs first; Picard-O takes over if it has not converged in 50 passes, or
    is still far from a fixed point after 10. ``W=None``: start from :func:`_data_init` of
    the re-whitened subsample."""
    Zs = np.asarray(Zs, dtype=np.float64)
    C = Zs.T @ Zs / Zs.shape[0]
    evals, evecs = np.linalg.eigh(C)
    R = (evecs * (1.0 / np.sqrt(np.clip(evals, 1e-12, None)))) @ evecs.T  # C_s^{-1/2}
    sub = _Source(Z=_on_device(np.ascontiguousarray(Zs @ R, dtype=dtype), device), block_rows=block_rows,
                  dtype=dtype, device=device)
    if W is None:
        W = _data_init(sub, rng)
    W, n_fp, crit = _fixed_point(sub, W, f, tol=tol, max_iter=min(50, max_iter), counter=counter, stall=10)
    n_pi = 0
    if not crit < tol:
        W, n_pi, _ = _picard_o(sub, W, f, tol=tol, max_iter=max_iter, counter=counter)
    # sources Zs R W' -> unmixing of the full-data whitened rows is W R, made orthogonal
    return _sym_decorrelation(W @ R), n_fp + n_pi


def _deflation(source, W_init, f, *, tol, max_iter, counter=None):
    """One-unit fixed-point FastICA with Gram-Schmidt deflation (sklearn's ``_ica_def``)."""
    k = W_init.shape[0]
    xp = source.xp
    W = np.zeros((k, k))
    n_iters = []
    for j in range(k):
        w = W_init[j].astype(np.float64).copy()
        w /= np.linalg.norm(w)  # as scikit-learn: the first update is decorrelated, not the start
        it = 0
        for it in range(1, max_iter + 1):
            wt = source.to_backend(w[:, None])
            acc = np.zeros(k)
            gp_sum = 0.0
            if source.remote is not None:
                acc, gp_sum = source.remote.deflation_sums(w)
            for Zb in source.blocks() if source.remote is None else ():
                y = Zb @ wt
                _, g, sgp = f(y, xp, False)
                acc += source.to_numpy(Zb.T @ g)[:, 0]
                gp_sum += float(source.to_numpy(sgp)[0])
            if counter:
                counter.tick(component=j)
            w1 = acc / source.n - (gp_sum / source.n) * w
            w1 -= W[:j].T @ (W[:j] @ w1)
            w1 /= np.linalg.norm(w1)
            lim = abs(abs(float(w1 @ w)) - 1.0)
            w = w1
            if lim < tol:
                break
        n_iters.append(it)
        W[j] = w
    return W, max(n_iters) if n_iters else 0, None


# ----------------------------------------------------------------------------- estimator
def _compute_dtype(name):
    if name in ("float32", np.float32):
        return np.dtype(np.float32)
    if name in ("float64", np.float64):
        return np.dtype(np.float64)
    raise ValueError(f"compute_dtype must be 'float32' or 'float64', got {name!r}")


class FastICA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """FastICA (scikit-learn compatible), solved with Picard-O, streaming-aware.

    Parameters
    ----------
    n_components : int, optional
        Number of sources ``k``. Default: all (the numerical rank of the data). With
        ``whiten=False`` it must be None or the number of features.
    algorithm : {"parallel", "deflation"}, default="parallel"
        ``"parallel"`` estimates all components at once (Picard-O quasi-Newton solver of
        the symmetric FastICA problem); ``"deflation"`` one after another (fixed point).
    whiten : bool, default=True
        PCA-whiten (mean, covariance with ddof=1, streaming) before the rotation. With
        ``False`` the input must already be centred and whitened.
    fun : {"logcosh", "exp", "cube"}, default="logcosh"
        Contrast ``G``: ``log cosh(a y)/a``, ``-exp(-y^2/2)``, ``y^4/4`` (as scikit-learn).
    fun_args : dict, optional
        ``{"alpha": a}`` for ``logcosh`` (1 <= a <= 2, default 1).
    max_iter : int, default=200
        Maximum passes (``parallel``: solver iterations; ``deflation``: per component).
    tol : float, default=1e-4
        ``parallel``: stop when the largest entry of the Riemannian gradient is below
        ``tol``; ``deflation``: scikit-learn's ``| |<w_new, w>| - 1 | < tol``.
    w_init : array-like of shape (n_components, n_components), optional
        Initial rotation; overrides ``init``.
    init : {"data", "random"}, default="data"
        ``parallel`` only. ``"data"``: start from the directions of the whitened rows of
        largest norm (mutually non-collinear ones, decorrelated): such rows are usually
        dominated by one source, so with many sources the solver needs far fewer passes
        (about half at 512 sources). ``"random"``: a Gaussian matrix from ``random_state``,
        decorrelated, as scikit-learn. ``deflation`` always starts as scikit-learn does.
    random_state : int, RandomState instance or None
        Seeds ``w_init`` and the warm-up subsample; fits are deterministic given it.
    warmup_rows : int, "auto" or None, default="auto"
        ``parallel`` only: first solve on this many random rows, then refine on all rows.
        ``"auto"``: ``max(20000, 100 k)`` when the data have more than twice that many rows;
        ``None`` or 0: no warm-up.
    compute_dtype : {"float32", "float64"}, default="float32"
        Precision of the passes over the data (statistics are accumulated in float64).
    device : str, default="cpu"
        Torch device of the passes over the data, e.g. ``"cuda"``.
    block_rows : int, optional
        Rows per block in passes over the data.
    verbose : bool, default=False
        Progress bars (tqdm) over the covariance pass and the solver passes.
    scheduler : None, str or distributed.Client, optional
        Dask: a dask array ``X`` is always fitted with every pass over the rows (moments,
        solver sums) as a map over its chunks + exact merge on this scheduler (None: the
        active ``distributed.Client``, else Dask's default); with a scheduler, store layers
        and h5py datasets are read by the workers too (``"local:N"``, an address, a
        ``Client``; ``docs/dask.md``). The warm-up subsample is solved in this process.

    Attributes
    ----------
    components_ : ndarray of shape (n_components_, n_features)
        Full unmixing matrix, whitening included: ``S = (X - mean_) @ components_.T``.
    mixing_ : ndarray of shape (n_features, n_components_)
        Pseudo-inverse of ``components_``: ``X ~ S @ mixing_.T + mean_``.
    mean_ : ndarray of shape (n_features,)
        Feature means (zeros with ``whiten=False``).
    whitening_ : ndarray of shape (n_components_, n_features)
        PCA whitening matrix (identity with ``whiten=False``).
    n_components_ : int
    n_iter_ : int
        Solver passes on all rows (``deflation``: the most any component needed).
    n_iter_warmup_ : int
        Solver iterations on the warm-up subsample (0 without warm-up).
    converged_ : bool
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> S = rng.laplace(size=(5000, 3)); A = rng.normal(size=(3, 3))
    >>> ica = FastICA(random_state=0).fit(S @ A.T)
    >>> from actkit.metrics import amari_distance
    >>> amari_distance(ica.components_, A) < 0.05
    True
    """

    def __init__(
        self,
        n_components=None,
        *,
        algorithm="parallel",
        whiten=True,
        fun="logcosh",
        fun_args=None,
        max_iter=200,
        tol=1e-4,
        w_init=None,
        init="data",
        random_state=None,
        warmup_rows="auto",
        compute_dtype="float32",
        device="cpu",
        block_rows=None,
        verbose=False,
        scheduler=None,
    ):
        self.n_components = n_components
        self.algorithm = algorithm
        self.whiten = whiten
        self.fun = fun
        self.fun_args = fun_args
        self.max_iter = max_iter
        self.tol = tol
        self.w_init = w_init
        self.init = init
        self.random_state = random_state
        self.warmup_rows = warmup_rows
        self.compute_dtype = compute_dtype
        self.device = device
        self.block_rows = block_rows
        self.verbose = verbose
        self.scheduler = scheduler

    # ------------------------------------------------------------------ validation
    def _validate_params_(self, n_features):
        if self.algorithm not in ("parallel", "deflation"):
            raise ValueError(f"algorithm must be 'parallel' or 'deflation', got {self.algorithm!r}")
        if self.init not in ("data", "random"):
            raise ValueError(f"init must be 'data' or 'random', got {self.init!r}")
        if self.fun not in ("logcosh", "exp", "cube"):
            raise ValueError(f"fun must be 'logcosh', 'exp' or 'cube', got {self.fun!r}")
        if not isinstance(self.whiten, (bool, np.bool_)):
            raise ValueError(f"whiten must be True or False, got {self.whiten!r}")
        alpha = float((self.fun_args or {}).get("alpha", 1.0))
        if not 1.0 <= alpha <= 2.0:
            raise ValueError(f"fun_args['alpha'] must be in [1, 2], got {alpha}")
        if isinstance(self.max_iter, bool) or not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 1:
            raise ValueError(f"max_iter must be a positive int, got {self.max_iter!r}")
        if not isinstance(self.tol, (int, float, np.floating)) or not self.tol > 0:
            raise ValueError(f"tol must be a positive float, got {self.tol!r}")
        nc = self.n_components
        if nc is not None:
            if isinstance(nc, bool) or not isinstance(nc, (int, np.integer)):
                raise ValueError(f"n_components must be a positive int or None, got {nc!r}")
            if not 1 <= nc <= n_features:
                raise ValueError(f"n_components={nc} must be between 1 and the number of features ({n_features})")
        _compute_dtype(self.compute_dtype)
        check_device(self.device)
        return alpha

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Fit the unmixing matrix.

        Parameters
        ----------
        X : array-like, torch.Tensor, h5py.Dataset or store Layer of shape (n_samples, n_features)
            On-disk sources are streamed in row blocks (never loaded whole).
        y : ignored

        Returns
        -------
        self
        """
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit, then return the sources ``(X - mean_) @ components_.T``, shape (n_samples, k)."""
        self._fit(X)
        return self.transform(X)

    def _fit(self, X):
        X = _as_input(X)
        from actkit import _dask

        Xd = _dask.as_dask(X, self.scheduler, self.block_rows)
        if Xd is not None:
            if _is_accelerator(self.device):
                raise ValueError(f"device={self.device!r} with Dask: the passes run on the workers' CPUs; "
                                 f"use device='cpu'")
            with _dask.use_scheduler(self.scheduler) as runner:
                return self._fit_rows(Xd, runner)
        return self._fit_rows(X, None)

    def _fit_rows(self, X, runner):
        streaming = runner is not None or _is_streaming(X)
        if streaming:
            n, d = int(X.shape[0]), int(X.shape[1])
            if n < 2:
                raise ValueError(f"need at least 2 rows for ICA, got {n}")
            self.n_features_in_ = d
            in_dtype = np.float32 if np.dtype(X.dtype) == np.float32 else np.float64
        else:
            X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
            n, d = X.shape
            in_dtype = X.dtype
        alpha = self._validate_params_(d)
        cdtype = _compute_dtype(self.compute_dtype)
        device = self.device
        rng = check_random_state(self.random_state)
        f = _contrast(self.fun, alpha)

        # ---- whitening (one streaming pass; also collects the warm-up subsample)
        k_req = self.n_components
        if not self.whiten and k_req is not None and k_req != d:
            warnings.warn("Ignoring n_components with whiten=False.", UserWarning, stacklevel=3)
            k_req = None
        k_guess = d if k_req is None else k_req
        warm = self._warmup_size(n, k_guess)
        sub_idx = np.sort(rng.choice(n, size=warm, replace=False)) if warm else None
        if self.whiten:
            moments, sub_rows = accumulate_moments(
                X, block_rows=self.block_rows, verbose=self.verbose, desc="ica: covariance", collect_rows=sub_idx,
                runner=runner,
            )
            p = whitening_from_moments(moments.mean_, moments.covariance(ddof=1), method="pca", n_components=k_req)
            mean, K, Kinv = p["mean"], p["whitening"], p["dewhitening"]
            # scikit-learn's basis convention (each eigenvector's first entry positive): the
            # same ``random_state`` then gives the same starting rotation as sklearn's FastICA,
            # which makes the deflation order (and so its per-component errors) comparable
            flip = np.where(K[:, 0] < 0, -1.0, 1.0)
            K, Kinv = K * flip[:, None], Kinv * flip[None, :]
        else:
            mean, K, Kinv = np.zeros(d), np.eye(d), np.eye(d)
            sub_rows = None
            if streaming and sub_idx is not None:
                _, sub_rows = accumulate_moments(X, block_rows=self.block_rows, collect_rows=sub_idx, runner=runner)
        k = K.shape[0]

        def whitened(rows):
            # float64 arithmetic, then the compute dtype: keeps ill-conditioned data accurate
            Z = (np.asarray(rows, dtype=np.float64) - mean) @ K.T
            return np.ascontiguousarray(Z, dtype=cdtype)

        if streaming:
            source = _Source(X=X, mean=mean, K=K, block_rows=self.block_rows, dtype=cdtype, device=device)
            if runner is not None:
                from actkit._dask_passes import ICAPasses

                source.remote = ICAPasses(runner, X, mean, K, fun=self.fun, alpha=alpha, dtype=cdtype,
                                          block_rows=source.block_rows, progress=False)
        else:
            source = _Source(Z=_on_device(whitened(X), device), block_rows=self.block_rows, dtype=cdtype,
                             device=device)
            sub_rows = None  # the warm-up slices the whitened matrix directly

        # ---- initial rotation
        if self.w_init is None:
            W0 = rng.normal(size=(k, k))
        else:
            W0 = np.asarray(self.w_init, dtype=np.float64)
            if W0.shape != (k, k):
                raise ValueError(f"w_init has shape {W0.shape}; expected ({k}, {k})")
        bar = None
        if self.verbose:
            from tqdm.auto import tqdm

            bar = tqdm(desc=f"ica ({self.algorithm})", unit="pass", disable=None, leave=False)
        counter = _PassCounter(bar)
        try:
            self.n_iter_warmup_ = 0
            if self.algorithm == "parallel":
                from_data = self.w_init is None and self.init == "data"
                W = None if from_data else _sym_decorrelation(W0)
                if sub_idx is not None:
                    Zs = source.to_numpy(source.Z[sub_idx]) if sub_rows is None else whitened(sub_rows)
                    W, self.n_iter_warmup_ = _warm_start(Zs, W, f, tol=max(self.tol, 1e-3),
                                                         max_iter=self.max_iter, dtype=cdtype, device=device,
                                                         block_rows=self.block_rows, counter=counter, rng=rng)
                elif from_data:
                    W = _data_init(source, rng)
                W, n_iter, gnorm = _picard_o(source, W, f, tol=self.tol, max_iter=self.max_iter, counter=counter)
                converged = gnorm < self.tol
                detail = f"largest gradient entry {gnorm:.2e} > tol={self.tol:g}"
            else:
                W, n_iter, _ = _deflation(source, W0, f, tol=self.tol, max_iter=self.max_iter, counter=counter)
                converged = n_iter < self.max_iter
                detail = "a component reached max_iter"
        finally:
            if bar is not None:
                bar.close()
        if not converged:
            warnings.warn(
                f"FastICA did not converge ({detail}) after max_iter={self.max_iter}; increase max_iter "
                f"or tol, reduce n_components, or check that the sources are non-Gaussian",
                ConvergenceWarning,
                stacklevel=3,
            )
        # deterministic signs: each source's largest mixing coefficient is positive
        mixing = Kinv @ W.T
        idx = np.argmax(np.abs(mixing), axis=0)
        sg = np.sign(mixing[idx, np.arange(k)])
        sg[sg == 0] = 1.0
        W = W * sg[:, None]
        mixing = mixing * sg[None, :]
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        self.n_components_ = k
        self.mean_ = mean.astype(in_dtype)
        self.whitening_ = K.astype(in_dtype)
        self.components_ = (W @ K).astype(in_dtype)
        self.mixing_ = mixing.astype(in_dtype)
        self._unmixing = W
        return self

    def _warmup_size(self, n, k):
        if self.algorithm != "parallel":
            return 0
        w = self.warmup_rows
        if w is None or (not isinstance(w, str) and int(w) <= 0):
            return 0
        if isinstance(w, str):
            if w != "auto":
                raise ValueError(f"warmup_rows must be 'auto', a positive int or None, got {w!r}")
            w = max(20000, 100 * k)  # fewer rows per source leave spurious optima
            return w if n > 2 * w else 0
        w = int(w)
        return w if w < n else 0

    @property
    def _n_features_out(self):
        return self.components_.shape[0]

    # ------------------------------------------------------------------ transforms
    def transform(self, X, copy=True):
        """Recover the sources: ``(X - mean_) @ components_.T``.

        Parameters
        ----------
        X : array-like or streaming source of shape (n_samples, n_features)

        Returns
        -------
        S : ndarray of shape (n_samples, n_components_), same float dtype as ``X``
            (a lazy dask array for a dask ``X``)
        """
        check_is_fitted(self)
        X = _as_input(X)
        from actkit import _dask

        if _dask.is_dask(X) or (self.scheduler is not None and _is_streaming(X)):
            return _dask.transform(self, X, self.n_components_, self.scheduler, self.block_rows)
        if _is_streaming(X):
            return transform_blocks(self, X, self.block_rows, self.n_components_)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False, copy=copy)
        return (X - self.mean_.astype(X.dtype)) @ self.components_.T.astype(X.dtype)

    def inverse_transform(self, X, copy=True):
        """Mix sources back: ``S @ mixing_.T + mean_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components_)

        Returns
        -------
        ndarray of shape (n_samples, n_features)
        """
        from sklearn.utils import check_array

        check_is_fitted(self)
        X = check_array(_as_input(X), dtype=[np.float64, np.float32], copy=copy)
        if X.shape[1] != self.n_components_:
            raise ValueError(f"X has {X.shape[1]} columns, expected n_components_={self.n_components_}")
        return X @ self.mixing_.T.astype(X.dtype) + self.mean_.astype(X.dtype)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def fastica(X, n_components=None, *, algorithm="parallel", whiten=True, fun="logcosh", fun_args=None,
            max_iter=200, tol=1e-4, w_init=None, random_state=None, return_n_iter=False, **kwargs):
    """Plain-function FastICA (same implementation as :class:`FastICA`).

    Parameters
    ----------
    X : array-like or streaming source of shape (n_samples, n_features)
    n_components, algorithm, whiten, fun, fun_args, max_iter, tol, w_init, random_state
        As in :class:`FastICA`; further keyword arguments (``device``, ``compute_dtype``,
        ``warmup_rows``, ``verbose``...) are passed on.
    return_n_iter : bool, default=False

    Returns
    -------
    K : ndarray of shape (n_components, n_features) or None
        Whitening matrix (None with ``whiten=False``, as scikit-learn).
    W : ndarray of shape (n_components, n_components)
        Rotation applied to the whitened data, so that ``S = (X - mean) @ (W @ K).T``.
    S : ndarray of shape (n_samples, n_components)
        Estimated sources.
    n_iter : int
        Only with ``return_n_iter=True``.
    """
    est = FastICA(n_components, algorithm=algorithm, whiten=whiten, fun=fun, fun_args=fun_args,
                  max_iter=max_iter, tol=tol, w_init=w_init, random_state=random_state, **kwargs)
    S = est.fit_transform(X)
    K = est.whitening_ if whiten else None
    W = est._unmixing.astype(est.components_.dtype)
    out = (K, W, S)
    return (*out, est.n_iter_) if return_n_iter else out
