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
# The FastICA kernels run over the fixed reduction blocks of actkit.ica._reduce (the array
# is rechunked onto their boundaries) and return a BlockSum: merged in row order, it builds
# the same tree of sums as the single-process pass, so Dask gives the same bits.
def _ica_blocks(block, start, rows, mean, Kt, dtype):
    from actkit.ica._reduce import whiten_block

    block = np.asarray(block)
    for i, s in enumerate(range(0, block.shape[0], rows)):
        yield start // rows + i, whiten_block(block[s : s + rows], mean, Kt, dtype)


def _ica_kernel(block, start, rows, mean, Kt, Wt, fun, alpha, need_loss):
    from actkit._threads import small_linalg
    from actkit.ica._contrast import contrast
    from actkit.ica._reduce import BlockSum
    from actkit.ica._source import block_stats

    f = contrast(fun, alpha)
    acc = BlockSum()
    with small_linalg():
        for i, Zb in _ica_blocks(block, start, rows, mean, Kt, Wt.dtype):
            acc.add(i, block_stats(Zb, Wt, f, need_loss))
    return acc


def _deflation_kernel(block, start, rows, mean, Kt, wt, fun, alpha):
    from actkit._threads import small_linalg
    from actkit.ica._contrast import contrast
    from actkit.ica._reduce import BlockSum
    from actkit.ica._source import deflation_block

    f = contrast(fun, alpha)
    acc = BlockSum()
    with small_linalg():
        for i, Zb in _ica_blocks(block, start, rows, mean, Kt, wt.dtype):
            acc.add(i, deflation_block(Zb, wt, f))
    return acc


def _block_sum_merge(a, b):
    return a.merge(b)


def _norms_kernel(block, start, rows, mean, Kt, dtype, m):
    from actkit._threads import small_linalg

    best_rows, best_norms = np.zeros((0, Kt.shape[1])), np.zeros(0)
    with small_linalg():
        for _, Zb in _ica_blocks(block, start, rows, mean, Kt, dtype):
            Zb = np.asarray(Zb, dtype=np.float64)
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


def on_reduction_blocks(X, rows):
    """X rechunked so that every chunk boundary is a multiple of ``rows`` (unchanged when it
    already is): the chunks then hold whole reduction blocks."""
    sizes = X.chunks[0]
    if all(c % rows == 0 for c in sizes[:-1]):
        return X
    target = max(rows, int(round(float(np.median(sizes)) / rows)) * rows)
    return X.rechunk({0: target})


class ICAPasses:
    """The passes of :mod:`actkit.ica` over a dask array of raw rows (whitened on workers).

    Attached to an ``ica._source.WhitenedSource`` as ``source.remote``; ``data_pass``,
    ``deflation_pass`` and ``data_init`` call it instead of iterating ``source.blocks()``.
    The array is rechunked onto the fixed reduction blocks (:mod:`actkit.ica._reduce`), and
    each pass merges the blocks' sums in the same tree as the single-process pass.
    """

    def __init__(self, runner, X, mean, K, *, fun, alpha, dtype, progress=False):
        from actkit.ica._reduce import pass_rows

        self.rows = pass_rows(int(X.shape[1]))
        self.runner, self.X = runner, on_reduction_blocks(X, self.rows)
        self.dtype = np.dtype(dtype)
        self.mean = np.asarray(mean, dtype=np.float64)
        self.Kt = np.ascontiguousarray(np.asarray(K, dtype=np.float64).T)
        self.fun, self.alpha = fun, float(alpha)
        self.n = int(X.shape[0])
        self.progress = progress

    def pass_stats(self, W, need_loss=True):
        """``EG`` (k,), ``M`` (k, k), ``Egp`` (k,) at rotation W, as ``ica._source.data_pass``."""
        Wt = np.ascontiguousarray(W.T, dtype=self.dtype)
        acc = self.runner.map_reduce(
            self.X, _ica_kernel, _block_sum_merge,
            args=(self.rows, self.mean, self.Kt, Wt, self.fun, self.alpha, bool(need_loss)),
            desc="ica: pass", progress=self.progress)
        EG, M, Egp = acc.total()
        return (None if EG is None else EG / self.n), M / self.n, Egp / self.n

    def deflation_sums(self, w):
        """``sum Z' g(Z w)`` (k,) and ``sum g'(Z w)`` for one unit ``w`` (k,)."""
        wt = np.ascontiguousarray(np.asarray(w)[:, None], dtype=self.dtype)
        acc = self.runner.map_reduce(self.X, _deflation_kernel, _block_sum_merge,
                                     args=(self.rows, self.mean, self.Kt, wt, self.fun, self.alpha),
                                     desc="ica: deflation pass", progress=self.progress)
        total, gp = acc.total()
        return total, float(gp[0])

    def largest_rows(self, m):
        """The ``m`` whitened rows of largest norm (float64) and their squared norms."""
        rows, norms, _ = self.runner.map_reduce(self.X, _norms_kernel, _norms_merge,
                                                args=(self.rows, self.mean, self.Kt, self.dtype, int(m)),
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
