"""Linear CKA (plain, debiased), mean CCA, linear R^2 against direct formulas and sklearn."""

import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.cross_decomposition import CCA
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from actkit.metrics import linear_cka, linear_r2, mean_cca
from actkit.stats import CrossMoments


# --- reference implementations in sample space (N x N Gram matrices) ---------------------
def _center_gram(gram, unbiased=False):
    gram = gram.copy()
    n = gram.shape[0]
    if unbiased:
        np.fill_diagonal(gram, 0)
        means = gram.sum(0) / (n - 2)
        means -= means.sum() / (2 * (n - 1))
        gram -= means[:, None]
        gram -= means[None, :]
        np.fill_diagonal(gram, 0)
    else:
        means = gram.mean(0)
        means -= means.mean() / 2
        gram -= means[:, None]
        gram -= means[None, :]
    return gram


def _cka_gram(X, Y, unbiased=False):
    K = _center_gram(X @ X.T, unbiased)
    L = _center_gram(Y @ Y.T, unbiased)
    return np.sum(K * L) / np.sqrt(np.sum(K * K) * np.sum(L * L))


def _data(seed=0, n=200, p=6, q=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) @ rng.normal(size=(p, p)) + 3.0
    Y = np.tanh(X[:, :q]) + 0.5 * rng.normal(size=(n, q)) - 2.0
    return X, Y


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("debiased", [False, True])
def test_cka_matches_gram_reference(seed, debiased):
    X, Y = _data(seed)
    assert linear_cka(X, Y, debiased=debiased) == pytest.approx(
        _cka_gram(X, Y, unbiased=debiased), rel=1e-9, abs=1e-12)


def test_cka_plain_direct_formula():
    X, Y = _data(3)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    direct = np.linalg.norm(Xc.T @ Yc) ** 2 / (np.linalg.norm(Xc.T @ Xc) * np.linalg.norm(Yc.T @ Yc))
    assert linear_cka(X, Y) == pytest.approx(direct, rel=1e-10)


@pytest.mark.parametrize("debiased", [False, True])
def test_cka_invariances(debiased):
    X, Y = _data(4)
    Q = ortho_group.rvs(Y.shape[1], random_state=0)
    base = linear_cka(X, Y, debiased=debiased)
    assert linear_cka(X, 2.5 * Y @ Q + 7.0, debiased=debiased) == pytest.approx(base, rel=1e-9)
    assert linear_cka(X, X, debiased=debiased) == pytest.approx(1.0)
    # not invariant to an anisotropic (non-orthogonal) map
    M = np.diag([1.0, 10.0, 0.1, 3.0])
    assert abs(linear_cka(X, Y @ M, debiased=debiased) - base) > 1e-3


def test_cka_streaming_matches_in_memory_float32():
    X, Y = _data(5, n=1000)
    m = CrossMoments()
    for s in range(0, 1000, 128):
        m.add(X[s:s + 128].astype(np.float32), Y[s:s + 128].astype(np.float32))
    assert _cka(m) == pytest.approx(linear_cka(X, Y), rel=1e-4)
    assert _cka(m, True) == pytest.approx(linear_cka(X, Y, debiased=True), rel=1e-3)
    # merge of two halves equals the whole
    a = CrossMoments().add(X[:300], Y[:300])
    b = CrossMoments(shift_x=a.shift_x, shift_y=a.shift_y).add(X[300:], Y[300:])
    assert _cka(a.merge(b), True) == pytest.approx(linear_cka(X, Y, debiased=True), rel=1e-9)


def test_debiased_cka_near_zero_for_independent_data():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(300, 50)), rng.normal(size=(300, 50))
    assert linear_cka(X, Y) > 0.1            # biased estimator inflated by p/n
    assert abs(linear_cka(X, Y, debiased=True)) < 0.02


def test_mean_cca_matches_sklearn():
    X, Y = _data(6, n=500, p=5, q=4)
    cca = CCA(n_components=4, max_iter=5000, tol=1e-12).fit(X, Y)
    xs, ys = cca.transform(X, Y)
    ref = np.mean([abs(np.corrcoef(xs[:, i], ys[:, i])[0, 1]) for i in range(4)])
    assert mean_cca(X, Y) == pytest.approx(ref, abs=1e-5)
    assert mean_cca(X, Y, n_components=2) == pytest.approx(
        np.mean([abs(np.corrcoef(xs[:, i], ys[:, i])[0, 1]) for i in range(2)]), abs=1e-5)


def test_mean_cca_invariant_to_invertible_affine_maps():
    X, Y = _data(7)
    rng = np.random.default_rng(1)
    base = mean_cca(X, Y)
    assert mean_cca(X @ rng.normal(size=(6, 6)) + 4, Y) == pytest.approx(base, rel=1e-8)
    assert mean_cca(X, X @ rng.normal(size=(6, 6)) - 1) == pytest.approx(1.0, abs=1e-8)
    indep = mean_cca(rng.normal(size=(2000, 3)), rng.normal(size=(2000, 3)))
    assert indep < 0.05


def test_linear_r2_matches_sklearn():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(400, 3))
    Z = S @ rng.normal(size=(3, 5)) + 0.3 * rng.normal(size=(400, 5)) + 2
    r2, per = linear_r2(Z, S, random_state=3, per_latent=True)
    perm = np.random.default_rng(3).permutation(400)
    test, fit = perm[:200], perm[200:]
    pred = LinearRegression().fit(Z[fit], S[fit]).predict(Z[test])
    assert r2 == pytest.approx(r2_score(S[test], pred), rel=1e-9)
    assert per.shape == (3,)
    # exact affine relation -> 1; invariance to an invertible map of Z
    assert linear_r2(S @ rng.normal(size=(3, 3)) + 1, S) == pytest.approx(1.0, abs=1e-9)
    assert linear_r2(np.tanh(3 * S), S) < 0.95


def test_input_validation():
    with pytest.raises(ValueError, match="same number of rows"):
        linear_cka(np.ones((5, 2)), np.ones((6, 2)))
    bad = np.ones((5, 2))
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        mean_cca(bad, np.ones((5, 2)))
    with pytest.raises(ValueError, match="at least 4"):
        linear_cka(np.eye(3), np.eye(3), debiased=True)


def _cka(cm, debiased=False):
    """CKA of a CrossMoments through the measure (the one place CKA is computed)."""
    from actkit.measures import Moments, get_measure

    return get_measure("linear_cka_debiased" if debiased else "linear_cka").compute(Moments.from_cross(cm))
