"""Per-unit token scores of ``actkit.units`` (issue 50): ``token_purity``, ``token_r2``,
``context_r2`` and ``description`` checked against a numpy brute force over the whole matrix in
memory (the same split, read from ``to_dict()["scores"]``), on a planted store and on the zoo's
Pythia-tiny for neurons, PCA and ICA; the same numbers in chunks of units, at one and two
threads and on Dask; SAE latents from their sparse codes; patch cells as the keys of images."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit import units
from test_units import TextInputs, _index, _store

pytestmark = [pytest.mark.usefixtures("torch_one_thread"),
              pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")]


def brute_scores(A, token, prev, sample, heldout, top_k):
    """numpy's scores of every column of ``A`` (rows x units, the whole matrix): the token
    purity of the top ``top_k`` rows (a stable sort), the held-out R^2 of the token model and of
    the (previous token, token) model (fit means on the rows of samples not in ``heldout``;
    an unseen pair backs off to its token, an unseen token to the fit mean; SST about the
    held-out rows' mean)."""
    ev = np.isin(sample, heldout) & (token >= 0)
    fit = ~np.isin(sample, heldout) & (token >= 0)
    out = {"token_purity": [], "token_r2": [], "context_r2": []}
    for j in range(A.shape[1]):
        a = A[:, j].astype(np.float64)
        mu = a[fit].mean()
        tok_mean = {t: a[fit & (token == t)].mean() for t in np.unique(token[fit])}
        pair_mean = {}
        for p, t in set(zip(prev[fit].tolist(), token[fit].tolist())):
            if p >= 0:
                pair_mean[(p, t)] = a[fit & (token == t) & (prev == p)].mean()
        pt = np.array([tok_mean.get(t, mu) for t in token[ev]])
        pc = np.array([pair_mean.get((p, t), tok_mean.get(t, mu)) for p, t in zip(prev[ev], token[ev])])
        y = a[ev]
        sst = ((y - y.mean()) ** 2).sum()
        with np.errstate(invalid="ignore", divide="ignore"):   # a unit constant on the held-out rows: NaN
            out["token_r2"].append(1 - ((y - pt) ** 2).sum() / sst if sst > 0 else np.nan)
            out["context_r2"].append(1 - ((y - pc) ** 2).sum() / sst if sst > 0 else np.nan)
        top = np.argsort(-A[:, j], kind="stable")[:top_k]
        out["token_purity"].append(np.unique(token[top], return_counts=True)[1].max() / top_k)
    return {k: np.asarray(v) for k, v in out.items()}


def _tokens(inputs, index):
    tok = np.array([inputs.token_ids(s)[p] for s, p in index])
    prev = np.array([inputs.token_ids(s)[p - 1] if p > 0 else -1 for s, p in index])
    return tok, prev


def _check(report, A, inputs, index, k, rtol=1e-9):
    d = report.to_dict()
    tok, prev = _tokens(inputs, index)
    want = brute_scores(A, tok, prev, index[:, 0], np.asarray(d["scores"]["heldout_samples"]), k)
    for u in d["units"]:
        j = u["unit"]
        for name in ("token_purity", "token_r2", "context_r2"):
            assert u[name] == pytest.approx(want[name][j], rel=rtol, abs=rtol), (name, j)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Unit j (j < 6) is the indicator of token j; unit 6 Gaussian noise. 240 samples x 12 tokens
    of a 30-token vocabulary: every token is seen in both splits."""
    rng = np.random.default_rng(0)
    G, L, V = 240, 12, 30
    ids = rng.integers(0, V, size=(G, L))
    flat = ids.ravel()
    X = np.zeros((G * L, 7), np.float32)
    for j in range(6):
        X[:, j] = flat == j
    X[:, 6] = rng.normal(size=G * L)
    path = _store(tmp_path_factory.mktemp("scores") / "p.h5", X, _index(G, L))
    return path, X, TextInputs(list(ids), [f"w{i}" for i in range(V)]), _index(G, L)


def test_indicator_units_score_one_and_a_gaussian_unit_about_zero(planted):
    path, X, inputs, index = planted
    r = units(path, k=10, inputs=inputs, order="index")
    for j in range(6):
        u = r.unit(j)
        assert u["token_purity"] == 1.0 and u["token_r2"] == pytest.approx(1.0, abs=1e-12)
        assert u["context_r2"] == pytest.approx(1.0, abs=1e-12)
        assert u["description"] == f"'w{j}' (10/10)"
    g = r.unit(6)
    assert g["token_purity"] <= 0.4 and abs(g["token_r2"]) < 0.05 and g["context_r2"] < 0.05
    _check(r, X, inputs, index, 10)
    d = r.to_dict()["scores"]
    assert d["key"] == "token" and d["fit_rows"] + d["heldout_rows"] == X.shape[0]
    assert len(d["heldout_samples"]) == round(0.2 * 240)
    frame = r.to_frame()
    for name in ("token_purity", "token_r2", "context_r2", "description"):
        assert name in frame.columns
    assert frame.set_index("unit").loc[3, "description"] == "'w3' (10/10)"


def test_max_rows_scores_whole_samples_and_the_split_is_seeded(planted):
    path, X, inputs, index = planted
    a = units(path, k=5, inputs=inputs, max_rows=600, random_state=3)
    b = units(path, k=5, inputs=inputs, max_rows=600, random_state=3)
    c = units(path, k=5, inputs=inputs, max_rows=600, random_state=4)
    da, db, dc = (r.to_dict()["scores"] for r in (a, b, c))
    assert da == db and da["heldout_samples"] != dc["heldout_samples"]
    assert da["fit_rows"] + da["heldout_rows"] <= 600 and (da["fit_rows"] + da["heldout_rows"]) % 12 == 0
    assert da["scored_samples"] == (da["fit_rows"] + da["heldout_rows"]) // 12


def test_chunks_of_units_threads_and_dask_give_the_same_scores(planted, monkeypatch):
    from actkit._threads import use_threads
    from actkit._units import _scores

    path, X, inputs, index = planted
    keys = ("token_purity", "token_r2", "context_r2", "description")

    def scores(**kw):
        return [{k: u[k] for k in keys} for u in units(path, k=7, inputs=inputs, **kw).to_dict()["units"]]

    with use_threads(1):
        one = scores()
    with use_threads(2):
        assert scores() == one
    monkeypatch.setattr(_scores, "SCORE_BYTES", 1)       # one unit per chunk: a pass per chunk
    chunked = scores()
    for a, b in zip(chunked, one):
        assert a["token_purity"] == b["token_purity"] and a["description"] == b["description"]
        assert a["token_r2"] == pytest.approx(b["token_r2"], abs=1e-12)
    monkeypatch.undo()
    for scheduler in ("threads", "local:2"):   # Dask's threads, and two worker processes (everything pickled)
        there = scores(scheduler=scheduler)
        for a, b in zip(there, one):
            assert a["token_purity"] == b["token_purity"]
            assert a["token_r2"] == pytest.approx(b["token_r2"], abs=1e-12)


def test_no_inputs_no_scores(planted):
    path, *_ = planted
    u = units(path, k=3, inputs=False).to_dict()
    assert "scores" not in u and "token_r2" not in u["units"][0]


def test_bad_split_arguments_are_one_line(planted):
    path, X, inputs, _ = planted
    for kw, msg in (({"eval_fraction": 1.0}, "eval_fraction must be in (0, 1)"),
                    ({"eval_fraction": 0}, "eval_fraction must be in (0, 1)"),
                    ({"max_rows": 1}, "max_rows must be an integer >= 2")):
        with pytest.raises(actkit.ActkitError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            units(path, inputs=inputs, **kw)


# ----------------------------------------------------------------------------- the zoo
@pytest.fixture(scope="module")
def pythia(tmp_path_factory):
    from actkit import zoo

    out = tmp_path_factory.mktemp("zoo") / "p.h5"
    return actkit.extract(zoo.model_spec("pythia-tiny-seed0"), zoo.text_inputs(), out, layers=["gpt_neox.layers.1"],
                          max_samples=60, max_length=32, batch_size=8, progress=False)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_zoo_pythia_scores_equal_numpy_for_neurons_pca_and_ica(pythia, tmp_path):
    layer = "gpt_neox.layers.1"
    s = actkit.open_store(pythia)
    X = np.asarray(s[layer])
    index = np.asarray(s[layer].index)
    pca = actkit.transform_store(actkit.Whitener().fit(s[layer]), s[layer], tmp_path / "pca.h5", progress=False)
    ica = actkit.transform_store(actkit.FastICA(n_components=24, random_state=0).fit(s[layer]), s[layer],
                                 tmp_path / "ica.h5", progress=False)
    for basis in (None, pca, ica):
        r = units(pythia, layer, basis=basis, k=6, progress=False)
        A = X if basis is None else np.asarray(actkit.open_store(basis)[layer])
        if basis is ica:   # the report orients each source to positive skewness: so does the brute force
            A = A * np.where(np.isin(np.arange(A.shape[1]), r.to_dict()["flipped"]), -1, 1).astype(np.float32)
        _check(r, A, s.inputs, index, 6)


def test_sae_latents_scored_from_their_sparse_codes(planted, tmp_path):
    path, X, inputs, index = planted
    sd = actkit.SparseDictionary(12, k=3, code="topk", positive=True, random_state=0, max_iter=3).fit(X)
    sae = actkit.load_sae(actkit.save_sae(sd, tmp_path / "sae", hook_name="h"))
    r = units(path, basis=sae, k=8, inputs=inputs, order="index")
    codes = sae.transform(X)
    d = r.to_dict()
    tok, prev = _tokens(inputs, index)
    want = brute_scores(codes, tok, prev, index[:, 0], np.asarray(d["scores"]["heldout_samples"]), 8)
    checked = 0
    for u in d["units"]:
        j = u["unit"]
        if np.count_nonzero(codes[:, j] > 0) >= 8:   # a sparse unit's top rows are its active rows
            assert u["token_purity"] == pytest.approx(want["token_purity"][j])
            checked += 1
        if np.isfinite(want["token_r2"][j]):
            assert u["token_r2"] == pytest.approx(want["token_r2"][j], rel=1e-6, abs=1e-6)
        else:
            assert u["token_r2"] is None    # constant on the held-out rows: no R^2
    assert checked >= 6


def test_image_rows_are_keyed_by_patch_cell(tmp_path):
    from actkit import zoo

    v = actkit.extract(zoo.model_spec("vit-tiny-seed0"), zoo.image_inputs(), tmp_path / "v.h5",
                       layers=["encoder.layer.1"], max_samples=24, progress=False)
    s = actkit.open_store(v)
    index = np.asarray(s["encoder.layer.1"].index)
    X = np.asarray(s["encoder.layer.1"])
    r = units(v, k=5, order="index")
    d = r.to_dict()
    assert d["scores"]["key"] == "patch cell"
    pos = index[:, 1]
    want = brute_scores(X, pos, np.full(pos.size, -1), index[:, 0], np.asarray(d["scores"]["heldout_samples"]), 5)
    for u in d["units"]:
        assert u["context_r2"] is None
        assert u["token_purity"] == pytest.approx(want["token_purity"][u["unit"]])
        assert u["token_r2"] == pytest.approx(want["token_r2"][u["unit"]], rel=1e-9, abs=1e-9)
        assert "patch (" in u["description"] or "CLS token" in u["description"]
    json.dumps(d)


def test_pooled_rows_or_too_few_samples_have_no_token_scores(tmp_path):
    """A pooled store (one row per sample, position -1) has no token per row, and two samples
    cannot be split 80/20: the report carries no token scores, compare_bases says why in one
    line."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, size=(40, 6))
    inputs = TextInputs(list(ids), [f"w{i}" for i in range(5)])
    pooled = np.stack([np.arange(40), np.full(40, -1)], 1).astype(np.int64)
    path = _store(tmp_path / "pooled.h5", rng.normal(size=(40, 4)), pooled)
    d = units(path, k=3, inputs=inputs).to_dict()
    assert "scores" not in d and "token_r2" not in d["units"][0]
    with pytest.raises(actkit.ActkitError, match="token scores need rows of tokens"):
        actkit.compare_bases(path, bases=[], inputs=inputs, progress=False)
    two = _store(tmp_path / "two.h5", rng.normal(size=(12, 4)), _index(2, 6))
    assert "scores" not in units(two, k=3, inputs=TextInputs(list(ids[:2]), [f"w{i}" for i in range(5)])).to_dict()
