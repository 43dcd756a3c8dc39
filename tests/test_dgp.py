"""Data-generating processes of actkit.synthetic.dgp: the properties the experiments rely on."""

import numpy as np
import pytest
from scipy.spatial.distance import pdist

from actkit.synthetic import dgp


def test_random_orthogonal_columns_and_rows():
    Q = dgp.random_orthogonal(7, 3, random_state=0)
    np.testing.assert_allclose(Q.T @ Q, np.eye(3), atol=1e-12)
    R = dgp.random_orthogonal(3, 7, random_state=0)
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)


def test_isometric_dgp_alpha_one_is_an_isometry():
    X, U, info = dgp.isometric_dgp(300, n_latents=3, n_features=6, alpha=1.0, random_state=1)
    assert X.shape == (300, 6) and U.shape == (300, 3)
    np.testing.assert_allclose(pdist(X), pdist(U), rtol=1e-9)
    assert info["lipschitz_L"] == 0.0
    assert dgp.empirical_bilipschitz(X, U, random_state=0)["L_max"] < 1e-9


@pytest.mark.parametrize("alpha", [0.7, 0.3])
def test_isometric_dgp_distance_ratios_within_bilipschitz_bounds(alpha):
    X, U, info = dgp.isometric_dgp(400, n_latents=4, alpha=alpha, random_state=2)
    r = pdist(X) / pdist(U)
    K = info["n_layers"]
    assert r.max() <= 1 + 1e-9 and r.min() >= alpha ** K - 1e-9
    assert info["lipschitz_L"] == pytest.approx(alpha ** -K - 1)
    est = dgp.empirical_bilipschitz(X, U, random_state=0)
    assert 0 < est["L_mean"] <= est["L_max"] <= info["lipschitz_L"] + 1e-9


def test_isometric_dgp_alpha_sweep_shares_latents_and_weights():
    _, U1, i1 = dgp.isometric_dgp(50, alpha=1.0, random_state=3)
    _, U2, i2 = dgp.isometric_dgp(50, alpha=0.2, random_state=3)
    np.testing.assert_array_equal(U1, U2)
    for a, b in zip(i1["weights"], i2["weights"]):
        np.testing.assert_array_equal(a, b)


def test_isometric_dgp_validation():
    with pytest.raises(ValueError, match="alpha"):
        dgp.isometric_dgp(10, alpha=0.0)
    with pytest.raises(ValueError, match="n_features"):
        dgp.isometric_dgp(10, n_latents=4, n_features=2)
    with pytest.raises(ValueError, match="latent"):
        dgp.isometric_dgp(10, latent="gaussian")


def test_generative_dgp_labels_encode_grid_digits():
    X, Z, y, info = dgp.generative_dgp(2000, n_latents=3, levels=3, sigma=0.1, random_state=0)
    assert X.shape == (2000, 6) and Z.shape == (2000, 3) and info["n_classes"] == 27
    digits = np.stack(np.unravel_index(y, (3, 3, 3)), axis=1)
    nearest = np.abs(Z[:, :, None] - np.linspace(-1, 1, 3)).argmin(-1)
    assert (nearest == digits).mean() > 0.99
    # same mixing for a different sample draw
    X2, Z2, _, _ = dgp.generative_dgp(5, n_latents=3, random_state=9)
    g = dgp.invertible_leaky_mlp(3, 6, alpha=0.2, random_state=0)
    np.testing.assert_allclose(g(Z2), X2)


def test_invertible_leaky_mlp_is_injective_bilipschitz():
    g = dgp.invertible_leaky_mlp(4, 6, n_layers=2, alpha=0.5, random_state=0)
    Z = np.random.default_rng(0).normal(size=(200, 4))
    r = pdist(g(Z)) / pdist(Z)
    assert r.min() >= 0.5 ** 2 - 1e-9 and r.max() <= 1 + 1e-9
    np.testing.assert_array_equal(g(np.zeros((1, 4))), 0)  # bias-free: g(0) = 0


