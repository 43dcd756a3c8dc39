"""The ICA alignment: whiten and FastICA each side alone, then match the sources.

``docs/definitions.md`` §1, "ICA alignment": FastICA is fitted ``restarts`` times on each
side; the sources every restart finds are the *identified* ones
(:mod:`actkit.alignment._ica_consensus`); they are matched across the sides by the optimal
signed permutation, and the rest of A (unidentified and unmatched sources) is mapped as the
permutation alignment maps it. Also the rows rule of FastICA (:func:`ica_min_rows`,
:func:`ica_rows`).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_random_state

from actkit._params import Interval, StrOptions
from actkit._rows import sample_rows
from actkit._threads import small_linalg
from actkit.alignment._assignment import signed_permutation
from actkit.alignment._ica_best import classic_maps, fastica_contrast, fit_best
from actkit.alignment._ica_consensus import identified_sources, pair_sources, side_rotation
from actkit.alignment._maps import Alignment
from actkit.alignment._sides import Side
from actkit.ica import FastICA, gaussianity, ica_min_rows, ica_supported_components, no_signal, whiten_rows
from actkit.errors import ValidationError
from actkit.stats import CrossMoments
from actkit.whitening import whitening_from_moments

ICA_AUTO_MIN_ROWS = 20000           # ica_max_rows="auto": at least this many rows ...
ICA_AUTO_MAX_BYTES = 2 ** 30        # ... and at most 1 GiB of float32 sample rows per side


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



def ica_fit_components(n_components, k_max, n_rows):
    """The ICA components to fit and why: ``(k, reason)``.

    ``n_components`` given: ``(n_components, "requested")`` (forced, even where the rows do
    not support it: ``compare`` then warns). Default: all ``k_max`` whitened components
    (``"all"``) when the ``n_rows`` fit rows support them by :func:`ica_min_rows`, else the
    leading ``k' = ica_supported_components(n_rows)`` (``"rows"``); the other directions
    are then mapped as the permutation maps them."""
    if n_components is not None:
        return ica_components(n_components, k_max), "requested"
    k_rows = ica_supported_components(n_rows)
    if k_rows >= k_max:
        return int(k_max), "all"
    return int(k_rows), "rows"


def ica_components(n_components, k_max):
    """ICA components to fit: ``n_components`` (an int in [1, k_max]) or ``k_max``."""
    if n_components is None:
        return int(k_max)
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)) \
            or not 1 <= n_components <= k_max:
        raise ValidationError(f"n_components must be an int in [1, {k_max}] (min(Da, Db)), "
                         f"got {n_components!r}")
    return int(n_components)


def quadratic_forms(U, S):
    """``u_i' S u_i`` for every row ``u_i`` of ``U`` (m, d), ``S`` (d, d): one product at one
    BLAS thread (the same bits at any thread count; a three-operand ``einsum`` loops in C
    without BLAS, 0.25 s per call at 252 x 384)."""
    with small_linalg():
        return np.einsum("ij,ij->i", U @ S, U)


def source_sd(U, scatter):
    """Root of each source's scatter ``u_i' S u_i``; NaN where it is below the rounding error
    of ``S`` (float32 row blocks: ~1e-6 of its largest eigenvalue times ``|u_i|^2``), i.e. a
    source that (numerically) does not vary on these rows: its correlations are undefined."""
    var = quadratic_forms(U, scatter)
    with small_linalg():
        top = float(np.linalg.eigvalsh(scatter)[-1]) if scatter.size else 0.0
    floor = 1e-6 * max(top, 0.0) * np.einsum("ij,ij->i", U, U)
    return np.where(var > floor, np.sqrt(np.maximum(var, 0.0)), np.nan)



def source_moments(e, Ua, Ub):
    """The cross moments (:class:`~actkit.stats.CrossMoments`) of the sources ``Ua x`` and ``Ub
    y`` over the rows of ``e``, centred: their correlation is :meth:`CrossMoments.correlation`'s."""
    ka, kb = Ua.shape[0], Ub.shape[0]
    with small_linalg():
        state = {"n": e.n, "compute_xx": True, "compute_yy": True, "debiased_terms": False,
                 "shift_x": np.zeros(ka), "shift_y": np.zeros(kb), "sx": np.zeros(ka), "sy": np.zeros(kb),
                 "xy": Ua @ e.scatter_xy() @ Ub.T, "xx": Ua @ e.scatter_xx() @ Ua.T, "yy": Ub @ e.scatter_yy() @ Ub.T}
    return CrossMoments().load_state_dict(state)


