"""SparseDictionary: planted-dictionary recovery, codes, streaming, sklearn estimator checks."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import actkit
from actkit.dictionary import SparseDictionary, sparse_dictionary
from actkit.dictionary._coding import _batched_spd_solve


def planted(n=4000, d=24, n_atoms=48, k=3, seed=0, positive=False, noise=0.01):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(n_atoms, d))
    D /= np.linalg.norm(D, axis=1, keepdims=True)
    support = np.argsort(rng.random((n, n_atoms)), axis=1)[:, :k]
    coef = rng.uniform(0.5, 1.5, size=(n, k))
    if not positive:
        coef *= rng.choice([-1, 1], size=(n, k))
    codes = np.zeros((n, n_atoms))
    np.put_along_axis(codes, support, coef, axis=1)
    X = codes @ D + noise * rng.normal(size=(n, d))
    return X.astype(np.float32), D, codes


def recovery(D_true, D_est, thr=0.95):
    return float((np.abs(D_true @ D_est.T).max(axis=1) > thr).mean())


# Every scikit-learn estimator check runs and passes (no expected_failed_checks); the only
# one not run is check_array_api_input, which scikit-learn skips itself unless SCIPY_ARRAY_API=1.
# (k=1: scikit-learn's checks refit with n_components=1, and k <= n_components)
@parametrize_with_checks(
    [SparseDictionary(6, k=1, random_state=0), SparseDictionary(5, code="l1", alpha=0.1, random_state=0)],
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_topk_recovers_planted_dictionary():
    X, D, codes = planted()
    sd = SparseDictionary(48, k=3, random_state=0).fit(X)
    assert sd.dictionary_.shape == (48, 24) and sd.dictionary_.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(sd.dictionary_, axis=1), 1, atol=1e-5)
    assert recovery(D, sd.dictionary_) >= 0.9
    A = sd.transform(X)
    assert A.shape == (4000, 48) and ((A != 0).sum(axis=1) <= 3).all()
    assert sd.reconstruction_error_ < 0.05
    assert sd.mean_active_ == pytest.approx(3.0)
    np.testing.assert_allclose(sd.inverse_transform(A), A @ sd.dictionary_, rtol=1e-6)


def test_warmup_then_full_passes():
    X, D, _ = planted(n=9000, seed=1)
    sd = SparseDictionary(48, k=3, random_state=0, warmup_rows=3000, n_epochs=2).fit(X)
    assert sd.n_iter_warmup_ > 0 and sd.n_iter_ == 2
    assert recovery(D, sd.dictionary_) >= 0.9


def test_positive_codes():
    X, D, _ = planted(positive=True, seed=2)
    sd = SparseDictionary(48, k=3, positive=True, random_state=0).fit(X)
    A = sd.transform(X)
    assert (A >= 0).all()
    assert recovery(D, sd.dictionary_) >= 0.85


def test_l1_codes_are_sparse_and_fit():
    X, D, _ = planted(n=2000, d=16, n_atoms=24, k=2, seed=3)
    sd = SparseDictionary(24, code="l1", alpha=0.05, max_iter=15, tol=1e-3, random_state=0).fit(X)
    A = sd.transform(X)
    assert (A == 0).mean() > 0.6  # sparse
    assert sd.reconstruction_error_ < 0.1
    # KKT conditions of the lasso on a few rows: |D(x - aD)| <= alpha, equality on the support
    Dm = sd.dictionary_.astype(np.float64)
    r = (X[:20].astype(np.float64) - A[:20] @ Dm) @ Dm.T
    assert np.abs(r).max() <= 0.05 * 1.05
    on = A[:20] != 0
    np.testing.assert_allclose(np.abs(r[on]), 0.05, atol=5e-3)


def test_streaming_store(tmp_path):
    from actkit.store import LayerSpec, create_store

    X, D, _ = planted(n=6000, seed=4)
    w = create_store(tmp_path / "s.h5", [LayerSpec("l", 6000, 24)], n_samples=6000, request={"t": 1})
    w.append("l", X)
    w.checkpoint(6000)
    w.finalize()
    layer = actkit.open_store(tmp_path / "s.h5")["l"]
    sd = SparseDictionary(48, k=3, random_state=0, batch_size=1000, warmup_rows=2500, max_iter=30).fit(layer)
    assert recovery(D, sd.dictionary_) >= 0.9
    ref = SparseDictionary(48, k=3, random_state=0, batch_size=1000, warmup_rows=2500, max_iter=30).fit(X)
    np.testing.assert_allclose(sd.dictionary_, ref.dictionary_, atol=1e-4)
    np.testing.assert_allclose(sd.transform(layer), ref.transform(X), atol=1e-3)


def test_function_and_errors():
    X, D, _ = planted(n=1500, seed=5)
    codes, dictionary = sparse_dictionary(X, 48, k=3, random_state=0)
    assert codes.shape == (1500, 48) and dictionary.shape == (48, 24)
    with pytest.raises(ValueError, match="n_components"):
        SparseDictionary(0).fit(X)
    with pytest.raises(ValueError, match="k must"):
        SparseDictionary(4, k=5).fit(X)
    with pytest.raises(ValueError, match="code"):
        SparseDictionary(4, code="omp").fit(X)
    bad = X.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="NaN|infinity"):
        SparseDictionary(4).fit(bad)


def test_batched_solver():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(50, 4, 6))
    A = M @ M.transpose(0, 2, 1) + 0.1 * np.eye(4)
    b = rng.normal(size=(50, 4))
    np.testing.assert_allclose(_batched_spd_solve(A, b), np.linalg.solve(A, b[..., None])[..., 0], rtol=1e-10)


@pytest.mark.parametrize("kw", [{"k": 3}, {"k": 3, "positive": True}, {"code": "l1", "alpha": 0.05}])
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.usefixtures("torch_one_thread")
def test_torch_backend_matches_numpy(monkeypatch, kw):
    # device="cuda" runs the torch kernels; here they run on CPU tensors (no GPU in CI) and
    # must give the numpy kernels' dictionary, codes and statistics
    import actkit.dictionary._epoch as dm_epoch
    import actkit.dictionary._estimator as dm_estimator

    X, D, _ = planted(n=3000, seed=7, positive=kw.get("positive", False))
    X = X.astype(np.float64)
    ref = SparseDictionary(48, random_state=0, max_iter=8, **kw).fit(X)
    for dm in (dm_epoch, dm_estimator):   # training epochs and transform
        monkeypatch.setattr(dm, "is_accelerator", lambda device: True)
    got = SparseDictionary(48, random_state=0, max_iter=8, **kw).fit(X)
    np.testing.assert_allclose(got.dictionary_, ref.dictionary_, atol=1e-8)
    assert got.reconstruction_error_ == pytest.approx(ref.reconstruction_error_, rel=1e-8)
    assert got.mean_active_ == pytest.approx(ref.mean_active_)
    np.testing.assert_allclose(got.transform(X[:500]), ref.transform(X[:500]), atol=1e-8)


def test_unavailable_device_is_a_clear_error():
    import torch

    X, _, _ = planted(n=500)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            SparseDictionary(8, k=2, device="cuda").fit(X)
    with pytest.raises(ValueError, match="unknown device"):
        SparseDictionary(8, k=2, device="gpu0").fit(X)
