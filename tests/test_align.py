"""Alignments and compare: ground truths, references (scipy/sklearn/brute force), errors."""

import math
import itertools
import json
import warnings

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.spatial.distance import pdist
from scipy.stats import ortho_group
from sklearn.linear_model import LinearRegression, Ridge

import actkit
from actkit.alignment import (
    ICAAlignment,
    LinearAlignment,
    PermutationAlignment,
    RigidAlignment,
    compare,
    compare_many,
    diameter,
)
from actkit.alignment import split as _split

N, D = 2000, 6


def _sources(seed=0, n=N, d=D):
    rng = np.random.default_rng(seed)
    S = rng.laplace(size=(n, d))
    return rng, S


def _signed_perm(rng, d):
    return np.eye(d)[rng.permutation(d)] * rng.choice([-1.0, 1.0], d)


def _errs(res):
    return res.errors


def test_signed_permutation_gives_zero_for_every_method():
    rng, S = _sources(0)
    A = S @ rng.normal(size=(D, D)) + 3.0
    B = A @ _signed_perm(rng, D) - 1.0
    e = _errs(compare(A, B))
    for m in ("permutation", "rigid", "linear", "ica"):
        assert e[m] < 1e-4, (m, e)


def test_orthogonal_zero_for_rigid_and_linear_only():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(N, D)) @ rng.normal(size=(D, D))
    B = A @ ortho_group.rvs(D, random_state=2) + 5.0
    e = _errs(compare(A, B))
    assert e["rigid"] < 1e-6 and e["linear"] < 1e-6
    assert e["permutation"] > 0.05
    # Gaussian data: no independent components to match (the consensus rule finds none;
    # the best-contrast fit is affine-equivariant on the same rows, so it can map these
    # exactly, which test_gaussian_directions_are_not_identified flags as not identifiable)
    e = _errs(compare(A, B, ica_method="consensus", ica_restarts=3))
    assert e["ica"] > 0.01


def test_invertible_zero_for_linear_only():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(N, D))
    B = A @ rng.normal(size=(D, D)) + 1.0
    e = _errs(compare(A, B, ica_method="consensus", ica_restarts=3))
    assert e["linear"] < 1e-6
    for m in ("permutation", "rigid", "ica"):
        assert e[m] > 0.02, (m, e)


def test_independent_sources_zero_for_ica():
    rng, S = _sources(4)
    A = S @ rng.normal(size=(D, D))
    B = S @ rng.normal(size=(D, D)) - 2.0
    res = compare(A, B)
    e = res.errors
    assert e["ica"] < 0.01
    assert e["permutation"] > 0.05 and e["rigid"] > 0.03
    assert res.ica_efficiency > 0.9
    assert np.all(np.abs(res.matched_correlations) > 0.99)
    assert res.source_correlation.shape == (D, D)
    assert np.allclose(np.diag(res.source_correlation), res.matched_correlations)


def test_errors_match_scipy_sklearn_and_brute_force():
    """Rigid = scipy Procrustes, linear = sklearn LinearRegression, permutation = brute force
    over all signed permutations, diameter = pdist; all on the same fit/eval split."""
    rng = np.random.default_rng(5)
    d = 4
    A = rng.normal(size=(600, d)) * [1, 2, 3, 4] + 1
    B = np.tanh(A @ rng.normal(size=(d, d))) + 0.1 * rng.normal(size=(600, d))
    groups = np.repeat(np.arange(150), 4)                   # 4 rows ("tokens") per sample
    res = compare(A, B, groups=groups, random_state=7)
    ev, _ = _split(600, groups, 0.2, 7)
    Af, Bf, Ae, Be = A[~ev], B[~ev], A[ev], B[ev]
    ma, mb = Af.mean(0), Bf.mean(0)
    diam = pdist(Be).max()
    assert res.info["diameter"] == pytest.approx(diam, rel=1e-12)

    def err(pred):
        return np.linalg.norm(pred - Be, axis=1).mean() / diam

    R, _ = orthogonal_procrustes(Af - ma, Bf - mb)
    assert res.errors["rigid"] == pytest.approx(err((Ae - ma) @ R + mb), rel=1e-8)
    lr = LinearRegression().fit(Af, Bf)
    assert res.errors["linear"] == pytest.approx(err(lr.predict(Ae)), rel=1e-8)
    best, best_P = np.inf, None
    for perm in itertools.permutations(range(d)):
        for signs in itertools.product([-1, 1], repeat=d):
            P = np.eye(d)[list(perm)] * signs
            sse = np.sum(((Af - ma) @ P - (Bf - mb)) ** 2)
            if sse < best:
                best, best_P = sse, P
    assert res.errors["permutation"] == pytest.approx(err((Ae - ma) @ best_P + mb), rel=1e-8)
    e = res.errors
    assert res.ica_efficiency == pytest.approx(
        (e["permutation"] - e["ica"]) / (e["permutation"] - e["rigid"]))
    # sample-wise split: no sample on both sides
    assert not set(groups[ev]) & set(groups[~ev])
    assert res.info["n_eval_rows"] == 120 and res.info["n_samples"] == 150


