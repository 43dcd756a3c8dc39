"""Every moment-based measure on the fast path (issue 42): the permutation null and the
bootstrap of each moment-based measure of the registry come from the per-sample moments (one
cross product per permutation shared by every measure, the sides' decompositions computed
once; plain and debiased CKA's bootstrap on the Gram route; the others from re-weighted
per-sample blocks), and their p-values and intervals equal those of recomputing each measure
from the resampled rows with the same draws, to 1e-10, at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest

from actkit._threads import use_threads
from actkit.alignment._uncertainty import fast_bootstraps, resampled_measures
from actkit.inference import Samples, bootstrap_draws, infer, permutation_draws
from actkit.measures import get_measure, moments_of, parse_measures

#: every moment-based measure of the registry that resamples (linear_r2 is scored on held-out rows)
MOMENT_MEASURES = ["linear_cka", "linear_cka_debiased", "mean_cca", "svcca", "pwcca", "procrustes",
                   "shape_metric", "shape_metric:alpha=0.5", "bures"]


def _pair(rank_deficient, G=24, seed=0):
    """Per-token rows of G input samples of 3 to 5 rows (rows of a sample contiguous), a
    per-sample effect and a real relation; ``rank_deficient``: B's last column is the sum of
    the others (as a LayerNorm output's rows satisfy one linear equation)."""
    rng = np.random.default_rng(seed)
    g = np.repeat(np.arange(G), rng.integers(3, 6, size=G))
    A = rng.normal(size=(g.size, 6)) + rng.normal(size=(G, 6))[g] + 2.0
    B = np.tanh(A @ rng.normal(size=(6, 5)) / 2) + 0.5 * rng.normal(size=(g.size, 5))
    if rank_deficient:
        B[:, -1] = B[:, :-1].sum(axis=1)
    return A, B, g


def _recomputed(A, B, g, name, params, perms, W):
    """The measure recomputed from the re-paired and the resampled rows (no moments reused), the
    rows gathered here, whole sample by whole sample: sample ``s`` of A (its rows in order;
    ``g`` sorted, so A is in sample order) meets sample ``p[s]`` of B row by row; a resample
    takes sample ``s`` ``w[s]`` times."""
    m = get_measure(name.partition(":")[0])
    rows_of = [np.flatnonzero(g == s) for s in np.unique(g)]
    null = [m.compute(moments_of(A, B[np.concatenate([rows_of[t] for t in p])]), **params) for p in perms]
    boot = []
    for w in W:
        rows = np.concatenate([rows_of[s] for s in range(len(w)) for _ in range(int(w[s]))])
        boot.append(m.compute(moments_of(A[rows], B[rows]), **params))
    return m.compute(moments_of(A, B), **params), np.array(null), np.array(boot)


def _p(null, value, kind):
    """``(1 + #{null at least as similar as the value}) / (1 + N)``, written out here."""
    hits = null >= value if kind == "similarity" else null <= value
    return (1 + int(hits.sum())) / (1 + null.size)


def _basic(boot, value, confidence=0.95):
    """The basic bootstrap interval ``[2 t - q_hi, 2 t - q_lo]``, written out here."""
    lo, hi = np.quantile(boot, [(1 - confidence) / 2, (1 + confidence) / 2])
    return 2 * value - hi, 2 * value - lo


@pytest.mark.parametrize("pairs", [False, True], ids=["rows' product", "pair products"])
@pytest.mark.parametrize("rank_deficient, blocks_fit", [(False, True), (True, True), (False, False)])
def test_fast_p_values_and_intervals_equal_recomputing_from_the_rows(rank_deficient, blocks_fit, pairs, monkeypatch):
    """``blocks_fit=False``: the per-sample blocks do not fit in memory (as for 500 sentences
    x 384 features a side) and are formed a few samples at a time for each batch of resamples.
    ``pairs``: the permutations' cross products from the products of pairs of input samples
    (:mod:`actkit.inference._pairs`, the route of many permutations of few samples), in small
    tables, runs and groups of permutations, so that every split of the work is taken."""
    if not blocks_fit:
        monkeypatch.setattr("actkit.inference._samples.BLOCK_BYTES", 0)
    from actkit.inference import _pairs

    monkeypatch.setattr(_pairs, "PAIR_GAIN", 0.0 if pairs else float("inf"))
    if pairs:
        monkeypatch.setattr(_pairs, "ROWS", 4)
        monkeypatch.setattr(_pairs, "TABLE_BYTES", 4 * 5 * 8 * 6 * 8)      # 6 samples of a class per GEMM
        monkeypatch.setattr(_pairs, "RUN_BYTES", 2 * 8 * 6 * 8)            # runs of 2 samples
        monkeypatch.setattr(_pairs, "OUT_BYTES", 7 * 6 * 5 * 8)           # groups of 7 permutations
    A, B, g = _pair(rank_deficient)
    chosen = parse_measures(MOMENT_MEASURES)
    measures, rows, skipped = resampled_measures(chosen)
    assert sorted(measures) == sorted(m.name for m, _ in chosen) and len(measures) == 9
    assert not rows and not skipped
    P, M, seed = 30, 40, 5
    runs = []
    for threads in (1, 2):
        with use_threads(threads):
            s = Samples(A, B, g)
            fast = fast_bootstraps(s, measures, M)
            assert set(fast) == {"linear_cka", "linear_cka_debiased", "mean_cca"}     # Gram route, blocks
            records, _ = infer(s, measures, permutations=P, bootstrap=M, random_state=seed,
                               fast_bootstrap=fast)
            runs.append(records)
    perms, _ = permutation_draws(s.n_s, P, seed)
    W = bootstrap_draws(s.G, M, seed)
    for (m, params) in chosen:
        value, null, boot = _recomputed(A, B, g, m.name, params, perms, W)
        # shape_metric at alpha < 1 scales B's null direction by (1 - alpha) / sqrt(1e-7)
        # (netrep's clip): the rounding of the sums, moved by any order of summation, x 1e3
        tol = 1e-8 if rank_deficient and params.get("alpha", 1) < 1 else 1e-10
        for records in runs:
            rec = records[m.name]
            assert rec.value == pytest.approx(value, abs=tol), m.name
            assert rec.null_mean == pytest.approx(null.mean(), abs=tol), m.name
            assert rec.null_sd == pytest.approx(null.std(ddof=1), abs=tol), m.name
            assert rec.p == _p(null, value, m.kind), m.name
            lo, hi = _basic(boot, value)
            assert rec.ci_low == pytest.approx(lo, abs=tol), m.name
            assert rec.ci_high == pytest.approx(hi, abs=tol), m.name
        assert runs[0][m.name].as_dict() == runs[1][m.name].as_dict(), m.name     # same bits


def test_compare_resamples_the_three_columns_from_the_moments():
    """``compare``'s default columns with resampling are these records (the same draws)."""
    import warnings

    import actkit

    A, B, g = _pair(False, G=30, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = actkit.compare(A, B, groups=g, methods=("rigid",), permutations=19, bootstrap=40,
                           random_state=2).to_dict()
    s = Samples(A, B, g)
    perms = permutation_draws(s.n_s, 19, 2)[0]
    W = bootstrap_draws(s.G, 40, 2)
    for name in ("linear_cka", "linear_cka_debiased", "mean_cca"):
        value, null, boot = _recomputed(A, B, g, name, {}, perms, W)
        assert d[f"{name}_null_mean"] == pytest.approx(null.mean(), abs=1e-10), name
        lo, hi = _basic(boot, value)
        assert d[f"{name}_ci_low"] == pytest.approx(lo, abs=1e-10), name
        assert d[f"{name}_ci_high"] == pytest.approx(hi, abs=1e-10), name


def test_mean_cca_route_equals_the_measure_where_its_shortcuts_do_not_apply():
    """The sum of singular values falls back to the SVD where a singular value is near zero
    (the square root of a rounded eigenvalue would lose digits); a side's whitening is the
    measure's own (the same inverse Cholesky factor, or its PCA whitening where a direction
    falls below the rank cut)."""
    from actkit.inference._cca import GRAM_FLOOR, cholesky_whitener, singular_value_sum
    from actkit.measures._linalg import whitener

    rng = np.random.default_rng(0)
    U, _ = np.linalg.qr(rng.normal(size=(7, 7)))
    V, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    for small in (0.3, 1e-7, 0.0):          # the last two below sqrt(GRAM_FLOOR)
        sv = np.array([0.9, 0.7, 0.5, 0.2, small])
        M = U[:, :5] @ np.diag(sv) @ V.T
        for X in (M, M.T):
            total, k = singular_value_sum(X)
            assert k == 5 and total == pytest.approx(sv.sum(), abs=1e-13)
    assert GRAM_FLOOR > 0
    X = rng.normal(size=(200, 6))
    S = X.T @ X
    assert np.array_equal(cholesky_whitener(S, 1e-10), whitener(S, 1e-10))       # the Cholesky route
    X[:, -1] = X[:, :-1].sum(axis=1)                                             # rank 5
    S = X.T @ X
    W = cholesky_whitener(S, 1e-10)
    assert np.array_equal(W, whitener(S, 1e-10)) and W.shape == (5, 6)          # the PCA whitening
    assert cholesky_whitener(np.zeros((3, 3)), 1e-10) is None
