"""The estimators' passes over rows, as per-chunk kernels and exact merges for Dask.

Each pass is ``Runner.map_reduce(X, kernel, merge)`` (:mod:`actkit._dask`): the kernel runs
on a worker over one chunk, in sub-blocks of the estimator's ``block_rows`` (the same
blocks and the same numpy kernels as the single-process path), and returns sums; the
merges add them (or keep the top rows) in a fixed tree. Kernels and merges are module-level
functions of plain arrays, so they pickle to any worker; merges never modify their inputs
(a retried task may reuse them).

* :func:`moments`        mean / covariance (:class:`~actkit.stats.RunningMoments`), and the
                          rows of a random subsample collected in the same pass
* :class:`ICAPasses`     FastICA / Picard-O sums ``E[G(y)]``, ``E[g(y) y']``, ``E[g'(y)]``, the
                          deflation sums and the largest-norm rows of the data-driven start
* :func:`dictionary_epoch` ``A'A``, ``A'X``, residuals and the worst-reconstructed rows
* :func:`gather`          chosen rows, in order
* :func:`transform`       a lazy dask array of ``estimator.transform`` per chunk
"""

from __future__ import annotations

import copy

import numpy as np

from actkit.stats import RunningMoments


def _sub_blocks(block, rows):
    rows = max(1, int(rows))
    for s in range(0, block.shape[0], rows):
        yield block[s : s + rows]


def _picks(X, rows):
    """Per-chunk local indices of the sorted global ``rows`` (a list of 1-tuples)."""
    bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    out = []
    for s, e in zip(bounds[:-1], bounds[1:]):
        lo, hi = np.searchsorted(rows, [s, e])
        out.append((np.asarray(rows[lo:hi] - s, dtype=np.int64),))
    return out


# ----------------------------------------------------------------------------- moments
def _moments_kernel(block, start, precision, check_finite, sub_rows, picks):
    block = np.asarray(block)
    m = RunningMoments(block.shape[1], precision=precision, check_finite=check_finite)
    for b in _sub_blocks(block, sub_rows):
        m.add(b)
    picked = np.array(block[picks]) if picks is not None else None
    return m, picked


def _moments_merge(a, b):
    m = RunningMoments(a[0].n_features_ or b[0].n_features_).load_state_dict(a[0].state_dict())
    m.merge(b[0])
    rows = None
    if a[1] is not None:
        rows = np.concatenate([a[1], b[1]])
    return m, rows


def moments(runner, X, *, block_rows, precision="float64", check_finite=True, collect_rows=None,
            desc="covariance", progress=None):
    """One pass: float64 moments of the rows of X (and the rows ``collect_rows``, sorted).

    Returns
    -------
    moments : RunningMoments
    rows : ndarray of shape (len(collect_rows), D) or None
    """
    per_block = _picks(X, np.asarray(collect_rows)) if collect_rows is not None else None
    if per_block is None:
        per_block = [(None,)] * len(X.chunks[0])
    m, rows = runner.map_reduce(X, _moments_kernel, _moments_merge,
                                args=(precision, check_finite, block_rows), per_block=per_block,
                                desc=desc, progress=progress)
    if collect_rows is not None and rows is None:
        rows = np.empty((0, int(X.shape[1])))
    return m, rows


# ----------------------------------------------------------------------------- gather
def _gather_kernel(block, start, picks):
    return np.array(np.asarray(block)[picks])


def _concat(a, b):
    return np.concatenate([a, b])


def gather(runner, X, rows, *, desc="rows", progress=None):
    """Rows ``rows`` (sorted, increasing) of X, shape (len(rows), D)."""
    return runner.map_reduce(X, _gather_kernel, _concat, per_block=_picks(X, np.asarray(rows)), desc=desc,
                             progress=progress)


# ----------------------------------------------------------------------------- FastICA
def _whitened(block, mean, Kt, dtype):
    return (np.asarray(block, dtype=dtype) - mean) @ Kt