def test_ridge_matches_sklearn():
    rng = np.random.default_rng(6)
    A, B = rng.normal(size=(300, 5)), rng.normal(size=(300, 3))
    h = actkit.align(A, B, method="linear", alpha=10.0)
    ref = Ridge(alpha=10.0).fit(A, B)
    assert np.allclose(h.transform(A), ref.predict(A), atol=1e-10)


def test_different_widths_and_padding():
    rng, S = _sources(8, d=8)
    A = S @ rng.normal(size=(8, 8))
    P = _signed_perm(rng, 8)
    # Da > Db: B keeps 5 signed, permuted columns of A
    B = (A @ P)[:, :5]
    res = compare(A, B)
    assert res.errors["permutation"] < 1e-6 and res.errors["linear"] < 1e-6
    assert res.alignments["rigid"].coef_.shape == (8, 5)
    # Da < Db: B = A's columns permuted, plus three constant columns (padding -> the mean)
    B2 = np.hstack([A[:, :5] @ _signed_perm(rng, 5), np.full((N, 3), 2.0)])
    res2 = compare(A[:, :5], B2)
    assert res2.errors["permutation"] < 1e-6
    assert res2.info["ica_n_components"] == 5


def test_fitted_alignment_maps_new_rows():
    rng = np.random.default_rng(9)
    A = rng.normal(size=(500, D))
    Q = ortho_group.rvs(D, random_state=3)
    h = actkit.align(A, A @ Q + 2, method="rigid")
    assert isinstance(h, RigidAlignment)
    new = rng.normal(size=(50, D))
    assert np.allclose(h.transform(new), new @ Q + 2, atol=1e-9)
    assert h.transform(new.astype(np.float32)).dtype == np.float32
    assert h.score(new, new @ Q + 2) < 1e-9
    assert np.allclose(new @ h.coef_ + h.intercept_, new @ Q + 2, atol=1e-9)
    p = PermutationAlignment().fit(A, -A[:, ::-1])
    assert sorted(p.pairs_[:, 1].tolist()) == list(range(D))
    with pytest.raises(ValueError, match="not fitted"):
        LinearAlignment().transform(A)
    with pytest.raises(ValueError, match="unknown alignment"):
        actkit.align(A, A, method="affine")


def test_ica_alignment_recovers_sources():
    rng, S = _sources(10)
    M1, M2 = rng.normal(size=(D, D)), rng.normal(size=(D, D))
    h = ICAAlignment(random_state=0).fit(S @ M1, S @ M2)
    # unmixing_a recovers S up to signed permutation and scale
    est = (S @ M1 - h.mean_a_) @ h.unmixing_a_.T
    C = np.abs(np.corrcoef(est.T, S.T)[:D, D:])
    assert np.all(C.max(1) > 0.99)
    assert np.allclose(h.transform(S[:10] @ M1), S[:10] @ M2, atol=0.05 * np.abs(S @ M2).max())


def test_float32_matches_float64_and_streaming(tmp_path):
    import h5py

    rng, S = _sources(11)
    A = S @ rng.normal(size=(D, D))
    B = S @ rng.normal(size=(D, D)) + 0.2 * rng.normal(size=(N, D))
    r64 = compare(A, B)
    r32 = compare(A.astype(np.float32), B.astype(np.float32))
    assert r32.info["compute_dtype"] == "float32"
    for m in ("permutation", "rigid", "linear"):
        assert r32.errors[m] == pytest.approx(r64.errors[m], rel=1e-4)
    assert r32.linear_cka == pytest.approx(r64.linear_cka, rel=1e-5)
    import torch

    rt = compare(torch.from_numpy(A.astype(np.float32)), torch.from_numpy(B.astype(np.float32)))
    assert rt.errors["rigid"] == pytest.approx(r32.errors["rigid"], rel=1e-9)
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f["a"], f["b"] = A.astype(np.float32), B.astype(np.float32)
    with h5py.File(tmp_path / "x.h5", "r") as f:
        rs = compare(f["a"], f["b"], block_rows=301)
    for key in ("permutation", "rigid", "linear", "ica", "linear_cka", "mean_cca"):
        assert rs.to_dict()[key] == pytest.approx(r32.to_dict()[key], rel=1e-4, abs=1e-7)


