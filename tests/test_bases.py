"""``actkit.compare_bases`` and ``actkit bases`` (issue 50): a planted store where unit j is the
indicator of token j scores 1 and its random rotation loses it; SAEBench's k-sparse probing
equals scikit-learn on the mean-pooled rows (a balanced task the split makes deterministic);
the bootstrap intervals by input sample cover on a designed case; every view; the page in
chromium; bad input is one line, exit 2, before any pass."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit import BasisComparison, compare_bases
from tests._browser import Visit, chromium_fixture
from tests._stores import write_store
from tests.cli_helpers import cli_error, run_cli

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]

HOSTILE = "<script>alert(1)</script>"


def _text_store(path, X, ids, vocab, layer="h", fingerprint="planted", record=True):
    """A store of rows ``X`` over samples ``ids`` (n_samples, length) that records its inputs."""
    from actkit.store import text_record

    G, L = ids.shape
    index = np.stack([np.repeat(np.arange(G), L), np.tile(np.arange(L), G)], 1).astype(np.int64)
    inputs = text_record([list(r) for r in ids], tokenizer={"name_or_path": "test"}, vocab=vocab,
                         special=np.zeros(len(vocab), bool)) if record else None
    return write_store(path, {layer: X}, index, fingerprint=fingerprint, inputs=inputs)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """300 samples x 10 tokens of a 10-token vocabulary; units 0-7 are the indicators of tokens
    0-7, units 8-23 Gaussian noise. Each sample has a label (0, 1, 2); samples of label c carry
    token c three extra times, so the indicator of token c separates label c."""
    rng = np.random.default_rng(0)
    G, L, V = 300, 10, 10
    labels = rng.integers(0, 3, G)
    ids = rng.integers(0, V, size=(G, L))
    for s in range(G):
        ids[s, rng.choice(L, 3, replace=False)] = labels[s]
    flat = ids.ravel()
    X = np.concatenate([(flat[:, None] == np.arange(8)).astype(np.float32),
                        rng.normal(size=(flat.size, 16)).astype(np.float32)], axis=1)
    vocab = [f"w{i}" for i in range(V)]
    vocab[9] = HOSTILE
    tmp = tmp_path_factory.mktemp("bases")
    path = _text_store(tmp / "p.h5", X, ids, vocab)
    return path, X, ids, labels, tmp


@pytest.fixture(scope="module")
def planted_result(planted):
    path, X, ids, labels, tmp = planted
    return compare_bases(path, bases=[], k=10, labels=labels, bootstrap=100, progress=False)


def test_indicator_units_score_one_and_the_random_rotation_loses_it(planted_result):
    d = planted_result.to_dict()
    neurons, rot = d["bases"]
    assert (neurons["name"], rot["name"]) == ("neurons", "random_rotation") and rot["control"]
    u = neurons["units"]
    assert u["token_purity"][:8] == [1.0] * 8
    assert np.allclose(u["token_r2"][:8], 1.0, atol=1e-12) and np.allclose(u["context_r2"][:8], 1.0, atol=1e-12)
    assert max(abs(x) for x in u["token_r2"][8:]) < 0.05 and max(u["token_purity"][8:]) <= 0.6
    assert all(u["description"][j] == f"'w{j}' (10/10)" for j in range(8))
    # the rotation of the same rows mixes the indicators with the Gaussian units: no unit keeps them
    r = rot["units"]
    assert max(r["token_r2"]) < 0.7 and max(r["token_purity"]) < 1.0
    assert neurons["scores"]["token_r2"]["share"]["value"] == pytest.approx(8 / 24)
    assert rot["scores"]["token_r2"]["share"]["value"] <= 2 / 24
    assert neurons["scores"]["token_purity"]["p90"]["value"] == 1.0 > rot["scores"]["token_purity"]["p90"]["value"]
    for v in d["verdicts"]:
        assert (v["a"], v["b"]) == ("neurons", "random_rotation")
        assert v["resolved"] == (v["ci_low"] > 0 or v["ci_high"] < 0)
        assert v["ci_low"] <= v["difference"] <= v["ci_high"]
    line = planted_result.verdicts()[0]
    assert line.startswith("neurons vs random_rotation: token_purity median ")
    assert line.count("not resolved") == sum(not v["resolved"] for v in d["verdicts"])
    for b in d["bases"]:
        for s in b["scores"].values():
            for stat in ("median", "mean", "p90", "share"):
                if s[stat]["ci_low"] is not None:
                    assert s[stat]["ci_low"] <= s[stat]["value"] <= s[stat]["ci_high"]


def test_a_rotated_planted_basis_given_as_a_basis_loses_the_scores(planted):
    path, X, ids, labels, tmp = planted
    from actkit._units._bases import RandomRotation

    class Rotated(RandomRotation):       # a fitted estimator: transform, fit, n_features_in_
        n_features_in_ = X.shape[1]

        def fit(self, X, y=None):
            return self

    res = compare_bases(path, bases={"rotated": Rotated(X.shape[1], None, random_state=3)}, k=10, bootstrap=0,
                        controls=(), progress=False)
    neurons, rotated = res.to_dict()["bases"]
    assert neurons["scores"]["token_purity"]["p90"]["value"] == 1.0
    assert rotated["scores"]["token_purity"]["p90"]["value"] < 0.7
    assert max(rotated["units"]["token_r2"]) < 0.5 < min(neurons["units"]["token_r2"][:8])
    assert rotated["scores"]["token_purity"]["median"]["ci_low"] is None     # bootstrap=0: no intervals


def test_labels_with_a_unit_of_their_own_and_probing(planted_result):
    d = planted_result.to_dict()
    neurons, rot = d["bases"]
    assert d["labels"] == ["0", "1", "2"]
    assert neurons["labels"]["threshold"] == 0.9
    assert neurons["probing"]["1"]["accuracy"] > 0.9 > rot["probing"]["1"]["accuracy"]
    assert sorted(neurons["probing"]["1"]["units"].values()) == [[0], [1], [2]]
    for k in ("1", "2", "5"):
        p = neurons["probing"][k]
        assert p["ci_low"] <= p["accuracy"] <= p["ci_high"] and set(p["per_label"]) == {"0", "1", "2"}


def test_probing_equals_scikit_learn_on_the_mean_pooled_rows(planted):
    """Two labels of equal counts in the fit and in the held-out split: SAEBench's balanced task
    is then every sample, and the probe is reproduced from the rows alone."""
    from sklearn.linear_model import LogisticRegression

    path, X, ids, _, tmp = planted
    G, L = ids.shape
    held = np.asarray(actkit.units(path, k=2, progress=False).to_dict()["scores"]["heldout_samples"])
    is_held = np.isin(np.arange(G), held)
    labels = np.zeros(G, int)
    for part in (np.flatnonzero(~is_held), np.flatnonzero(is_held)):
        labels[part[1::2]] = 1                       # alternate within each split: equal counts
    res = compare_bases(path, bases=[], k=5, labels=labels, bootstrap=0, controls=(), progress=False)
    pooled = X.reshape(G, L, -1).mean(axis=1)
    fit, test = ~is_held, is_held
    for k in (1, 2, 5):
        got = res.to_dict()["bases"][0]["probing"][str(k)]
        for c in (0, 1):
            y = (labels == c).astype(int)
            diff = np.abs(pooled[fit & (y == 1)].mean(0) - pooled[fit & (y == 0)].mean(0))
            pick = np.argsort(-diff, kind="stable")[:k]
            clf = LogisticRegression(C=1.0, max_iter=1000).fit(pooled[fit][:, pick], y[fit])
            assert got["units"][str(c)] == pick.tolist()
            assert got["per_label"][str(c)] == pytest.approx((clf.predict(pooled[test][:, pick]) == y[test]).mean())


def test_intervals_cover_on_a_designed_case():
    """Rows ``a = mu[token] + b[sample] + e`` (a sample effect: rows of one text are not
    independent). The target of the held-out R^2 given the fit means is known in closed form;
    the interval of the median over units (``centred_interval``), resampling input samples, covers it in
    about 95% of 120 datasets; resampling rows instead covers far less. The purity of each
    unit's top rows covers its expected value at the same size (from 400 fresh datasets)."""
    from actkit.inference import bootstrap_draws
    from actkit._units._scores import r2
    from actkit._units._summary import centred_interval, purity_resampled, statistics

    G, L, V, U, B = 100, 30, 12, 5, 200
    p = np.full(V, 1 / V)
    betas = np.linspace(0.5, 2.0, U)
    sb, se = 1.5, 1.0

    def data(rng):
        tok = rng.integers(0, V, size=G * L)
        sample = np.repeat(np.arange(G), L)
        mu = betas[None, :] * np.sin(np.arange(V))[:, None]            # (V, U) token effects
        A = mu[tok] + sb * rng.normal(size=(G, U))[sample] + se * rng.normal(size=(G * L, U))
        return tok, sample, mu, A

    rng = np.random.default_rng(0)
    hits = {"sample": 0, "row": 0}
    reps = 120
    for rep in range(reps):
        tok, sample, mu, A = data(rng)
        held = rng.permutation(G)[: G // 5]
        ev = np.isin(sample, held)
        m = np.stack([A[~ev & (tok == t)].mean(0) for t in range(V)])
        var = (p[:, None] * (mu - (p[:, None] * mu).sum(0)) ** 2).sum(0) + sb ** 2 + se ** 2
        truth = np.median(1 - ((p[:, None] * (mu - m) ** 2).sum(0) + sb ** 2 + se ** 2) / var)
        pred = m[tok[ev]]
        rows_sample = sample[ev]
        slot = np.searchsorted(held := np.sort(held), rows_sample)
        per = [np.zeros((held.size, U)) for _ in range(3)]
        d = A[ev] - A[~ev].mean(0)
        for arr, x in zip(per, (d, d * d, (A[ev] - pred) ** 2)):
            np.add.at(arr, slot, x)
        n = np.bincount(slot, minlength=held.size)[:, None].astype(float)
        observed = np.median(r2(per[2].sum(0), per[0].sum(0), per[1].sum(0), n.sum()))
        W = bootstrap_draws(held.size, B, rep)
        boot = statistics(r2(W @ per[2], W @ per[0], W @ per[1], W @ n), 0.5)["median"]
        lo, hi = centred_interval(boot, observed, 0.95)
        hits["sample"] += lo <= truth <= hi
        Wr = np.random.default_rng(rep).multinomial(ev.sum(), np.full(ev.sum(), 1 / ev.sum()), size=B).astype(float)
        rows = [d, d * d, (A[ev] - pred) ** 2]
        boot_rows = statistics(r2(Wr @ rows[2], Wr @ rows[0], Wr @ rows[1], Wr.sum(1, keepdims=True)), 0.5)["median"]
        lo, hi = centred_interval(boot_rows, observed, 0.95)
        hits["row"] += lo <= truth <= hi
    assert hits["sample"] / reps >= 0.88, hits
    assert hits["row"] / reps < hits["sample"] / reps - 0.15, hits

    k, Gp, Lp = 10, 150, 20
    zipf = 1 / np.arange(1, 51)
    zipf /= zipf.sum()

    def purity_data(rng):
        tok = rng.choice(50, size=Gp * Lp, p=zipf)
        sample = np.repeat(np.arange(Gp), Lp)
        A = np.stack([b * (tok == j + 3) + 0.7 * rng.normal(size=Gp)[sample] + rng.normal(size=Gp * Lp)
                      for j, b in enumerate((1.0, 1.5, 2.0, 2.5))], 1)
        return tok, sample, A

    def purity(tok, A):
        top = np.argsort(-A, axis=0, kind="stable")[:k]
        return np.array([np.unique(tok[top[:, j]], return_counts=True)[1].max() / k for j in range(A.shape[1])])

    expected = np.mean([purity(*purity_data(rng)[::2]) for _ in range(300)], axis=0)
    covered = np.zeros(4)
    for rep in range(60):
        tok, sample, A = purity_data(rng)
        top = np.argsort(-A, axis=0, kind="stable")[:3 * k]
        boot = purity_resampled(tok[top], sample[top], bootstrap_draws(Gp, B, rep), k)
        t = purity(tok, A)
        for j in range(4):
            lo, hi = centred_interval(boot[:, j], t[j], 0.95, 0.0, 1.0)
            covered[j] += lo <= expected[j] <= hi
    assert (covered / 60 >= 0.85).all(), covered / 60


def test_views_share_one_data_structure(planted_result, tmp_path):
    res = planted_result
    assert isinstance(res, BasisComparison) and res.bases == ["neurons", "random_rotation"]
    d = res.to_dict()
    assert d["schema"] == "actkit-bases/1" and d["interval"] == "centred percentile" and d["bootstrap"] == 100
    assert len(d["split"]["heldout_samples"]) == 60 and d["top_rows"] == 30
    f = res.to_frame()
    assert list(f.columns) == ["basis", "score", "statistic", "value", "ci_low", "ci_high", "n_units", "control"]
    row = f[(f.basis == "neurons") & (f.score == "token_purity") & (f.statistic == "median")].iloc[0]
    assert row.value == d["bases"][0]["scores"]["token_purity"]["median"]["value"]
    assert set(f.score) >= {"token_purity", "token_r2", "context_r2", "label_auroc", "probing_k1", "probing_k5"}
    res.to_json(tmp_path / "b.json")
    assert json.loads((tmp_path / "b.json").read_text()) == json.loads(json.dumps(d))
    html = res._repr_html_()
    assert "neurons vs random_rotation" in html and HOSTILE not in html
    assert repr(res).startswith("BasisComparison: 2 bases of layer h (3,000 rows)")
    assert set(res.reports) == {"neurons", "random_rotation"}


@pytest.fixture(scope="module")
def chromium():
    yield from chromium_fixture()


def test_page_draws_every_basis_with_the_units_cards(planted_result, tmp_path, chromium):
    page = planted_result.to_html(tmp_path / "b.html")
    visit = Visit(chromium, page)
    try:
        assert visit.errors() == [] and visit.foreign_requests() == [] and visit.ran() == []
        assert visit.page.locator("section#scores table tbody tr").count() == 2
        assert visit.page.locator(".hists figure").count() == 2 * 4
        visit.wait("() => document.querySelectorAll('article.card').length >= 8")
        text = visit.page.inner_text("body")
        assert "neurons vs random_rotation" in text and "Unit 0" in text
        assert HOSTILE in text  # a token that tries to be markup is shown as text (and ran nothing: ran() above)
        assert visit.page.locator("ul.verdicts li").count() == 1
    finally:
        visit.close()


# ----------------------------------------------------------------------------- the command
def test_cli_writes_the_comparison(planted, tmp_path, capsys):
    path, X, ids, labels, tmp = planted
    np.save(tmp_path / "labels.npy", labels.astype(str))
    code, out, err = run_cli(capsys, "bases", path, "--labels", tmp_path / "labels.npy", "--bootstrap", "40",
                             "-k", "5", "--json", tmp_path / "b.json", "--html", tmp_path / "b.html", "--quiet")
    assert code == 0, err
    assert "BasisComparison" in out and "wrote" in err and "wrote" not in out
    d = json.loads((tmp_path / "b.json").read_text())
    assert [b["name"] for b in d["bases"]] == ["neurons", "random_rotation"] and d["bootstrap"] == 40
    # --json follows --html's rule (as in actkit units): an existing file only with --overwrite
    before = (tmp_path / "b.json").read_bytes()
    assert "--overwrite" in cli_error(capsys, "bases", path, "--bootstrap", "0", "--json", tmp_path / "b.json")
    assert (tmp_path / "b.json").read_bytes() == before


def test_cli_bad_input_is_one_line_before_any_pass(planted, tmp_path, capsys, monkeypatch):
    from actkit._units import _bases

    path, X, ids, labels, tmp = planted
    monkeypatch.setattr(_bases, "_score_basis", lambda *a, **k: pytest.fail("a pass ran"))
    vocab = [f"w{i}" for i in range(40)]
    other = _text_store(tmp_path / "o.h5", X, ids, vocab, fingerprint="other")
    foreign = actkit.transform_store(actkit.Whitener().fit(X), actkit.open_store(other)["h"], tmp_path / "f.h5",
                                     progress=False)
    index = np.asarray(actkit.open_store(path)["h"].index)
    two = write_store(tmp_path / "two.h5", {"h": X, "g": X}, index, fingerprint="two")
    g_basis = actkit.transform_store(actkit.Whitener().fit(X), actkit.open_store(two)["g"], tmp_path / "g.h5",
                                     progress=False)
    bare = _text_store(tmp_path / "bare.h5", X, ids, vocab, fingerprint="bare", record=False)
    pca = actkit.transform_store(actkit.Whitener().fit(X), actkit.open_store(path)["h"], tmp_path / "pca.h5",
                                 progress=False)
    np.save(tmp_path / "short.npy", labels[:7])
    cases = [((path, "--basis", foreign), "computed from another store"),
             ((two, "--layer", "h", "--basis", g_basis), "of layer 'g', not 'h'"),
             ((path, "--basis", pca, "--basis", pca), "given twice"),
             ((path, "--eval-fraction", "0"), "--eval-fraction must be in (0, 1)"),
             ((path, "--eval-fraction", "1"), "--eval-fraction must be in (0, 1)"),
             ((path, "--bootstrap", "39"), "--bootstrap 39 is too few resamples"),
             ((bare,), "does not record its inputs"),
             ((path, "--labels", tmp_path / "short.npy"), "7 labels for 3000 rows"),
             ((path, "--max-rows", "1"), "--max-rows must be an integer >= 2"),
             ((path, "--confidence", "1.5"), "--confidence must be in (0, 1)"),
             ((path, "--device", "bogus"), "unknown device")]
    for argv, message in cases:
        assert message in cli_error(capsys, "bases", *argv), argv


def test_resampled_purity_equals_a_loop_over_resamples():
    """Every resample's top-k rows taken one row at a time, each as often as its input sample
    is drawn, up to k; rows of no sample (-1) count nothing."""
    from actkit.inference import bootstrap_draws
    from actkit._units._summary import purity_resampled

    rng = np.random.default_rng(4)
    K, U, k, G = 15, 7, 5, 40
    keys, samples = rng.integers(0, 4, (K, U)), rng.integers(0, G, (K, U))
    samples[-4:, :2] = -1
    W = bootstrap_draws(G, 30, 1)
    got = purity_resampled(keys, samples, W, k)
    for b in range(W.shape[0]):
        for j in range(U):
            taken = []
            for key, s in zip(keys[:, j], samples[:, j]):
                if s >= 0:
                    taken += [key] * int(W[b, s])
            taken = taken[:k]
            want = np.unique(taken, return_counts=True)[1].max() / len(taken) if taken else np.nan
            assert got[b, j] == pytest.approx(want, nan_ok=True)


def test_zoo_vit_with_its_hue_and_shape_labels(tmp_path):
    """Image rows keyed by patch cell, one label per image spread over its patches, k-sparse
    probing of every basis; the ICA basis is a fitted estimator."""
    from actkit import zoo

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), tmp_path / "v.h5",
                       layers=["encoder.layer.3"], max_samples=96, progress=False)
    layer = actkit.open_store(v)["encoder.layer.3"]
    factors, names = zoo.image_factors()
    ica = actkit.FastICA(n_components=16, random_state=0).fit(layer)
    for f in ("shape", "object_hue"):
        res = compare_bases(v, bases={"ica": ica}, k=8, labels=factors[:96, names.index(f)], bootstrap=40,
                            progress=False)
        d = res.to_dict()
        assert res.bases == ["neurons", "ica", "random_rotation"] and d["split"]["key"] == "patch cell"
        for b in d["bases"]:
            assert "context_r2" not in b["scores"] and b["labels"]["count"] >= 0
            assert set(b["probing"]) == {"1", "2", "5"} and 0 <= b["probing"]["1"]["accuracy"] <= 1
            assert all(x == "" or x.startswith(("patch (", "CLS token")) for x in b["units"]["description"])


def test_the_same_comparison_at_one_and_two_threads_and_on_dask(planted):
    from actkit._threads import use_threads

    path, X, ids, labels, tmp = planted
    out = []
    for n in (1, 2):
        with use_threads(n):
            out.append(compare_bases(path, bases=[], k=5, labels=labels, bootstrap=40, progress=False).to_dict())
    assert json.dumps(out[0], sort_keys=True) == json.dumps(out[1], sort_keys=True)
    there = compare_bases(path, bases=[], k=5, labels=labels, bootstrap=40, progress=False, scheduler="threads")
    for a, b in zip(out[0]["bases"], there.to_dict()["bases"]):
        assert a["units"]["token_purity"] == b["units"]["token_purity"]
        assert np.allclose(a["units"]["token_r2"], b["units"]["token_r2"], atol=1e-12)
