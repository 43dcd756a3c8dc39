"""Row sources: arrays, tensors, h5py datasets and store layers read the same way."""

import h5py
import numpy as np
import pytest
import torch

from actkit import _data
from actkit.store import LayerSpec, create_store, open_store


@pytest.fixture
def sources(tmp_path):
    X = np.random.default_rng(0).normal(size=(1003, 7)).astype(np.float32)
    with h5py.File(tmp_path / "plain.h5", "w") as f:
        f["X"] = X
    w = create_store(tmp_path / "s.h5", [LayerSpec("x", 1003, 7)], n_samples=1003, request={"r": 1})
    w.append("x", X)
    w.checkpoint(1003)
    w.finalize()
    f = h5py.File(tmp_path / "plain.h5", "r")
    st = open_store(tmp_path / "s.h5")
    yield X, [X, torch.from_numpy(X), f["X"], st["x"]]
    f.close()
    st.close()


def test_every_source_streams_the_same_rows(sources):
    X, srcs = sources
    for src in srcs:
        assert _data.n_rows(src) == 1003 and _data.n_features(src) == 7
        blocks = list(_data.iter_blocks(src, block_rows=100, dtype=np.float64))
        assert [len(b) for b in blocks] == [100] * 10 + [3]
        np.testing.assert_array_equal(np.concatenate(blocks), X.astype(np.float64))
        np.testing.assert_array_equal(_data.as_array(src), X)
        part = np.concatenate(list(_data.iter_blocks(src, block_rows=64, start=10, stop=500)))
        np.testing.assert_array_equal(part, X[10:500])
    assert [_data.is_streaming(s) for s in srcs] == [False, False, True, True]


def test_prefetch_propagates_errors_and_stops_early(sources):
    X, srcs = sources
    it = _data.iter_blocks(srcs[3], block_rows=10)
    first = next(it)
    np.testing.assert_array_equal(first, X[:10])
    it.close()  # consumer stops early: the reader thread must not hang

    def bad(s):
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(_data._prefetched(bad, [0, 1]))


def test_non_matrix_is_refused():
    with pytest.raises(ValueError, match="2-D"):
        _data.n_features(np.zeros(5))