def test_metrics_in_result_match_metric_functions():
    rng, S = _sources(12)
    A, B = S @ rng.normal(size=(D, D)), np.tanh(S @ rng.normal(size=(D, D)))
    res = compare(A, B)
    assert res.linear_cka == pytest.approx(actkit.metrics.linear_cka(A, B), rel=1e-9)
    assert res.linear_cka_debiased == pytest.approx(
        actkit.metrics.linear_cka(A, B, debiased=True), rel=1e-9)
    assert res.mean_cca == pytest.approx(actkit.metrics.mean_cca(A, B), rel=1e-9)


def test_to_dict_flat_json():
    rng, S = _sources(13, n=400)
    res = compare(S, S @ rng.normal(size=(D, D)))
    d = res.to_dict()
    for key in ("permutation", "rigid", "linear", "ica", "ica_efficiency", "linear_cka",
                "mean_cca", "linear_cka_debiased", "convention_error", "convention_split",
                "diameter_method"):
        assert key in d
    assert all(not isinstance(v, (dict, list, np.ndarray)) for k, v in d.items() if k != "notes")
    assert isinstance(d["notes"], list) and all(isinstance(x, str) for x in d["notes"])
    json.dumps(d, allow_nan=False)
    assert "Permutation" in str(res) and "ICA (% eff.)" in str(res)


def test_split_keeps_groups_together_and_is_seeded():
    groups = np.repeat(np.arange(50), 7)
    m1, g = _split(groups.size, groups, 0.2, 0)
    assert g == 50 and m1.sum() == 70
    for gid in range(50):
        assert len(set(m1[groups == gid])) == 1
    assert np.array_equal(m1, _split(groups.size, groups, 0.2, 0)[0])
    assert not np.array_equal(m1, _split(groups.size, groups, 0.2, 1)[0])


@pytest.mark.usefixtures("torch_one_thread")
def test_ica_on_torch_kernels_matches_numpy(monkeypatch):
    # device="cuda" runs FastICA's torch kernels; here they run on CPU tensors (no GPU in CI)
    # and must give the numpy fit: same sources, same alignment, same errors
    import actkit.ica._source as ica_mod

    rng, S = _sources(8, n=3000)
    A = S @ rng.normal(size=(D, D))
    B = S @ rng.normal(size=(D, D)) + 1.0
    ref = compare(A, B, methods=["permutation", "rigid", "ica"], ica_tol=1e-6)
    monkeypatch.setattr(ica_mod, "is_accelerator", lambda device: True)
    got = compare(A, B, methods=["permutation", "rigid", "ica"], ica_tol=1e-6)
    assert got.to_dict()["ica_device"] == "cpu"
    assert got.errors["ica"] == pytest.approx(ref.errors["ica"], abs=1e-5)
    assert got.errors["ica"] < 0.01
    np.testing.assert_array_equal(got.alignments["ica"].pairs_, ref.alignments["ica"].pairs_)
    np.testing.assert_allclose(got.alignments["ica"].coef_, ref.alignments["ica"].coef_, atol=1e-3)


def test_source_sd_is_undefined_below_rounding():
    # held-out source variances come from float32 moments: a source that does not vary
    # there (its variance is rounding noise, possibly negative) has no correlation (NaN),
    # which once showed up as |r| ~ 1e146 in the matched correlations
    from actkit.alignment._ica_map import source_sd as _source_sd

    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 4)).astype(np.float32)
    X[:, 3] = X[:, 0] + X[:, 1]                      # a null direction: (1, 1, 0, -1)
    scatter = (X - X.mean(0)).astype(np.float64).T @ (X - X.mean(0)).astype(np.float64)
    scatter[3, 3] -= 1e-5                            # rounding can make it negative
    U = np.array([[1.0, 0, 0, 0], [1e3, 1e3, 0, -1e3], [0, 0, 2.0, 0]])
    sd = _source_sd(U, scatter)
    assert np.isnan(sd[1])
    np.testing.assert_allclose(sd[[0, 2]], np.sqrt([scatter[0, 0], 4 * scatter[2, 2]]))


