"""actkit.units and actkit.match_units, as the spec (issue 40): each unit's top rows, moments,
histogram, logit lens and label selectivity checked against numpy / scipy / scikit-learn
computed independently; matched units against a known permutation and a Gaussian control;
the same result at any block size, thread count and on Dask; bad input is one line, exit 2,
before any work."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats

import actkit
from actkit import UnitReport, match_units, units
from _stores import write_store
from cli_helpers import cli_error as _error, run_cli as _run

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]


def _store(path, X, index, fingerprint="inputs-1", params=None, layer="h"):
    return write_store(path, {layer: X}, index, fingerprint=fingerprint, params=params)


def _index(n_samples, length):
    return np.stack([np.repeat(np.arange(n_samples), length), np.tile(np.arange(length), n_samples)], 1).astype(np.int64)


def _brute_top(X, k):
    """numpy's top-k rows of every column: a stable sort of -X (ties by row order)."""
    return np.argsort(-X, axis=0, kind="stable")[:k]


class TextInputs:
    """Recorded text inputs as a store hands them out (the RecordedInputs interface), built
    from token ids and a vocabulary."""

    kind = "text"

    def __init__(self, ids, vocab):
        self.ids, self.vocab = ids, list(vocab)
        self.n_samples = len(ids)
        self.special = np.zeros(len(vocab), bool)
        self.tokenizer = {"name": "test"}
        self.fingerprint = "inputs-1"

    def token_ids(self, sample):
        return np.asarray(self.ids[sample], np.int64)

    def tokens(self, sample):
        return [self.vocab[i] for i in self.ids[sample]]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """8 units over 300 samples x 10 tokens of a 40-token vocabulary: unit j fires (5 + small
    noise) exactly on token j, and token j occurs in exactly 12 rows; elsewhere noise < 0.1."""
    rng = np.random.default_rng(0)
    n_samples, length, k, U = 300, 10, 12, 8
    ids = rng.integers(8, 40, size=(n_samples, length))
    flat = ids.ravel()
    for j in range(U):
        free = np.flatnonzero(flat >= 8)
        flat[rng.choice(free, k, replace=False)] = j
    ids = flat.reshape(n_samples, length)
    X = rng.uniform(0, 0.1, size=(n_samples * length, U))
    for j in range(U):
        X[flat == j, j] = 5 + rng.uniform(0, 0.5, size=k)
    vocab = [f"tok{i}" for i in range(40)]
    vocab[3] = "<script>alert(1)</script>"
    path = _store(tmp_path_factory.mktemp("planted") / "p.h5", X, _index(n_samples, length))
    return path, X.astype(np.float32), flat, TextInputs(list(ids), vocab), k


def test_planted_unit_top_examples_are_exactly_its_token(planted):
    path, X, flat, inputs, k = planted
    r = units(path, k=k, inputs=inputs, context=2)
    for j in range(8):
        top = r.unit(j)["top"]
        assert sorted(e["row"] for e in top) == sorted(np.flatnonzero(flat == j).tolist())
        for e in top:
            t = e["text"]
            assert t["tokens"][t["highlight"]] == inputs.vocab[j]
            assert len(t["tokens"]) <= 2 * 2 + 1


def test_top_k_equals_numpy_brute_force_at_any_block_and_thread_count(planted, tmp_path):
    path, X, *_ = planted
    rng = np.random.default_rng(1)
    Y = np.round(rng.normal(size=(2000, 5)), 1).astype(np.float32)  # many ties: broken by row order
    p = _store(tmp_path / "ties.h5", Y, _index(200, 10))
    want = _brute_top(Y, 7)
    from actkit._threads import use_threads

    for threads in (1, 2):
        with use_threads(threads):
            r = units(p, k=7, inputs=False, order="index")
        for j in range(5):
            assert [e["row"] for e in r.unit(j)["top"]] == want[:, j].tolist()
            assert [e["row"] for e in r.unit(j)["bottom"]] == _brute_top(-Y, 7)[:, j].tolist()
            assert [e["value"] for e in r.unit(j)["top"]] == Y[want[:, j], j].astype(np.float64).tolist()


def _pass_result(basis, X, k, rows, threads, flippable=False):
    from actkit._threads import use_threads
    from actkit.runners import LOCAL
    from actkit._units._pass import finish, setup, unit_pass

    st = setup(basis, k, flippable=flippable)
    with use_threads(threads):
        return finish(LOCAL.run(X, unit_pass(st, rows), progress=False), st)


def _brute_sample(A, size, random_state=0, eligible=None):
    """Each column's sample by brute force: its ``size`` active rows (and ``eligible``, where
    given) of smallest priority ``frac(p_row + c_unit)`` (the pass's splitmix64 numbers of the
    row and the unit), ties by row."""
    from actkit._units._pass import priority

    p = priority(np.arange(A.shape[0]), random_state)
    c = priority(np.arange(A.shape[1]), random_state, salt=1)
    q = (p[:, None] + c[None, :]) % 1.0
    ok = A != 0 if eligible is None else (A != 0) & eligible
    score = np.where(ok, 1.0 - q, -np.inf)
    order = np.argsort(-score, axis=0, kind="stable")[:size]
    return np.where(np.take_along_axis(score, order, 0) > -np.inf, order, -1)


