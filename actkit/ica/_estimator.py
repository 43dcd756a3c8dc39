"""The estimator: :class:`FastICA` and :func:`fastica` (whitening, start, solver, signs)."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from actkit._data import as_input
from actkit._device import check_device
from actkit._warn import warn_user
from actkit._params import (FloatTransformer, Interval, Options, StrOptions, check_fitted, check_input_array, fit_input,
                            transform_input, validate_params, warmup_size)
from actkit._rows import sample_rows
from actkit.errors import ValidationError
from actkit.ica._contrast import contrast
from actkit.ica._fixed_point import deflation
from actkit.ica._init import data_init, warm_start
from actkit.ica._picard import picard_o
from actkit.ica._reduce import pass_rows, whiten_rows
from actkit.ica._rotations import sym_decorrelation
from actkit.ica._rows_rule import ica_supported_components
from actkit.ica._source import PassCounter, WhitenedSource, on_device
from actkit.runners import runner_for
from actkit.whitening import accumulate_moments, whitening_from_moments

__all__ = ["FastICA", "fastica"]


def auto_components(n, d):
    """``n_components="auto"``: None (all ``d``) where ``n`` rows support them by the rows
    rule, else the supported ``k'``, with a ``UserWarning``."""
    k = ica_supported_components(n)
    if k >= d:
        return None
    warn_user(f"FastICA on the leading {k} of {d} whitened components: {n} rows support {k} by the rows "
              f"rule max(50 k, k^2/4); with more components FastICA finds spurious sources (single "
              f"outlying rows); set n_components to force k", UserWarning)
    return k


def _compute_dtype(name):
    if name in ("float32", np.float32):
        return np.dtype(np.float32)
    if name in ("float64", np.float64):
        return np.dtype(np.float64)
    raise ValidationError(f"compute_dtype must be 'float32' or 'float64', got {name!r}")