def test_matched_correlations_are_correlations():
    rng, S = _sources(6, n=3000, d=4)
    groups = np.arange(3000)
    eval_mask, _ = _split(3000, groups, 0.2, 0)
    S[eval_mask, 3] = 0.5                            # one source constant on held-out rows
    A = (S @ rng.normal(size=(4, 4))).astype(np.float32)
    B = (S @ rng.normal(size=(4, 4))).astype(np.float32)
    res = compare(A, B, groups=groups)
    mc = res.matched_correlations
    assert np.all(np.isnan(mc) | (np.abs(mc) <= 1.0))
    d = res.to_dict()
    assert d["ica_matched_corr_undefined"] == int(np.isnan(mc).sum())
    assert 0 <= d["ica_matched_corr_min"] <= d["ica_matched_corr_mean"] <= 1.0


def test_ica_rows_rule_and_warning():
    from actkit.alignment import ica_min_rows, ica_rows

    assert ica_min_rows(6) == 300 and ica_min_rows(256) == 16384
    assert ica_rows("auto", 64) == 20000            # small k: the 20000-row floor
    assert ica_rows("auto", 768) == 768 * 768 // 4   # k^2/4 rows
    assert ica_rows("auto", 4096) == 2 ** 30 // (4 * 4096)   # 1 GiB cap
    assert ica_rows(5000, 768) == 5000
    for bad in ("many", 1, 2.5, True):
        with pytest.raises(ValueError, match="ica_max_rows"):
            ica_rows(bad, 6)
    rng, S = _sources(5)
    A, B = S @ rng.normal(size=(D, D)), S @ rng.normal(size=(D, D))
    # forced k: kept, with the warning
    with pytest.warns(UserWarning, match="100 fit rows for 6 components.*spurious"):
        res = compare(A, B, ica_max_rows=100, ica_n_components=6)
    assert res.to_dict()["ica_rows_per_component"] == pytest.approx(100 / 6, abs=0.01)
    # default: the k' = 2 components 100 rows support, with a note
    with pytest.warns(UserWarning, match="leading 2 of 6 whitened components: 100 fit rows"):
        res = compare(A, B, ica_max_rows=100)
    assert res.to_dict()["ica_n_components"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        # two non-orthogonal mixings of the same sources: ica ~ 0 is below rigid, which is noted
        warnings.filterwarnings("ignore", message="ica is below rigid")
        d = compare(A, B).to_dict()                  # 1600 fit rows >= 300: no rows warning
    assert d["ica"] < d["rigid"] and any("ica is below rigid" in n for n in d["notes"])
    assert d["ica_fit_rows"] == 1600 and d["ica_rows_per_component"] == pytest.approx(1600 / 6, abs=0.01)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "x", 7, True])
def test_bad_n_components_is_one_clear_error(bad):
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(300, 4)), rng.normal(size=(300, 5))
    with pytest.raises(ValueError, match=r"n_components must be an int in \[1, 4\]"):
        compare(A, B, ica_n_components=bad)


def test_unavailable_device_fails_before_any_work():
    import torch

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(100, 3)), rng.normal(size=(100, 3))
    with pytest.raises(ValueError, match="unknown device"):
        compare(A, B, device="gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            compare(A, B, device="cuda")
    compare(A, B, methods=["rigid"], device="gpu0")   # no ICA: the device is not used


@pytest.mark.parametrize("case", ["rows", "nan", "inf_b", "few", "method", "fraction"])
def test_user_errors(case):
    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(100, 3)), rng.normal(size=(100, 3))
    if case == "rows":
        with pytest.raises(ValueError, match="different row counts"):
            compare(A, B[:99])
    elif case == "nan":
        A[17, 1] = np.nan
        with pytest.raises(ValueError, match="A contains NaN.*row 17"):
            compare(A, B)
    elif case == "inf_b":
        B[3, 0] = np.inf
        with pytest.raises(ValueError, match="B contains NaN or infinite"):
            compare(A, B)
    elif case == "few":
        with pytest.raises(ValueError, match="too few input samples"):
            compare(A, B, groups=np.zeros(100))
    elif case == "method":
        with pytest.raises(ValueError, match="unknown method"):
            compare(A, B, methods=["rigid", "cka"])
    else:
        with pytest.raises(ValueError, match="eval_fraction"):
            compare(A, B, eval_fraction=1.5)


