"""Sparse dictionary learning for activations: top-k and L1 codes, streaming-aware.

Model: ``x ~ a @ D`` with ``D`` (n_atoms x n_features, unit-norm rows = atoms) and a sparse
code ``a`` (n_atoms,) per row. Rows are not centred (activations are modelled as they are).

* ``code="topk"``: exactly ``k`` active atoms per row, chosen by orthogonal matching pursuit
  run for all rows at once (greedy: the atom most correlated with the residual, then a least
  squares refit on the support; only positive correlations and coefficients with
  ``positive=True``).
* ``code="l1"``: the lasso code ``argmin_a 1/2 |x - a D|^2 + alpha |a|_1`` (``a >= 0`` with
  ``positive=True``), solved by FISTA for all rows at once.

Training alternates a code step and a dictionary step. The dictionary step is the method
of optimal directions (MOD): with codes ``A`` the least-squares dictionary is
``(A'A)^{-1} A'X``, and ``A'A`` (n_atoms^2) and ``A'X`` (n_atoms x n_features) are sums over
row blocks, so a training epoch is one streaming pass (``batch_size`` rows at a time) and
memory does not grow with the number of rows. Atoms that no row uses, or that duplicate
another atom (|cos| > 0.95), are re-seeded with the worst-reconstructed rows. Training
starts on a random row subsample (the warm-up: many cheap epochs), then refines on all rows
for ``n_epochs`` passes.

Two levels share one implementation: :class:`SparseDictionary` and :func:`sparse_dictionary`.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from actkit.stats import transform_blocks, _is_streaming, gather_rows, iter_row_blocks, small_linalg
from actkit._device import check_device as _check_device, is_accelerator as _is_accelerator
from actkit.whitening import _as_input

__all__ = ["SparseDictionary", "sparse_dictionary"]

_DUP_COS = 0.95




# ----------------------------------------------------------------------------- codes
def _topk_code(X, D, G, k, positive):
    """Top-k code by batched orthogonal matching pursuit.

    ``k`` greedy steps for all rows at once: add the atom most correlated with the current
    residual, refit the coefficients on the support by least squares (batched ``j x j``
    solves), update the residual correlations through the Gram matrix ``G = D D'``
    (``c = C - coef @ G[support]``, no pass over the features).

    Returns ``support`` (n, k) int and ``coef`` (n, k) in X's dtype."""
    C = X @ D.T  # (n, n_atoms) correlations
    n = X.shape[0]
    rows = np.arange(n)[:, None]
    support = np.empty((n, k), dtype=np.int64)
    c = C
    coef = None
    for j in range(k):
        score = c.copy() if positive else np.abs(c)
        if j:
            score[rows, support[:, :j]] = -np.inf
        support[:, j] = score.argmax(axis=1)
        S = support[:, : j + 1]
        b = np.take_along_axis(C, S, axis=1)
        if j == 0:
            coef = b / G[S[:, 0], S[:, 0]][:, None]
        else:
            Gs = G[S[:, :, None], S[:, None, :]]
            Gs += (1e-6 * np.eye(j + 1, dtype=Gs.dtype))[None]
            coef = _batched_spd_solve(Gs, b)
        if positive:
            np.maximum(coef, 0, out=coef)
        if j + 1 < k:  # correlations of the residual: one GEMM beats gathering G[S]
            R = X - np.einsum("nj,njd->nd", coef.astype(X.dtype), D[S])
            c = R @ D.T
    return support, coef.astype(X.dtype, copy=False)


def _batched_spd_solve(A, b):
    """Solve ``A[i] x[i] = b[i]`` for many small SPD systems (n, m, m) at once.

    Gaussian elimination vectorised over the batch (no pivoting: the matrices are Gram
    matrices plus a ridge); for m <= ~16 this is far faster than a LAPACK call per system."""
    A = A.astype(np.float64)
    x = b.astype(np.float64)
    m = A.shape[1]
    for j in range(m):
        piv = A[:, j, j].copy()
        piv[np.abs(piv) < 1e-300] = 1e-300
        f = A[:, j + 1 :, j] / piv[:, None]  # (n, m-j-1)
        A[:, j + 1 :, j:] -= f[:, :, None] * A[:, None, j, j:]
        x[:, j + 1 :] -= f * x[:, j, None]
    for j in range(m - 1, -1, -1):
        x[:, j] = (x[:, j] - np.einsum("ij,ij->i", A[:, j, j + 1 :], x[:, j + 1 :])) / A[:, j, j]
    return x


