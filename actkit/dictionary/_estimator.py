"""The estimator: :class:`SparseDictionary` and :func:`sparse_dictionary`."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from tqdm.auto import tqdm

from actkit._data import as_input, iter_blocks, prefetched
from actkit._params import (FloatTransformer, Interval, StrOptions, check_fitted, check_input_array, fit_input,
                            transform_input, validate_params, warmup_size)
from actkit._device import check_device, is_accelerator
from actkit._warn import warn_user
from actkit._rows import sample_rows
from actkit.dictionary._coding import code_block
from actkit.dictionary._epoch import epoch, epoch_pass, update
from actkit.dictionary._torch import code_dense_torch
from actkit.errors import ValidationError
from actkit.matrix_files import MatrixLayer
from actkit.runners import gather, runner_for
from actkit.store import Layer

__all__ = ["SparseDictionary", "sparse_dictionary"]


class SparseDictionary(FloatTransformer):
    """Sparse dictionary learning (top-k or L1 codes), scikit-learn compatible.

    Parameters
    ----------
    n_components : int
        Number of atoms (dictionary rows); may exceed the number of features (overcomplete).
    code : {"topk", "l1"}, default="topk"
        Sparse code: exactly ``k`` active atoms per row, or the lasso code with penalty
        ``alpha``.
    k : int, optional
        Active atoms per row for ``code="topk"``. Default: ``max(1, n_features // 10)``.
    alpha : float, optional
        L1 penalty for ``code="l1"`` (objective ``1/2 |x - aD|^2 + alpha |a|_1``). Default 1.0.
    positive : bool, default=False
        Non-negative codes.
    batch_size : int, default=8192
        Rows per block in every pass (memory grows with it, not with the number of rows).
    n_epochs : int, default=1
        Passes over all rows after the warm-up.
    warmup_rows : int, "auto" or None, default="auto"
        Rows of the random subsample trained on first; ``"auto"``:
        ``max(10000, 40 n_components)`` when the data have more rows than twice that.
    max_iter : int, default=100
        Maximum warm-up epochs (on the subsample; all epochs when there is no warm-up).
    tol : float, default=1e-4
        Warm-up stops when the largest atom change ``1 - |cos(d_old, d_new)|`` is below tol.
    random_state : int, RandomState instance or None
    device : str, default="cpu"
        ``"cpu"``: numpy/OpenBLAS kernels. Any other torch device (``"cuda"``, ``"cuda:1"``):
        the code and statistics steps run there in torch (the n_components x n_components MOD solve
        stays on the CPU in float64).
    verbose : bool, default=False
    scheduler : None, str or distributed.Client, optional
        Dask, as for :class:`~actkit.Whitener`: the passes over the rows of a dask array (or,
        with a scheduler, of a store layer or h5py dataset) run on this scheduler
        (``docs/dask.md``); ``transform`` of a dask array returns a lazy dask array.
        Warm-up epochs on the in-memory subsample run in this process.

    Attributes
    ----------
    dictionary_ : ndarray of shape (n_components, n_features)
        Unit-norm atoms.
    components_ : ndarray of shape (n_components, n_features)
        Alias of ``dictionary_`` (scikit-learn's name).
    reconstruction_error_ : float
        ``sum |x - a D|^2 / sum |x|^2`` over the rows of the last pass (all rows after a
        warm-up, else the training rows), coded with the dictionary of that pass.
    mean_active_ : float
        Mean number of non-zero coefficients per row in the last pass.
    n_iter_ : int
        Full-data passes; ``n_iter_warmup_`` : warm-up epochs.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 16)).astype(np.float32)
    >>> sd = SparseDictionary(32, k=3, random_state=0).fit(X)
    >>> sd.transform(X[:5]).shape, int((sd.transform(X[:5]) != 0).sum(1).max())
    ((5, 32), 3)
    """

    def __init__(
        self,
        n_components=None,
        *,
        code="topk",
        k=None,
        alpha=None,
        positive=False,
        batch_size=8192,
        n_epochs=1,
        warmup_rows="auto",
        max_iter=100,
        tol=1e-4,
        random_state=None,
        device="cpu",
        verbose=False,
        scheduler=None,
    ):
        self.n_components = n_components
        self.code = code
        self.k = k
        self.alpha = alpha
        self.positive = positive
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.warmup_rows = warmup_rows
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.device = device
        self.verbose = verbose
        self.scheduler = scheduler

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "code": [StrOptions({"topk", "l1"})],
        "k": [Interval(Integral, 1, None, closed="left"), None],
        "alpha": [Interval(Real, 0.0, None, closed="left"), None],
        "positive": ["boolean"],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "n_epochs": [Interval(Integral, 0, None, closed="left")],
        "warmup_rows": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"}), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="left")],
        "random_state": ["random_state"],
        "device": [str, object],
        "verbose": ["verbose"],
        "scheduler": "no_validation",
    }

    def _params(self, n_features):
        validate_params(self)
        if is_accelerator(self.device):
            check_device(self.device)
        k = self.k if self.k is not None else max(1, n_features // 10)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.n_components:
            raise ValidationError(f"k must be an int between 1 and n_components={self.n_components}, got {self.k!r}")
        alpha = 1.0 if self.alpha is None else self.alpha
        return {"code": self.code, "k": int(k), "alpha": float(alpha), "positive": bool(self.positive)}

    def fit(self, X, y=None):
        """Learn the dictionary.

        Parameters
        ----------
        X : array-like, torch.Tensor, h5py.Dataset or store Layer of shape (n_samples, n_features)
            On-disk sources are streamed ``batch_size`` rows at a time.
        y : ignored

        Returns
        -------
        self
        """
        with runner_for(X, self.scheduler, block_rows=self.batch_size, device=self.device) as (rows, runner):
            return self._fit_rows(rows, runner)

    def _fit_rows(self, X, runner):
        X, streaming, n, d, dtype = fit_input(self, X)
        p = self._params(d)
        rng = check_random_state(self.random_state)
        auto = max(10000, 40 * int(self.n_components))
        warm = warmup_size(self.warmup_rows, n, auto=auto)
        if streaming and warm == 0 and n > 0:
            warm = min(n, auto)  # the initial atoms come from rows in memory
        if warm:
            idx = sample_rows(n, warm, rng)
            Xs = np.asarray(X[idx] if not streaming else gather(runner, X, idx, self.batch_size), dtype=dtype)
        else:
            Xs = X
        if not np.all(np.isfinite(Xs)):
            raise ValidationError("Input X contains NaN or infinity.")
        # initial atoms: random distinct rows (normalised), noise for all-zero rows
        init = rng.choice(Xs.shape[0], size=self.n_components, replace=self.n_components > Xs.shape[0])
        D = np.array(Xs[init], dtype=dtype)
        norms = np.linalg.norm(D, axis=1)
        zero = norms < 1e-12
        D[zero] = rng.normal(size=(int(zero.sum()), d))
        D /= np.linalg.norm(D, axis=1, keepdims=True)
        D = D.astype(dtype)
        keep = 4 * self.n_components
        bar = None
        if self.verbose:
            bar = tqdm(desc="dictionary", unit="epoch", disable=None, leave=False)
        try:
            # warm-up (or the whole fit when X is small and in memory): epochs on rows in memory
            n_warm = 0
            if warm or not streaming:
                for n_warm in range(1, self.max_iter + 1):
                    ep = epoch(row_batches(Xs, self.batch_size), D, p, keep, self.device)
                    D_new, n_re = update(D, ep, rng)
                    change = float(np.max(1.0 - np.abs(np.einsum("ij,ij->i", D_new, D))))
                    D = D_new
                    if bar is not None:
                        bar.update(1)
                        bar.set_postfix(err=f"{ep.sq_res / max(ep.sq_x, 1e-300):.3g}", refresh=False)
                    if change < self.tol and n_re == 0:
                        break
                converged = change < self.tol
            else:
                converged = True
            # refinement passes over all rows (streaming when X is on disk); the reported
            # error and sparsity are those of the last pass (before its dictionary update)
            n_full = self.n_epochs if (warm or streaming) else 0
            for _ in range(n_full):
                if is_accelerator(self.device):  # codes with torch, in this process
                    ep = epoch(train_batches(X, self.batch_size, dtype), D, p, keep, self.device)
                else:  # codes and sums per block (per chunk on a scheduler), merged
                    ep = runner.run(X, epoch_pass(D, p, keep, dtype, self.batch_size),
                                    blocks=train_batches(X, self.batch_size, dtype))
                    ep.D, ep.G = D, None
                D, _ = update(D, ep, rng)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if not converged and not (warm or streaming):
            warn_user(
                f"SparseDictionary did not converge in max_iter={self.max_iter} epochs (largest atom change "
                f"above tol={self.tol:g}); increase max_iter or tol",
                ConvergenceWarning,
            )
        self.dictionary_ = D
        self.n_iter_ = int(n_full if (warm or streaming) else n_warm)
        self.n_iter_warmup_ = int(n_warm if (warm or streaming) else 0)
        self.reconstruction_error_ = ep.sq_res / max(ep.sq_x, 1e-300)
        self.mean_active_ = ep.nnz / max(ep.n, 1)
        self._p = p
        return self

    @property
    def components_(self):
        return self.dictionary_

    @property
    def _n_features_out(self):
        return self.dictionary_.shape[0]

    def transform(self, X):
        """Sparse codes of the rows of ``X``.

        Parameters
        ----------
        X : array-like or streaming source of shape (n_samples, n_features)

        Returns
        -------
        codes : ndarray of shape (n_samples, n_components), same float dtype as ``X``
        """
        X, streamed = transform_input(self, X, self.batch_size, self.n_components)
        if streamed is not None:
            return streamed
        D = self.dictionary_.astype(X.dtype, copy=False)
        if is_accelerator(self.device):
            import torch  # torch: ~1.2 s at import (measured); CPU work stays in numpy without it

            Dt = torch.from_numpy(np.ascontiguousarray(D)).to(self.device)
            G = Dt @ Dt.T
            out = [code_dense_torch(torch.from_numpy(np.ascontiguousarray(b)).to(self.device), Dt, G,
                                     self._p).cpu().numpy() for b in row_batches(X, self.batch_size)]
            return np.concatenate(out) if out else np.empty((0, self.n_components), dtype=X.dtype)
        G = D @ D.T
        out = [code_block(b, D, G, self._p) for b in row_batches(X, self.batch_size)]
        return np.concatenate(out) if out else np.empty((0, self.n_components), dtype=X.dtype)

    def inverse_transform(self, codes):
        """Reconstruct rows from codes: ``codes @ dictionary_``, shape (n_samples, n_features)."""

        check_fitted(self)
        codes = check_input_array(as_input(codes), dtype=[np.float64, np.float32])
        if codes.shape[1] != self.dictionary_.shape[0]:
            raise ValidationError(f"codes have {codes.shape[1]} columns, expected n_components={self.dictionary_.shape[0]}")
        return codes @ self.dictionary_.astype(codes.dtype, copy=False)


def train_batches(X, rows, dtype):
    """The mini-batches of one full pass, in row order: store layers and embedding files are
    read through the torch loader (:mod:`actkit.loader`, every block checked against its
    checksum; one batch read ahead on a thread), other sources in plain row blocks."""
    if not isinstance(X, (Layer, MatrixLayer)) or (isinstance(X, Layer) and not X.store.complete):
        yield from iter_blocks(X, rows, dtype=dtype)
        return
    from actkit.loader import ActivationDataset  # torch (~1.2 s at import, measured): only store layers need it

    batches = iter(ActivationDataset(X, rows, shuffle=False, dtype=dtype))
    yield from prefetched(lambda _: next(batches).numpy(), range(-(-len(X) // rows)))


def row_batches(X, rows):
    for s in range(0, X.shape[0], rows):
        yield X[s : s + rows]


def sparse_dictionary(X, n_components, *, code="topk", k=None, alpha=None, positive=False, random_state=None,
                      return_estimator=False, **kwargs):
    """Plain-function form of :class:`SparseDictionary`.

    Parameters
    ----------
    X : array-like or streaming source of shape (n_samples, n_features)
    n_components, code, k, alpha, positive, random_state
        As in :class:`SparseDictionary`; further keyword arguments are passed on.
    return_estimator : bool, default=False

    Returns
    -------
    codes : ndarray of shape (n_samples, n_components)
    dictionary : ndarray of shape (n_components, n_features)
    estimator : SparseDictionary
        Only with ``return_estimator=True``.
    """
    est = SparseDictionary(n_components, code=code, k=k, alpha=alpha, positive=positive, random_state=random_state,
                           **kwargs).fit(X)
    codes = est.transform(X)
    return (codes, est.dictionary_, est) if return_estimator else (codes, est.dictionary_)
