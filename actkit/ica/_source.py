"""Whitened rows as blocks (in memory or re-whitened from a stream) and one pass over them.

Every solver (Picard-O, the fixed point, deflation) reads the data only through
:func:`data_pass`, :func:`deflation_pass` or the start's norms pass, each stated once as a
:class:`~actkit.runners.RowPass` over the fixed reduction blocks and run by the source's
runner (this process, or a scheduler's workers that whiten their own rows), so a streamed
store layer, an in-memory matrix, a GPU tensor and a chunked array are all the same to them.
"""

from __future__ import annotations

import numpy as np

from actkit._data import iter_blocks
from actkit._device import is_accelerator
from actkit._threads import small_linalg
from actkit.ica._contrast import contrast
from actkit.ica._reduce import BlockSum, pass_rows, whiten_block
from actkit.runners import LOCAL, RowPass


class WhitenedSource:
    """Whitened rows ``Z`` (N x k) as blocks, in memory or re-whitened from a stream.

    ``blocks()`` yields the fixed reduction blocks of :mod:`actkit.ica._reduce`
    (``pass_rows`` rows at global boundaries, whatever ``block_rows`` a caller reads with).
    On CPU blocks are numpy arrays; on other devices torch tensors. ``runner`` runs the
    passes (:func:`actkit.runners.runner_for`; default this process) on the same blocks.
    ``rows``: the reduction block size (default :func:`pass_rows` of the raw width)."""

    def __init__(self, *, Z=None, X=None, mean=None, K=None, dtype=np.float32, device="cpu", rows=None,
                 runner=LOCAL):
        self.device, self.runner = device, runner
        self.use_torch = is_accelerator(device)
        self.np_dtype = np.dtype(dtype)
        self.Z, self.X, self.mean, self.K = Z, X, mean, K
        self.n = int(Z.shape[0]) if Z is not None else int(X.shape[0])
        self.k = int(Z.shape[1]) if Z is not None else int(K.shape[0])
        d = int(Z.shape[1]) if Z is not None else int(X.shape[1])
        self.rows = int(rows or pass_rows(d))

    @property
    def xp(self):
        if self.use_torch:
            import torch  # torch: ~1 s at import; `import actkit` stays torch-free

            return torch
        return np

    def to_backend(self, A):
        """numpy (float64) k x k matrix -> backend array in the compute dtype."""
        A = np.ascontiguousarray(A, dtype=self.np_dtype)
        if self.use_torch:
            import torch  # torch: ~1 s at import; `import actkit` stays torch-free

            return torch.from_numpy(A).to(self.device)
        return A

    def to_numpy(self, A):
        return A.cpu().numpy() if self.use_torch else A

    def blocks(self):
        """The reduction blocks of whitened rows, in order."""
        if self.Z is not None:
            for s in range(0, self.n, self.rows):
                yield self.Z[s : s + self.rows]
            return
        mean = np.asarray(self.mean, dtype=np.float64)
        Kt = np.ascontiguousarray(np.asarray(self.K, dtype=np.float64).T)
        for block in iter_blocks(self.X, self.rows):
            with small_linalg():
                Zb = whiten_block(block, mean, Kt, self.np_dtype)
            yield self.to_backend(Zb) if self.use_torch else Zb

    def run(self, stat, *args, new=None, add=None, merge=None, name="ica: pass"):
        """One pass: ``stat(Zb, use_torch, *args)`` on every reduction block of whitened rows,
        the results summed in the fixed tree of :class:`~actkit.ica._reduce.BlockSum` (or
        folded by ``new``/``add``/``merge``), on this source's runner."""
        if self.Z is not None:
            rows, whiten = self.Z, (None, None)
        else:
            rows = self.X
            whiten = (np.asarray(self.mean, dtype=np.float64), np.ascontiguousarray(np.asarray(self.K, np.float64).T))
        p = RowPass(new or _new_sum, add or _add_sum, merge or _merge_sum,
                    (self.rows, *whiten, self.np_dtype, self.use_torch, stat, *args), self.rows,
                    map=_whitened_stat, aligned=True, threads=not self.use_torch and self.n > self.rows, name=name)
        return self.runner.run(rows, p, progress=False)


