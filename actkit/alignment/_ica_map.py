"""The ICA alignment: whiten and FastICA each side alone, then match the sources.

``docs/definitions.md`` §1, the ``ica`` row: ``h(a) = mixing_B P unmixing_A (a - mu_A) + mu_B``
with the sources of the two sides matched by the optimal signed permutation. Also the rows
rule of FastICA (:func:`ica_min_rows`, :func:`ica_rows`).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from actkit._params import Interval, StrOptions
from actkit._rows import sample_rows
from actkit._threads import small_linalg
from actkit.alignment._assignment import signed_permutation
from actkit.alignment._maps import Alignment
from actkit.errors import ValidationError

ICA_AUTO_MIN_ROWS = 20000           # ica_max_rows="auto": at least this many rows ...
ICA_AUTO_MAX_BYTES = 2 ** 30        # ... and at most 1 GiB of float32 sample rows per side


def ica_min_rows(k):
    """Rows FastICA needs for ``k`` components: ``max(50 k, k^2 / 4)``.

    Measured (docs/compare.md, "How many rows ICA needs"): on noisy Laplace mixtures FastICA
    recovered the sources from 50 rows per component at k = 64 and 128 and from 100 at
    k = 256 and 384, but not from 50 at k = 256 nor from 100 at k = 768 (spurious sources);
    with fewer rows than this ``compare`` warns that the ica column is unreliable."""
    return int(max(50 * k, k * k // 4))



def ica_rows(max_rows, k):
    """Rows FastICA sees per side for ``k`` components: ``max_rows``, or for ``"auto"``
    ``max(20000, ica_min_rows(k))`` capped at 1 GiB of float32 rows (``k`` unknown: 20000)."""
    if isinstance(max_rows, str):
        if max_rows != "auto":
            raise ValidationError(f"ica_max_rows must be a positive int or 'auto', got {max_rows!r}")
        if not k:
            return ICA_AUTO_MIN_ROWS
        return int(min(max(ICA_AUTO_MIN_ROWS, ica_min_rows(k)), ICA_AUTO_MAX_BYTES // (4 * k)))
    if isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer)) or max_rows < 2:
        raise ValidationError(f"ica_max_rows must be an int >= 2 or 'auto', got {max_rows!r}")
    return int(max_rows)



def ica_components(n_components, k_max):
    """ICA components to fit: ``n_components`` (an int in [1, k_max]) or ``k_max``."""
    if n_components is None:
        return int(k_max)
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) \
            or not 1 <= n_components <= k_max:
        raise ValidationError(f"n_components must be an int in [1, {k_max}] (min(Da, Db)), "
                         f"got {n_components!r}")
    return int(n_components)


def source_sd(U, scatter):
    """Root of each source's scatter ``u_i' S u_i``; NaN where it is below the rounding error
    of ``S`` (float32 row blocks: ~1e-6 of its largest eigenvalue times ``|u_i|^2``), i.e. a
    source that (numerically) does not vary on these rows: its correlations are undefined."""
    var = np.einsum("ij,jk,ik->i", U, scatter, U)
    with small_linalg():
        top = float(np.linalg.eigvalsh(scatter)[-1]) if scatter.size else 0.0
    floor = 1e-6 * max(top, 0.0) * np.einsum("ij,ij->i", U, U)
    return np.where(var > floor, np.sqrt(np.maximum(var, 0.0)), np.nan)



def fit_ica_side(sample, mean, scatter, n, k, random_state, ica_params):
    """PCA whitening from the fit-row covariance, then FastICA on whitened sample rows.

    Uses :func:`actkit.whitening.whitening_from_moments` (eigenvalues below ``1e-6`` x the
    largest are dropped) and :class:`actkit.FastICA` with ``whiten=False``.
    Returns ``(unmixing (k, d), mixing (d, k), mean (d,), rank, n_iter, converged)``.
    """
    from actkit.whitening import whitening_from_moments

    cov = scatter / max(n - 1, 1)
    if not np.max(np.diag(cov), initial=0.0) > 0:
        raise ValidationError("a representation has zero variance on the fit rows: nothing to align")
    with small_linalg():
        wp = whitening_from_moments(mean, cov, method="pca", n_components=None, warn=False)
    rank = int(wp["rank"])
    k = min(k, rank)
    if sample.shape[0] < 2 * k:
        raise ValidationError(
            f"too few rows for ICA: {sample.shape[0]} fit rows for {k} components "
            f"(need at least {2 * k}); provide more inputs or lower n_components")
    W = wp["whitening"][:k]                           # (k, d)
    W_inv = wp["dewhitening"][:, :k]                  # (d, k)
    Z = ((sample.astype(np.float64) - mean) @ W.T).astype(sample.dtype, copy=False)
    R, n_iter, converged = fastica_rotation(Z, random_state, ica_params)   # (k, k)
    unmixing = R @ W
    with small_linalg():
        mixing = W_inv @ np.linalg.pinv(R)
    return unmixing, mixing, mean, rank, n_iter, converged


def fastica_rotation(Z, random_state, ica_params):
    """The (k, k) FastICA unmixing of already-whitened rows Z (n, k), n_iter, converged."""
    from actkit.ica import FastICA

    params = {"fun": "logcosh", "max_iter": 200, "tol": 1e-4, "device": "cpu"}
    params.update(ica_params)
    # random start, never FastICA's data-driven one: the two sides share their rows, so
    # starting each from its largest-norm rows would hand both the same rows' directions
    # and "match" sources even where no independent components exist (Gaussian data)
    est = FastICA(whiten=False, random_state=random_state, init="random",
                  compute_dtype="float32" if Z.dtype == np.float32 else "float64", **params)
    est.fit(Z)
    return (np.asarray(est.components_, dtype=np.float64), int(getattr(est, "n_iter_", -1)),
            bool(getattr(est, "converged_", True)))



class ICAAlignment(Alignment):
    """Unsupervised alignment through independent components (spec §1, ``ica`` row).

    Each side is PCA-whitened (top ``k = min(Da, Db)`` components, fit-row covariance,
    ddof=1) and rotated by FastICA **separately**; the two source sets are matched by the
    optimal signed permutation (using the paired fit rows only to match, never to fit a
    map) and ``h(a) = mixing_B P unmixing_A (a - mu_A) + mu_B``.

    Parameters
    ----------
    n_components : int, optional
        Default ``min(Da, Db)``.
    random_state : int, default=0
    max_rows : int or "auto", default="auto"
        FastICA runs on at most this many random fit rows of each side (whitening and
        matching use all fit rows). ``"auto"``: ``max(20000, ica_min_rows(k))`` for ``k``
        components, at most 1 GiB of float32 rows per side (see :func:`ica_rows`).
    fun, max_iter, tol
        Passed to FastICA.
    device : str, default="cpu"
        Torch device of the FastICA passes (e.g. ``"cuda"``); moments, whitening and
        matching stay on the CPU in float64.

    Attributes
    ----------
    unmixing_a_, unmixing_b_ : ndarray of shape (k, Da), (k, Db)
    mixing_a_, mixing_b_ : ndarray of shape (Da, k), (Db, k)
    pairs_ : ndarray of shape (k, 2)
        Matched (source of A, source of B).
    signs_ : ndarray of shape (k,)
    n_iter_ : (int, int)
        FastICA iterations on each side.
    converged_ : bool
        Whether FastICA reached ``tol`` on both sides within ``max_iter``.
    """

    method = "ica"

    # n_components and max_rows are checked against the data (ica_components, ica_rows)
    _parameter_constraints: dict = {
        "n_components": [object],
        "random_state": ["random_state"],
        "max_rows": [object],
        "fun": [StrOptions({"logcosh", "exp", "cube"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0.0, None, closed="neither")],
        "device": [str, object],
    }

    def __init__(self, *, n_components=None, random_state=0, max_rows="auto",
                 fun="logcosh", max_iter=200, tol=1e-4, device="cpu"):
        self.n_components = n_components
        self.random_state = random_state
        self.max_rows = max_rows
        self.fun = fun
        self.max_iter = max_iter
        self.tol = tol
        self.device = device

    def sample_rows_for(self, n, fit_rows=None, k=None):
        """The fit rows FastICA sees: at most :func:`ica_rows` of them, drawn at random."""
        rows = np.arange(n) if fit_rows is None else fit_rows
        if k is not None:
            k = ica_components(self.n_components, k)
        return sample_rows(rows, ica_rows(self.max_rows, k), self.random_state)

    def fit_pair(self, pair):
        self._validate()
        m = pair.fit_pm
        k = ica_components(self.n_components, min(pair.a.d, pair.b.d))
        params = {"fun": self.fun, "max_iter": self.max_iter, "tol": self.tol,
                  "device": str(self.device)}
        Ua, Ma, mu_a, _, it_a, conv_a = pair.a.ica(k, self.random_state, params, fit_ica_side)
        Ub, Mb, mu_b, _, it_b, conv_b = pair.b.ica(k, self.random_state, params, fit_ica_side)
        self.n_iter_ = (it_a, it_b)
        self.converged_ = bool(conv_a and conv_b)
        k = min(Ua.shape[0], Ub.shape[0])
        Ua, Ma, Ub, Mb = Ua[:k], Ma[:, :k], Ub[:k], Mb[:, :k]
        # source moments on fit rows, from the raw moments
        cross = Ua @ m.scatter_xy() @ Ub.T
        va = np.einsum("ij,jk,ik->i", Ua, m.scatter_xx(), Ua)
        vb = np.einsum("ij,jk,ik->i", Ub, m.scatter_yy(), Ub)
        P, r, c = signed_permutation(va, vb, cross)
        self.unmixing_a_, self.mixing_a_ = Ua, Ma
        self.unmixing_b_, self.mixing_b_ = Ub, Mb
        self.pairs_ = np.stack([r, c], axis=1)
        self.signs_ = P[r, c]
        self.n_components_ = k
        # row convention: h(a) = (a - mu_A) Ua^T P Mb^T + mu_B
        return self._set(Ua.T @ P @ Mb.T, m.mean_x, m.mean_y)