def test_diameter_exact_and_sampled():
    rng = np.random.default_rng(0)
    for X in (rng.normal(size=(700, 5)),
              np.vstack([rng.normal(size=(700, 5)), 40 * rng.normal(size=(2, 5))]),
              rng.standard_t(1.5, size=(500, 3)).astype(np.float32)):
        assert diameter(X, block_rows=64) == pytest.approx(pdist(X.astype(np.float64)).max(), rel=1e-6)
    X = rng.normal(size=(900, 4))
    d, info = diameter(X, max_rows=300, return_info=True)
    assert info == {"method": "sampled", "rows": 300, "of_rows": 900}
    assert d <= pdist(X).max() + 1e-12


def test_compare_sampled_diameter_is_recorded():
    rng = np.random.default_rng(1)
    A = rng.normal(size=(1000, 3))
    B = A @ rng.normal(size=(3, 3))
    exact = compare(A, B, methods=["rigid"], diameter_max_rows=None).to_dict()
    samp = compare(A, B, methods=["rigid"], diameter_max_rows=50).to_dict()
    assert exact["diameter_method"] == "exact" and exact["diameter_rows"] == 200
    assert samp["diameter_method"] == "sampled" and samp["diameter_rows"] == 50
    assert samp["diameter"] <= exact["diameter"]
    assert samp["rigid"] * samp["diameter"] == pytest.approx(exact["rigid"] * exact["diameter"])


def test_compare_many_matrix():
    rng, S = _sources(14, n=800)
    reps = [S @ rng.normal(size=(D, D)) for _ in range(2)] + [rng.normal(size=(800, 4))]
    mat, results = compare_many(reps, metric="linear")
    assert mat.shape == (3, 3)
    assert mat[0, 1] < 1e-6 and mat[0, 0] < 1e-6
    assert mat[0, 2] > 0.1
    direct = compare(reps[2], reps[0]).errors["linear"]
    assert mat[2, 0] == pytest.approx(direct, rel=1e-9)
    mat_cka, _ = compare_many(reps, metric="linear_cka", methods=["rigid"])
    assert mat_cka[1, 0] == pytest.approx(actkit.metrics.linear_cka(reps[1], reps[0]), rel=1e-9)
    with pytest.raises(ValueError, match="unknown metric"):
        compare_many(reps[:2], metric="bogus", methods=["rigid"])


def _store(path, X, index, fingerprint="inputs-1"):
    from actkit.store import LayerSpec, create_store

    w = create_store(path, [LayerSpec("h", X.shape[0], X.shape[1], index=index)],
                     n_samples=int(index[:, 0].max()) + 1, request={"p": str(path)},
                     inputs_fingerprint=fingerprint)
    w.append("h", X.astype(np.float32))
    w.checkpoint(int(index[:, 0].max()) + 1)
    w.finalize()
    return actkit.open_store(path)


def test_store_layers_use_groups_and_refuse_mismatch(tmp_path):
    rng, S = _sources(15, n=600)
    A = S @ rng.normal(size=(D, D))
    B = S @ rng.normal(size=(D, D))
    index = np.stack([np.repeat(np.arange(100), 6), np.tile(np.arange(6), 100)], 1)
    sa = _store(tmp_path / "a.h5", A, index)
    sb = _store(tmp_path / "b.h5", B, index)
    res = compare(sa["h"], sb["h"])
    ref = compare(A.astype(np.float32), B.astype(np.float32), groups=index[:, 0])
    assert res.errors["rigid"] == pytest.approx(ref.errors["rigid"], rel=1e-5)
    assert res.info["n_samples"] == 100
    sc = _store(tmp_path / "c.h5", B, index, fingerprint="inputs-2")
    with pytest.raises(ValueError, match="different inputs"):
        compare(sa["h"], sc["h"])
    index2 = index.copy()
    index2[:, 1] = index2[::-1, 1]
    sd = _store(tmp_path / "d.h5", B, index2)
    with pytest.raises(ValueError, match="different row indexes"):
        compare(sa["h"], sd["h"])


def _noisy(B, rel, seed=0):
    rng = np.random.default_rng(seed)
    return B + rel * B.std() * rng.standard_normal(B.shape)