@pytest.mark.parametrize("sparse", [False, True])
def test_the_pass_equals_brute_force_at_any_block_size_and_thread_count(sparse):
    """Many blocks: the running thresholds, the short first chunks and the queued rebuilds of
    the top-k, bottom-k and sample states give numpy's brute force (ties by row order, exact
    zeros, a dead unit), and the same bits at every block size and thread count."""
    from actkit._units._basis import Basis
    from actkit._units._pass import SAMPLE, TAIL

    rng = np.random.default_rng(7)
    A = np.round(rng.laplace(size=(6000, 9)), 1).astype(np.float32)  # ties and exact zeros
    if sparse:
        A = np.where(rng.random(A.shape) < 0.1, np.abs(A) + 0.1, 0).astype(np.float32)
    A[:, 4] = 0  # a dead unit
    basis = Basis("dictionary" if sparse else "neuron", A, A.shape[1], source="test")
    runs = [_pass_result(basis, A, 6, rows, threads, flippable=not sparse) for rows in (97, 1000, 6000)
            for threads in (1, 2)]
    keys = ("top", "sample", "tail") + (() if sparse else ("bottom",))
    for acc in runs[1:]:
        for key in keys:
            for a, b in zip(getattr(runs[0], key), getattr(acc, key)):
                np.testing.assert_array_equal(a, b)
        for key in ("counts", "edges"):
            if runs[0].hist[key] is not None:
                np.testing.assert_array_equal(runs[0].hist[key], acc.hist[key])
        for key in ("active", "vmin", "vmax"):
            np.testing.assert_array_equal(getattr(runs[0], key), getattr(acc, key))
        np.testing.assert_allclose(acc.kurtosis, runs[0].kurtosis, rtol=1e-12, atol=1e-12)
    acc = runs[0]
    top = np.where(A[_brute_top(A, 6), np.arange(A.shape[1])] > 0, _brute_top(A, 6), -1) if sparse \
        else _brute_top(A, 6)
    np.testing.assert_array_equal(acc.top[1], top)
    if not sparse:
        np.testing.assert_array_equal(acc.bottom[1], _brute_top(-A, 6))
    np.testing.assert_array_equal(acc.sample[1], _brute_sample(A, SAMPLE))
    live = [0, 1, 2, 3, 5, 6, 7, 8]  # the thresholds: quantiles of the active values (here of every row)
    def up(q):  # the smallest float32 at or above q (the thresholds are float32 values)
        return float(np.float32(q) if np.float32(q) >= q else np.nextafter(np.float32(q), np.float32(np.inf)))

    def down(q):
        return float(np.float32(q) if np.float32(q) <= q else np.nextafter(np.float32(q), np.float32(-np.inf)))

    hi = [up(np.quantile(A[A[:, j] != 0, j].astype(np.float64), 0.98)) for j in live]
    np.testing.assert_array_equal(acc.tau_hi[live], hi)
    assert acc.tau_hi[4] == -np.inf and (acc.tau_lo == -np.inf).all() == sparse
    if not sparse:
        lo = [down(np.quantile(A[A[:, j] != 0, j].astype(np.float64), 0.02)) for j in live]
        np.testing.assert_array_equal(acc.tau_lo[live], lo)
    eligible = (A >= acc.tau_hi) | (A <= acc.tau_lo)
    np.testing.assert_array_equal(acc.tail[1], _brute_sample(A, TAIL, eligible=eligible))
    np.testing.assert_array_equal(acc.active, np.count_nonzero(A, axis=0))
    np.testing.assert_array_equal(acc.vmin, A.min(axis=0))
    np.testing.assert_array_equal(acc.vmax, A.max(axis=0))
    np.testing.assert_allclose(acc.mean, A.mean(axis=0, dtype=np.float64), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(acc.variance, A.astype(np.float64).var(axis=0, ddof=1), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(acc.skewness, np.nan_to_num(scipy.stats.skew(A.astype(np.float64))), rtol=1e-10,
                               atol=1e-12)


def test_sae_top_k_codes_give_the_pass_of_their_dense_codes(tmp_path):
    """An SAE basis is folded from its top-k codes as they are (never densified): the same
    examples, histograms and counts as the pass over the dense codes."""
    from actkit._units._basis import Basis
    from actkit._units._pass import SAMPLE

    X = np.random.default_rng(5).normal(size=(3000, 6)).astype(np.float32)
    sd = actkit.SparseDictionary(12, k=3, code="topk", positive=True, random_state=0, max_iter=3).fit(X)
    sae = actkit.load_sae(actkit.save_sae(sd, tmp_path / "sae", hook_name="h"))
    codes = sae.transform(X)
    by_sae = _pass_result(Basis("sae", X, 12, source="sae", sae=sae), X, 5, 700, 2)
    dense = _pass_result(Basis("dictionary", codes, 12, source="codes"), codes, 5, 700, 1)
    for key in ("top", "sample", "tail"):
        for a, b in zip(getattr(by_sae, key), getattr(dense, key)):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(by_sae.hist["counts"], dense.hist["counts"])
    np.testing.assert_array_equal(by_sae.active, np.count_nonzero(codes, axis=0))
    np.testing.assert_array_equal(by_sae.sample[1], _brute_sample(codes, SAMPLE))


def test_moments_and_histogram_equal_numpy(planted):
    path, X, *_ = planted
    r = units(path, k=3, inputs=False)
    for j in range(X.shape[1]):
        u = r.unit(j)
        x = X[:, j].astype(np.float64)
        assert u["mean"] == pytest.approx(x.mean(), rel=1e-6, abs=1e-9)
        assert u["sd"] == pytest.approx(x.std(ddof=1), rel=1e-5)
        assert u["skewness"] == pytest.approx(scipy.stats.skew(x), rel=1e-4)
        assert u["kurtosis"] == pytest.approx(scipy.stats.kurtosis(x), rel=1e-4)
        assert u["active_share"] == np.count_nonzero(x) / x.size
        counts, _ = np.histogram(X[:, j], bins=np.asarray(u["hist"]["edges"]))
        assert counts.tolist() == u["hist"]["counts"] and sum(counts) == X.shape[0]
        assert 64 <= len(u["hist"]["counts"]) <= 256


def test_logit_lens_equals_direction_times_unembedding(tmp_path):
    rng = np.random.default_rng(2)
    n, d, V = 1200, 6, 30
    S = rng.laplace(size=(n, d)) * [1, -1, 1, -1, 1, -1]
    X = (S @ rng.normal(size=(d, d))).astype(np.float32)
    W_U = rng.normal(size=(V, d))
    src = _store(tmp_path / "lm.h5", X, _index(120, 10), params={"unembedding": W_U})
    r = units(src, k=4, inputs=False)
    for j in range(d):  # neurons: the basis vector e_j
        lens = r.unit(j)["logits"]
        want = np.argsort(-W_U[:, j], kind="stable")[:10]
        assert [t[0] for t in lens["promoted"]] == want.tolist()
        np.testing.assert_allclose([t[2] for t in lens["promoted"]], W_U[want, j])
        assert [t[0] for t in lens["suppressed"]][0] == int(np.argmin(W_U[:, j]))
    ica = actkit.FastICA(random_state=0).fit(np.asarray(actkit.open_store(src)["h"]))
    out = actkit.transform_store(ica, actkit.open_store(src)["h"], tmp_path / "ica.h5")
    r = units(src, basis=out, k=4, inputs=False)
    assert r.to_dict()["basis"]["kind"] == "ica"
    for j in range(d):
        u = r.unit(j)
        sign = -1.0 if u["flipped"] else 1.0
        logits = sign * ica.mixing_[:, j].astype(np.float64) @ W_U.T
        assert [t[0] for t in u["logits"]["promoted"]] == np.argsort(-logits, kind="stable")[:10].tolist()
        np.testing.assert_allclose([t[2] for t in u["logits"]["promoted"]], np.sort(logits)[::-1][:10], rtol=1e-5)


def test_a_fitted_estimator_is_the_same_basis_as_its_derived_store(tmp_path):
    rng = np.random.default_rng(8)
    X = (rng.laplace(size=(2000, 5)) @ rng.normal(size=(5, 5))).astype(np.float32)
    src = _store(tmp_path / "s.h5", X, _index(200, 10))
    layer = actkit.open_store(src)["h"]
    ica = actkit.FastICA(random_state=0).fit(np.asarray(layer))
    stored = units(src, basis=actkit.transform_store(ica, layer, tmp_path / "ica.h5"), k=6, inputs=False).to_dict()
    direct = units(src, basis=ica, k=6, inputs=False).to_dict()
    assert direct["basis"]["kind"] == "ica" and direct["flipped"] == stored["flipped"]
    for u, v in zip(direct["units"], stored["units"]):
        assert u["unit"] == v["unit"] and [e["row"] for e in u["top"]] == [e["row"] for e in v["top"]]
        np.testing.assert_allclose([e["value"] for e in u["top"]], [e["value"] for e in v["top"]], rtol=1e-5)
    with pytest.raises(actkit.ActkitError, match="fitted on 3 features"):
        units(src, basis=actkit.FastICA(random_state=0).fit(X[:, :3]), inputs=False)


def test_ica_sources_are_oriented_to_positive_skew(tmp_path):
    rng = np.random.default_rng(3)
    n = 3000
    S = rng.exponential(size=(n, 4)) * np.array([1, -1, 1, -1])  # skewed sources, two negated
    X = (S @ rng.normal(size=(4, 4))).astype(np.float32)
    src = _store(tmp_path / "s.h5", X, _index(300, 10))
    layer = actkit.open_store(src)["h"]
    ica = actkit.FastICA(random_state=0).fit(np.asarray(layer))
    out = actkit.transform_store(ica, layer, tmp_path / "ica.h5")
    r = units(src, basis=out, k=5, inputs=False)
    Z = np.asarray(actkit.open_store(out)["h"], np.float64)
    d = r.to_dict()
    assert d["order"] == "skewness"
    assert d["flipped"] == [j for j in range(4) if scipy.stats.skew(Z[:, j]) < 0]
    skews = [u["skewness"] for u in d["units"]]
    assert all(s >= 0 for s in skews) and skews == sorted(skews, reverse=True)
    for u in d["units"]:
        z = -Z[:, u["unit"]] if u["flipped"] else Z[:, u["unit"]]
        assert [e["row"] for e in u["top"]] == _brute_top(z[:, None], 5)[:, 0].tolist()
        counts, _ = np.histogram(z, bins=np.asarray(u["hist"]["edges"]))
        assert sum(counts) == n


def test_sae_codes_ordered_by_frequency_with_dead_units_apart(tmp_path):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1500, 6)).astype(np.float32)
    src = _store(tmp_path / "s.h5", X, _index(150, 10))
    sd = actkit.SparseDictionary(10, k=2, code="topk", positive=True, random_state=0, max_iter=5).fit(X)
    folder = actkit.save_sae(sd, tmp_path / "sae", hook_name="h")
    sae = actkit.load_sae(folder)
    codes = sae.transform(X)
    r = units(src, basis=folder, k=4, inputs=False)
    d = r.to_dict()
    assert d["basis"]["kind"] == "sae" and d["order"] == "frequency"
    freq = (codes != 0).mean(axis=0)
    live = [u["unit"] for u in d["units"] if not u["dead"]]
    assert [freq[j] for j in live] == sorted(freq[live], reverse=True)
    assert d["dead"] == [j for j in np.argsort(-freq, kind="stable") if freq[j] == 0]
    labels = np.arange(len(X)) % 3
    by_label = units(src, basis=folder, k=4, inputs=False, labels=labels).to_dict()
    for u in by_label["units"]:  # the histogram of mostly-zero codes (zeros counted apart) is numpy's
        counts, _ = np.histogram(codes[:, u["unit"]], bins=np.asarray(u["hist"]["edges"]))
        assert counts.tolist() == u["hist"]["counts"]
        if u["label"] is not None:
            from sklearn.metrics import roc_auc_score

            binned = np.searchsorted(np.asarray(u["hist"]["edges"]), codes[:, u["unit"]], side="right")
            y = labels.astype(str) == u["label"]["name"]
            assert u["label"]["auroc"] == pytest.approx(roc_auc_score(y, binned), abs=1e-12)
    for u in d["units"]:
        active = np.flatnonzero(codes[:, u["unit"]] > 0)
        want = _brute_top(codes[:, u["unit"]:u["unit"] + 1], 4)[:, 0]
        assert [e["row"] for e in u["top"]] == [r_ for r_ in want.tolist() if r_ in set(active.tolist())]
        assert u["bottom"] == []
        np.testing.assert_allclose(u["active_share"], freq[u["unit"]])
    # the same units from the codes file transform_store writes
    cfile = actkit.transform_store(sae, actkit.open_store(src)["h"], tmp_path / "codes.h5")
    rc = units(src, basis=cfile, k=4, inputs=False)
    assert [u["unit"] for u in rc.to_dict()["units"]] == [u["unit"] for u in d["units"]]
    assert [[e["row"] for e in u["top"]] for u in rc.to_dict()["units"]] == \
        [[e["row"] for e in u["top"]] for u in d["units"]]
    for u in rc.to_dict()["units"][:3]:  # logit-lens directions: the decoder rows
        assert u["logits"] is None


