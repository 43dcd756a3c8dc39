"""FastICA against scikit-learn, invariances, streaming, backends, sklearn estimator checks."""

import warnings

import numpy as np
import pytest
from sklearn.decomposition import FastICA as SkFastICA
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import actkit
from actkit.ica import FastICA, fastica
from actkit.metrics import amari_distance


def _mixture(n=4000, seed=0, kind="mixed"):
    rng = np.random.default_rng(seed)
    if kind == "laplace":
        S = rng.laplace(size=(n, 6))
    elif kind == "uniform":
        S = rng.uniform(-1, 1, size=(n, 6))
    else:
        S = np.c_[rng.laplace(size=(n, 3)), rng.uniform(-1, 1, size=(n, 3))]
    A = rng.normal(size=(6, 6))
    return S @ A.T, S, A


def _sklearn(X, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return SkFastICA(whiten="unit-variance", max_iter=1000, random_state=0, **kw).fit(X)


# Every scikit-learn estimator check runs and passes (no expected_failed_checks); the only
# one not run is check_array_api_input, which scikit-learn skips itself unless SCIPY_ARRAY_API=1.
@parametrize_with_checks([FastICA(random_state=0), FastICA(n_components=2, algorithm="deflation", random_state=0)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("fun", ["logcosh", "exp", "cube"])
@pytest.mark.parametrize("kind", ["laplace", "uniform", "mixed"])
def test_parallel_matches_sklearn(fun, kind):
    X, S, A = _mixture(kind=kind)
    ours = FastICA(fun=fun, random_state=0).fit(X)
    ref = _sklearn(X, fun=fun)
    d_ours, d_ref = amari_distance(ours.components_, A), amari_distance(ref.components_, A)
    # same objective, converged at least as tightly: equal or better up to float noise
    assert d_ours <= d_ref * 1.02 + 1e-4, (d_ours, d_ref)
    assert d_ours < 0.05
    C = np.abs(np.corrcoef(ours.transform(X).T, ref.transform(X).T)[:6, 6:])
    assert C.max(axis=1).min() >= 0.99


@pytest.mark.parametrize("fun", ["logcosh", "exp", "cube"])
@pytest.mark.parametrize("kind", ["laplace", "uniform", "mixed"])
def test_deflation_matches_sklearn(fun, kind):
    # the whitening basis follows sklearn's sign convention and the same random_state gives
    # the same starting vectors, so both extract the components in the same order: equal or
    # better Amari distance on every seed, and the same sources
    for seed in range(2):
        X, S, A = _mixture(n=3000, seed=seed, kind=kind)
        ours = FastICA(algorithm="deflation", fun=fun, random_state=0).fit(X)
        ref = _sklearn(X, algorithm="deflation", fun=fun)
        d_ours, d_ref = amari_distance(ours.components_, A), amari_distance(ref.components_, A)
        assert d_ours <= d_ref * 1.02 + 1e-4, (seed, d_ours, d_ref)
        assert d_ours < 0.06
        C = np.abs(np.corrcoef(ours.transform(X).T, ref.transform(X).T)[:6, 6:])
        assert C.max(axis=1).min() >= 0.99


def test_attributes_and_round_trip():
    X, S, A = _mixture()
    ica = FastICA(n_components=4, random_state=0).fit(X)
    assert ica.components_.shape == (4, 6) and ica.mixing_.shape == (6, 4)
    assert ica.whitening_.shape == (4, 6) and ica.mean_.shape == (6,)
    np.testing.assert_allclose(ica.mixing_, np.linalg.pinv(ica.components_), atol=1e-8)
    full = FastICA(random_state=0).fit(X)
    Y = full.transform(X)
    np.testing.assert_allclose(full.inverse_transform(Y), X, atol=1e-8)
    # whiten="unit-variance" (scikit-learn's default): np.std(S) == 1 (ddof=0)
    np.testing.assert_allclose(np.cov(Y, rowvar=False, ddof=0), np.eye(6), atol=1e-6)
    K, W, S2 = fastica(X, random_state=0)
    np.testing.assert_allclose(S2, Y, atol=1e-10)
    n = X.shape[0]
    np.testing.assert_allclose(np.sqrt(n / (n - 1)) * W @ K, full.components_, atol=1e-10)


def test_deterministic_and_float32():
    X, S, A = _mixture(seed=1)
    a = FastICA(random_state=3).fit(X).components_
    b = FastICA(random_state=3).fit(X).components_
    np.testing.assert_array_equal(a, b)
    ica = FastICA(random_state=0).fit(X.astype(np.float32))
    assert ica.components_.dtype == np.float32
    assert ica.transform(X.astype(np.float32)).dtype == np.float32
    assert amari_distance(ica.components_, A) < 0.05


def test_whiten_false_on_prewhitened_input():
    X, S, A = _mixture(seed=2)
    w = actkit.Whitener().fit(X)
    Z = w.transform(X)
    ica = FastICA(whiten=False, random_state=0).fit(Z)
    np.testing.assert_allclose(ica.mean_, 0)
    np.testing.assert_allclose(ica.whitening_, np.eye(6))
    assert amari_distance(ica.components_ @ w.whitening_, A) < 0.05


def test_warmup_subsample_path():
    X, S, A = _mixture(n=12000, seed=4, kind="laplace")
    ica = FastICA(random_state=0, warmup_rows=3000).fit(X)
    assert ica.n_iter_warmup_ > 0
    ref = FastICA(random_state=0, warmup_rows=None).fit(X)
    assert amari_distance(ica.components_, A) <= amari_distance(ref.components_, A) + 1e-3


def test_streaming_store_equals_in_memory(tmp_path):
    from actkit.store import LayerSpec, create_store

    X, S, A = _mixture(n=3000, seed=5)
    X = X.astype(np.float32)
    w = create_store(tmp_path / "s.h5", [LayerSpec("l", 3000, 6)], n_samples=3000, request={"t": 1})
    w.append("l", X)
    w.checkpoint(3000)
    w.finalize()
    layer = actkit.open_store(tmp_path / "s.h5")["l"]
    for kw in ({}, {"warmup_rows": 1000}, {"algorithm": "deflation"}):
        a = FastICA(random_state=0, block_rows=256, **kw).fit(layer)
        b = FastICA(random_state=0, **kw).fit(X)
        np.testing.assert_allclose(a.components_, b.components_, rtol=1e-3, atol=1e-3 * np.abs(b.components_).max())
    np.testing.assert_allclose(a.transform(layer), b.transform(X), atol=1e-2)


def test_torch_backend_matches_numpy():
    # the torch kernels (used on GPUs) give the numpy (CPU) result
    from actkit.ica._contrast import contrast
    from actkit.ica._picard import picard_o
    from actkit.ica._rotations import sym_decorrelation
    from actkit.ica._source import WhitenedSource, data_pass

    X, S, A = _mixture(n=2000, seed=6)
    f = contrast("logcosh", 1.0)
    Z = np.ascontiguousarray(actkit.Whitener().fit_transform(X), dtype=np.float64)
    W = sym_decorrelation(np.random.default_rng(0).normal(size=(6, 6)))
    src_np = WhitenedSource(Z=Z, dtype=np.float64)
    src_t = WhitenedSource(Z=Z, dtype=np.float64)
    import torch

    src_t.use_torch = True
    src_t.Z = torch.from_numpy(Z)
    for a, b in zip(data_pass(src_np, W, f), data_pass(src_t, W, f)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    Wa, *_ = picard_o(src_np, W, f, tol=1e-6, max_iter=100)
    Wb, *_ = picard_o(src_t, W, f, tol=1e-6, max_iter=100)
    np.testing.assert_allclose(Wa, Wb, atol=1e-8)


def test_convergence_warning_and_errors():
    X, S, A = _mixture(seed=7)
    with pytest.warns(ConvergenceWarning, match="increase max_iter"):
        FastICA(max_iter=1, random_state=0).fit(X)
    with pytest.raises(ValueError, match="between 1 and"):
        FastICA(n_components=7).fit(X)
    with pytest.raises(ValueError, match="algorithm"):
        FastICA(algorithm="symmetric").fit(X)
    with pytest.raises(ValueError, match="fun"):
        FastICA(fun="tanh").fit(X)
    bad = X.copy()
    bad[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinity|NaN"):
        FastICA().fit(bad)
