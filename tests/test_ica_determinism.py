"""FastICA passes are deterministic: the unmixing has the same bits at 1 and 2 threads,
for any ``block_rows`` a store is read with, and on a Dask ``LocalCluster``.

The reduction blocks and their merge tree are fixed (``actkit/ica/_reduce.py``), so the
solver's iterates do not depend on how the rows are split among threads or workers.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import actkit
from actkit.ica._reduce import BlockSum, pass_rows
from actkit.store import LayerSpec, create_store


def _mixtures(n=20000, k=8, seed=0):
    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(n, k)) * rng.uniform(0.5, 2.0, size=k)
    return (S @ rng.normal(size=(k, k)).T + 1.0).astype(np.float32)


def _fit(X, threads, **kw):
    with threadpool_limits(limits=threads, user_api="blas"):
        est = actkit.FastICA(random_state=0, init="random", max_iter=500, **kw).fit(X)
    return est


@pytest.fixture(scope="module")
def store_layer(tmp_path_factory):
    X = _mixtures()
    path = tmp_path_factory.mktemp("det") / "s.h5"
    w = create_store(path, [LayerSpec("l", X.shape[0], X.shape[1], dtype="float32")], n_samples=X.shape[0],
                     request={"test": "det"}, overwrite=True)
    w.append("l", X)
    w.checkpoint(w.n_samples, force=True)
    w.finalize()
    return actkit.open_store(path)["l"], X


def test_block_sum_is_the_same_for_any_grouping_of_consecutive_blocks():
    rng = np.random.default_rng(0)
    vals = [(rng.normal(size=3) * 10.0 ** rng.integers(-8, 8),) for _ in range(37)]
    one = BlockSum()
    for i, v in enumerate(vals):
        one.add(i, v)
    ref = one.total()[0]
    for cuts in ([5, 6, 20], [1], [16, 32], [3, 4, 5, 30, 36]):
        parts, lo = [], 0
        for hi in cuts + [len(vals)]:
            p = BlockSum()
            for i in range(lo, hi):
                p.add(i, vals[i])
            parts.append(p)
            lo = hi
        # a balanced tree of merges, as Dask's, and a left fold
        tree = parts
        while len(tree) > 1:
            tree = [tree[i].merge(tree[i + 1]) if i + 1 < len(tree) else tree[i] for i in range(0, len(tree), 2)]
        fold = parts[0]
        for p in parts[1:]:
            fold = fold.merge(p)
        assert np.array_equal(tree[0].total()[0], ref) and np.array_equal(fold.total()[0], ref)
    assert pass_rows(384) == 4096 and pass_rows(16384) == 256


@pytest.mark.parametrize("kw", [dict(), dict(warmup_rows=5000), dict(algorithm="deflation")],
                         ids=["picard", "warmup", "deflation"])
def test_unmixing_bitwise_at_one_and_two_threads_in_memory(kw):
    # one block of 10,000 rows: before the fixed reduction, 2 BLAS threads summed it in
    # another order and the unmixing moved by 3e-6
    X = _mixtures(n=10000, k=64)
    a, b = _fit(X, 1, **kw), _fit(X, 2, **kw)
    assert a.n_iter_ == b.n_iter_
    assert np.array_equal(a.components_, b.components_)
    assert np.array_equal(a._unmixing, b._unmixing)


def test_unmixing_bitwise_for_any_block_rows_and_threads_on_a_store(store_layer):
    layer, X = store_layer
    ref = _fit(layer, 2)
    for threads, block_rows in ((1, 1000), (2, 777), (1, None)):
        got = _fit(layer, threads, block_rows=block_rows)
        assert np.array_equal(got._unmixing, ref._unmixing), (threads, block_rows)
    # the in-memory rows give the same bits as the stream
    assert np.array_equal(_fit(X, 1)._unmixing, ref._unmixing)


def test_unmixing_bitwise_on_a_dask_local_cluster():
    from dask import array as da
    import distributed
    X = _mixtures(n=12000, k=6, seed=3).astype(np.float64)
    # pre-whitened rows (whiten=False): Dask's own moments merge is exact only to 1e-12,
    # the passes of the solver are what must match bit for bit
    X -= X.mean(0)
    evals, evecs = np.linalg.eigh(np.cov(X.T))
    Z = (X @ evecs / np.sqrt(evals)).astype(np.float32)
    ref = _fit(Z, 2, whiten=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                           dashboard_address=None)
        client = distributed.Client(cluster, set_as_default=False)
    try:
        for chunk in (3000, 2500):   # aligned and unaligned with the reduction blocks
            got = actkit.FastICA(random_state=0, init="random", max_iter=500, whiten=False,
                                 scheduler=client).fit(da.from_array(Z, chunks=(chunk, 6)))
            assert got.n_iter_ == ref.n_iter_
            assert np.array_equal(got._unmixing, ref._unmixing), chunk
    finally:
        client.close()
        cluster.close()