def test_label_selectivity_equals_sklearn_on_the_binned_values(planted):
    from sklearn.metrics import mutual_info_score, roc_auc_score

    path, X, flat, inputs, k = planted
    labels = np.array([f"t{t}" if t < 8 else "other" for t in flat])  # each unit's own token a label
    r = units(path, k=3, inputs=False, labels=labels)
    d = r.to_dict()
    for u in d["units"]:
        lab = u["label"]
        assert lab["name"] == f"t{u['unit']}" and lab["auroc"] == 1.0
        edges = np.asarray(u["hist"]["edges"])
        binned = np.searchsorted(edges, X[:, u["unit"]], side="right")
        y = labels == lab["name"]
        assert lab["auroc"] == pytest.approx(roc_auc_score(y, binned), abs=1e-12)
        assert lab["mutual_information"] == pytest.approx(mutual_info_score(y, binned) / np.log(2), rel=1e-9)
    assert d["labels"]["with_own_unit"] == [f"t{j}" for j in range(8)] and d["labels"]["count"] == 8


def test_quantile_bands_hold_active_rows_of_their_band(planted):
    path, X, *_ = planted
    r = units(path, k=12, inputs=False)
    for j in range(X.shape[1]):
        u = r.unit(j)
        top = {e["row"] for e in u["top"]}
        assert [b["quantiles"] for b in u["bands"]] == [[0.99, 1.0], [0.9, 0.99], [0.5, 0.9]]
        for b in u["bands"]:
            for e in b["examples"]:
                assert b["lo"] <= e["value"] <= b["hi"] and e["row"] not in top
                assert X[e["row"], j] == np.float32(e["value"])


def test_match_recovers_a_permutation_with_sign_flips(planted, tmp_path):
    path, X, *_ = planted
    perm = np.array([3, 0, 7, 1, 5, 2, 6, 4])
    signs = np.array([1, -1, 1, 1, -1, -1, 1, -1])
    other = _store(tmp_path / "b.h5", X[:, perm] * signs, _index(300, 10))
    r = units(path, k=3, inputs=False)
    before = json.dumps(r.to_dict(), sort_keys=True)
    m = match_units(r, other, permutations=50)
    got = {p["a"]: p["b"] for p in m.pairs}
    assert all(got[perm[i]] == i for i in range(8))
    for p in m.pairs:
        assert abs(p["corr"]) == pytest.approx(1.0, abs=1e-6) and p["abs_corr"] == abs(p["corr"])
        assert p["ci_low"] <= p["abs_corr"] + 1e-9 and p["ci_high"] == pytest.approx(1.0, abs=1e-6)
        assert np.sign(p["corr"]) == signs[p["b"]] and p["shared"]
    assert json.dumps(r.to_dict(), sort_keys=True) == before  # the report given is not changed
    assert all(u["match"]["shared"] for u in m.report.to_dict()["units"])
    assert m.report.to_frame()["shared"].all() and r.to_frame()["shared"].isna().all()


def test_match_of_a_gaussian_control_shares_nothing(tmp_path):
    rng = np.random.default_rng(5)
    a = _store(tmp_path / "a.h5", rng.normal(size=(2000, 6)), _index(200, 10))
    b = _store(tmp_path / "b.h5", rng.normal(size=(2000, 6)), _index(200, 10))
    m = match_units(a, b, permutations=100)
    assert len(m.pairs) == 6 and m.shared == []
    assert all(p["p_value"] > 0.05 for p in m.pairs)


def test_match_null_re_pairs_only_samples_of_equal_length(tmp_path):
    """Samples of a length no other sample has cannot move; they stay out of the null (else they
    keep their pairing and a shared unit looks like chance)."""
    rng = np.random.default_rng(7)
    lengths = [10] * 150 + list(range(11, 61))  # 150 movable samples, 50 of unique lengths
    index = np.concatenate([np.stack([np.full(n, s), np.arange(n)], 1) for s, n in enumerate(lengths)]).astype(np.int64)
    S = rng.normal(size=(index.shape[0], 4))
    a = _store(tmp_path / "a.h5", S, index)
    b = _store(tmp_path / "b.h5", np.c_[S[:, :1] + 0.5 * rng.normal(size=(len(S), 1)), rng.normal(size=(len(S), 3))],
               index)
    m = match_units(a, b, permutations=100)
    assert m.info["null_rows"] == 1500 and m.info["null_samples"] == 150
    assert m.shared == [(0, 0)] and m.pairs[0]["p_value"] == pytest.approx(1 / 101)