@pytest.mark.parametrize("k", [1, 3])
def test_discriminative_dgp_is_k_sparse_nonnegative(k):
    A = dgp.hadamard_frame(8)
    X, Z, Y, info = dgp.discriminative_dgp(2000, measurement=A, k=k, random_state=0)
    assert Z.shape == (2000, 16) and X.shape == (2000, 16)
    assert ((Z > 0).sum(1) == k).all() and (Z >= 0).all()
    assert Y.shape == (2000, info["n_labels"]) and set(np.unique(Y)) == {0.0, 1.0}
    # labels depend on z only through A z: each label correlates with its logit v_c . A z
    V = dgp.random_orthogonal(info["n_labels"], 8, random_state=1)
    logit = Z @ A.T @ V.T
    corr = [np.corrcoef(logit[:, c], Y[:, c])[0, 1] for c in range(Y.shape[1])]
    assert min(corr) > 0.2
    with pytest.raises(ValueError, match="k must be"):
        dgp.discriminative_dgp(10, measurement=A, k=17)


def test_hadamard_frame_and_mutual_coherence():
    A = dgp.hadamard_frame(16)
    assert A.shape == (16, 32)
    np.testing.assert_allclose(np.linalg.norm(A, axis=0), 1)
    assert dgp.mutual_coherence(A) == pytest.approx(0.25)
    assert dgp.mutual_coherence(np.eye(5)) == 0.0
    B = np.array([[1.0, 1.0], [0.0, 1.0]])
    assert dgp.mutual_coherence(B) == pytest.approx(1 / np.sqrt(2))
    with pytest.raises(ValueError, match="power of two"):
        dgp.hadamard_frame(12)


def _kl(f1, g1, f2, g2):
    l1 = f1 @ g1.T
    l2 = f2 @ g2.T
    l1 = l1 - np.logaddexp.reduce(l1, axis=1, keepdims=True)
    l2 = l2 - np.logaddexp.reduce(l2, axis=1, keepdims=True)
    return float((np.exp(l1) * (l1 - l2)).sum(1).mean())


def test_kl_counterexample_saturates_while_embeddings_scramble():
    kls = []
    for rho in (1.0, 5.0, 20.0):
        f1, g1, f2, g2, labels = dgp.kl_counterexample(rho, n_per_label=50, random_state=0)
        assert f1.shape == (350, 2) and g1.shape == (7, 2)
        # both models put their top label on the true label
        assert ((f1 @ g1.T).argmax(1) == labels).all() and ((f2 @ g2.T).argmax(1) == labels).all()
        kls.append(_kl(f1, g1, f2, g2))
    assert kls[0] > 0.1 and kls[-1] < 1e-3 * kls[0]
    assert kls[0] > kls[1] > kls[2]
    # embeddings are a label-wise permutation of the same points: no linear relation
    lin = np.linalg.lstsq(np.c_[f1, np.ones(len(f1))], f2, rcond=None)[0]
    resid = f2 - np.c_[f1, np.ones(len(f1))] @ lin
    assert (resid ** 2).sum() / ((f2 - f2.mean(0)) ** 2).sum() > 0.8
    with pytest.raises(ValueError, match="permutation"):
        dgp.kl_counterexample(1.0, permutation=(0, 1, 2))


def test_radial_classification_labels_are_angular_sectors():
    X, y = dgp.radial_classification(3000, n_classes=6, noise=0.0, random_state=0)
    r = np.linalg.norm(X, axis=1)
    assert r.min() >= 0.5 and r.max() <= 1.5
    sector = (np.mod(np.arctan2(X[:, 1], X[:, 0]), 2 * np.pi) / (2 * np.pi) * 6).astype(int)
    assert (np.minimum(sector, 5) == y).mean() > 0.999
    assert set(np.unique(y)) == set(range(6))


def test_dgps_are_deterministic():
    a = dgp.generative_dgp(100, random_state=5)
    b = dgp.generative_dgp(100, random_state=5)
    for u, v in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(u, v)
    A = dgp.hadamard_frame(4)
    c = dgp.discriminative_dgp(100, measurement=A, k=2, random_state=5)
    d = dgp.discriminative_dgp(100, measurement=A, k=2, random_state=5)
    for u, v in zip(c[:3], d[:3]):
        np.testing.assert_array_equal(u, v)
