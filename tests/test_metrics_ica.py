"""Amari distance, MCC and Hoyer sparsity against their formulas (docs/definitions.md §2-3)."""

import numpy as np
import pytest

from actkit.metrics import amari_distance, hoyer_sparsity, mcc


def _amari_loop(P):
    """The spec formula written out with loops (independent of the vectorised code)."""
    P = np.abs(P)
    n = P.shape[0]
    total = 0.0
    for i in range(n):
        total += sum(P[i, j] for j in range(n)) / max(P[i]) - 1
    for j in range(n):
        total += sum(P[i, j] for i in range(n)) / max(P[:, j]) - 1
    return total / (2 * n * (n - 1))


def test_amari_zero_for_scaled_permuted_inverse():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(5, 5))
    perm = np.eye(5)[rng.permutation(5)]
    scale = np.diag(rng.uniform(0.5, 3, 5) * rng.choice([-1, 1], 5))
    W = scale @ perm @ np.linalg.inv(A)
    assert amari_distance(W, A) == pytest.approx(0.0, abs=1e-12)


def test_amari_matches_loop_formula_and_range():
    rng = np.random.default_rng(1)
    W, A = rng.normal(size=(4, 6)), rng.normal(size=(6, 4))
    d = amari_distance(W, A)
    assert d == pytest.approx(_amari_loop(W @ A), rel=1e-12)
    assert 0 < d <= 1
    assert amari_distance(np.ones((3, 3)), np.eye(3)) == pytest.approx(1.0)


def test_amari_shape_errors():
    with pytest.raises(ValueError, match="columns"):
        amari_distance(np.ones((3, 4)), np.ones((3, 3)))
    with pytest.raises(ValueError, match="NaN"):
        amari_distance(np.full((2, 2), np.nan), np.eye(2))


def test_mcc_invariances_and_value():
    rng = np.random.default_rng(2)
    Z = rng.normal(size=(500, 4))
    Zp = Z[:, [2, 0, 3, 1]] * np.array([-2.0, 0.5, 3.0, -1.0]) + 7.0
    score, (rows, cols) = mcc(Z, Zp, return_matching=True)
    assert score == pytest.approx(1.0, abs=1e-12)
    assert list(cols[np.argsort(rows)]) == [1, 3, 0, 2]
    noise = rng.normal(size=(500, 4))
    assert mcc(Z, noise) < 0.2
    # the matched mean, not the best per row: two estimates of the same latent count once
    dup = np.c_[Z[:, 0], Z[:, 0], noise[:, :2]]
    assert mcc(Z, dup) < 0.7


def test_hoyer_values():
    assert hoyer_sparsity(np.array([0, 0, 3.0, 0])) == pytest.approx(1.0)
    assert hoyer_sparsity(np.array([1, -1, 1, -1.0])) == pytest.approx(0.0)
    x = np.array([1.0, 2.0, 0.0])
    expected = (np.sqrt(3) - 3 / np.sqrt(5)) / (np.sqrt(3) - 1)
    assert hoyer_sparsity(x) == pytest.approx(expected)
    rows = hoyer_sparsity(np.array([[0, 0, 3.0], [1, 1, 1.0]]), reduce=None)
    np.testing.assert_allclose(rows, [1.0, 0.0], atol=1e-12)
    with pytest.raises(ValueError):
        hoyer_sparsity(np.array([1.0]))