class FastICA(FloatTransformer):
    """FastICA (scikit-learn compatible), solved with Picard-O, streaming-aware.

    Parameters
    ----------
    n_components : int, "auto" or None, optional
        Number of sources ``k``. Default (None): all (the numerical rank of the data).
        ``"auto"``: all where the rows support them by the rows rule ``max(50 k, k^2/4)``
        (``actkit.alignment.ica_min_rows``), else the ``k'`` leading whitened components
        they support, with a ``UserWarning`` (what ``actkit ica`` does by default). With
        ``whiten=False`` it must be None or the number of features.
    algorithm : {"parallel", "deflation"}, default="parallel"
        ``"parallel"`` estimates all components at once (Picard-O quasi-Newton solver of
        the symmetric FastICA problem); ``"deflation"`` one after another (fixed point).
    whiten : {"unit-variance", "arbitrary-variance"} or False, default="unit-variance"
        scikit-learn's values. ``"unit-variance"``: PCA-whiten (mean, covariance with
        ddof=1, streaming) before the rotation and scale each source to unit variance
        (``np.std(S, axis=0) == 1`` on the fitted rows, as scikit-learn);
        ``"arbitrary-variance"``: the same whitening without that final scaling (sources of
        variance 1 with ddof=1). ``False``: the input must already be centred and whitened.
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
        Dask, as for :class:`~actkit.Whitener`: the passes over the rows of a dask array (or,
        with a scheduler, of a store layer or h5py dataset) run on this scheduler
        (``docs/dask.md``); ``transform`` of a dask array returns a lazy dask array.
        The warm-up subsample is solved in this process.

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
        whiten="unit-variance",
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

    _parameter_constraints: dict = {
        "n_components": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "algorithm": [StrOptions({"parallel", "deflation"})],
        "whiten": [StrOptions({"unit-variance", "arbitrary-variance"}), Options(bool, {False})],
        "fun": [StrOptions({"logcosh", "exp", "cube"})],
        "fun_args": [dict, None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="neither")],
        "w_init": ["array-like", None],
        "init": [StrOptions({"data", "random"})],
        "random_state": ["random_state"],
        "warmup_rows": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"}), None],
        "compute_dtype": [StrOptions({"float32", "float64"}), type],
        "device": [str, object],
        "block_rows": [Interval(Integral, 1, None, closed="left"), None],
        "verbose": ["verbose"],
        "scheduler": "no_validation",
    }

    # ------------------------------------------------------------------ validation
    def _validate_params_(self, n_features):
        validate_params(self)
        alpha = float((self.fun_args or {}).get("alpha", 1.0))
        if not 1.0 <= alpha <= 2.0:
            raise ValidationError(f"fun_args['alpha'] must be in [1, 2], got {alpha}")
        nc = self.n_components
        if nc is not None and nc != "auto" and not nc <= n_features:
            raise ValidationError(f"n_components={nc} must be between 1 and the number of features ({n_features})")
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
        with runner_for(X, self.scheduler, block_rows=self.block_rows, device=self.device) as (rows, runner):
            return self._fit_rows(rows, runner)

    def _fit_rows(self, X, runner):
        """Fit on ``X`` (an array or a streamed row source, read by ``runner``): the steps
        below in order; sets the fitted attributes and returns ``self``."""
        X, streaming, n, d, in_dtype = fit_input(self, X, min_rows=2, purpose="for ICA")
        f = contrast(self.fun, self._validate_params_(d))
        cdtype = _compute_dtype(self.compute_dtype)
        rng = check_random_state(self.random_state)
        k_req = self._requested_components(n, d)
        sub_idx = self._warmup_indices(n, d, k_req, rng)
        mean, K, Kinv, sub_rows = self._whitening(X, streaming, d, k_req, sub_idx, runner)

        def whitened(rows):
            # float64 arithmetic per reduction block, then the compute dtype: keeps
            # ill-conditioned data accurate, and every row's bits do not depend on threads
            return whiten_rows(rows, mean, K, cdtype, rows=pass_rows(d))

        if streaming:
            source = WhitenedSource(X=X, mean=mean, K=K, dtype=cdtype, device=self.device, runner=runner)
        else:
            # whiten=False: whitening by (mean 0, K = I) is the identity in float64, so the rows
            # are only cast (the same bits, without a k x k product per block)
            Z = np.ascontiguousarray(X, dtype=cdtype) if not self.whiten and isinstance(X, np.ndarray) \
                else whitened(X)
            source = WhitenedSource(Z=on_device(Z, self.device), dtype=cdtype, device=self.device,
                                    rows=pass_rows(d))
            if sub_idx is not None:
                sub_rows = np.asarray(X)[sub_idx]   # the warm-up re-whitens its raw rows
        W0 = self._initial_rotation(K.shape[0], rng)
        warm_rows = None if sub_idx is None else whitened(sub_rows)
        W, n_iter, converged = self._rotation(source, W0, f, warm_rows, cdtype, rng)
        self._set_fitted(W, mean, K, Kinv, n, n_iter, converged, in_dtype)
        return self

    def _requested_components(self, n, d):
        """The number of sources asked for, ``n_components`` resolved against ``n`` rows and
        ``d`` features: an int, or None for all (``"auto"`` by the rows rule; ignored, with a
        warning, when ``whiten=False``)."""
        k_req = self.n_components
        if k_req == "auto":
            k_req = None if not self.whiten else auto_components(n, d)
        if not self.whiten and k_req is not None and k_req != d:
            warn_user("Ignoring n_components with whiten=False.", UserWarning)
            k_req = None
        return k_req

    def _warmup_indices(self, n, d, k_req, rng):
        """Sorted indices of the warm-up subsample among ``n`` rows (drawn from ``rng``), or
        None when there is no warm-up (``algorithm="deflation"`` or ``warmup_rows`` 0/None)."""
        k_guess = d if k_req is None else k_req
        # "auto": fewer rows per source leave spurious optima
        warm = warmup_size(self.warmup_rows, n, auto=max(20000, 100 * k_guess)) if self.algorithm == "parallel" else 0
        return sample_rows(n, warm, rng) if warm else None

    def _whitening(self, X, streaming, d, k_req, sub_idx, runner):
        """One streaming pass over ``X`` (``d`` features): the mean (d,), the whitening ``K``
        (k, d) and its inverse ``Kinv`` (d, k) (identities and zeros with ``whiten=False``),
        and the raw warm-up rows at ``sub_idx`` collected on the way (None where not read)."""
        if not self.whiten:
            sub_rows = None
            if streaming and sub_idx is not None:
                _, sub_rows = accumulate_moments(X, block_rows=pass_rows(d), collect_rows=sub_idx, runner=runner)
            return np.zeros(d), np.eye(d), np.eye(d), sub_rows
        moments, sub_rows = accumulate_moments(
            X, block_rows=pass_rows(d), verbose=self.verbose, desc="ica: covariance", collect_rows=sub_idx,
            runner=runner,
        )
        p = whitening_from_moments(moments.mean_, moments.covariance(ddof=1), method="pca", n_components=k_req)
        K, Kinv = p["whitening"], p["dewhitening"]
        # scikit-learn's basis convention (each eigenvector's first entry positive): the
        # same ``random_state`` then gives the same starting rotation as sklearn's FastICA,
        # which makes the deflation order (and so its per-component errors) comparable
        flip = np.where(K[:, 0] < 0, -1.0, 1.0)
        return p["mean"], K * flip[:, None], Kinv * flip[None, :], sub_rows

    def _initial_rotation(self, k, rng):
        """The (k, k) starting rotation: ``w_init``, or a standard normal draw from ``rng``."""
        if self.w_init is None:
            return rng.normal(size=(k, k))
        W0 = np.asarray(self.w_init, dtype=np.float64)
        if W0.shape != (k, k):
            raise ValidationError(f"w_init has shape {W0.shape}; expected ({k}, {k})")
        return W0

    def _rotation(self, source, W0, f, warm_rows, cdtype, rng):
        """Solve for the (k, k) unmixing rotation of the whitened ``source`` from ``W0`` with
        the contrast ``f``: Picard-O (after the warm-up on the whitened ``warm_rows``, or a
        start from the data) or the deflation fixed point. Sets ``n_iter_warmup_``; returns
        ``(W, n_iter, converged)`` and warns (``ConvergenceWarning``) when not converged."""
        bar = None
        if self.verbose:
            from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

            bar = tqdm(desc=f"ica ({self.algorithm})", unit="pass", disable=None, leave=False)
        counter = PassCounter(bar)
        try:
            self.n_iter_warmup_ = 0
            if self.algorithm == "parallel":
                from_data = self.w_init is None and self.init == "data"
                W = None if from_data else sym_decorrelation(W0)
                if warm_rows is not None:
                    W, self.n_iter_warmup_ = warm_start(warm_rows, W, f, tol=max(self.tol, 1e-3),
                                                         max_iter=self.max_iter, dtype=cdtype, device=self.device,
                                                         counter=counter, rng=rng)
                elif from_data:
                    W = data_init(source, rng)
                W, n_iter, gnorm = picard_o(source, W, f, tol=self.tol, max_iter=self.max_iter, counter=counter)
                converged = gnorm < self.tol
                detail = f"largest gradient entry {gnorm:.2e} > tol={self.tol:g}"
            else:
                W, n_iter, _ = deflation(source, W0, f, tol=self.tol, max_iter=self.max_iter, counter=counter)
                converged = n_iter < self.max_iter
                detail = "a component reached max_iter"
        finally:
            if bar is not None:
                bar.close()
        if not converged:
            warn_user(
                f"FastICA did not converge ({detail}) after max_iter={self.max_iter}; increase max_iter "
                f"or tol, reduce n_components, or check that the sources are non-Gaussian",
                ConvergenceWarning,
            )
        return W, n_iter, converged

    def _set_fitted(self, W, mean, K, Kinv, n, n_iter, converged, in_dtype):
        """Fix each source's sign (its largest mixing coefficient positive), scale for
        ``whiten``, and set ``components_`` (k, d), ``mixing_`` (d, k), ``mean_``,
        ``whitening_``, ``n_iter_``, ``converged_``, ``n_components_`` in ``in_dtype``."""
        k = K.shape[0]
        mixing = Kinv @ W.T
        idx = np.argmax(np.abs(mixing), axis=0)
        sg = np.sign(mixing[idx, np.arange(k)])
        sg[sg == 0] = 1.0
        W = W * sg[:, None]
        mixing = mixing * sg[None, :]
        # whitening (ddof=1) and an orthogonal W give sources of variance 1 with ddof=1;
        # "unit-variance" makes np.std(S, axis=0) (ddof=0) exactly 1, as scikit-learn does
        scale = math.sqrt(n / (n - 1)) if self.whiten == "unit-variance" else 1.0
        self.n_iter_ = int(n_iter)
        self.converged_ = bool(converged)
        self.n_components_ = k
        self.mean_ = mean.astype(in_dtype)
        self.whitening_ = K.astype(in_dtype)
        self.components_ = (scale * (W @ K)).astype(in_dtype)
        self.mixing_ = (mixing / scale).astype(in_dtype)
        self._unmixing = W

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
        """
        X, streamed = transform_input(self, X, self.block_rows, self.n_components_, copy=copy)
        if streamed is not None:
            return streamed
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

        check_fitted(self)
        X = check_input_array(as_input(X), dtype=[np.float64, np.float32], copy=copy)
        if X.shape[1] != self.n_components_:
            raise ValidationError(f"X has {X.shape[1]} columns, expected n_components_={self.n_components_}")
        return X @ self.mixing_.T.astype(X.dtype) + self.mean_.astype(X.dtype)


