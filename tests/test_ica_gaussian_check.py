"""compare's ICA on rows with nothing to identify (docs/definitions.md, "ICA alignment", the
Gaussian check): where a side's whitened FastICA rows show no non-Gaussian signal beyond
chance, every rotation is an ICA solution, so its restarts keep their random starts
(0 iterations) and a note says so; on non-Gaussian rows nothing changes (the same fits as
FastICA on the same whitened rows)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from actkit import FastICA
from actkit._threads import use_threads
from actkit.alignment import compare
from actkit.ica._gaussianity import GAUSSIAN_Z, gaussianity, no_signal


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*a, **kw)


def _effects(rng, G=120, m=50, d=24):
    """Gaussian rows with a Gaussian per-sample effect (the benchmark pair's construction)."""
    g = np.repeat(np.arange(G), m)
    X = rng.normal(size=(G * m, d)) + 0.7 * rng.normal(size=(G, d))[g]
    return X, g


def _mardia_z(X, units=128):
    """The kurtosis z-score written out: Mardia's b2 from Mahalanobis distances (np.linalg.inv
    of the ddof=0 covariance), its per-row influence ``r^2 - (2k+4) r + k(k+2)(1 + 2/(n+1))``
    summed per unit ``row % units``."""
    X = np.asarray(X, np.float64)
    n, k = X.shape
    Xc = X - X.mean(0)
    r = np.einsum("ij,jk,ik->i", Xc, np.linalg.inv(np.cov(Xc.T, bias=True)), Xc)
    v = r ** 2 - (2 * k + 4) * r + k * (k + 2) * (1 + 2 / (n + 1))
    c = np.array([v[np.arange(n) % units == u].sum() for u in range(units)])
    return c.sum() / np.sqrt(np.sum(c ** 2))


def test_kurtosis_z_is_mardias_b2_against_its_gaussian_expectation():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 6)) @ rng.normal(size=(6, 6))
    assert gaussianity(X)["kurtosis"] == pytest.approx(_mardia_z(X), rel=1e-9, abs=1e-9)
    L = rng.laplace(size=(3000, 6)) @ rng.normal(size=(6, 6))
    assert gaussianity(L)["kurtosis"] == pytest.approx(_mardia_z(L), rel=1e-9)


def test_gaussian_rows_pass_and_heavy_tailed_rows_fail_by_input_sample():
    rng = np.random.default_rng(1)
    for _ in range(3):
        X, g = _effects(rng)
        stats = gaussianity(X, g)
        assert no_signal(stats), stats
        assert no_signal(gaussianity(rng.normal(size=(4000, 24)))), "independent Gaussian rows"
    # rows of one sample share an effect: taken as independent rows they are not Gaussian
    # enough by chance, so the check never calls them Gaussian without their groups
    X, g = _effects(rng, G=40, m=150)
    assert not no_signal(gaussianity(X))
    # three Laplace sources among 24 directions, mixed, per-sample effects on top
    S = rng.normal(size=X.shape)
    S[:, :3] = rng.laplace(size=(X.shape[0], 3))
    H = S @ np.linalg.qr(rng.normal(size=(24, 24)))[0] + 0.7 * rng.normal(size=(40, 24))[g]
    stats = gaussianity(H, g)
    assert stats["kurtosis"] > GAUSSIAN_Z and stats["cumulant"] > 3 * GAUSSIAN_Z
    assert not no_signal(stats)
    # skewed sources (centred exponentials): the skewness test sees them
    S = rng.normal(size=(6000, 12))
    S[:, :4] = rng.exponential(size=(6000, 4)) - 1
    assert gaussianity(S @ rng.normal(size=(12, 12)))["skewness"] > 2 * GAUSSIAN_Z


def test_too_few_rows_are_not_tested():
    rng = np.random.default_rng(2)
    assert gaussianity(rng.normal(size=(200, 24))) is None          # under 10 k dof
    assert gaussianity(rng.normal(size=(1999, 4))) is None          # under 2,000 rows
    assert gaussianity(rng.normal(size=(2000, 4))) is not None
    assert not no_signal(None)


def test_gaussian_pair_keeps_the_random_starts_and_says_so():
    rng = np.random.default_rng(3)
    X, g = _effects(rng, G=100, m=40, d=32)
    A = X.astype(np.float32)
    B = (X @ rng.normal(size=(32, 32)) / 6 + rng.normal(size=X.shape)).astype(np.float32)
    res = _quiet(compare, A, B, groups=g)
    d, h = res.to_dict(), res.alignments["ica"]
    assert h.gaussian_ == (True, True)
    assert d["ica_n_iter_a"] == 0 and d["ica_n_iter_b"] == 0 and d["ica_converged"] is True
    assert sum(n.startswith("FastICA found nothing to identify on ") for n in d["notes"]) == 2
    assert not any(n.startswith("FastICA did not converge") for n in d["notes"])
    # nothing reproducible: the halves share (almost) no source, and the check says so too
    assert d["ica_identifiable"] is False
    # the rotation kept is the seeded random start, symmetrically decorrelated
    W0 = np.random.RandomState(d["ica_seed"] + h.best_[0]).normal(size=(32, 32))
    u, _, vt = np.linalg.svd(W0)
    fit = _side_fit(A, B, g, d["ica_seed"] + h.best_[0])
    assert fit["n_iter"] == 0 and fit["gaussian"]
    np.testing.assert_allclose(fit["rotation"], u @ vt, atol=1e-10)
    np.testing.assert_array_equal(h.unmixing_a_, fit["rotation"] @ fit["whitening"])


