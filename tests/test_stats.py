"""RunningMoments: float64 streaming mean/covariance, merge, resume."""

import numpy as np
import pytest

from actkit.stats import RunningMoments, iter_row_blocks


def _data(n=3000, d=6, dtype=np.float64, offset=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + offset).astype(dtype)


@pytest.mark.parametrize("block", [1, 7, 500, 5000])
def test_matches_numpy_for_any_block_size(block):
    X = _data()
    m = RunningMoments()
    for b in iter_row_blocks(X, block):
        m.add(b)
    np.testing.assert_allclose(m.mean_, X.mean(0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.covariance(), np.cov(X, rowvar=False), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m.covariance(ddof=0), np.cov(X, rowvar=False, ddof=0), rtol=1e-10, atol=1e-12)
    assert m.n_samples_ == len(X)


def test_float32_large_offset_is_accurate():
    # the textbook E[xx'] - mu mu' would lose every digit here; the shifted sums do not
    X = _data(dtype=np.float32, offset=1e4)
    ref = np.cov(X.astype(np.float64), rowvar=False)
    for precision in ("auto", "float64"):
        m = RunningMoments(precision=precision)
        for b in iter_row_blocks(X, 256):
            m.add(b)
        np.testing.assert_allclose(m.mean_, X.astype(np.float64).mean(0), rtol=1e-12)
        np.testing.assert_allclose(m.covariance(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_merge_and_state_dict_resume():
    X = _data(seed=3)
    parts = np.array_split(X, 5)
    a, b = RunningMoments(), RunningMoments()
    for p in parts[:2]:
        a.add(p)
    for p in parts[2:]:
        b.add(p + 0)  # different shift than a
    a.merge(b)
    np.testing.assert_allclose(a.covariance(), np.cov(X, rowvar=False), rtol=1e-10)
    # interrupt after two blocks, save, restore into a fresh object, continue
    c = RunningMoments()
    for p in parts[:2]:
        c.add(p)
    state = {k: np.array(v) for k, v in c.state_dict().items()}
    d = RunningMoments().load_state_dict(state)
    for p in parts[2:]:
        d.add(p)
    np.testing.assert_allclose(d.mean_, X.mean(0), atol=1e-12)
    np.testing.assert_allclose(d.covariance(), np.cov(X, rowvar=False), rtol=1e-10)


def test_errors():
    m = RunningMoments()
    with pytest.raises(ValueError, match="no rows"):
        m.mean_
    m.add(np.ones((3, 2)))
    with pytest.raises(ValueError, match="features"):
        m.add(np.ones((3, 4)))
    with pytest.raises(ValueError, match="NaN"):
        m.add(np.array([[np.nan, 1.0]]))
    with pytest.raises(ValueError, match="ddof"):
        RunningMoments().add(np.ones((1, 2))).covariance()


def test_h5py_streaming(tmp_path):
    import h5py
    X = _data(dtype=np.float32, seed=4)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["x"] = X
    with h5py.File(tmp_path / "x.h5", "r") as f:
        m = RunningMoments()
        for b in iter_row_blocks(f["x"], 333):
            m.add(b)
    ref = RunningMoments().add(X)
    np.testing.assert_allclose(m.covariance(), ref.covariance(), rtol=1e-6)


def test_add_of_a_stream_is_one_pass_on_the_runner(tmp_path):
    """A stream handed to ``add`` is the runner's :func:`moments_pass`, bit for bit, and agrees
    with the in-memory block; a fixed shift is kept."""
    import h5py

    from actkit._rows import block_rows
    from actkit.runners import LOCAL
    from actkit.stats import moments_pass

    X = np.random.default_rng(3).standard_normal((5000, 7)).astype(np.float32) + 2.0
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["x"] = X
    with h5py.File(tmp_path / "x.h5", "r") as f:
        got = RunningMoments().add(f["x"])
        want, _ = LOCAL.run(f["x"], moments_pass(block_rows(7), precision="auto"))
        shifted = RunningMoments(shift=np.ones(7)).add(f["x"])
    assert got.n_samples_ == 5000
    np.testing.assert_array_equal(got.covariance(), want.covariance())
    np.testing.assert_array_equal(got.mean_, want.mean_)
    ref = RunningMoments().add(X)
    np.testing.assert_allclose(got.covariance(), ref.covariance(), rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(shifted.shift_, np.ones(7))
    np.testing.assert_allclose(shifted.mean_, ref.mean_, rtol=1e-6)


# ----------------------------------------------------------------------------- ColumnMoments
def _scipy_moments(X):
    import scipy.stats

    X = np.asarray(X, np.float64)
    return X.mean(0), X.var(0, ddof=1), scipy.stats.skew(X), scipy.stats.kurtosis(X)


def _check_columns(m, X, rtol):
    mean, var, skew, kurt = _scipy_moments(X)
    skew, kurt = np.nan_to_num(skew), np.nan_to_num(kurt)  # a constant column: 0 here, NaN in scipy
    np.testing.assert_allclose(m.mean_, mean, rtol=1e-12, atol=0)
    np.testing.assert_allclose(m.variance(), var, rtol=rtol, atol=0)
    np.testing.assert_allclose(m.skewness(), skew, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(m.kurtosis(), kurt, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("scale,offset", [(1e-31, 0.0), (4.0, 1e6), (1.0, 0.0), (0.5, -3e5)])
def test_column_moments_of_near_constant_columns_are_numpy_s_float64(scale, offset):
    """Values near 1e-31 (float32 powers underflow) and 1e6 +- a few (float32 sums cancel):
    the moments numpy and scipy compute in float64 from the same float32 values."""
    from actkit.stats import ColumnMoments

    rng = np.random.default_rng(11)
    X = (offset + scale * np.c_[rng.exponential(size=5000), rng.uniform(size=5000), rng.normal(size=5000)]
         ).astype(np.float32)
    m = ColumnMoments()
    for b in iter_row_blocks(X, 333):
        m.add(b)
    _check_columns(m, X, rtol=1e-9)
    assert m.n == len(X)


def test_column_moments_merge_in_any_order_and_resume():
    from actkit.stats import ColumnMoments

    rng = np.random.default_rng(12)
    X = (rng.laplace(size=(4000, 5)) * [1, 10, 0.1, 1, 3] + [0, 5, -2, 1e3, 0]).astype(np.float32)
    parts = [ColumnMoments().add(p) for p in np.array_split(X, 6)]  # each its own reference
    tree = parts[0].copy().merge(parts[1]).merge(parts[2].copy().merge(parts[3]))
    tree.merge(parts[4].copy().merge(parts[5]))
    _check_columns(tree, X, rtol=1e-10)
    assert parts[0].n == len(np.array_split(X, 6)[0])  # copy() kept the part as it was
    back = ColumnMoments().load_state_dict(tree.state_dict())
    np.testing.assert_array_equal(back.kurtosis(), tree.kurtosis())
    assert ColumnMoments().merge(ColumnMoments()).n == 0


def test_column_moments_from_the_non_zero_entries_of_mostly_zero_blocks():
    from actkit.stats import ColumnMoments

    rng = np.random.default_rng(13)
    X = np.where(rng.random((3000, 7)) < 0.05, rng.exponential(size=(3000, 7)), 0).astype(np.float32)
    X[:, 3] = 0  # a column that is never non-zero
    m = ColumnMoments(7)
    for s in range(0, 3000, 250):
        r, u = np.nonzero(X[s:s + 250])
        m.add_entries(len(X[s:s + 250]), u, X[s:s + 250][r, u])
    dense = ColumnMoments().add(X)
    _check_columns(m, X, rtol=1e-10)
    np.testing.assert_allclose(m.kurtosis(), dense.kurtosis(), rtol=1e-10)
    assert m.skewness()[3] == 0 and m.kurtosis()[3] == 0 and m.variance()[3] == 0


def test_column_moments_refuse_a_block_of_another_width():
    from actkit.errors import ValidationError
    from actkit.stats import ColumnMoments

    m = ColumnMoments().add(np.ones((3, 4)))
    with pytest.raises(ValidationError, match="4"):
        m.add(np.ones((3, 5)))
    with pytest.raises(ValidationError, match="no rows"):
        ColumnMoments().skewness()


def test_cross_moments_correlation_equals_numpy_corrcoef():
    from actkit.stats import CrossMoments

    rng = np.random.default_rng(14)
    X = rng.normal(size=(2000, 4)) + 100  # far from the origin: the shifted sums keep the digits
    Y = np.c_[X[:, :2] @ rng.normal(size=(2, 2)), rng.normal(size=2000), np.full(2000, 3.0)]
    cm = CrossMoments(debiased_terms=False)
    for s in range(0, 2000, 300):
        cm.add(X[s:s + 300], Y[s:s + 300])
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.corrcoef(X.T, Y.T)[:4, 4:]
    want[:, 3] = 0  # a constant column: 0, not NaN
    np.testing.assert_allclose(cm.correlation(), want, rtol=0, atol=1e-12)