def _whitened_stat(block, first_row, rows, mean, Kt, dtype, use_torch, stat, *args):
    """A pass's per-block work: whiten raw rows (if the source is a stream), then ``stat``."""
    Zb = block if mean is None else whiten_block(block, mean, Kt, dtype)
    if use_torch and mean is not None:
        import torch  # torch: ~1 s at import; `import actkit` stays torch-free

        Zb = torch.from_numpy(Zb).to(args[-1])
    return first_row // rows, stat(Zb, use_torch, *args)


def _new_sum(*args):
    return BlockSum()


def _add_sum(acc, item, first_row, *args):
    return acc.add(*item)


def _merge_sum(a, b):
    return a.merge(b)


def _backend(use_torch):
    if not use_torch:
        return np, None
    import torch  # torch: ~1 s at import; `import actkit` stays torch-free

    return torch, lambda a: a.cpu().numpy()


def on_device(Z, device):
    """numpy array -> itself on CPU, a torch tensor on another device."""
    if not is_accelerator(device):
        return Z
    import torch  # torch: ~1 s at import; `import actkit` stays torch-free

    return torch.from_numpy(Z).to(device)


def block_stats(Zb, Wt, f, need_loss, xp=np, to_numpy=None):
    """One reduction block's sums at rotation ``Wt`` (k x k, compute dtype): ``sum G(y)``
    (k,) or None, ``g(Y)' Y`` (k, k) and ``sum g'(y)`` (k,), as float64 numpy arrays."""
    Y = Zb @ Wt
    sG, g, sgp = f(Y, xp, need_loss)
    conv = to_numpy or (lambda a: a)
    return (None if sG is None else np.asarray(conv(sG), dtype=np.float64),
            np.asarray(conv(g.T @ Y), dtype=np.float64), np.asarray(conv(sgp), dtype=np.float64))


def _pass_block(Zb, use_torch, Wt, spec, need_loss, device=None):
    return block_stats(Zb, Wt, contrast(*spec), need_loss, *_backend(use_torch))


def data_pass(source, W, f, need_loss=True):
    """One pass over the data at rotation ``W`` (k x k, float64 numpy).

    Returns ``EG`` (k,), ``M`` (k x k) with ``M_ij = E[g(y_i) y_j]`` and ``Egp`` (k,), float64.

    Deterministic: the reduction blocks are fixed (:mod:`actkit.ica._reduce`); on the CPU
    each block is computed with one BLAS thread, ``t`` blocks at once on ``t`` worker
    threads (``t`` = the thread budget of :mod:`actkit._threads`; numpy's contrast functions are
    single-threaded, so this keeps every core busy for the whole pass), and the blocks'
    sums are merged in the fixed tree of :class:`~actkit.ica._reduce.BlockSum`: the
    result has the same bits for any number of threads, read block size or Dask chunking."""
    Wt = source.to_backend(W.T)
    EG, M, Egp = source.run(_pass_block, Wt, f.spec, bool(need_loss), source.device).total()
    n = source.n
    return (None if EG is None else EG / n), M / n, Egp / n


def deflation_block(Zb, wt, f, xp=np, to_numpy=None):
    """One reduction block's deflation sums for one unit ``wt`` (k x 1): ``Z' g(Z w)`` (k,)
    and ``sum g'(Z w)`` (1,), float64."""
    conv = to_numpy or (lambda a: a)
    _, g, sgp = f(Zb @ wt, xp, False)
    return (np.asarray(conv(Zb.T @ g), dtype=np.float64)[:, 0], np.asarray(conv(sgp), dtype=np.float64))


def _deflation_block(Zb, use_torch, wt, spec, device=None):
    return deflation_block(Zb, wt, contrast(*spec), *_backend(use_torch))


def deflation_pass(source, w, f):
    """``sum_rows Z' g(Z w)`` (k,) and ``sum_rows g'(Z w)`` (float) for one unit ``w`` (k,),
    over the same fixed blocks and merge tree as :func:`data_pass`."""
    wt = source.to_backend(np.asarray(w)[:, None])
    total, gp = source.run(_deflation_block, wt, f.spec, source.device, name="ica: deflation pass").total()
    return total, float(gp[0])


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
