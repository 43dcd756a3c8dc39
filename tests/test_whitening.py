"""Whitener / whiten: identity covariance, ZCA symmetry, invariances, streaming, sklearn checks."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

import actkit
from actkit.whitening import RankDeficientWarning, Whitener, whiten


def _data(n=2000, d=8, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    X = rng.laplace(size=(n, d)) @ rng.normal(size=(d, d)) + rng.normal(size=d) * 5
    return X.astype(dtype)


def _store(path, X, name="layer"):
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec(name, X.shape[0], X.shape[1])], n_samples=X.shape[0], request={"t": 1})
    for s in range(0, len(X), 300):
        w.append(name, X[s : s + 300].astype(np.float32))
    w.checkpoint(X.shape[0])
    w.finalize()
    return actkit.open_store(path)


# Every scikit-learn estimator check runs and passes (no expected_failed_checks); the only
# one not run is check_array_api_input, which scikit-learn skips itself unless SCIPY_ARRAY_API=1.
@parametrize_with_checks([Whitener(), Whitener(method="zca"), Whitener(n_components=2)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("method", ["pca", "zca"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_identity_covariance(method, dtype):
    X = _data(dtype=dtype)
    w = Whitener(method=method).fit(X)
    Z = w.transform(X)
    assert Z.dtype == dtype
    np.testing.assert_allclose(np.cov(Z.astype(np.float64), rowvar=False), np.eye(Z.shape[1]), atol=1e-4)
    np.testing.assert_allclose(w.inverse_transform(Z), X, rtol=1e-3, atol=1e-3 * np.abs(X).max())
    assert w.n_components_ == w.rank_ == X.shape[1]


def test_zca_symmetric_and_pca_formula():
    X = _data()
    zca = Whitener(method="zca").fit(X)
    np.testing.assert_allclose(zca.whitening_, zca.whitening_.T, atol=1e-12)
    # spec: W = Lambda_k^{-1/2} U_k' from eigh of the ddof=1 covariance
    pca = Whitener(n_components=3).fit(X)
    lam, U = np.linalg.eigh(np.cov(X, rowvar=False))
    lam, U = lam[::-1][:3], U[:, ::-1][:, :3]
    W = (U / np.sqrt(lam)).T
    np.testing.assert_allclose(np.abs(pca.whitening_), np.abs(W), rtol=1e-8)
    np.testing.assert_allclose(pca.explained_variance_, lam, rtol=1e-10)
    assert pca.whitening_.shape == (3, 8) and pca.transform(X).shape == (2000, 3)


def test_invariant_to_row_order_and_block_size():
    X = _data(seed=1)
    a = Whitener(block_rows=64).fit(X)
    b = Whitener(block_rows=5000).fit(X[np.random.default_rng(0).permutation(len(X))])
    np.testing.assert_allclose(a.whitening_, b.whitening_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.mean_, b.mean_, rtol=1e-12)


def test_rank_deficient_warns_and_refuses_too_many_components():
    X = _data(d=5)
    X = np.c_[X, X[:, 0] + X[:, 1]]  # rank 5 of 6 features
    with pytest.warns(RankDeficientWarning, match="rank 5 < 6"):
        w = Whitener().fit(X)
    assert w.n_components_ == 5 and w.rank_ == 5
    np.testing.assert_allclose(np.cov(w.transform(X), rowvar=False), np.eye(5), atol=1e-6)
    with pytest.raises(ValueError, match="exceeds the rank"):
        Whitener(n_components=6).fit(X)
    with pytest.raises(ValueError, match="between 1 and"):
        Whitener(n_components=7).fit(X)


def test_bad_input():
    X = _data()
    X[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        Whitener().fit(X)
    with pytest.raises(ValueError, match="method"):
        Whitener(method="svd").fit(_data())


def test_streaming_store_equals_in_memory(tmp_path):
    X = _data(n=1500, seed=2).astype(np.float32)
    layer = _store(tmp_path / "s.h5", X)["layer"]
    a = Whitener(n_components=4, block_rows=100).fit(layer)
    b = Whitener(n_components=4).fit(X)
    np.testing.assert_allclose(a.whitening_, b.whitening_, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.transform(layer), b.transform(X), rtol=1e-4, atol=1e-4)
    assert a.n_samples_seen_ == 1500


def test_torch_input_function_clone_pipeline():
    import torch

    X = _data(seed=3)
    Z, mean, W = whiten(torch.from_numpy(X), n_components=3, return_params=True)
    np.testing.assert_allclose(Z, (X - mean) @ W.T, atol=1e-10)
    est = clone(Whitener(method="zca", eps=1e-8))
    assert est.get_params()["eps"] == 1e-8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = make_pipeline(Whitener(n_components=2)).fit_transform(X)
    assert out.shape == (2000, 2)