def test_a_positional_unit_does_not_hide_a_shared_content_unit(tmp_path):
    """A unit firing on every sample's first token (a [CLS]) in both stores keeps its correlation
    under any re-pairing of samples; a unit shared by content must still come out shared."""
    rng = np.random.default_rng(9)
    index = _index(300, 10)
    first = (index[:, 1] == 0) * 5.0
    content = rng.normal(size=len(index))
    noise = rng.normal(size=(len(index), 4))
    a = _store(tmp_path / "a.h5", np.c_[first + 0.1 * noise[:, 0], content, noise[:, 1]], index)
    b = _store(tmp_path / "b.h5", np.c_[first + 0.1 * noise[:, 2], 0.8 * content + 0.6 * noise[:, 3],
                                        rng.normal(size=len(index))], index)
    m = match_units(a, b, permutations=100)
    by_a = {p["a"]: p for p in m.pairs}
    assert by_a[1]["b"] == 1 and by_a[1]["shared"] and by_a[1]["p_value"] < 0.02
    assert by_a[0]["b"] == 0 and abs(by_a[0]["corr"]) > 0.99
    assert not by_a[2]["shared"]


def test_dask_gives_the_same_report(planted):
    path, *_ = planted
    here = units(path, k=5, inputs=False, labels=np.arange(3000) % 3).to_dict()
    for scheduler in ("threads", "local:2"):  # Dask's threads, and a LocalCluster of two worker processes
        there = units(path, k=5, inputs=False, labels=np.arange(3000) % 3, scheduler=scheduler).to_dict()
        assert json.dumps(here, sort_keys=True) == json.dumps(there, sort_keys=True)


def test_corpus_markup_is_data_in_every_output(planted, tmp_path):
    path, X, flat, inputs, k = planted
    r = units(path, k=k, inputs=inputs, context=1)
    u = r.unit(3)
    assert all(e["text"]["tokens"][e["text"]["highlight"]] == "<script>alert(1)</script>" for e in u["top"])
    r.to_json(tmp_path / "r.json")
    back = json.loads((tmp_path / "r.json").read_text())
    assert back["units"] == r.to_dict()["units"]
    assert "<script>alert(1)</script>" in json.dumps(back)
    assert "<script>alert(1)</script>" in repr(r.unit(3)["top"][0]["text"]) and r.to_frame()["unit"].tolist() == r.units


def test_the_frame_and_the_dict_hold_each_units_numpy_moments(planted):
    """Every view's number is the unit's own, computed here from the rows by numpy / scipy
    (mean, SD with ddof=1, variance, skewness and excess kurtosis as ``scipy.stats`` with
    ``bias=True``), not only the views agreeing with each other."""
    import scipy.stats

    path, X, *_ = planted
    r = units(path, k=2, inputs=False, max_units=3)
    assert isinstance(r, UnitReport) and len(r) == 3
    d = r.to_dict()
    assert d["schema"] == "actkit-units/1" and len(d["units"]) == 3
    frame = r.to_frame()
    assert frame["unit"].tolist() == r.units == [u["unit"] for u in d["units"]]
    for row, u in zip(frame.to_dict("records"), d["units"]):
        col = X[:, row["unit"]].astype(np.float64)
        expect = {"mean": col.mean(), "sd": col.std(ddof=1), "variance": col.var(ddof=1),
                  "skewness": scipy.stats.skew(col), "kurtosis": scipy.stats.kurtosis(col)}
        for key, value in expect.items():
            assert row[key] == pytest.approx(value, rel=1e-6), (row["unit"], key)
            assert u[key] == pytest.approx(value, rel=1e-6), (row["unit"], key)
    assert repr(r).startswith("UnitReport: 8 neuron units of layer h (3,000 rows)")


# ----------------------------------------------------------------------------- the command
def test_cli_writes_the_report_and_matches(planted, tmp_path, capsys):
    path, X, *_ = planted
    other = _store(tmp_path / "b.h5", -X, _index(300, 10))
    code, out, err = _run(capsys, "units", path, "--no-inputs", "-k", "3", "--match", other, "--permutations", "20",
                          "--json", tmp_path / "u.json", "--quiet")
    assert f"wrote {tmp_path / 'u.json'}" in err and "wrote" not in out
    assert code == 0, err
    d = json.loads((tmp_path / "u.json").read_text())
    assert d["matches"]["shared"] == 8 and "UnitReport" in out


def test_cli_bad_input_is_one_line_before_any_work(planted, tmp_path, capsys):
    path, X, *_ = planted
    rng = np.random.default_rng(6)
    foreign = _store(tmp_path / "foreign.h5", X[:, :4], _index(300, 10), fingerprint="other")
    ica = actkit.FastICA(random_state=0, n_components=3).fit(X[:, :4])
    foreign_ica = actkit.transform_store(ica, actkit.open_store(foreign)["h"], tmp_path / "fica.h5")
    two = _store(tmp_path / "two.h5", X[:, :4], _index(300, 10), layer="g")
    np.save(tmp_path / "short.npy", np.zeros(10, np.int64))
    outside = tmp_path / "no-such-dir" / "u.json"
    cases = [
        (["--basis", tmp_path / "nothing.h5"], "no such file"),
        (["--basis", foreign_ica], "another store"),
        (["--basis", two], "not one written by actkit whiten / ica / dictionary"),
        (["-k", "0"], "positive integer"),
        (["--layer", "nope"], "no layer 'nope'"),
        ([], "does not record its inputs"),
        (["--no-inputs", "--labels", tmp_path / "short.npy"], "10 labels for 3000 rows"),
        (["--no-inputs", "--json", outside], "cannot write --json"),
        (["--no-inputs", "--match", foreign], "not computed on the same inputs"),
    ]
    for extra, words in cases:
        line = _error(capsys, "units", path, *extra)
        assert words in line, (extra, line)
    assert not outside.parent.exists()
    sd = actkit.SparseDictionary(5, k=2, code="topk", positive=True, random_state=0, max_iter=3).fit(
        rng.normal(size=(200, 4)).astype(np.float32))
    sae = actkit.save_sae(sd, tmp_path / "sae4", hook_name="g")
    from actkit.store import LayerSpec, create_store

    both = tmp_path / "both.h5"  # one store of two layers, g and h
    w = create_store(both, [LayerSpec(n, 3000, 4, index=_index(300, 10)) for n in ("g", "h")], n_samples=300,
                     request={"both": 1}, inputs_fingerprint="inputs-1")
    for n in ("g", "h"):
        w.append(n, X[:, :4])
    w.checkpoint(300)
    w.finalize()
    codes = actkit.transform_store(actkit.load_sae(sae), actkit.open_store(both)["g"], tmp_path / "codes.h5")
    assert "codes of layer 'g', not 'h'" in _error(capsys, "units", both, "--layer", "h", "--basis", codes,
                                                   "--no-inputs")
    assert "reads 4 features, layer h has 8" in _error(capsys, "units", path, "--basis", sae, "--no-inputs")
    assert "another store" in _error(capsys, "units", path, "--basis", codes, "--no-inputs")


# ----------------------------------------------------------------------------- the zoo
@pytest.fixture(scope="module")
def pythia(tmp_path_factory):
    from actkit import zoo

    out = tmp_path_factory.mktemp("zoo") / "p.h5"
    return actkit.extract(zoo.model_spec("pythia-tiny-seed0"), zoo.text_inputs(), out,
                          layers=["gpt_neox.layers.1", "final_hidden"], max_samples=40, max_length=32,
                          batch_size=8, unembedding=True, progress=False)