def _l1_code(X, D, G, alpha, positive, n_iter=100):
    """Lasso codes for every row by FISTA. Returns a dense (n, n_atoms) array."""
    if D.shape[0] <= 512:  # small n_atoms x n_atoms products: one BLAS thread is faster
        with small_linalg():
            return _l1_code_(X, D, G, alpha, positive, n_iter)
    return _l1_code_(X, D, G, alpha, positive, n_iter)


def _l1_code_(X, D, G, alpha, positive, n_iter):
    L = float(np.linalg.eigvalsh(G.astype(np.float64))[-1]) or 1.0
    C = X @ D.T
    A = np.zeros_like(C)
    Y = A.copy()
    t = 1.0
    thr = alpha / L
    for _ in range(n_iter):
        V = Y - (Y @ G - C) / L
        if positive:
            A_new = np.maximum(V - thr, 0)
        else:
            A_new = np.sign(V) * np.maximum(np.abs(V) - thr, 0)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        Y = A_new + ((t - 1.0) / t_new) * (A_new - A)
        A, t = A_new, t_new
    return A.astype(X.dtype, copy=False)


def _dense(support, coef, n_atoms, dtype):
    A = np.zeros((support.shape[0], n_atoms), dtype=dtype)
    np.put_along_axis(A, support, coef, axis=1)
    return A


# ----------------------------------------------------------------------------- torch kernels
# The same code and dictionary-statistics steps on torch tensors, for ``device="cuda"`` (and
# any other torch device). The MOD update itself (an n_atoms x n_atoms solve) stays on the
# CPU in float64. Tested on CPU tensors against the numpy kernels.


def _topk_code_torch(X, D, G, k, positive):
    """:func:`_topk_code` on torch tensors (same algorithm, same tie rules up to float)."""
    import torch

    C = X @ D.T
    n = X.shape[0]
    support = torch.empty((n, k), dtype=torch.long, device=X.device)
    c = C
    coef = None
    for j in range(k):
        score = c.clone() if positive else c.abs()
        if j:
            score.scatter_(1, support[:, :j], float("-inf"))
        support[:, j] = score.argmax(dim=1)
        S = support[:, : j + 1]
        b = torch.gather(C, 1, S).double()
        if j == 0:
            coef = b / G[S[:, 0], S[:, 0]].double()[:, None]
        else:
            Gs = G[S[:, :, None], S[:, None, :]].double()
            Gs = Gs + 1e-6 * torch.eye(j + 1, dtype=Gs.dtype, device=Gs.device)
            coef = torch.linalg.solve(Gs, b.unsqueeze(-1)).squeeze(-1)
        if positive:
            coef = coef.clamp(min=0)
        if j + 1 < k:
            R = X - torch.einsum("nj,njd->nd", coef.to(X.dtype), D[S])
            c = R @ D.T
    return support, coef.to(X.dtype)


def _l1_code_torch(X, D, G, alpha, positive, n_iter=100):
    """:func:`_l1_code` (FISTA) on torch tensors. Returns a dense (n, n_atoms) tensor."""
    import torch

    L = float(torch.linalg.eigvalsh(G.double())[-1]) or 1.0
    C = X @ D.T
    A = torch.zeros_like(C)
    Y = A.clone()
    t = 1.0
    thr = alpha / L
    for _ in range(n_iter):
        V = Y - (Y @ G - C) / L
        if positive:
            A_new = (V - thr).clamp(min=0)
        else:
            A_new = V.sign() * (V.abs() - thr).clamp(min=0)
        t_new = (1.0 + np.sqrt(1.0 + 4.0 * t * t)) / 2.0
        Y = A_new + ((t - 1.0) / t_new) * (A_new - A)
        A, t = A_new, t_new
    return A


