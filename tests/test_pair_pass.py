"""The read of a compared pair is one RowPass (issue 22): the local runner runs it over
paired blocks, and two partials of it merge into the result of one."""

import numpy as np

from actkit.alignment._inputs import blocks
from actkit.alignment._sides import Pair, pair_pass
from actkit.runners import LOCAL


def _pair(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, 12)).astype(np.float32) + 3.0
    B = (A @ rng.standard_normal((12, 9))).astype(np.float32)
    eval_mask = rng.random(n) < 0.2
    sample = np.flatnonzero(~eval_mask)[::3]
    diam = np.flatnonzero(eval_mask)[::2]
    return Pair(A, B, eval_mask=eval_mask, sample_rows=sample, diam_rows=diam, block_rows=700)


def _partial(pair, shifts, lo, hi):
    """The pass folded over the fixed blocks of rows lo:hi only (a chunk of a runner)."""
    p = pair_pass(pair, shifts)
    acc = p.new(*p.args)
    start = 0
    for xa, xb in zip(blocks(pair.A, pair.block_rows, pair.dtype), blocks(pair.B, pair.block_rows, pair.dtype)):
        if lo <= start < hi:
            acc = p.add(acc, (xa, xb), start, *p.args)
        start += xa.shape[0]
    return p, acc


def test_two_partials_of_the_pair_pass_merge_into_the_whole_pass():
    whole = _pair().fit_moments()
    pair = _pair()
    shifts = (pair._shift(pair.a), pair._shift(pair.b))
    p, first = _partial(pair, shifts, 0, 2048)          # a chunk boundary on a fixed block
    _, second = _partial(pair, shifts, 2048, 10 ** 9)
    a, b, pm_fit, pm_eval = p.merge(first, second)
    assert first[2].n == 2048 - int(pair.eval_mask[:2048].sum())   # merge left its inputs alone
    for side in (a, b):
        side.finish()
    for got, want in ((a, whole.a), (b, whole.b)):
        np.testing.assert_allclose(got.fit.covariance(), want.fit.covariance(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.eval.mean_, want.eval.mean_, rtol=1e-12)
        np.testing.assert_array_equal(got.sample, want.sample)
        np.testing.assert_array_equal(got.diam, want.diam)
    np.testing.assert_allclose(pm_fit.attach_sides(a.fit, b.fit).scatter_xy(), whole.fit_pm.scatter_xy(),
                               rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(pm_eval.attach_sides(a.eval, b.eval).scatter_xy(), whole.eval_pm.scatter_xy(),
                               rtol=1e-12, atol=1e-9)


def test_the_local_runner_numbers_paired_blocks_by_rows():
    pair = _pair(n=3000)
    shifts = (pair._shift(pair.a), pair._shift(pair.b))
    seen = []
    p = pair_pass(pair, shifts)
    p = p._replace(add=lambda acc, block, start, *args: seen.append((start, block[0].shape[0])) or acc)
    LOCAL.run(pair.A, p, blocks=zip(blocks(pair.A, 700, pair.dtype), blocks(pair.B, 700, pair.dtype)))
    assert seen == [(0, 2048), (2048, 952)]