def whitened_side(side, k):
    """PCA whitening of a side from its fit-row covariance and its FastICA sample rows
    whitened, once per ``k`` (cached on the side; :func:`side_fits` drops the rows after).

    Uses :func:`actkit.whitening.whitening_from_moments` (eigenvalues below ``1e-6`` x the
    largest are dropped for float32 rows, ``1e-10`` for float64). Returns ``{"whitening"
    (k, d), "dewhitening" (d, k), "rank", "Z" (n_sample, k) whitened rows, "gaussianity"}``
    (:func:`actkit.ica.gaussianity` of ``Z`` by input sample, or None)."""
    key = ("whitened", k)
    cached = side._ica.get(key)
    if cached is not None and cached["Z"] is not None:
        return cached
    sample, n = side.sample, side.n_fit
    cov = side.scatter_fit() / max(n - 1, 1)
    if not np.max(np.diag(cov), initial=0.0) > 0:
        raise ValidationError("a representation has zero variance on the fit rows: nothing to align")
    with small_linalg():
        # with float32 rows, eigenvalues below 1e-6 x the largest are rounding noise of the
        # row blocks (a null direction's scatter comes out at ~1e-8 x the largest):
        # whitening one would let float noise decide the rank, and so which directions the
        # two sides keep; float64 rows keep everything above 1e-10 x the largest
        eps = 1e-6 if sample.dtype == np.float32 else 1e-10
        wp = whitening_from_moments(side.mean_fit, cov, method="pca", n_components=None, eps=eps,
                                    warn=False)
    rank = int(wp["rank"])
    k = min(k, rank)
    if sample.shape[0] < 2 * k:
        raise ValidationError(
            f"too few rows for ICA: {sample.shape[0]} fit rows for {k} components "
            f"(need at least {2 * k}); provide more inputs or lower n_components")
    W = wp["whitening"][:k]                           # (k, d)
    # per reduction block with one BLAS thread: the same bits at any thread count
    Z = whiten_rows(sample, side.mean_fit, W, sample.dtype)
    stats = cached["gaussianity"] if cached is not None else gaussianity(Z, side.sample_groups())
    side._ica[key] = {"whitening": W, "dewhitening": wp["dewhitening"][:, :k], "rank": rank, "Z": Z,
                      "gaussianity": stats}
    return side._ica[key]


def fit_ica_side(side, k, random_state, ica_params):
    """FastICA on the whitened sample rows of a side (:func:`whitened_side`).

    Where those rows show no non-Gaussian signal beyond chance
    (:func:`actkit.ica.no_signal`), every rotation is a FastICA solution and
    the fit keeps its random start (seeded by ``random_state``; 0 iterations) instead of
    optimising the rows' sampling noise (docs/definitions.md, "ICA alignment").
    Returns ``{"whitening" (k, d), "dewhitening" (d, k), "rotation" (k, k) orthogonal,
    "mean" (d,), "rank", "n_iter", "converged", "contrast", "gaussian", "gaussianity"}``.
    """
    w = whitened_side(side, k)
    Z = w["Z"]
    gaussian = no_signal(w["gaussianity"])
    if gaussian:
        # a random start seeded by random_state, made orthogonal below (its polar factor)
        R = check_random_state(random_state).normal(size=(Z.shape[1],) * 2)
        n_iter, converged = 0, True
    else:
        R, n_iter, converged = fastica_rotation(Z, random_state, ica_params)   # (k, k)
    with small_linalg():
        u, _, vt = np.linalg.svd(R)
        R = u @ vt
        contrast = fastica_contrast(Z, R, ica_params.get("fun", "logcosh"))
    return {"whitening": w["whitening"], "dewhitening": w["dewhitening"], "rotation": R,
            "mean": side.mean_fit, "rank": w["rank"], "n_iter": n_iter, "converged": converged,
            "contrast": contrast, "gaussian": gaussian, "gaussianity": w["gaussianity"]}


def side_fits(side, k, seeds, ica_params):
    """One FastICA fit of ``k`` components per seed on a side (cached on the side); the
    whitened rows are dropped afterwards (the whitening and the Gaussian check stay)."""
    try:
        return [side.ica(k, s, ica_params, fit_ica_side) for s in seeds]
    finally:
        if side._ica.get(("whitened", k)) is not None:
            side._ica[("whitened", k)]["Z"] = None