def test_zoo_top_k_equals_numpy_brute_force_and_logit_lens(pythia, tmp_path):
    s = actkit.open_store(pythia)
    for layer in ("gpt_neox.layers.1", "final_hidden"):
        X = np.asarray(s[layer])
        r = units(pythia, layer, k=9, inputs=False, order="index")
        want = _brute_top(X, 9)
        for j in range(X.shape[1]):
            assert [e["row"] for e in r.unit(j)["top"]] == want[:, j].tolist()
    W_U = np.asarray(s.params["unembedding"], np.float64)
    r = units(pythia, "final_hidden", k=3, inputs=False)
    assert r.to_dict()["logit_lens"]
    for j in r.units[:8]:
        want = np.argsort(-W_U[:, j], kind="stable")[:10]
        assert [t[0] for t in r.unit(j)["logits"]["promoted"]] == want.tolist()
    pca = actkit.Whitener(n_components=16).fit(s["final_hidden"])
    out = actkit.transform_store(pca, s["final_hidden"], tmp_path / "pca.h5")
    r = units(pythia, "final_hidden", basis=out, k=5, inputs=False)
    Z = np.asarray(actkit.open_store(out)["final_hidden"])
    assert r.to_dict()["order"] == "variance"  # of the components before whitening: the explained variance
    assert r.units == np.argsort(-pca.explained_variance_, kind="stable").tolist()
    for j in r.units[:4]:
        logits = pca.dewhitening_[:, j].astype(np.float64) @ W_U.T
        assert [t[0] for t in r.unit(j)["logits"]["promoted"]] == np.argsort(-logits, kind="stable")[:10].tolist()
        assert [e["row"] for e in r.unit(j)["top"]] == _brute_top(Z[:, j:j + 1], 5)[:, 0].tolist()


@pytest.mark.filterwarnings("ignore::UserWarning")  # compare's notes on a small ICA fit
def test_match_units_on_compare_s_ica_sources_gives_compare_s_pairs_and_correlations(pythia, tmp_path, capsys):
    """compare pairs its ICA sources on the fit rows (Hungarian on |corr|: the sources are
    whitened there) and reports their correlations on the held-out rows, sign-corrected by the
    fit rows' sign; match_units on the same sources (CompareResult.ica_basis) over the same
    rows gives the same pairs and, to float tolerance, the same correlations."""
    from actkit import zoo

    layer = "gpt_neox.layers.1"
    other = actkit.extract(zoo.model_spec("pythia-tiny-seed1"), zoo.text_inputs(), tmp_path / "p1.h5",
                           layers=[layer], max_samples=40, max_length=32, batch_size=8, progress=False)
    res = actkit.compare(actkit.open_store(pythia)[layer], actkit.open_store(other)[layer],
                         methods=["permutation", "rigid", "ica"], progress=False)
    pairs = res.ica_pairs()
    assert len(pairs) == res.info["ica_matched"] == res.info["ica_n_components"] > 8
    assert np.array_equal(np.sort(np.concatenate([res.fit_rows, res.heldout_rows])), np.arange(res.info["n_rows"]))
    kw = dict(layer=layer, basis=res.ica_basis("a"), basis_b=res.ica_basis("b"), permutations=20, progress=False)
    fit = match_units(pythia, other, rows=res.fit_rows, **kw)
    held = match_units(pythia, other, rows=res.heldout_rows, **kw)
    assert held.info["rows"] == res.info["n_eval_rows"] and fit.info["rows"] == res.info["n_fit_rows"]
    assert sorted((p["a"], p["b"]) for p in fit.pairs) == sorted((p["a"], p["b"]) for p in pairs)
    a, b = np.array([p["a"] for p in pairs]), np.array([p["b"] for p in pairs])
    got = held.corr[a, b] * np.sign(fit.corr[a, b])
    np.testing.assert_allclose(got, res.matched_correlations, rtol=0, atol=1e-6)
    # the sources themselves: numpy's correlation of ICASources.transform on the held-out rows
    Xa = np.asarray(actkit.open_store(pythia)[layer], np.float64)[res.heldout_rows]
    Xb = np.asarray(actkit.open_store(other)[layer], np.float64)[res.heldout_rows]
    Sa, Sb = res.ica_basis("a").transform(Xa), res.ica_basis("b").transform(Xb)
    want = np.corrcoef(Sa.T, Sb.T)[: Sa.shape[1], Sa.shape[1]:]
    np.testing.assert_allclose(held.corr, want, rtol=0, atol=1e-6)
    # and actkit.units reads them as ICA sources, oriented to positive skew
    r = units(pythia, layer, basis=res.ica_basis("a"), k=3, inputs=False)
    assert r.to_dict()["basis"]["kind"] == "ica" and r.to_dict()["order"] == "skewness"
    skew = scipy.stats.skew(res.ica_basis("a").transform(np.asarray(actkit.open_store(pythia)[layer])), axis=0)
    assert sorted(r.to_dict()["flipped"]) == np.flatnonzero(skew < 0).tolist()
    # on the command line: transform_store writes each side's sources as an `actkit ica` store
    sa, sb = actkit.open_store(pythia), actkit.open_store(other)
    ica_a = actkit.transform_store(res.ica_basis("a"), sa[layer], tmp_path / "ica-a.h5", progress=False)
    ica_b = actkit.transform_store(res.ica_basis("b"), sb[layer], tmp_path / "ica-b.h5", progress=False)
    stored = match_units(pythia, other, layer=layer, basis=ica_a, basis_b=ica_b, rows=res.heldout_rows,
                         permutations=20, progress=False)
    np.testing.assert_allclose(stored.corr, held.corr, rtol=0, atol=1e-5)  # float32 rows of the stores
    code, _, err = _run(capsys, "units", pythia, "--layer", layer, "--basis", ica_a, "--match", other, "--basis-b", ica_b,
                        "--permutations", "20", "--no-inputs", "-k", "2", "--json", tmp_path / "u.json", "--quiet")
    assert code == 0, err
    every = match_units(pythia, other, **kw)
    got = json.loads((tmp_path / "u.json").read_text())["matches"]["pairs"]
    assert sorted((p["a"], p["b"]) for p in got) == sorted((p["a"], p["b"]) for p in every.pairs)


def test_match_units_rows_and_ica_basis_bad_input_is_one_line(pythia):
    layer = "gpt_neox.layers.1"
    with pytest.raises(actkit.errors.InputError, match=r"rows must lie in \[0, "):
        match_units(pythia, pythia, layer=layer, rows=[0, 10 ** 9], permutations=20)
    with pytest.raises(actkit.errors.InputError, match="rows must be two or more row numbers"):
        match_units(pythia, pythia, layer=layer, rows=[[1, 2]], permutations=20)
    X = np.asarray(actkit.open_store(pythia)[layer])
    res = actkit.compare(X, X + 0.1, methods=["permutation", "rigid"], groups=np.asarray(actkit.open_store(pythia)[layer].groups),
                         progress=False)
    with pytest.raises(actkit.errors.InputError, match="fitted no ICA"):
        res.ica_basis("a")


def test_zoo_text_examples_are_the_recorded_tokens_in_context(pythia):
    from transformers import AutoTokenizer

    from actkit import zoo

    tok = AutoTokenizer.from_pretrained(zoo.model_path("pythia-tiny-seed0"))
    s = actkit.open_store(pythia)
    assert s.inputs is not None and s.inputs.kind == "text"
    r = units(pythia, "final_hidden", k=4, context=3, max_units=6)
    for j in r.units:
        for e in r.unit(j)["top"] + [x for b in r.unit(j)["bands"] for x in b["examples"]]:
            ids = s.inputs.token_ids(e["sample"]).tolist()
            t = e["text"]
            a = max(0, e["position"] - 3)
            assert t["start"] == a and len(t["tokens"]) == len(ids[a:e["position"] + 4])
            for shown, i in zip(t["tokens"], ids[a:e["position"] + 4]):
                _is_token(shown, tok, i)
            _is_token(t["tokens"][t["highlight"]], tok, ids[e["position"]])
    promoted = r.unit(r.units[0])["logits"]["promoted"]
    for p in promoted:
        _is_token(p[1], tok, p[0])
    # the report's line shows the top example's context text, and a partial byte-level top token's
    # escaped bytes once escaped, as Python writes them ('\xe2\x80'), not with doubled backslashes
    d = r.to_dict()
    t = d["units"][0]["top"][0]["text"]
    a, b = t["span"]
    assert f"[{t['context'][a:b]}]" in repr(r).splitlines()[1]
    d["units"][0]["top_tokens"]["tokens"][0]["token"] = r"\xe2\x80"
    assert "tokens '\\xe2\\x80' " in repr(UnitReport(d))


