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