def ica_restarts(side, k, seeds, ica_params):
    """FastICA on one side once per seed, then the identified sources
    (:func:`actkit.alignment._ica_consensus.identified_sources`).

    Returns ``(fits, info)``: ``fits[0]`` holds the sources every restart finds,
    ``fits[1:]`` those each pair of restarts ``(r, s)``, ``r < s``, shares
    (:func:`~actkit.alignment._ica_consensus.pair_sources`); each is ``(unmixing (k, d),
    mixing (d, k), n_identified)`` with the identified sources in rows ``[:n_identified]``
    and a basis of the unidentified subspace in the others. ``info``: ``n_iter`` (the most
    iterations of a restart) and ``converged`` (every restart reached ``tol``). Cached on
    the side."""
    key = ("restarts", k, tuple(seeds), tuple(sorted(ica_params.items())))
    if key not in side._ica:
        fits = side_fits(side, k, seeds, ica_params)
        W, W_inv = fits[0]["whitening"], fits[0]["dewhitening"]
        out = []
        with small_linalg():
            rotations = [f["rotation"] for f in fits]
            U, _ = identified_sources(rotations)
            for V in [U] + pair_sources(rotations):
                T, m = side_rotation(V, W.shape[0])
                out.append((T @ W, W_inv @ T.T, m))
        restarts_ok = all(f["converged"] for f in fits)
        side._ica[key] = (out, {"n_iter": max(f["n_iter"] for f in fits),
                                "converged": restarts_ok, "k": int(W.shape[0])})
    return side._ica[key]