def _is_token(shown, tok, i):
    """``shown`` is token ``i`` as the tokenizer decodes it alone, or, where that is U+FFFD (a
    byte-level token that is only part of a UTF-8 character), the token's bytes escaped
    (``'\\xc3'``): bytes that are not a character on their own."""
    decoded = tok.decode([i])
    if "\ufffd" not in decoded:
        assert shown == decoded
        return
    raw = shown.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1")
    assert "\\x" in shown and raw, shown
    with pytest.raises(UnicodeDecodeError):
        raw.decode("utf-8")


def test_zoo_vit_examples_box_their_patch_in_the_recorded_image(tmp_path):
    import base64
    import io

    from PIL import Image

    from actkit import zoo

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), tmp_path / "v.h5",
                       layers=["encoder.layer.1"], max_samples=12, progress=False)
    s = actkit.open_store(v)
    gh, gw = s.inputs.patch_grid
    H, W = s.inputs.image_size
    r = units(v, k=5, max_units=10)
    images = r.to_dict()["inputs"]["images"]
    for j in r.units:
        for e in r.unit(j)["top"]:
            img = e["image"]
            p = e["position"] - s.inputs.prefix_tokens
            if p < 0:
                assert img["box"] is None
                continue
            row, col = divmod(p, gw)
            assert img["cell"] == [row, col]
            assert img["box"] == [row * H / gh, col * W / gw, (row + 1) * H / gh, (col + 1) * W / gw]
            png = base64.b64decode(images[str(e["sample"])].split(",", 1)[1])
            np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png)).convert("RGB")),
                                          s.inputs.image(e["sample"]))


