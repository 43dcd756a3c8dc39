"""Inference by input sample (issue 32): resampled moments equal recomputation from the
resampled rows; permutation p-values are calibrated under within-sample dependence (and a
row-level shuffle is not); bootstrap intervals cover a known population value; compare's
keys, table and reproducibility."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import actkit
from actkit.errors import ValidationError
from actkit.inference import (Samples, bootstrap_cka, bootstrap_draws, infer, p_value,
                              permutation_draws)
from actkit.measures import get_measure


def _pair(G=30, seed=0, unequal=False, d=(5, 4), tau=1.0, shuffle_rows=True):
    rng = np.random.default_rng(seed)
    lens = rng.integers(3, 6, G) if unequal else np.full(G, 4)
    g = np.repeat(np.arange(G), lens)
    if shuffle_rows:
        g = rng.permutation(g)                  # a sample's rows need not be contiguous
    A = rng.normal(size=(g.size, d[0])) + tau * rng.normal(size=(G, d[0]))[g] + 3.0
    B = A @ rng.normal(size=(d[0], d[1])) + rng.normal(size=(g.size, d[1]))
    return A, B, g


def _rows_of(g, picks):
    """Rows of the samples ``picks`` (sample ids, in order), each sample's rows in row order."""
    uniq = np.unique(g)
    return np.concatenate([np.flatnonzero(g == uniq[s]) for s in picks])


MEASURES = ("linear_cka", "linear_cka_debiased", "mean_cca", "procrustes", "bures")


def _direct(name, A, B):
    return actkit.measure(A, B, name)


def test_bootstrap_moments_equal_the_resampled_rows():
    A, B, g = _pair(unequal=True)
    s = Samples(A, B, g)
    W = bootstrap_draws(s.G, 4, random_state=3)
    fast = bootstrap_cka(s, W)
    for k, m in enumerate(s.weighted_moments(W)):
        picks = np.repeat(np.arange(s.G), W[k].astype(int))
        rows = _rows_of(g, picks)
        for name in MEASURES:
            got = get_measure(name).compute(m)
            assert got == pytest.approx(_direct(name, A[rows], B[rows]), abs=1e-9), name
        assert fast[k] == pytest.approx(_direct("linear_cka", A[rows], B[rows]), abs=1e-12)


def test_permuted_moments_equal_the_permuted_rows_within_equal_lengths():
    A, B, g = _pair(unequal=True, seed=1)
    s = Samples(A, B, g)
    perms, share = permutation_draws(s.n_s, 3, random_state=0)
    assert 0 < share <= 1
    for perm in perms:
        assert np.array_equal(s.n_s[perm], s.n_s)          # lengths kept
        ia, ib = _rows_of(g, np.arange(s.G)), _rows_of(g, perm)
        m = s.permuted_moments(perm)
        for name in MEASURES:
            assert get_measure(name).compute(m) == pytest.approx(_direct(name, A[ia], B[ib]),
                                                                 abs=1e-9), name


def test_p_value_counts_ties_against_the_observation_and_follows_the_kind():
    assert p_value([0.1, 0.5, 0.9], 0.5, "similarity") == 3 / 4
    assert p_value([0.1, 0.5, 0.9], 0.5, "distance") == 3 / 4
    assert p_value([0.1, 0.2], 0.9, "similarity") == 1 / 3
    assert p_value([0.1, 0.2], 0.9, "distance") == 1.0


def _cka_only():
    m = get_measure("linear_cka")
    return {"linear_cka": (m.compute, "similarity")}