def fastica_rotation(Z, random_state, ica_params):
    """The (k, k) FastICA unmixing of already-whitened rows Z (n, k), n_iter, converged."""
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
    """Unsupervised alignment through independent components (docs/definitions.md §1).

    Each side is PCA-whitened (fit-row covariance, ddof=1) and rotated by FastICA
    **separately**, ``restarts`` times (random starts, seeds ``random_state + r``), on the
    leading ``k`` whitened components: ``n_components`` if given, else all ``min(Da, Db)``
    where the FastICA rows support them by :func:`ica_min_rows`, else the ``k'`` they
    support (:func:`ica_fit_components`). Matched sources map A onto B through ICA,
    ``h_I(a) = mixing_B,I P unmixing_A,I (a - mu_A)``; every other direction of A (outside
    the ``k`` fitted components, or unmatched) is mapped as the permutation alignment maps it:
    ``h(a) = h_I(a) + Q' (a - mu_A - a_I) + mu_B``, ``Q`` the signed permutation of the
    coordinates.

    ``method="best"`` (default): each side keeps its fit of largest FastICA contrast and all
    its sources are matched by the optimal signed permutation (:mod:`._ica_best`); the
    ``R x R`` maps of every pairing of starts give the spread (``restarts_``), the ``R``
    same-start pairings are the paper's single fits (``classic_``), and two disjoint halves
    of the starts give the reproducibility check (``shared_halves_``, ``self_map_``).
    ``method="consensus"``: per pair of restarts, only the sources both find
    (``|cos| >= 0.995``, :mod:`._ica_consensus`) are matched, a matched pair going through
    ICA only where that lowers the fit-row squared error; the map is the mean of the
    ``R (R - 1) / 2`` restart-pair maps.

    Parameters
    ----------
    n_components : int, optional
        Forces ``k`` (default: the rows rule above).
    random_state : int, default=0
        Seed of the first FastICA start (``compare``'s ``ica_seed``).
    max_rows : int or "auto", default="auto"
        FastICA runs on at most this many random fit rows of each side (whitening and
        matching use all fit rows). ``"auto"``: ``max(20000, ica_min_rows(k))`` for ``k``
        components, at most 1 GiB of float32 rows per side (see :func:`ica_rows`).
    fun, max_iter, tol
        Passed to FastICA.
    restarts : int, default=5
        FastICA fits per side.
    method : {"best", "consensus"}, default="best"
    device : str, default="cpu"
        Torch device of the FastICA passes (e.g. ``"cuda"``); moments, whitening and
        matching stay on the CPU in float64.

    Attributes
    ----------
    unmixing_a_, unmixing_b_ : ndarray of shape (k, Da), (k, Db)
    mixing_a_, mixing_b_ : ndarray of shape (Da, k), (Db, k)
    pairs_ : ndarray of shape (n_matched, 2)
        Matched (source of A, source of B).
    signs_ : ndarray of shape (n_matched,)
    n_components_ : int
        ICA components fitted (``k``).
    n_components_reason_ : {"requested", "all", "rows"}
    n_identified_ : (int, int)
        Sources identified on A and on B (``best``: all ``k``).
    restarts_ : list of ICAAlignment
        ``best``: the ``R x R`` maps (start of A major); ``consensus``: the
        ``R (R - 1) / 2`` restart-pair maps. The spread of their errors is ``ica_std``.
    classic_ : list of ICAAlignment
        The ``R`` single-start maps (start ``r`` of A with start ``r`` of B, all matched).
    best_ : (int, int)
        ``best``: the start kept on A and on B.
    shared_halves_ : (int, int) or None
        ``best``: sources the two halves' best fits share on A and on B (None with one start).
    self_map_ : ICAAlignment or None
        ``best``: B onto itself through the two halves' best fits of B.
    n_iter_ : (int, int)
        The most FastICA iterations of a start on each side (0 on a side whose rows show no
        non-Gaussian signal: ``gaussian_``).
    converged_ : bool
        Whether every FastICA start reached ``tol`` on both sides within ``max_iter``.
    gaussian_ : (bool, bool)
        Whether A's and B's whitened FastICA rows show no non-Gaussian signal beyond chance
        (:func:`actkit.ica.no_signal`); such a side keeps its random starts.
    gaussianity_ : (dict or None, dict or None)
        The z-scores of that check on each side (:func:`actkit.ica.gaussianity`).
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
        "restarts": [Interval(Integral, 1, None, closed="left")],
        "ica_method": [StrOptions({"best", "consensus"})],
    }

    def __init__(self, *, n_components=None, random_state=0, max_rows="auto",
                 fun="logcosh", max_iter=200, tol=1e-4, device="cpu", restarts=5,
                 ica_method="best"):
        self.restarts = restarts
        self.n_components = n_components
        self.random_state = random_state
        self.max_rows = max_rows
        self.fun = fun
        self.max_iter = max_iter
        self.tol = tol
        self.device = device
        self.ica_method = ica_method

    def sample_rows_for(self, n, fit_rows=None, k=None, seed=None):
        """The fit rows FastICA sees: at most :func:`ica_rows` of them, drawn at random
        (``seed``, default ``random_state``)."""
        rows = np.arange(n) if fit_rows is None else fit_rows
        if k is not None:
            k = ica_components(self.n_components, k)
        return sample_rows(rows, ica_rows(self.max_rows, k), self.random_state if seed is None else seed)

    def fit_pair(self, pair):
        R = self.restarts
        if isinstance(R, bool) or not isinstance(R, (int, np.integer)) or R < 1:
            raise ValidationError(f"ica_restarts must be an int >= 1, got {R!r}")
        self._validate()
        k, reason = ica_fit_components(self.n_components, min(pair.a.d, pair.b.d), pair.a.sample.shape[0])
        params = {"fun": self.fun, "max_iter": self.max_iter, "tol": self.tol,
                  "device": str(self.device)}
        seeds = [int(self.random_state) + r for r in range(int(R))]
        fits_a, fits_b = side_fits(pair.a, k, seeds, params), side_fits(pair.b, k, seeds, params)
        ka, kb = fits_a[0]["rotation"].shape[0], fits_b[0]["rotation"].shape[0]
        if ka != kb:
            # one side has fewer non-degenerate directions: fit the other with as many
            # components (dropping its least-variance whitened directions, not an arbitrary
            # part of its rotated basis)
            k = min(ka, kb)
            fits_a, fits_b = side_fits(pair.a, k, seeds, params), side_fits(pair.b, k, seeds, params)
        fits = fits_a + fits_b
        self.n_iter_ = (max(f["n_iter"] for f in fits_a), max(f["n_iter"] for f in fits_b))
        self.converged_ = all(f["converged"] for f in fits)
        self.gaussian_ = (fits_a[0]["gaussian"], fits_b[0]["gaussian"])
        self.gaussianity_ = (fits_a[0]["gaussianity"], fits_b[0]["gaussianity"])

        def clone():
            h = ICAAlignment(**self.get_params())
            h.n_iter_, h.converged_ = self.n_iter_, self.converged_
            h.gaussian_, h.gaussianity_ = self.gaussian_, self.gaussianity_
            return h

        if self.ica_method == "best":
            fit_best(self, pair, fits_a, fits_b, clone)
        else:
            self._fit_consensus(pair, k, seeds, params, clone)
            self.classic_ = classic_maps(pair, fits_a, fits_b, clone)
            self.best_ = self.shared_halves_ = self.self_map_ = None
        self.n_components_reason_ = reason
        return self

    def _fit_consensus(self, pair, k, seeds, params, clone):
        """Today's consensus rule (``ica_method="consensus"``, docs/definitions.md)."""
        fa, _ = ica_restarts(pair.a, k, seeds, params)
        fb, _ = ica_restarts(pair.b, k, seeds, params)
        # one restart: the classic ICA alignment (every source identified and matched)
        self._fit_sources(pair, fa[0], fb[0], select=len(seeds) > 1)
        self.restarts_ = [clone()._fit_sources(pair, sa, sb) for sa, sb in zip(fa[1:], fb[1:])]
        if self.restarts_:
            # the map: the mean of the restart-pair maps (docs/definitions.md, "ICA alignment")
            self._set(np.mean([h.coef_ for h in self.restarts_], axis=0), self.mean_a_, self.mean_b_)

    def _fit_sources(self, pair, side_a, side_b, select=True):
        """Identified sources matched by signed permutation; the rest by the permutation
        alignment (docs/definitions.md, "ICA alignment")."""
        m = pair.fit_pm
        Ua, Ma, ma = side_a
        Ub, Mb, mb = side_b
        k = min(Ua.shape[0], Ub.shape[0])
        ma, mb = min(ma, k), min(mb, k)
        Ua, Ma, Ub, Mb = Ua[:k], Ma[:, :k], Ub[:k], Mb[:, :k]
        # source moments on fit rows, from the raw moments
        cross = Ua @ m.scatter_xy() @ Ub.T
        va, vb = quadratic_forms(Ua, m.scatter_xx()), quadratic_forms(Ub, m.scatter_yy())
        Sxx, Syy, Sxy = m.scatter_xx(), m.scatter_yy(), m.scatter_xy()
        # the fallback: all of A as the permutation maps it -- including the directions
        # outside the k fitted components (mapping only Ua' Ma' Q, their projection, would
        # drop them: with n_components < D that cost a noisy copy 0.276 against 0.009)
        Q, _, _ = signed_permutation(np.diag(Sxx), np.diag(Syy), Sxy)
        coef = Q.copy()
        r = c = np.zeros(0, np.int64)
        signs = np.zeros(0)
        if ma and mb:
            P, r, c = signed_permutation(va[:ma], vb[:mb], cross[:ma, :mb])
            signs = P[r, c]
            # mapping source i of A onto its match j through ICA replaces u_i m_i' Q by
            # u_i s n_j', i.e. adds u_i v_i' with v_i = s n_j - Q' m_i. The sources are
            # uncorrelated on the fit rows (u_i' Sxx u_l = 0), so the fit-row squared error
            # changes by 2 u_i' (Sxx coef - Sxy) v_i + (u_i' Sxx u_i) |v_i|^2 for each pair
            # alone: a pair goes through ICA only where that lowers it
            V = signs[:, None] * Mb[:, c].T - (Q.T @ Ma[:, r]).T            # (pairs, Db)
            U = Ua[r]                                                       # (pairs, Da)
            keep = np.ones(r.size, bool)
            if select:
                with small_linalg():
                    G = Sxx @ coef - Sxy
                    gain = 2.0 * np.einsum("id,id->i", U @ G, V) + va[r] * np.einsum("ie,ie->i", V, V)
                keep = gain < 0
            coef = coef + U[keep].T @ V[keep]
            r, c, signs = r[keep], c[keep], signs[keep]
        self.unmixing_a_, self.mixing_a_ = Ua, Ma
        self.unmixing_b_, self.mixing_b_ = Ub, Mb
        self.pairs_ = np.stack([r, c], axis=1)
        self.signs_ = signs
        self.n_components_ = k
        self.n_identified_ = (int(ma), int(mb))
        return self._set(coef, m.mean_x, m.mean_y)


def prepared_side(X, name, eval_mask, sample_rows, diam_rows, dtype, block_rows, ica_ks, seeds, ica_params,
                  groups=None):
    """One representation of :func:`~actkit.compare_many`, read once: its :class:`Side`
    (moments, diameter and ICA sample rows) with the FastICA fits of every ``(n_components,
    width)`` in ``ica_ks`` that its pairs will ask for, and no rows kept (``X`` is dropped, so
    the side can travel to other processes); ``groups``: the input-sample id of every row
    (or None). A fit that fails (too few rows, ...) is left to
    the pair, which raises it with :func:`~actkit.compare`'s own message."""
    side = Side(X, name, eval_mask, sample_rows, diam_rows, dtype, groups=groups)   # groups: the Gaussian check's
    side.run(block_rows)
    for n_components, width in ica_ks:
        try:
            k, _ = ica_fit_components(n_components, width, side.sample.shape[0])
            side_fits(side, k, seeds, ica_params)
        except ValueError:
            pass
    side.X = None
    return side