def test_efficiency_is_nan_with_a_note_when_permutation_minus_rigid_is_noise():
    """A representation against a noisy copy: every error ~0, so (perm - ica) / (perm -
    rigid) divides noise by noise; it must be NaN with a warning, never 144652886%."""
    rng, S = _sources(0)
    A = S @ rng.normal(size=(D, D))
    with pytest.warns(UserWarning, match="ica_efficiency is undefined"):
        res = compare(A, _noisy(A, 1e-6))
    assert math.isnan(res.ica_efficiency)
    d = res.to_dict()
    assert d["ica_efficiency"] is None and d["ica_efficiency_std"] is None
    assert d["efficiency_denominator"] <= d["efficiency_noise"]
    assert res.errors["ica"] <= res.errors["rigid"] + 0.01
    from actkit.report import format_table

    table = format_table([res], ["noisy copy"])
    assert "(\u2013)" in table and "\u2013: ICA efficiency undefined" in table


def test_efficiency_is_finite_and_in_range_when_rigid_beats_permutation():
    """Mixed independent sources mapped by a random rotation: permutation - rigid is far
    above its noise; the efficiency is (perm - ica) / (perm - rigid), with ICA recovering
    the sources it lies near 1 (documented range: 0 = no better than the permutation,
    1 = as good as the rigid map)."""
    rng, S = _sources(0)
    A = S @ rng.normal(size=(D, D))
    B = A @ ortho_group.rvs(D, random_state=3)
    res = compare(A, B)
    d = res.to_dict()
    e = res.errors
    assert d["efficiency_denominator"] > 10 * d["efficiency_noise"]
    assert res.ica_efficiency == pytest.approx((e["permutation"] - e["ica"]) / (e["permutation"] - e["rigid"]))
    assert 0.8 <= res.ica_efficiency <= 1.1
    assert d["ica_identified"] == D


def test_ica_restarts_give_a_spread_and_identical_seeds_identical_results():
    rng, S = _sources(4)
    A = S @ rng.normal(size=(D, D))
    B = (S + 0.3 * rng.normal(size=S.shape)) @ rng.normal(size=(D, D))
    r1 = compare(A, B, ica_restarts=4, random_state=1).to_dict()
    r2 = compare(A, B, ica_restarts=4, random_state=1).to_dict()
    for key in ("ica", "ica_std", "ica_efficiency", "ica_efficiency_std", "ica_identified"):
        assert r1[key] == r2[key], key
    assert r1["ica_restarts"] == 4
    assert r1["ica_std"] is not None and r1["ica_std"] >= 0
    assert r1["ica_efficiency_std"] == pytest.approx(
        r1["ica_std"] / (r1["permutation"] - r1["rigid"]))
    one = compare(A, B, ica_restarts=1).to_dict()
    assert one["ica_std"] is None and one["ica_restarts"] == 1
    with pytest.raises(ValueError, match="ica_restarts"):
        compare(A, B, ica_restarts=0)


def test_table_prints_the_spread_only_where_it_shows():
    from actkit.report import format_table

    row = {"permutation": 0.5, "rigid": 0.3, "linear": 0.2, "ica": 0.4, "ica_efficiency": 0.5,
           "linear_cka": 0.9, "mean_cca": 0.8, "ica_std": 0.012, "ica_efficiency_std": 0.06,
           "ica_converged": True}
    table = format_table([row], ["x"])
    # with a spread, only the digits it supports: 0.400 +- 0.012 -> 0.40+-0.01
    assert "0.40±0.01 (50±6%)" in table and "±: standard deviation of the ICA error" in table
    assert "0.400±0.003 (50±6%)" in format_table([{**row, "ica_std": 0.003}], ["x"])
    assert "0.4±0.1 (50±60%)" in format_table([{**row, "ica_std": 0.12, "ica_efficiency_std": 0.6}], ["x"])
    assert "(60±20%)" in format_table([{**row, "ica_efficiency": 0.57, "ica_efficiency_std": 0.15}], ["x"])
    # the spread is rounded to one significant digit before it decides the places: two runs
    # of the demo's Pythia row (66 +- 10.6 % and 69 +- 9.7 %) print the same cell
    for ica, eff, sd in ((0.4639, 0.6557, 0.1055), (0.4586, 0.6874, 0.0973)):
        assert "0.46±0.02 (70±10%)" in format_table([{**row, "ica": ica, "ica_std": 0.017,
                                                       "ica_efficiency": eff, "ica_efficiency_std": sd}], ["x"])
    assert "0.40±0.01 (50±6%)" in format_table([row], ["x"], ica_digits=2, eff_step=5)
    quiet = {**row, "ica_std": 1e-5, "ica_efficiency_std": 5e-5}
    assert "0.400 (50%)" in format_table([quiet], ["x"]) and "±" not in format_table([quiet], ["x"])
    starred = format_table([{**quiet, "ica_converged": False}], ["x"])
    assert "0.400 (50%)*" in starred and "*: FastICA did not converge" in starred