def test_permutation_p_values_are_uniform_and_a_row_shuffle_is_anticonservative():
    """Independent A and B, each with a strong per-sample effect (rows of a sample share
    it): shuffling whole samples gives uniform p-values; shuffling rows (each row its own
    sample) ignores the dependence and rejects far too often."""
    rng = np.random.default_rng(7)
    G, L, d = 20, 8, 3
    g = np.repeat(np.arange(G), L)
    p_sample, p_row = [], []
    for rep in range(150):
        A = rng.normal(size=(G * L, d)) + 3 * rng.normal(size=(G, d))[g]
        B = rng.normal(size=(G * L, d)) + 3 * rng.normal(size=(G, d))[g]
        for groups, out in ((g, p_sample), (None, p_row)):
            rec, _ = infer(Samples(A, B, groups), _cka_only(), permutations=49, random_state=rep)
            out.append(rec["linear_cka"].p)
    p_sample, p_row = np.array(p_sample), np.array(p_row)
    assert 0.0 < np.mean(p_sample <= 0.05) <= 0.12          # nominal 5%
    assert abs(np.mean(p_sample) - 0.5) < 0.08             # uniform: mean 1/2
    assert np.mean(p_row <= 0.05) > 0.4                    # anti-conservative


def _population_case(rng, G, L, d, tau, Mx):
    g = np.repeat(np.arange(G), L)
    A = rng.normal(size=(G * L, d)) + tau * rng.normal(size=(G, d))[g]
    B = A @ Mx + rng.normal(size=(G * L, d))
    return A, B, g


def test_bootstrap_interval_covers_the_population_value():
    """Rows x = z_sample + e, y = x M + noise: the population CKA is that of the marginal
    covariances; the basic interval over input samples covers it ~95% of the time."""
    rng = np.random.default_rng(11)
    G, L, d, tau = 40, 8, 6, 1.0
    Mx = rng.normal(size=(d, d)) / np.sqrt(d)
    Saa = (1 + tau ** 2) * np.eye(d)
    Sab, Sbb = Saa @ Mx, Mx.T @ Saa @ Mx + np.eye(d)
    pop = np.sum(Sab ** 2) / np.linalg.norm(Saa) / np.linalg.norm(Sbb)
    hits = []
    for rep in range(150):
        A, B, g = _population_case(rng, G, L, d, tau, Mx)
        rec, _ = infer(Samples(A, B, g), _cka_only(), bootstrap=200, random_state=rep,
                       fast_bootstrap={"linear_cka": bootstrap_cka})
        hits.append(rec["linear_cka"].ci_low <= pop <= rec["linear_cka"].ci_high)
    assert 0.88 <= np.mean(hits) <= 0.995


def test_resampling_needs_ten_samples_and_valid_arguments():
    A, B, g = _pair(G=9)
    with pytest.raises(ValidationError, match="at least 10 input samples"):
        actkit.compare(A, B, groups=g, permutations=5, methods=("rigid",))
    A, B, g = _pair(G=12)
    for kw, msg in ((dict(permutations=-1), "permutations"), (dict(bootstrap=2.5), "bootstrap"),
                    (dict(confidence=1.0), "confidence"), (dict(interval="bca"), "interval")):
        with pytest.raises(ValidationError, match=msg):
            actkit.compare(A, B, groups=g, methods=("rigid",), **kw)


@pytest.fixture(scope="module")
def resampled():
    A, B, g = _pair(G=40, seed=2, shuffle_rows=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=g, permutations=19, bootstrap=40,
                             methods=("permutation", "rigid", "linear"), measures=["procrustes"])
    return A, B, g, res


def test_compare_reports_every_key_and_record(resampled):
    A, B, g, res = resampled
    d = res.to_dict()
    for name in ("linear_cka", "linear_cka_debiased", "mean_cca", "procrustes"):
        for suffix in ("_p", "_null_mean", "_null_sd", "_ci_low", "_ci_high"):
            assert d[f"{name}{suffix}"] is not None, name + suffix
        rec = res.measures[name]
        assert rec.p == d[f"{name}_p"] and rec.ci_low == d[f"{name}_ci_low"]
        assert rec.value == d[name]
    for name in ("permutation", "rigid", "linear"):
        assert d[f"{name}_ci_low"] <= d[f"{name}_ci_high"]
        assert f"{name}_p" not in d
    assert d["linear_cka_p"] == 1 / 20 and d["procrustes_p"] == 1 / 20     # strongly related
    assert d["permutations"] == 19 and d["bootstrap"] == 40 and d["interval"] == "basic"