def _side_fit(A, B, g, seed):
    """The fit compare keeps for side A at ``seed`` (through a fresh compare's side cache)."""
    from actkit.alignment import steps
    from actkit.alignment._ica_map import ICAAlignment, fit_ica_side, ica_fit_components

    request = steps.resolve_request(A, B, groups=g)
    rows = steps.split_by_sample(request, ICAAlignment())
    pair = steps.moment_pass(request, rows, progress=False)
    k, _ = ica_fit_components(None, min(pair.a.d, pair.b.d), pair.a.sample.shape[0])
    return fit_ica_side(pair.a, k, seed, {"fun": "logcosh", "max_iter": 200, "tol": 1e-4, "device": "cpu"})


def test_non_gaussian_rows_give_fastica_s_own_fits():
    """On heavy-tailed sources the check passes them to FastICA unchanged: every restart's
    rotation is FastICA's (whiten=False, random start, same seed) on the same whitened rows."""
    from actkit.alignment import steps
    from actkit.alignment._ica_map import ICAAlignment, side_fits, whitened_side
    from actkit.ica import whiten_rows

    rng = np.random.default_rng(4)
    S = rng.laplace(size=(4000, 8)) ** 3
    A = (S @ rng.normal(size=(8, 8))).astype(np.float32)
    B = (S @ rng.normal(size=(8, 8)) + 0.1 * rng.normal(size=(4000, 8))).astype(np.float32)
    res = _quiet(compare, A, B, ica_restarts=2)
    h, d = res.alignments["ica"], res.to_dict()
    assert h.gaussian_ == (False, False) and d["ica_n_iter_a"] > 0
    assert not any("nothing to identify" in n for n in d["notes"])
    request = steps.resolve_request(A, B)
    rows = steps.split_by_sample(request, ICAAlignment())
    pair = steps.moment_pass(request, rows, progress=False)
    params = {"fun": "logcosh", "max_iter": 200, "tol": 1e-4, "device": "cpu"}
    fits = side_fits(pair.a, 8, [0, 1], params)
    Z = whiten_rows(pair.a.sample, pair.a.mean_fit, whitened_side(pair.a, 8)["whitening"], np.float32)
    for seed, fit in zip([0, 1], fits):
        est = _quiet(FastICA(whiten=False, random_state=seed, init="random").fit, Z)
        R = np.asarray(est.components_, np.float64)
        u, _, vt = np.linalg.svd(R)
        np.testing.assert_array_equal(fit["rotation"], u @ vt)
        assert fit["n_iter"] == est.n_iter_ > 0
    np.testing.assert_array_equal(h.unmixing_a_, fits[h.best_[0]]["rotation"] @ fits[0]["whitening"])


def test_the_check_has_the_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(5)
    X, g = _effects(rng, G=60, m=80, d=48)
    out = []
    for t in (1, 2):
        with use_threads(t):
            out.append(gaussianity(X.astype(np.float32), g))
    assert out[0] == out[1]


def test_compare_many_checks_each_side_by_input_sample_once():
    """compare_many fits each representation's ICA once, before the pairs: the check there
    sees the same input samples as compare's own (the same notes, 0 iterations)."""
    from actkit.alignment import compare_many

    rng = np.random.default_rng(6)
    X, g = _effects(rng, G=100, m=30, d=16)
    reps = [X.astype(np.float32), (X @ rng.normal(size=(16, 16)) + rng.normal(size=X.shape)).astype(np.float32)]
    _, results = _quiet(compare_many, reps, groups=g, metric="ica")      # ICA asked: a rigid matrix fits none
    for res in results.values():
        d = res.to_dict()
        assert d["ica_n_iter_a"] == 0 and d["ica_n_iter_b"] == 0
        assert sum(n.startswith("FastICA found nothing to identify") for n in d["notes"]) == 2
    direct = _quiet(compare, reps[0], reps[1], groups=g).to_dict()
    assert direct["ica"] == results[(0, 1)].to_dict()["ica"]


def test_compare_on_a_gaussian_pair_has_the_same_digits_at_one_and_two_threads():
    rng = np.random.default_rng(8)
    X, g = _effects(rng, G=60, m=50, d=24)
    A = X.astype(np.float32)
    B = (X @ rng.normal(size=(24, 24)) / 5 + rng.normal(size=X.shape)).astype(np.float32)
    out = []
    for t in (1, 2):
        d = _quiet(compare, A, B, groups=g, threads=t).to_dict()
        assert d["ica_n_iter_a"] == 0
        out.append(json.dumps({k: v for k, v in d.items() if not k.startswith("seconds")}, sort_keys=True))
    assert out[0] == out[1]