def test_gaussian_directions_are_not_identified():
    """Gaussian sources have no ICA solution. The consensus rule: no source is found by
    every restart, and the ICA map falls back on the permutation alignment. The default
    (best contrast): the two halves of the restarts land on different optima, so
    ica_identifiable is False (these seeds)."""
    rng = np.random.default_rng(1)
    A = rng.normal(size=(N, D)) @ rng.normal(size=(D, D))
    B = A @ ortho_group.rvs(D, random_state=2)
    with pytest.warns(UserWarning, match="ica_identifiable is false"):
        best = compare(A, B).to_dict()
    assert best["ica_identifiable"] is False and best["ica_shared_halves"] < D
    res = compare(A, B, ica_method="consensus", ica_restarts=3)
    assert res.to_dict()["ica_identified"] == 0
    e = res.errors
    # at most a chance source shared by two restarts: ICA closes < 10% of the perm-rigid gap
    assert abs(e["ica"] - e["permutation"]) <= 0.1 * (e["permutation"] - e["rigid"]), e


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_direction_at_rounding_level_cannot_change_the_rank_ica_keeps(dtype):
    """A null direction (LayerNorm-like: the coordinates sum to zero) that a copy fills with
    noise at 1e-8 of the largest variance -- the level of float32 rounding in block moments
    -- never leaves the two sides with different ranks: float32 rows drop it on both sides,
    and where one side keeps it (float64) the other is refitted with as many components.
    A representation then aligns with such a copy by ICA as by the rigid map (before, one
    side kept the direction and an arbitrary part of the other's rotated basis was cut
    off: ica 0.09 against rigid 0.000 on the demo's Pythia-tiny store)."""
    rng, S = _sources(2)
    A = S @ rng.normal(size=(D, D))
    A -= A.mean(axis=1, keepdims=True)                       # rank D - 1
    null = np.ones(D) / np.sqrt(D)
    B = A + 1e-4 * A.std() * rng.standard_normal((A.shape[0], 1)) * null
    res = compare(A.astype(dtype), B.astype(dtype))
    e = res.errors
    assert e["ica"] <= e["rigid"] + 0.01, e
    assert res.to_dict()["ica_n_components"] == D - 1


def test_ica_maps_a_source_through_ica_only_where_that_helps():
    """Independent sources on A against unrelated noise on B: whatever FastICA finds on B,
    no matched pair lowers the fit-row error, so ICA falls back on the permutation map
    (efficiency ~0) instead of matching unrelated sources."""
    rng, S = _sources(3)
    A = S @ rng.normal(size=(D, D))
    B = rng.laplace(size=A.shape) @ rng.normal(size=(D, D))
    res = compare(A, B, ica_method="consensus", ica_restarts=3)
    e = res.errors
    assert e["ica"] <= e["permutation"] + 0.01 * e["permutation"], e


def test_one_restart_is_the_classic_ica_alignment():
    """ica_restarts=1: every source identified and matched (the paper's method, one draw):
    the one map is the single-start map, with no spread and no reproducibility check."""
    rng, S = _sources(0)
    A = S @ rng.normal(size=(D, D))
    B = A @ ortho_group.rvs(D, random_state=3)
    for method in ("best", "consensus"):
        res = compare(A, B, ica_restarts=1, ica_method=method)
        h = res.alignments["ica"]
        assert h.pairs_.shape[0] == D and len(h.classic_) == 1
        np.testing.assert_allclose(h.coef_, h.classic_[0].coef_, atol=1e-12)
        d = res.to_dict()
        assert d["ica_std"] is None and d["ica_identifiable"] is None
        assert d["ica_classic"] == pytest.approx(d["ica"], abs=1e-12) and d["ica_classic_se"] is None