def _code_dense_torch(X, D, G, p):
    """Dense codes (n, n_atoms) of a torch block."""
    import torch

    if p["code"] == "topk":
        support, coef = _topk_code_torch(X, D, G, p["k"], p["positive"])
        return torch.zeros((X.shape[0], D.shape[0]), dtype=X.dtype, device=X.device).scatter_(1, support, coef)
    return _l1_code_torch(X, D, G, p["alpha"], p["positive"])


class _TorchEpoch(object):
    """:class:`_Epoch` on a torch device: the sums stay on the device (float64) until the end."""

    def __init__(self, D):
        import torch

        K, d = D.shape
        self.D = D
        self.AtA = torch.zeros((K, K), dtype=torch.float64, device=D.device)
        self.AtX = torch.zeros((K, d), dtype=torch.float64, device=D.device)
        self.sq_res = torch.zeros((), dtype=torch.float64, device=D.device)
        self.sq_x = torch.zeros((), dtype=torch.float64, device=D.device)
        self.n = 0
        self.nnz = torch.zeros((), dtype=torch.int64, device=D.device)
        self.worst = None

    def add(self, X, A, keep_worst):
        import torch

        R = X - A @ self.D
        rn = (R * R).sum(dim=1)
        self.AtA += (A.T @ A).double()
        self.AtX += (A.T @ X).double()
        self.sq_res += rn.double().sum()
        self.sq_x += (X.double() * X.double()).sum()
        self.n += X.shape[0]
        self.nnz += torch.count_nonzero(A)
        if keep_worst:  # as _Epoch.add
            m = min(keep_worst, rn.shape[0])
            idx = torch.topk(rn, m).indices
            cand = (rn[idx], R[idx], idx + (self.n - X.shape[0]))
            if self.worst is not None:
                cand = tuple(torch.cat([a, b]) for a, b in zip(self.worst, cand))
            if cand[0].shape[0] > keep_worst:
                top = torch.topk(cand[0], keep_worst).indices
                cand = tuple(c[top] for c in cand)
            order = torch.argsort(-cand[0], stable=True)
            self.worst = tuple(c[order] for c in cand)

    def to_numpy(self):
        """The accumulated sums as an :class:`_Epoch`-like object of numpy values (for _update)."""
        out = _Epoch.__new__(_Epoch)
        out.D = self.D.cpu().numpy()
        out.AtA = self.AtA.cpu().numpy()
        out.AtX = self.AtX.cpu().numpy()
        out.sq_res = float(self.sq_res)
        out.sq_x = float(self.sq_x)
        out.n = self.n
        out.nnz = int(self.nnz)
        out.worst = None if self.worst is None else tuple(c.cpu().numpy() for c in self.worst)
        return out


def _epoch_torch(blocks, D, p, keep_worst, device):
    import torch

    Dt = torch.from_numpy(np.ascontiguousarray(D)).to(device)
    G = Dt @ Dt.T
    ep = _TorchEpoch(Dt)
    for X in blocks:
        Xt = torch.as_tensor(np.ascontiguousarray(X, dtype=D.dtype)).to(device)
        ep.add(Xt, _code_dense_torch(Xt, Dt, G, p), keep_worst)
    return ep.to_numpy()


# ----------------------------------------------------------------------------- training
class _Epoch:
    """Accumulates A'A, A'X and the residual over the blocks of one pass."""

    def __init__(self, D):
        n_atoms, n_features = D.shape
        self.D = D
        self.AtA = np.zeros((n_atoms, n_atoms))
        self.AtX = np.zeros((n_atoms, n_features))
        self.sq_res = 0.0
        self.sq_x = 0.0
        self.n = 0
        self.nnz = 0
        self.worst = None  # (residual norms, residual rows, row positions) of the worst rows seen

    def add(self, X, support, coef, keep_worst):
        from scipy import sparse

        K = self.D.shape[0]
        n, k = support.shape
        A = sparse.csr_matrix((coef.ravel(), support.ravel(), np.arange(0, n * k + 1, k)), shape=(n, K))
        R = X - A @ self.D  # sparse (n x K) @ dense: only the k active atoms per row
        rn = np.einsum("ij,ij->i", R, R)
        At = A.T.tocsr()
        self.AtA += (At @ A).toarray()
        self.AtX += At @ X
        self.sq_res += float(rn.sum(dtype=np.float64))
        self.sq_x += float(np.einsum("ij,ij->", X, X, dtype=np.float64))
        self.n += n
        self.nnz += int(np.count_nonzero(coef))
        if keep_worst:
            # the keep_worst worst-reconstructed rows so far (worst first; re-seeding samples them)
            m = min(keep_worst, len(rn))
            idx = np.argpartition(-rn, m - 1)[:m] if m < len(rn) else np.arange(len(rn))
            cand = (rn[idx], R[idx], idx + (self.n - n))
            if self.worst is not None:
                cand = tuple(np.concatenate([a, b]) for a, b in zip(self.worst, cand))
            if len(cand[0]) > keep_worst:
                top = np.argpartition(-cand[0], keep_worst - 1)[:keep_worst]
                cand = tuple(c[top] for c in cand)
            order = np.argsort(-cand[0], kind="stable")
            self.worst = tuple(c[order] for c in cand)