def test_table_prints_interval_and_p_unless_compact(resampled):
    from actkit.report import format_table

    *_, res = resampled
    text = format_table([res], ["x"])
    assert re.search(r"\d\.\d{3} \[\d\.\d{2,3}, \d\.\d{2,3}\] p=0\.050", text), text
    assert "bootstrap interval (basic)" in text and "permutation p-value" in text
    compact = format_table([res], ["x"], compact=True)
    assert " p=" not in compact and "bootstrap interval" not in compact
    # no resampling: the table as before (no interval, the chance levels)
    plain = dict(res.to_dict())
    for k in [k for k in plain if k.endswith(("_p", "_ci_low", "_ci_high", "_null_mean", "_null_sd"))]:
        del plain[k]
    plain["permutations"] = plain["bootstrap"] = 0
    assert format_table([plain], ["x"]) == compact


def _keys(res):
    d = res.to_dict()
    return {k: v for k, v in d.items() if k.endswith(("_p", "_null_mean", "_null_sd", "_ci_low", "_ci_high"))}


def test_same_digits_at_1_and_2_threads_and_on_a_store(tmp_path):
    from actkit.store import LayerSpec, create_store

    A, B, g = _pair(G=24, seed=4, shuffle_rows=False)
    index = np.stack([g, np.concatenate([np.arange(c) for c in np.bincount(g)])], 1)
    paths = []
    for name, X in (("a", A), ("b", B)):
        w = create_store(tmp_path / f"{name}.h5", [LayerSpec("l", X.shape[0], X.shape[1], index=index)],
                         n_samples=24, request={"p": name}, inputs_fingerprint="same")
        w.append("l", X.astype(np.float32))
        w.checkpoint(24)
        w.finalize()
        paths.append(tmp_path / f"{name}.h5")
    la, lb = actkit.open_store(paths[0])["l"], actkit.open_store(paths[1])["l"]
    kw = dict(permutations=9, bootstrap=40, methods=("permutation", "rigid"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one = _keys(actkit.compare(la, lb, threads=1, **kw))
        two = _keys(actkit.compare(la, lb, threads=2, **kw))
        arr = _keys(actkit.compare(np.asarray(la[:]), np.asarray(lb[:]), groups=g, threads=2, **kw))
    assert one == two == arr and len(one) > 10


def test_compare_layers_map_and_self_map(tmp_path):
    from actkit.store import LayerSpec, create_store

    rng = np.random.default_rng(5)
    G, L = 30, 4
    g = np.repeat(np.arange(G), L)
    index = np.stack([g, np.tile(np.arange(L), G)], 1)
    S = rng.normal(size=(G * L, 5)) + rng.normal(size=(G, 5))[g]
    layers = {"l0": S, "l1": np.tanh(S @ rng.normal(size=(5, 6))), "l2": rng.normal(size=(G * L, 3))}
    path = tmp_path / "s.h5"
    w = create_store(path, [LayerSpec(k, X.shape[0], X.shape[1], index=index) for k, X in layers.items()],
                     n_samples=G, request={"p": 1}, inputs_fingerprint="fp")
    for k, X in layers.items():
        w.append(k, X.astype(np.float32))
    w.checkpoint(G)
    w.finalize()
    st = actkit.open_store(path)
    lm = actkit.compare_layers(st, st, permutations=19)
    matrix, la, lb = lm
    assert la == lb == ["l0", "l1", "l2"]
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-9)
    for i, x in enumerate(la):
        for j, y in enumerate(lb):
            ref = actkit.measure(st[x][:].astype(np.float64), st[y][:].astype(np.float64), "linear_cka")
            assert matrix[i, j] == pytest.approx(ref, abs=1e-9)
    assert lm.p[0, 1] == 1 / 20 and lm.p[0, 2] > 0.05        # l2 is noise
    assert "*" in str(lm).splitlines()[1]
    sub = actkit.compare_layers(st, st, measure="mean_cca", layers_a=["l1"], layers_b=["l0", "l2"])
    assert sub.matrix.shape == (1, 2)
    with pytest.raises(ValidationError, match="moment-based"):
        actkit.compare_layers(st, st, measure="linear_r2")


def test_row_based_measures_resample_their_row_sample():
    """A sampled measure's p-value and interval come from its own row sample: each
    permutation re-pairs whole input samples of that sample (checked against a direct
    recomputation), and compare reports them with the moment-based ones."""
    import torch

    from actkit.inference import infer_rows

    A, B, g = _pair(G=15, seed=6, shuffle_rows=False)
    m = get_measure("rbf_cka")
    rec = infer_rows(torch.from_numpy(A), torch.from_numpy(B), g,
                     {"rbf_cka": (lambda a, b: float(m.compute(a, b)), "similarity")},
                     permutations=5, bootstrap=6, confidence=0.6, random_state=0)["rbf_cka"]
    assert rec.value == pytest.approx(actkit.measure(A, B, "rbf_cka"), abs=1e-12)
    s = Samples(A, B, g)
    perms, _ = permutation_draws(s.n_s, 5, 0)
    null = [actkit.measure(A, B[s.row_order(p)], "rbf_cka") for p in perms]
    assert rec.null_mean == pytest.approx(np.mean(null), abs=1e-12)
    assert rec.p == p_value(null, rec.value, "similarity")
    assert rec.ci_low < rec.ci_high
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = actkit.compare(A, B, groups=g, methods=("rigid",), measures=["rbf_cka"],
                             permutations=5, bootstrap=6, confidence=0.6)
    d = res.to_dict()
    assert d["rbf_cka_p"] == rec.p and d["rbf_cka_ci_low"] == pytest.approx(rec.ci_low, abs=1e-12)


def test_permutation_products_on_a_torch_device_equal_numpy():
    """``device``: the permutations' cross products run in torch on that device (here the
    CPU, the only one every machine has) and give the numpy path's values."""
    A, B, g = _pair(G=20, seed=8, unequal=True)
    here, torch_cpu = Samples(A, B, g), Samples(A, B, g, device="cpu")
    for perm in permutation_draws(here.n_s, 3, 0)[0]:
        np.testing.assert_allclose(torch_cpu.permuted_cross(perm), here.permuted_cross(perm),
                                   rtol=1e-12, atol=1e-12)
        assert get_measure("linear_cka_debiased").compute(torch_cpu.permuted_moments(perm)) == \
            pytest.approx(get_measure("linear_cka_debiased").compute(here.permuted_moments(perm)), abs=1e-12)


@pytest.mark.parametrize("G,d", [(20, (5, 4)), (12, (24, 20))], ids=["G>=D", "G<D"])
def test_bootstrap_on_a_torch_device_equals_numpy(G, d):
    """``device``: the bootstrap's one-time products (per-sample blocks, Gram matrices, rows
    against the sample sums) run in torch on that device and give the numpy path's values."""
    A, B, g = _pair(G=G, seed=10, unequal=True, d=d)
    here, torch_cpu = Samples(A, B, g), Samples(A, B, g, device="cpu")
    W = bootstrap_draws(G, 6, random_state=4)
    np.testing.assert_allclose(bootstrap_cka(torch_cpu, W), bootstrap_cka(here, W), rtol=1e-12, atol=1e-12)
    for m_dev, m_np in zip(torch_cpu.weighted_moments(W), here.weighted_moments(W)):
        for name in MEASURES:
            assert get_measure(name).compute(m_dev) == pytest.approx(get_measure(name).compute(m_np), abs=1e-10)


def test_fast_paths_of_wide_pairs_equal_the_rows_and_keep_their_digits_at_any_thread_count(monkeypatch):
    """Fewer input samples than features (the bootstrap's route through the rows' products
    with the sample sums) and more rows than one step of a permutation's product (B's rows
    re-paired step by step): the values of the resampled rows, the same bits at 1 and 2 threads."""
    from actkit._threads import use_threads
    from actkit.inference import _samples

    monkeypatch.setattr(_samples, "PRODUCT_CHUNK_BYTES", 64)      # a step of 256 rows
    A, B, g = _pair(G=12, seed=9, d=(24, 20))
    A, B, g = np.repeat(A, 30, axis=0), np.repeat(B, 30, axis=0), np.repeat(g, 30)
    A = A + np.random.default_rng(0).normal(size=A.shape)         # 1,440 rows, 12 samples
    W = bootstrap_draws(12, 5, random_state=1)
    perms = permutation_draws(np.bincount(g), 3, random_state=2)[0]
    runs = []
    for threads in (1, 2):
        with use_threads(threads):
            s = Samples(A, B, g, norms=False)
            runs.append((bootstrap_cka(s, W), [get_measure("linear_cka").compute(s.permuted_moments(p))
                                               for p in perms]))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    for k in range(len(W)):
        rows = _rows_of(g, np.repeat(np.arange(12), W[k].astype(int)))
        assert runs[0][0][k] == pytest.approx(_direct("linear_cka", A[rows], B[rows]), abs=1e-12)
    for perm, value in zip(perms, runs[0][1]):
        ia, ib = _rows_of(g, np.arange(12)), _rows_of(g, perm)
        assert value == pytest.approx(_direct("linear_cka", A[ia], B[ib]), abs=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pair_route_gives_the_rows_products_for_unequal_lengths_at_any_thread_count(dtype, monkeypatch):
    """The permutations' cross products from the products of pairs of input samples
    (:mod:`actkit.inference._pairs`): for samples of unequal lengths (a length only one sample
    has keeps its partner), split into small tables, runs and row chunks, they equal the product
    of the re-paired rows (float64: to rounding; float32: to float32 rounding), the debiased
    CKA's pairing terms too, with the same bits at 1 and 2 threads."""
    from actkit._threads import use_threads
    from actkit.inference import _pairs

    monkeypatch.setattr(_pairs, "ROWS", 3)
    monkeypatch.setattr(_pairs, "TABLE_BYTES", 3 * 4 * 6 * 5 * 8)
    monkeypatch.setattr(_pairs, "RUN_BYTES", 2 * 6 * 5 * 8)
    rng = np.random.default_rng(11)
    lens = np.r_[np.full(6, 4), np.full(5, 7), 9, np.full(6, 2)]         # one sample of 9 rows
    g = rng.permutation(np.repeat(np.arange(lens.size), lens))
    A = rng.normal(size=(g.size, 7)) + 2.0
    B = A[:, :5] @ rng.normal(size=(5, 5)) + rng.normal(size=(g.size, 5))
    runs = []
    for threads in (1, 2):
        with use_threads(threads):
            s = Samples(A, B, g, product_dtype=dtype)
            perms = permutation_draws(s.n_s, 13, random_state=3)[0]
            runs.append((_pairs.permuted_crosses(s, perms), *_pairs.pairing_terms(s, perms)))
    for one, two in zip(*runs):
        assert np.array_equal(one, two)
    crosses, x_dy, y_dx, dxdy = runs[0]
    assert crosses.dtype == dtype and crosses.shape == (13, 7, 5)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    for j, perm in enumerate(perms):
        r = s.row_order(perm)
        np.testing.assert_allclose(crosses[j], s.A.T @ s.B[r], rtol=rtol, atol=rtol * np.abs(s.A.T @ s.B[r]).max())
        np.testing.assert_allclose(x_dy[j], s.A.T @ s.dy[r], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(y_dx[j], s.B[r].T @ s.dx, rtol=1e-12, atol=1e-9)
        assert dxdy[j] == pytest.approx(s.dx @ s.dy[r], rel=1e-12)


def test_pair_route_is_taken_where_it_is_cheaper():
    """Many permutations of few long samples: the pair products; one-row samples, few
    permutations, or a torch device: the rows' product."""
    from actkit.inference._pairs import use_pairs

    rng = np.random.default_rng(0)
    A, B = rng.normal(size=(1200, 3)), rng.normal(size=(1200, 2))
    long_samples = Samples(A, B, np.repeat(np.arange(40), 30))
    assert use_pairs(long_samples, 1000) and not use_pairs(long_samples, 20)
    assert not use_pairs(Samples(A, B, None), 100000)                      # one-row samples
    assert not use_pairs(Samples(A, B, np.repeat(np.arange(40), 30), device="cpu"), 1000)