def fastica(X, n_components=None, *, algorithm="parallel", whiten="unit-variance", fun="logcosh",
            fun_args=None, max_iter=200, tol=1e-4, w_init=None, random_state=None,
            return_X_mean=False, compute_sources=True, return_n_iter=False, **kwargs):
    """Plain-function FastICA (same implementation as :class:`FastICA`).

    Parameters
    ----------
    X : array-like or streaming source of shape (n_samples, n_features)
    n_components, algorithm, whiten, fun, fun_args, max_iter, tol, w_init, random_state
        As in :class:`FastICA`; further keyword arguments (``device``, ``compute_dtype``,
        ``warmup_rows``, ``verbose``...) are passed on.
    return_X_mean : bool, default=False
        Also return the feature means (scikit-learn's ``return_X_mean``).
    compute_sources : bool, default=True
        Return the sources ``S`` (else None, and the transform pass is skipped).
    return_n_iter : bool, default=False

    Returns
    -------
    What :func:`sklearn.decomposition.fastica` returns, in its order:

    K : ndarray of shape (n_components, n_features) or None
        Whitening matrix (None with ``whiten=False``).
    W : ndarray of shape (n_components, n_components)
        Rotation applied to the whitened data: the sources are
        ``S = (X - X_mean) @ (W @ K).T`` (times ``sqrt(n / (n - 1))`` for
        ``whiten="unit-variance"``, which gives them unit ``np.std``).
    S : ndarray of shape (n_samples, n_components) or None
        Estimated sources (None with ``compute_sources=False``).
    X_mean : ndarray of shape (n_features,) or None
        Only with ``return_X_mean=True`` (None with ``whiten=False``).
    n_iter : int
        Only with ``return_n_iter=True``.
    """
    est = FastICA(n_components, algorithm=algorithm, whiten=whiten, fun=fun, fun_args=fun_args,
                  max_iter=max_iter, tol=tol, w_init=w_init, random_state=random_state, **kwargs)
    est.fit(X)
    S = est.transform(X) if compute_sources else None
    K = est.whitening_ if whiten else None
    X_mean = est.mean_ if whiten else None
    W = est._unmixing.astype(est.components_.dtype)
    out = [K, W, S]
    if return_X_mean:
        out.append(X_mean)
    if return_n_iter:
        out.append(est.n_iter_)
    return tuple(out)