def test_inputs_of_an_older_store_are_reattached_and_checked(pythia, tmp_path, capsys, monkeypatch):
    from actkit import zoo
    from actkit.extractors.hf_text import TextAdapter

    monkeypatch.setattr(TextAdapter, "record_inputs", lambda self, data: None)  # as an older actkit wrote it
    old = actkit.extract(zoo.model_spec("pythia-tiny-seed0"), zoo.text_inputs(), tmp_path / "old.h5",
                         layers=["final_hidden"], max_samples=40, max_length=32, batch_size=8, unembedding=True,
                         progress=False)
    monkeypatch.undo()
    assert actkit.open_store(old).inputs is None
    assert "does not record its inputs" in _error(capsys, "units", old)
    r = units(old, k=3, inputs=zoo.text_inputs(), max_units=4)
    ref = units(pythia, "final_hidden", k=3, max_units=4)
    assert r.to_dict()["units"] == ref.to_dict()["units"]
    other = tmp_path / "other.txt"
    other.write_text("something else entirely\n" * 40)
    from actkit.extractors import registry

    # refused from the raw text, before any tokenizer loads (the count, then the fingerprint)
    monkeypatch.setattr(registry, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    assert "not the inputs of" in _error(capsys, "units", old, "--inputs", other)
    other.write_text("too few\n" * 7)
    assert "hold 7 samples" in _error(capsys, "units", old, "--inputs", other)


# ----------------------------------------------------------------------------- honest statistics (issue 49)
class FastICA:
    """An ICA as ``units`` reads a fitted one (kind "ica" by its class name): the identity,
    so the sources are the stored columns themselves."""

    def __init__(self, d):
        self.n_features_in_, self.mixing_ = d, np.eye(d)

    def fit(self, X):
        return self

    def transform(self, X):
        return np.asarray(X)


def test_flipped_units_histograms_equal_numpy_of_the_oriented_column_with_values_on_edges(tmp_path):
    """Sources of negative skew are flipped; values lying exactly on a bin edge (multiples of
    1/8 here) land where np.histogram of the negated column puts them, by label too."""
    rng = np.random.default_rng(21)
    S = np.round(rng.exponential(size=(4000, 4)) * 8) / 8 * np.array([1, -1, -1, 1])  # on edges, two negated
    S[:, 3] = np.round(rng.normal(size=4000) * 8) / 8 - 0.5 * S[:, 0]
    src = _store(tmp_path / "s.h5", S, _index(400, 10))
    labels = np.arange(4000) % 3
    r = units(src, basis=FastICA(4), k=4, inputs=False, labels=labels).to_dict()
    flipped = [j for j in range(4) if scipy.stats.skew(S[:, j]) < 0]
    assert r["flipped"] == flipped and {1, 2} <= set(flipped)
    on_edge = 0
    for u in r["units"]:
        z = -S[:, u["unit"]] if u["flipped"] else S[:, u["unit"]]
        edges = np.asarray(u["hist"]["edges"])
        assert np.histogram(z, edges)[0].tolist() == u["hist"]["counts"]
        on_edge += int(np.isin(z, edges).sum())
        binned = np.searchsorted(edges, z, side="right")  # the label AUROC of the oriented bins
        if u["label"] is not None:
            from sklearn.metrics import roc_auc_score

            y = labels.astype(str) == u["label"]["name"]
            assert u["label"]["auroc"] == pytest.approx(roc_auc_score(y, binned), abs=1e-12)
    assert on_edge > 1000  # the case is the one that was wrong: many values on edges


def test_moments_of_near_constant_units_are_numpy_s_float64_and_tiny_units_are_dead(tmp_path):
    """Units with |x| < 1e-31 and units at 1e6 +- a few: float64 moments as numpy / scipy
    compute them from the stored float32 values; the tiny ones (within 1e-6 of the layer's
    scale of 0) are dead, listed last whatever the order, their share never active."""
    rng = np.random.default_rng(22)
    n = 6000
    X = np.c_[rng.exponential(size=n) * 1e-32, rng.normal(size=n) * 1e-33, 1e6 + np.round(rng.exponential(size=n) * 8),
              rng.laplace(size=n), 1e6 + rng.normal(size=n) * 3].astype(np.float32)
    src = _store(tmp_path / "s.h5", X, _index(600, 10))
    x64 = X.astype(np.float64)
    for order in ("kurtosis", "variance", "skewness"):
        d = units(src, k=3, inputs=False, order=order).to_dict()
        assert d["dead"] == [0, 1] and [u["unit"] for u in d["units"]][-2:] == [0, 1]
    for u in d["units"]:
        j = u["unit"]
        assert u["mean"] == pytest.approx(x64[:, j].mean(), rel=1e-12)
        assert u["variance"] == pytest.approx(x64[:, j].var(ddof=1), rel=1e-9)
        assert u["skewness"] == pytest.approx(scipy.stats.skew(x64[:, j]), rel=1e-9, abs=1e-12)
        assert u["kurtosis"] == pytest.approx(scipy.stats.kurtosis(x64[:, j]), rel=1e-9, abs=1e-12)
        assert u["dead"] == (j in (0, 1))


def _brute_bands(z, edges, top_rows, p, per_band=5):
    """The rows of each band by brute force: rows with ``lo <= z < hi`` (``<= hi`` for the
    top band), the top rows left out, the ``per_band`` of smallest priority ``p``, highest
    value first."""
    out = []
    for lo, hi, top in edges:
        ok = (z >= lo) & ((z <= hi) if top else (z < hi)) & (z != 0)
        ok[top_rows] = False
        rows = np.flatnonzero(ok)
        rows = rows[np.argsort(p[rows], kind="stable")][:per_band]
        out.append(sorted(rows.tolist(), key=lambda r: (-z[r], r)))
    return out


def test_bands_have_histogram_quantile_edges_and_their_own_rows_sorted_by_value(tmp_path):
    """Each band's edges are the unit's quantiles to within one histogram bin; each band holds
    5 rows of the band (the top band too: its rows come from the unit's tail sample), the 5 of
    smallest priority by brute force, sorted by value; two units share band rows only by
    chance."""
    from actkit._units._pass import priority

    rng = np.random.default_rng(23)
    n, U = 20000, 12
    X = (rng.laplace(size=(n, U)) * np.arange(1, U + 1)).astype(np.float32)
    X[:, 5] = np.maximum(X[:, 5], 0)  # a ReLU-like unit: bands over its active rows
    src = _store(tmp_path / "s.h5", X, _index(2000, 10))
    d = units(src, k=6, inputs=False, order="index").to_dict()
    p = priority(np.arange(n))
    c = priority(np.arange(U), salt=1)
    seen = []
    for u in d["units"]:
        j, z = u["unit"], X[:, u["unit"]].astype(np.float64)
        act = z[z != 0]
        w = np.diff(u["hist"]["edges"])[0]
        bands = u["bands"]
        assert [b["quantiles"] for b in bands] == [[0.99, 1.0], [0.9, 0.99], [0.5, 0.9]]
        assert bands[0]["source"] == "tail" and bands[0]["hi"] == float(act.max())
        for b in bands:
            assert abs(b["lo"] - np.quantile(act, b["quantiles"][0])) <= w
            assert len(b["examples"]) == 5
            values = [e["value"] for e in b["examples"]]
            assert values == sorted(values, reverse=True)
        want = _brute_bands(z, [(b["lo"], b["hi"], b["quantiles"][1] == 1.0) for b in bands],
                            [e["row"] for e in u["top"]], (p + c[j]) % 1.0)
        assert [[e["row"] for e in b["examples"]] for b in bands] == want
        seen += [e["row"] for b in bands for e in b["examples"]]
    assert len(set(seen)) >= len(seen) - 3  # 180 rows of 12 units: shared only by chance


def test_dense_units_show_the_share_beyond_3_sd(tmp_path):
    rng = np.random.default_rng(24)
    n = 8000
    X = np.c_[rng.standard_t(3, size=n), rng.normal(size=n),
              np.where(rng.random(n) < 0.2, rng.exponential(size=n), 0)].astype(np.float32)
    src = _store(tmp_path / "s.h5", X, _index(800, 10))
    d = units(src, k=3, inputs=False, order="index").to_dict()
    for u in d["units"]:
        z = X[:, u["unit"]].astype(np.float64)
        far = np.abs(z - z.mean()) > 3 * z.std(ddof=1)
        edges = np.asarray(u["hist"]["edges"])
        counts = np.histogram(z, edges)[0]
        cut = np.searchsorted(edges, [z.mean() - 3 * z.std(ddof=1), z.mean() + 3 * z.std(ddof=1)]) - 1
        slack = counts[np.clip(cut, 0, len(counts) - 1)].sum() / n  # the two bins the cuts fall in
        assert abs(u["beyond_3sd"] - far.mean()) <= slack
        assert u["share_shown"] == ("beyond_3sd" if u["unit"] < 2 else "active")
    assert d["units"][0]["beyond_3sd"] > 0.005 and d["units"][2]["active_share"] == pytest.approx(
        np.count_nonzero(X[:, 2]) / n)


def test_a_layer_is_its_store_and_layer_and_an_array_is_refused_in_one_line(planted):
    path, X, *_ = planted
    layer = actkit.open_store(path)["h"]
    assert units(layer, k=3, inputs=False).to_dict()["units"] == units(path, "h", k=3, inputs=False).to_dict()["units"]
    assert actkit.units(layer, k=3, inputs=False).units == units(path, k=3, inputs=False).units
    with pytest.raises(actkit.errors.InputError, match="not an array in memory"):
        units(X, k=3, inputs=False)
    with pytest.raises(actkit.errors.LayerError, match="layer='g', but the layer given is 'h'"):
        units(layer, "g", k=3, inputs=False)


def test_one_label_per_input_sample_is_given_to_every_row_of_it(planted):
    path, X, *_ = planted
    per_sample = np.array([f"s{i % 4}" for i in range(300)])
    by_sample = units(path, k=3, inputs=False, labels=per_sample).to_dict()
    by_row = units(path, k=3, inputs=False, labels=np.repeat(per_sample, 10)).to_dict()
    assert "300 labels, one per input sample" in by_sample["labels"].pop("note")
    assert by_sample["units"] == by_row["units"] and by_sample["labels"] == by_row["labels"]
    with pytest.raises(actkit.errors.InputError, match="7 labels for 3000 rows of 300 input samples"):
        units(path, k=3, inputs=False, labels=np.arange(7))


def test_a_bad_device_is_refused_before_any_work(planted, capsys, monkeypatch):
    path, *_ = planted
    import actkit._units._api as api

    monkeypatch.setattr(api, "_run_pass", lambda *a, **k: pytest.fail("the pass ran"))
    import torch

    for device in ("bogus", "mps:x") + (() if torch.cuda.is_available() else ("cuda",)):
        line = _error(capsys, "units", path, "--no-inputs", "--device", device)
        assert "device" in line


# ----------------------------------------------------------------------------- matched units (issue 49, 51)
def test_match_p_values_equal_a_brute_force_loop_over_every_re_pairing_of_8_samples(tmp_path):
    """8 samples of 4 rows: 8! = 40,320 re-pairings, all of them enumerated (an exact test).
    Brute force: for each re-pairing, B's samples moved as wholes, np.corrcoef of every unit
    pair, each pair's |corr| standardised by its mean and SD over the re-pairings, the largest
    over all pairs; a pair's p-value the share of re-pairings whose largest standardised
    value reaches the pair's own."""
    import itertools

    rng = np.random.default_rng(31)
    n_s, length = 8, 4
    A = rng.normal(size=(n_s * length, 3))
    B = np.c_[A[:, 0] + 0.7 * rng.normal(size=n_s * length), rng.normal(size=(n_s * length, 2))]
    a = _store(tmp_path / "a.h5", A, _index(n_s, length))
    b = _store(tmp_path / "b.h5", B, _index(n_s, length))
    m = match_units(a, b, permutations=40320, bootstrap=40)
    assert m.info["exact"] and m.info["permutations"] == 40320
    A32, B32 = np.asarray(A, np.float32).astype(np.float64), np.asarray(B, np.float32).astype(np.float64)
    Bs = B32.reshape(n_s, length, 3)
    stats = []
    for perm in itertools.permutations(range(n_s)):
        Bp = Bs[list(perm)].reshape(-1, 3)
        stats.append(np.abs(np.corrcoef(A32.T, Bp.T)[:3, 3:]))
    stats = np.array(stats)  # (40320, 3, 3); the identity first
    mu, sd = stats.mean(axis=0), stats.std(axis=0)
    z = (stats - mu) / sd
    biggest = z.reshape(len(z), -1).max(axis=1)
    for p in m.pairs:
        t = z[0, p["a"], p["b"]]
        assert p["p_value"] == pytest.approx(np.mean(biggest >= t - 1e-9), abs=1e-12)
        assert p["abs_corr"] == pytest.approx(stats[0, p["a"], p["b"]], abs=1e-9)
    np.testing.assert_allclose(np.sort(m.null_max), np.sort(biggest), rtol=0, atol=1e-9)


def test_match_intervals_resample_whole_input_samples(tmp_path):
    """Each pair's interval: percentiles of |corr| over resamples of whole input samples (the
    rows of each drawn sample repeated as often as it is drawn), by brute force."""
    from actkit.inference import bootstrap_draws, percentile_interval

    rng = np.random.default_rng(32)
    index = _index(40, 5)
    A = rng.normal(size=(200, 3))
    B = np.c_[A[:, 1] + rng.normal(size=200), A[:, 0] * 0.3 + rng.normal(size=200), rng.normal(size=200)]
    a, b = _store(tmp_path / "a.h5", A, index), _store(tmp_path / "b.h5", B, index)
    m = match_units(a, b, permutations=50, bootstrap=60, confidence=0.9, random_state=4)
    A, B = np.asarray(A, np.float32).astype(np.float64), np.asarray(B, np.float32).astype(np.float64)
    W = bootstrap_draws(40, 60, 4)
    for p in m.pairs:
        values = []
        for w in W:
            rows = np.repeat(np.arange(200), np.repeat(w, 5).astype(int))
            values.append(abs(np.corrcoef(A[rows, p["a"]], B[rows, p["b"]])[0, 1]))
        lo, hi = percentile_interval(values, 0.9)
        assert (p["ci_low"], p["ci_high"]) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))


