"""Whitened rows as blocks (in memory or re-whitened from a stream) and one pass over them.

Every solver (Picard-O, the fixed point, deflation) reads the data only through
:func:`data_pass` (or :meth:`WhitenedSource.blocks`), so a streamed store layer, an in-memory
matrix and a GPU tensor are all the same to them.
"""

from __future__ import annotations

import numpy as np

from actkit._data import iter_blocks
from actkit._device import is_accelerator
from actkit._rows import block_rows as default_block_rows

PASS_MAX_ROWS = 16384   # rows per block of a pass: several blocks run on parallel threads


class WhitenedSource:
    """Whitened rows ``Z`` (N x k) as blocks, in memory or re-whitened from a stream.

    On CPU blocks are numpy arrays; on other devices torch tensors. ``remote`` (an
    ``actkit._dask_passes.ICAPasses``) runs the passes on Dask instead."""

    remote = None

    def __init__(self, *, Z=None, X=None, mean=None, K=None, block_rows=None, dtype=np.float32, device="cpu"):
        self.device = device
        self.use_torch = is_accelerator(device)
        self.np_dtype = np.dtype(dtype)
        self.Z, self.X, self.mean, self.K = Z, X, mean, K
        self.n = int(Z.shape[0]) if Z is not None else int(X.shape[0])
        self.k = int(Z.shape[1]) if Z is not None else int(K.shape[0])
        self.block_rows = block_rows or default_block_rows(self.k, self.np_dtype.itemsize,
                                                           max_rows=PASS_MAX_ROWS)

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
        for block in iter_blocks(self.X, self.block_rows):
            Zb = (np.asarray(block, dtype=self.np_dtype) - mean) @ Kt
            yield self.to_backend(Zb) if self.use_torch else Zb

    def subset(self, rows):
        """In-memory source of the given rows (only for in-memory sources)."""
        if self.use_torch:
            import torch

            Zs = self.Z[torch.as_tensor(rows, device=self.device)]
        else:
            Zs = self.Z[rows]
        return WhitenedSource(Z=Zs, block_rows=self.block_rows, dtype=self.np_dtype, device=self.device)




def on_device(Z, device):
    """numpy array -> itself on CPU, a torch tensor on another device."""
    if not is_accelerator(device):
        return Z
    import torch

    return torch.from_numpy(Z).to(device)


def data_pass(source, W, f, need_loss=True):
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


class PassCounter:
    """Counts passes over the data (and ticks the progress bar)."""

    def __init__(self, bar):
        self.bar = bar
        self.n = 0

    def tick(self, **postfix):
        self.n += 1
        if self.bar is not None:
            self.bar.update(1)
            if postfix:
                self.bar.set_postfix(**postfix, refresh=False)