def _ica_kernel(block, start, mean, Kt, Wt, fun, alpha, need_loss, sub_rows):
    from actkit.ica._contrast import contrast

    f = contrast(fun, alpha)
    k = Wt.shape[0]
    EG, M, Egp = np.zeros(k), np.zeros((k, k)), np.zeros(k)
    for b in _sub_blocks(block, sub_rows):
        Y = _whitened(b, mean, Kt, Wt.dtype) @ Wt
        sG, g, sgp = f(Y, np, need_loss)
        if need_loss:
            EG += sG
        M += g.T @ Y
        Egp += sgp
    return EG, M, Egp


def _add3(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _deflation_kernel(block, start, mean, Kt, wt, fun, alpha, sub_rows):
    from actkit.ica._contrast import contrast

    f = contrast(fun, alpha)
    acc, gp = np.zeros(Kt.shape[1]), 0.0
    for b in _sub_blocks(block, sub_rows):
        Zb = _whitened(b, mean, Kt, wt.dtype)
        _, g, sgp = f(Zb @ wt, np, False)
        acc += (Zb.T @ g)[:, 0]
        gp += float(sgp[0])
    return acc, gp


def _add2(a, b):
    return a[0] + b[0], a[1] + b[1]


def _norms_kernel(block, start, mean, Kt, m, sub_rows):
    best_rows, best_norms = np.zeros((0, Kt.shape[1])), np.zeros(0)
    for b in _sub_blocks(block, sub_rows):
        Zb = np.asarray(_whitened(b, mean, Kt, Kt.dtype), dtype=np.float64)
        best_rows, best_norms = _top(best_rows, best_norms, Zb, np.einsum("ij,ij->i", Zb, Zb), m)
    return best_rows, best_norms, m


def _top(rows_a, norms_a, rows_b, norms_b, m):
    rows, norms = np.concatenate([rows_a, rows_b]), np.concatenate([norms_a, norms_b])
    if norms.size > m:
        keep = np.argpartition(-norms, m - 1)[:m]
        rows, norms = rows[keep], norms[keep]
    return rows, norms


def _norms_merge(a, b):
    return (*_top(a[0], a[1], b[0], b[1], a[2]), a[2])


class ICAPasses:
    """The passes of :mod:`actkit.ica` over a dask array of raw rows (whitened on workers).

    Attached to an ``ica._Source`` as ``source.remote``; ``_pass``, ``_deflation`` and
    ``_data_init`` call it instead of iterating ``source.blocks()``.
    """

    def __init__(self, runner, X, mean, K, *, fun, alpha, dtype, block_rows, progress=False):
        self.runner, self.X = runner, X
        self.dtype = np.dtype(dtype)
        self.mean = np.asarray(mean).astype(self.dtype)
        self.Kt = np.ascontiguousarray(np.asarray(K).T.astype(self.dtype))
        self.fun, self.alpha = fun, float(alpha)
        self.block_rows = int(block_rows)
        self.n = int(X.shape[0])
        self.progress = progress

    def pass_stats(self, W, need_loss=True):
        """``EG`` (k,), ``M`` (k, k), ``Egp`` (k,) at rotation W, as ``ica._pass``."""
        Wt = np.ascontiguousarray(W.T, dtype=self.dtype)
        EG, M, Egp = self.runner.map_reduce(
            self.X, _ica_kernel, _add3, args=(self.mean, self.Kt, Wt, self.fun, self.alpha, bool(need_loss),
                                              self.block_rows), desc="ica: pass", progress=self.progress)
        return EG / self.n, M / self.n, Egp / self.n

    def deflation_sums(self, w):
        """``sum Z' g(Z w)`` (k,) and ``sum g'(Z w)`` for one unit ``w`` (k,)."""
        wt = np.ascontiguousarray(np.asarray(w)[:, None], dtype=self.dtype)
        return self.runner.map_reduce(self.X, _deflation_kernel, _add2,
                                      args=(self.mean, self.Kt, wt, self.fun, self.alpha, self.block_rows),
                                      desc="ica: deflation pass", progress=self.progress)

    def largest_rows(self, m):
        """The ``m`` whitened rows of largest norm (float64) and their squared norms."""
        rows, norms, _ = self.runner.map_reduce(self.X, _norms_kernel, _norms_merge,
                                                args=(self.mean, self.Kt, int(m), self.block_rows),
                                                desc="ica: start", progress=self.progress)
        return rows, norms


# ----------------------------------------------------------------------------- dictionary
def _dict_kernel(block, start, D, p, keep_worst, dtype, sub_rows):
    from actkit.dictionary._coding import code_sparse
    from actkit.dictionary._epoch import Epoch

    G = D @ D.T
    ep = Epoch(D)
    for b in _sub_blocks(block, sub_rows):
        Xb = np.asarray(b, dtype=dtype)
        support, coef = code_sparse(Xb, D, G, p)
        ep.add(Xb, support, coef, keep_worst)
    if ep.worst is not None:
        ep.worst = (ep.worst[0], ep.worst[1], ep.worst[2] + start)
    ep.D = None  # the client has it
    return ep, keep_worst


def _dict_merge(a, b):
    from actkit.dictionary._epoch import Epoch

    (x, keep), (y, _) = a, b
    out = Epoch.__new__(Epoch)
    out.D = None
    out.AtA, out.AtX = x.AtA + y.AtA, x.AtX + y.AtX
    out.sq_res, out.sq_x = x.sq_res + y.sq_res, x.sq_x + y.sq_x
    out.n, out.nnz = x.n + y.n, x.nnz + y.nnz
    out.worst = x.worst if y.worst is None else y.worst if x.worst is None else None
    if x.worst is not None and y.worst is not None:  # as _Epoch.add: the keep worst, worst first
        cand = tuple(np.concatenate([u, v]) for u, v in zip(x.worst, y.worst))
        if len(cand[0]) > keep:
            top = np.argpartition(-cand[0], keep - 1)[:keep]
            cand = tuple(c[top] for c in cand)
        order = np.argsort(-cand[0], kind="stable")
        out.worst = tuple(c[order] for c in cand)
    return out, keep


def dictionary_epoch(runner, X, D, p, keep_worst, dtype, batch_size, progress=False):
    """One dictionary pass (codes with D, then the MOD statistics), as ``dictionary._epoch.epoch``."""
    ep, _ = runner.map_reduce(X, _dict_kernel, _dict_merge, args=(D, p, keep_worst, np.dtype(dtype), batch_size),
                              desc="dictionary: pass", progress=progress)
    ep.D = D
    return ep


# ----------------------------------------------------------------------------- transforms
def _transform_kernel(block, estimator, dtype):
    return np.asarray(estimator.transform(np.asarray(block)), dtype=dtype)


def portable(estimator):
    """A shallow copy without the scheduler (a Client does not travel to workers)."""
    est = copy.copy(estimator)
    if hasattr(est, "scheduler"):
        est.scheduler = None
    return est


def transform(estimator, X, n_out):
    """Lazy ``estimator.transform`` of every chunk: a dask array (n_rows, n_out).

    float32 input gives float32 output, anything else float64 (as the estimators)."""
    from actkit.errors import ValidationError

    if int(X.shape[1]) != estimator.n_features_in_:
        raise ValidationError(f"X has {X.shape[1]} features, but {type(estimator).__name__} was fitted on "
                         f"{estimator.n_features_in_}")
    dtype = np.dtype(np.float32) if X.dtype == np.float32 else np.dtype(np.float64)
    return X.map_blocks(_transform_kernel, portable(estimator), dtype, dtype=dtype,
                        chunks=(X.chunks[0], (int(n_out),)), meta=np.empty((0, 0), dtype=dtype))