def _code_sparse(X, D, G, p):
    """Codes as (support (n, m), coef (n, m)): m = k for top-k, all atoms for L1."""
    if p["code"] == "topk":
        return _topk_code(X, D, G, p["k"], p["positive"])
    A = _l1_code(X, D, G, p["alpha"], p["positive"])
    support = np.broadcast_to(np.arange(D.shape[0]), A.shape)
    return np.ascontiguousarray(support), A


def _code_block(X, D, G, p):
    support, coef = _code_sparse(X, D, G, p)
    return _dense(support, coef, D.shape[0], X.dtype)


def _epoch(blocks, D, p, keep_worst, device="cpu"):
    if _is_accelerator(device):
        return _epoch_torch(blocks, D, p, keep_worst, device)
    G = D @ D.T
    ep = _Epoch(D)
    for X in blocks:
        support, coef = _code_sparse(X, D, G, p)
        ep.add(X, support, coef, keep_worst)
    return ep


def _update(D, ep, rng):
    """MOD step + re-seeding of unused and duplicate atoms. Returns (D_new, n_reseeded)."""
    with small_linalg():
        return _update_(D, ep, rng)


def _update_(D, ep, rng):
    K = D.shape[0]
    AtA = ep.AtA
    used = np.diag(AtA) > 1e-10 * max(1.0, np.trace(AtA) / K)
    ridge = 1e-6 * max(np.trace(AtA) / K, 1e-12)
    D_new = np.linalg.solve(AtA + ridge * np.eye(K), ep.AtX)
    D_new[~used] = D[~used]
    norms = np.linalg.norm(D_new, axis=1)
    bad = norms < 1e-12
    D_new[bad] = D[bad]
    D_new /= np.linalg.norm(D_new, axis=1, keepdims=True)
    cos = np.abs(D_new @ D_new.T)
    np.fill_diagonal(cos, 0)
    upper = np.triu(cos > _DUP_COS, 1)
    dup = upper.any(axis=0)  # the later atom of a near-duplicate pair
    reseed = np.flatnonzero((~used) | dup | bad)
    if len(reseed) and ep.worst is not None:
        # a random sample of the worst-reconstructed rows (not the very worst few: those often
        # share one missing atom, and atoms seeded from alike rows collide again)
        pool = ep.worst[1][: max(4 * len(reseed), K // 2)]
        R = pool[rng.permutation(len(pool))]
        rn = np.linalg.norm(R, axis=1)
        ok = rn > 1e-12
        take = reseed[: int(ok.sum())]
        D_new[take] = R[ok][: len(take)] / rn[ok][: len(take), None]
    return D_new.astype(D.dtype, copy=False), len(reseed)


class SparseDictionary(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Sparse dictionary learning (top-k or L1 codes), scikit-learn compatible.

    Parameters
    ----------
    n_atoms : int
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
        ``max(10000, 40 n_atoms)`` when the data have more rows than twice that.
    max_iter : int, default=100
        Maximum warm-up epochs (on the subsample; all epochs when there is no warm-up).
    tol : float, default=1e-4
        Warm-up stops when the largest atom change ``1 - |cos(d_old, d_new)|`` is below tol.
    random_state : int, RandomState instance or None
    device : str, default="cpu"
        ``"cpu"``: numpy/OpenBLAS kernels. Any other torch device (``"cuda"``, ``"cuda:1"``):
        the code and statistics steps run there in torch (the n_atoms x n_atoms MOD solve
        stays on the CPU in float64).
    verbose : bool, default=False
    scheduler : None, str or distributed.Client, optional
        Dask: a dask array ``X`` is always fitted with every full pass (the warm-up sample,
        the code + ``A'A``, ``A'X`` statistics of each epoch) as a map over its chunks +
        exact merge on this scheduler (None: the active ``distributed.Client``, else Dask's
        default); with a scheduler, store layers and h5py datasets are read by the workers
        too (``docs/dask.md``). Warm-up epochs on the in-memory subsample run in this process.

    Attributes
    ----------
    dictionary_ : ndarray of shape (n_atoms, n_features)
        Unit-norm atoms.
    components_ : ndarray of shape (n_atoms, n_features)
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
        n_atoms=None,
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
        self.n_atoms = n_atoms
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

    def _params(self, n_features):
        if isinstance(self.n_atoms, bool) or not isinstance(self.n_atoms, (int, np.integer)) or self.n_atoms < 1:
            raise ValueError(f"n_atoms must be a positive int, got {self.n_atoms!r}")
        if self.code not in ("topk", "l1"):
            raise ValueError(f"code must be 'topk' or 'l1', got {self.code!r}")
        if _is_accelerator(self.device):
            _check_device(self.device)
        k = self.k if self.k is not None else max(1, n_features // 10)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= self.n_atoms:
            raise ValueError(f"k must be an int between 1 and n_atoms={self.n_atoms}, got {self.k!r}")
        alpha = 1.0 if self.alpha is None else self.alpha
        if not isinstance(alpha, (int, float, np.floating)) or alpha < 0:
            raise ValueError(f"alpha must be a non-negative float, got {self.alpha!r}")
        for name in ("batch_size", "n_epochs", "max_iter"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (0 if name == "n_epochs" else 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not isinstance(self.tol, (int, float, np.floating)) or self.tol < 0:
            raise ValueError(f"tol must be a non-negative float, got {self.tol!r}")
        return {"code": self.code, "k": int(k), "alpha": float(alpha), "positive": bool(self.positive)}

    def _warmup_size(self, n):
        w = self.warmup_rows
        if w is None or (not isinstance(w, str) and int(w) <= 0):
            return 0
        if isinstance(w, str):
            if w != "auto":
                raise ValueError(f"warmup_rows must be 'auto', a positive int or None, got {w!r}")
            w = max(10000, 40 * int(self.n_atoms))
            return w if n > 2 * w else 0
        return int(w) if int(w) < n else 0

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
        X = _as_input(X)
        from actkit import _dask

        Xd = _dask.as_dask(X, self.scheduler, self.batch_size)
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
            self.n_features_in_ = d
            dtype = np.float32 if np.dtype(X.dtype) == np.float32 else np.float64
        else:
            X = validate_data(self, X, dtype=[np.float64, np.float32])
            n, d = X.shape
            dtype = X.dtype
        p = self._params(d)
        rng = check_random_state(self.random_state)
        warm = self._warmup_size(n)
        if streaming and warm == 0 and n > 0:
            warm = min(n, max(10000, 40 * int(self.n_atoms)))  # the initial atoms come from rows in memory
        if warm:
            idx = np.sort(rng.choice(n, size=warm, replace=False))
            if runner is not None:
                from actkit._dask_passes import gather

                Xs = np.asarray(gather(runner, X, idx, progress=False), dtype=dtype)
            else:
                Xs = np.asarray(X[idx] if not streaming else gather_rows(X, idx, self.batch_size), dtype=dtype)
        else:
            Xs = X
        if not np.all(np.isfinite(Xs)):
            raise ValueError("Input X contains NaN or infinity.")
        # initial atoms: random distinct rows (normalised), noise for all-zero rows
        init = rng.choice(Xs.shape[0], size=self.n_atoms, replace=self.n_atoms > Xs.shape[0])
        D = np.array(Xs[init], dtype=dtype)
        norms = np.linalg.norm(D, axis=1)
        zero = norms < 1e-12
        D[zero] = rng.normal(size=(int(zero.sum()), d))
        D /= np.linalg.norm(D, axis=1, keepdims=True)
        D = D.astype(dtype)
        keep = 4 * self.n_atoms
        bar = None
        if self.verbose:
            from tqdm.auto import tqdm

            bar = tqdm(desc="dictionary", unit="epoch", disable=None, leave=False)
        try:
            # warm-up (or the whole fit when X is small and in memory): epochs on rows in memory
            n_warm = 0
            if warm or not streaming:
                for n_warm in range(1, self.max_iter + 1):
                    ep = _epoch(_split(Xs, self.batch_size), D, p, keep, self.device)
                    D_new, n_re = _update(D, ep, rng)
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
                if runner is not None:
                    from actkit._dask_passes import dictionary_epoch

                    ep = dictionary_epoch(runner, X, D, p, keep, dtype, self.batch_size)
                    D, _ = _update(D, ep, rng)
                    if bar is not None:
                        bar.update(1)
                    continue
                ep = _epoch(iter_row_blocks(X, self.batch_size, dtype=dtype), D, p, keep, self.device)
                D, _ = _update(D, ep, rng)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        if not converged and not (warm or streaming):
            warnings.warn(
                f"SparseDictionary did not converge in max_iter={self.max_iter} epochs (largest atom change "
                f"above tol={self.tol:g}); increase max_iter or tol",
                ConvergenceWarning,
                stacklevel=2,
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
        codes : ndarray of shape (n_samples, n_atoms), same float dtype as ``X``
            (a lazy dask array for a dask ``X``)
        """
        check_is_fitted(self)
        X = _as_input(X)
        from actkit import _dask

        if _dask.is_dask(X) or (self.scheduler is not None and _is_streaming(X)):
            return _dask.transform(self, X, self.n_atoms, self.scheduler, self.batch_size)
        if _is_streaming(X):
            return transform_blocks(self, X, self.batch_size, self.n_atoms)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        D = self.dictionary_.astype(X.dtype, copy=False)
        if _is_accelerator(self.device):
            import torch

            Dt = torch.from_numpy(np.ascontiguousarray(D)).to(self.device)
            G = Dt @ Dt.T
            out = [_code_dense_torch(torch.from_numpy(np.ascontiguousarray(b)).to(self.device), Dt, G,
                                     self._p).cpu().numpy() for b in _split(X, self.batch_size)]
            return np.concatenate(out) if out else np.empty((0, self.n_atoms), dtype=X.dtype)
        G = D @ D.T
        out = [_code_block(b, D, G, self._p) for b in _split(X, self.batch_size)]
        return np.concatenate(out) if out else np.empty((0, self.n_atoms), dtype=X.dtype)

    def inverse_transform(self, codes):
        """Reconstruct rows from codes: ``codes @ dictionary_``, shape (n_samples, n_features)."""
        from sklearn.utils import check_array

        check_is_fitted(self)
        codes = check_array(_as_input(codes), dtype=[np.float64, np.float32])
        if codes.shape[1] != self.dictionary_.shape[0]:
            raise ValueError(f"codes have {codes.shape[1]} columns, expected n_atoms={self.dictionary_.shape[0]}")
        return codes @ self.dictionary_.astype(codes.dtype, copy=False)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _split(X, rows):
    for s in range(0, X.shape[0], rows):
        yield X[s : s + rows]


def sparse_dictionary(X, n_atoms, *, code="topk", k=None, alpha=None, positive=False, random_state=None,
                      return_estimator=False, **kwargs):
    """Plain-function form of :class:`SparseDictionary`.

    Parameters
    ----------
    X : array-like or streaming source of shape (n_samples, n_features)
    n_atoms, code, k, alpha, positive, random_state
        As in :class:`SparseDictionary`; further keyword arguments are passed on.
    return_estimator : bool, default=False

    Returns
    -------
    codes : ndarray of shape (n_samples, n_atoms)
    dictionary : ndarray of shape (n_atoms, n_features)
    estimator : SparseDictionary
        Only with ``return_estimator=True``.
    """
    est = SparseDictionary(n_atoms, code=code, k=k, alpha=alpha, positive=positive, random_state=random_state,
                           **kwargs).fit(X)
    codes = est.transform(X)
    return (codes, est.dictionary_, est) if return_estimator else (codes, est.dictionary_)