def test_shared_needs_both_rules_and_the_order_is_by_abs_corr(tmp_path):
    rng = np.random.default_rng(33)
    index = _index(400, 10)
    n = len(index)
    A = rng.normal(size=(n, 3))
    B = np.c_[-0.9 * A[:, 0] + 0.3 * rng.normal(size=n), 0.25 * A[:, 1] + rng.normal(size=n), rng.normal(size=n)]
    a, b = _store(tmp_path / "a.h5", A, index), _store(tmp_path / "b.h5", B, index)
    m = match_units(a, b, permutations=50)
    by_a = {p["a"]: p for p in m.pairs}
    assert by_a[1]["p_value"] < 0.05 and 0.1 < by_a[1]["abs_corr"] < 0.5 and not by_a[1]["shared"]
    assert by_a[0]["corr"] < -0.9 and by_a[0]["shared"] and m.shared == [(0, 0)]
    assert [p["a"] for p in m.pairs] == [0, 1, 2]  # -0.95 first: the order is by |corr|
    assert match_units(a, b, permutations=50, min_corr=0.2).shared == [(0, 0), (1, 1)]
    frame = m.to_frame()
    assert frame["abs_corr"].tolist() == sorted(frame["abs_corr"], reverse=True)
    assert m.info["rule"] == "p < 0.05 and |corr| >= 0.5" and "p < 0.05 and |corr| >= 0.5" in repr(m)
    html = m._repr_html_()
    assert "<table" in html and "abs_corr" in html and "|corr| &gt;= 0.5" in html


def test_match_on_dask_and_at_any_thread_count_is_the_same(tmp_path):
    from actkit._threads import use_threads

    rng = np.random.default_rng(34)
    index = _index(300, 10)
    A = rng.laplace(size=(3000, 4))
    B = A @ rng.normal(size=(4, 4)) + rng.normal(size=(3000, 4))
    a, b = _store(tmp_path / "a.h5", A, index), _store(tmp_path / "b.h5", B, index)
    with use_threads(1):
        one = match_units(a, b, permutations=30).to_dict()
    with use_threads(2):
        two = match_units(a, b, permutations=30).to_dict()
    there = match_units(a, b, permutations=30, scheduler="threads").to_dict()
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)
    for p, q in zip(one["pairs"], there["pairs"]):
        assert (p["a"], p["b"], p["shared"]) == (q["a"], q["b"], q["shared"])
        assert p["corr"] == pytest.approx(q["corr"], abs=1e-12) and p["p_value"] == q["p_value"]


def test_match_bad_input_is_one_line_before_any_work(planted, tmp_path, capsys, monkeypatch):
    path, X, *_ = planted
    other = _store(tmp_path / "b.h5", -X, _index(300, 10))
    with pytest.raises(actkit.errors.InputError, match="ask for at least 20"):
        match_units(path, other, permutations=19)
    with pytest.raises(actkit.errors.InputError, match=r"min_corr must be in \[0, 1\]"):
        match_units(path, other, min_corr=1.5)
    with pytest.raises(actkit.errors.InputError, match="bootstrap 39 is too few resamples for a 95% interval"):
        match_units(path, other, bootstrap=39)
    import actkit._units._match as m

    monkeypatch.setattr(m, "_stream", lambda *a, **k: pytest.fail("the pass ran"))
    import actkit._units._api as api

    monkeypatch.setattr(api, "_run_pass", lambda *a, **k: pytest.fail("the pass ran"))
    (tmp_path / "old.json").write_text("{}")
    cases = [
        (["--match", other, "--permutations", "10"], "--permutations 10 cannot make any pair shared"),
        (["--match", other, "--min-corr", "-0.1"], "--min-corr must be in [0, 1]"),
        (["--basis-b", tmp_path / "x.h5"], "--basis-b: only with --match"),
        (["--layer-b", "h"], "--layer-b: only with --match"),
        (["--match", other, "--layer-b", "nope"], "pick one with --layer-b"),
        (["--match", other, "--basis-b", tmp_path / "none.h5"], "basis_b (--basis-b)"),
        (["--json", tmp_path / "old.json"], "exists; pass --overwrite"),
        (["--model", "m"], "--model names the model that prepared --inputs"),
    ]
    for extra, words in cases:
        line = _error(capsys, "units", path, "--no-inputs", *extra)
        assert words in line, (extra, line)


def test_too_few_re_pairings_say_nothing_can_be_shared(tmp_path):
    """3 samples of one length allow 3! = 6 re-pairings: all are used (an exact test), the
    smallest p-value is 1/6, nothing is shared, and a warning says why."""
    rng = np.random.default_rng(35)
    index = _index(3, 20)
    A = rng.normal(size=(60, 2))
    a, b = _store(tmp_path / "a.h5", A, index), _store(tmp_path / "b.h5", A + 0.01 * rng.normal(size=(60, 2)), index)
    with pytest.warns(UserWarning, match="allow only 6 re-pairings"):
        m = match_units(a, b, permutations=50)
    assert m.info["exact"] and m.info["permutations"] == 6 and m.shared == []
    assert min(p["p_value"] for p in m.pairs) == pytest.approx(1 / 6) and all(p["abs_corr"] > 0.99 for p in m.pairs)


def test_dask_chunks_merge_to_the_same_report(tmp_path):
    """Three chunks of 16,384 rows merged on Dask: every example, band, histogram and count as
    here, the moments to 1e-12 (float sums merged in another order)."""
    rng = np.random.default_rng(36)
    X = rng.laplace(size=(40000, 6)) * [1, -1, 1, -1, 1, -1]
    src = _store(tmp_path / "s.h5", X, _index(4000, 10))
    here = units(src, basis=FastICA(6), k=7, inputs=False).to_dict()
    there = units(src, basis=FastICA(6), k=7, inputs=False, scheduler="threads").to_dict()
    assert here["flipped"] == there["flipped"] and here["flipped"]
    moments = ("mean", "sd", "variance", "skewness", "kurtosis", "beyond_3sd")
    for u, v in zip(here["units"], there["units"]):
        for key in moments:
            assert u[key] == pytest.approx(v[key], rel=1e-12, abs=1e-12)
        assert {k: x for k, x in u.items() if k not in moments} == {k: x for k, x in v.items() if k not in moments}
