"""``actkit compare``: tables, JSON, PNG, pairwise matrix, models directly, user mistakes."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import actkit
from _stores import write_store
from cli_helpers import cli_error as _error, run_cli as _run

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _store(path, layers, index, fingerprint="inputs-1", params=None):
    return write_store(path, layers, index, fingerprint=fingerprint, params=params)


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """Three stores of two layers on the same 120 samples x 4 tokens; b = a linearly mixed."""
    tmp = tmp_path_factory.mktemp("cmp")
    rng = np.random.default_rng(0)
    n, d = 480, 6
    index = np.stack([np.repeat(np.arange(120), 4), np.tile(np.arange(4), 120)], 1)
    S = rng.laplace(size=(n, d))
    l1 = S @ rng.normal(size=(d, d))
    l2 = np.tanh(S @ rng.normal(size=(d, d)))
    a = _store(tmp / "a.h5", {"l1": l1, "l2": l2}, index)
    b = _store(tmp / "b.h5", {"l1": l1 @ rng.normal(size=(d, d)), "l2": -l2[:, ::-1] + 1}, index)
    c = _store(tmp / "c.h5", {"l1": rng.normal(size=(n, d)), "l2": rng.normal(size=(n, d))}, index)
    return tmp, a, b, c, index


def test_two_stores_table_json_plot(stores, capsys):
    tmp, a, b, _, _ = stores
    js, png = tmp / "out.json", tmp / "out.png"
    code, out, _ = _run(capsys, "compare", a, b, "--json", js, "--plot", png, "--quiet")
    assert code == 0
    assert "ICA (% eff.)" in out and "l1" in out and "l2" in out
    data = json.loads(js.read_text())
    assert set(data) == {"l1", "l2"}
    for key in ("permutation", "rigid", "linear", "ica", "ica_efficiency", "linear_cka",
                "mean_cca", "convention_error"):
        assert key in data["l1"]
    assert data["l1"]["linear"] < 1e-4 and data["l1"]["rigid"] > 0.01
    assert data["l2"]["permutation"] < 1e-4          # a signed permutation + shift
    assert data["l1"]["n_samples"] == 120
    direct = actkit.compare(actkit.open_store(a)["l1"], actkit.open_store(b)["l1"])
    assert data["l1"]["rigid"] == pytest.approx(direct.errors["rigid"], rel=1e-9)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_layer_a_b_and_single_json(stores, capsys):
    tmp, a, b, _, _ = stores
    js = tmp / "one.json"
    code, out, _ = _run(capsys, "compare", a, b, "--layer-a", "l1", "--layer-b", "l2",
                        "--json", js, "--methods", "rigid,linear", "--quiet")
    assert code == 0 and "l1 -> l2" in out
    data = json.loads(js.read_text())
    assert data["layer_a"] == "l1" and data["layer_b"] == "l2" and data["ica"] is None
    code, out, err = _run(capsys, "compare", a, b, "--layers", "l1", "--methods", "ica",
                          "--ica-max-iter", "1", "--quiet")
    # one note for every side's and restart's ConvergenceWarning (others may follow, as notes)
    assert code == 0 and err.count("FastICA did not converge") == 1
    assert all(line.startswith("note: ") for line in err.splitlines())


def test_three_stores_pairwise_matrix(stores, capsys):
    tmp, a, b, c, _ = stores
    js = tmp / "m.json"
    code, out, _ = _run(capsys, "compare", a, b, c, "--layers", "l1", "--metric", "linear",
                        "--methods", "rigid,linear", "--json", js, "--plot", tmp / "m.png", "--quiet")
    assert code == 0 and "linear [l1]" in out
    m = np.array(json.loads(js.read_text())["l1"]["matrix"], dtype=float)
    assert m.shape == (3, 3)
    assert m[0, 1] < 1e-4 and m[0, 0] < 1e-4 and m[0, 2] > 0.05
    assert (tmp / "m.png").exists()


def test_too_few_ica_rows_is_noted(stores, capsys):
    tmp, a, b, _, _ = stores
    # default: the rows rule fits the k' = 1 component 50 rows support, and says so
    code, out, err = _run(capsys, "compare", a, b, "--layers", "l1", "--ica-max-rows", "50",
                          "--quiet")
    assert code == 0
    assert "note: l1: ICA fitted the leading 1 of 6 whitened components: 50 fit rows" in err
    # a forced k is kept, with the warning. b's l1 = a's l1 times a random matrix: its
    # smallest eigenvalue is 2.6e-8 of the largest, below the rounding of float32 block
    # moments, so ICA keeps 5 of the 6 forced components
    code, out, err = _run(capsys, "compare", a, b, "--layers", "l1", "--ica-max-rows", "50",
                          "--ica-n-components", "6", "--quiet")
    assert code == 0
    assert "note: l1: ICA had 50 fit rows for 5 components" in err and "spurious" in err
    code, out, err = _run(capsys, "compare", a, b, "--layers", "l1", "--quiet")
    assert code == 0 and "spurious" not in err
    # fewer components need fewer rows
    code, out, err = _run(capsys, "compare", a, b, "--layers", "l1", "--ica-max-rows", "150",
                          "--ica-n-components", "3", "--quiet", "--json", tmp / "k3.json")
    assert code == 0 and "spurious" not in err, err
    assert json.loads((tmp / "k3.json").read_text())["ica_n_components"] == 3
    assert "n_components" in _error(capsys, "compare", a, b, "--layers", "l1", "--ica-n-components", "9")


def test_user_mistakes_one_line(stores, capsys, tmp_path):
    tmp, a, b, _, index = stores
    rng = np.random.default_rng(1)
    other = _store(tmp_path / "o.h5", {"l1": rng.normal(size=(480, 6))}, index, fingerprint="x")
    assert "different inputs" in _error(capsys, "compare", a, other)
    assert "l9" in _error(capsys, "compare", a, b, "--layers", "l9")
    short_index = index[:400]
    short = _store(tmp_path / "s.h5", {"l1": rng.normal(size=(400, 6))}, short_index)
    assert "different row counts" in _error(capsys, "compare", a, short, "--layers", "l1")
    bad = rng.normal(size=(480, 6))
    bad[5, 2] = np.nan
    nan = _store(tmp_path / "n.h5", {"l1": bad}, index)
    assert "NaN" in _error(capsys, "compare", a, nan, "--layers", "l1")
    one = np.stack([np.zeros(480, int), np.arange(480)], 1)
    s1 = _store(tmp_path / "g1.h5", {"l1": rng.normal(size=(480, 6))}, one)
    s2 = _store(tmp_path / "g2.h5", {"l1": rng.normal(size=(480, 6))}, one)
    assert "too few input samples" in _error(capsys, "compare", s1, s2)
    assert _error(capsys, "compare", a, tmp_path / "missing.h5")
    assert "folder" in _error(capsys, "compare", a, b, "--json", tmp_path / "no" / "x.json")
    assert "two" in _error(capsys, "compare", a)
    assert "unknown method" in _error(capsys, "compare", a, b, "--methods", "rigid,cka")
    assert "unknown device" in _error(capsys, "compare", a, b, "--device", "gpu0")
    with pytest.raises(SystemExit) as exc:          # argparse: usage line + error line, exit 2
        _run(capsys, "compare", a, b, "--ica-max-rows", "many")
    assert exc.value.code == 2
    assert "--ica-max-rows: expected 'auto' or an integer" in capsys.readouterr().err
    reindexed = index.copy()
    reindexed[:, 1] = reindexed[::-1, 1]
    ri = _store(tmp_path / "ri.h5", {"l1": rng.normal(size=(480, 6))}, reindexed)
    assert "row indexes" in _error(capsys, "compare", a, ri, "--layers", "l1")
    assert not list(tmp_path.glob("*.partial*"))


def test_compare_models_directly(tiny_gpt_neox, tmp_path, capsys):
    from cli_helpers import perturbed_copy

    other = tmp_path / "other"
    perturbed_copy(tiny_gpt_neox, other)
    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over lazy dog model features sparse whitening".split()
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(" ".join(rng.choice(words, 10)) for _ in range(40)) + "\n")
    js = tmp_path / "models.json"
    code, out, err = _run(capsys, "compare", tiny_gpt_neox, other, "--inputs", texts,
                          "--layers", "gpt_neox.layers.0,gpt_neox.layers.2", "--json", js,
                          "--quiet", "--work-dir", tmp_path / "work")
    assert code == 0, err
    data = json.loads(js.read_text())
    assert set(data) == {"gpt_neox.layers.0", "gpt_neox.layers.2"}
    for d in data.values():
        assert 0 < d["linear"] < d["permutation"]
        assert d["n_samples"] == 40
    # the extracted stores were kept in --work-dir; a store against itself is exact
    kept = sorted((tmp_path / "work").glob("*.h5"))
    assert len(kept) == 2
    code, out, err = _run(capsys, "compare", kept[0], kept[0], "--layers", "gpt_neox.layers.2",
                          "--json", js, "--quiet")
    assert code == 0, err
    d = json.loads(js.read_text())
    for m in ("permutation", "rigid", "linear", "ica"):
        assert d[m] < 1e-3, (m, d[m])
    assert "--layers" in _error(capsys, "compare", tiny_gpt_neox, other, "--inputs", texts)


def test_softmax_distances_from_stores(tmp_path, capsys):
    rng = np.random.default_rng(3)
    n, m, vocab = 200, 3, 40
    index = np.stack([np.arange(n), -np.ones(n, int)], 1)
    f = rng.normal(size=(n, m))
    g = 2 * rng.normal(size=(vocab, m))
    A = rng.normal(size=(m, m))
    s1 = _store(tmp_path / "s1.h5", {"final_hidden": f}, index,
                params={"unembedding": g.astype(np.float32)})
    s2 = _store(tmp_path / "s2.h5", {"final_hidden": f @ A.T}, index,
                params={"unembedding": (g @ np.linalg.inv(A)).astype(np.float32)})
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(str(i) for i in range(0, 30, 3)) + "\n")
    js = tmp_path / "sm.json"
    code, out, err = _run(capsys, "compare", s1, s2, "--softmax-labels", ids, "--json", js,
                          "--methods", "rigid,linear", "--quiet")
    assert code == 0, err
    sm = json.loads(js.read_text())["softmax"]
    assert sm["d_kl"] < 1e-4 and sm["d_svd_f"] < 1e-3
    assert sm["bound"] == pytest.approx(2 * m * sm["d_llv"])
    assert "d_llv=" in out
    assert "ids" in _error(capsys, "compare", s1, s2, "--softmax-labels", "0,1,x")
    assert "[0, 40)" in _error(capsys, "compare", s1, s2, "--softmax-labels", "0,1,99")
    s3 = _store(tmp_path / "s3.h5", {"final_hidden": f}, index)      # no unembedding saved
    assert "unembedding" in _error(capsys, "compare", s1, s3, "--softmax-labels", "0,1,2,3,4",
                                   "--methods", "rigid", "--quiet")


def test_resampling_flags_table_and_one_line_mistakes(stores, capsys, tmp_path):
    """Issue 32: ``value [low, high] p...`` by default with resampling, ``--compact`` hides it;
    bad values are one line naming the flag (no usage dump)."""
    tmp, a, b, c, index = stores
    js = tmp_path / "r.json"
    code, out, _ = _run(capsys, "compare", a, b, "--layer-a", "l1", "--methods", "permutation,rigid",
                        "--permutations", "19", "--bootstrap", "40", "--json", js, "--quiet")
    assert code == 0
    assert re.search(r"\d\.\d{3} \[\d\.\d{2,3}, \d\.\d{2,3}\] p=0\.050", out), out
    d = json.loads(js.read_text())
    assert d["linear_cka_p"] == 0.05 and d["rigid_ci_low"] <= d["rigid"] + 0.05
    code, out, _ = _run(capsys, "compare", a, b, "--layer-a", "l1", "--methods", "rigid",
                        "--permutations", "19", "--compact", "--quiet")
    assert code == 0 and " p=" not in out
    for argv, flag in ((["--permutations", "-3"], "--permutations"), (["--permutations", "x"], "--permutations"),
                       (["--bootstrap", "1.5"], "--bootstrap"), (["--confidence", "1"], "--confidence"),
                       (["--confidence", "abc"], "--confidence")):
        assert flag in _error(capsys, "compare", a, b, "--quiet", *argv)
    few = _store(tmp_path / "few_a.h5", {"l1": np.ones((20, 3)) + np.arange(60).reshape(20, 3) ** 2},
                 np.stack([np.arange(20) // 4, np.arange(20) % 4], 1), fingerprint="few")
    few_b = _store(tmp_path / "few_b.h5", {"l1": np.arange(60.0).reshape(20, 3) % 7},
                   np.stack([np.arange(20) // 4, np.arange(20) % 4], 1), fingerprint="few")
    assert "at least 10 input samples" in _error(capsys, "compare", few, few_b, "--methods", "rigid",
                                                 "--bootstrap", "40", "--quiet")
    other = _store(tmp_path / "other.h5", {"l1": np.ones((480, 6)).cumsum(0)}, index, fingerprint="other")
    assert "different inputs" in _error(capsys, "compare", a, other, "--layer-matrix", "--quiet")


def test_layer_matrix_prints_plots_and_writes_json(stores, capsys, tmp_path):
    tmp, a, b, _, _ = stores
    png, js = tmp_path / "map.png", tmp_path / "map.json"
    code, out, _ = _run(capsys, "compare", a, b, "--layer-matrix", "--measures", "linear_cka",
                        "--plot", png, "--json", js, "--permutations", "19", "--quiet")
    assert code == 0
    assert out.splitlines()[1].split() == ["linear_cka", "l1", "l2"]
    data = json.loads(js.read_text())
    assert data["layers_a"] == data["layers_b"] == ["l1", "l2"] and len(data["p"]) == 2
    ref = actkit.measure(actkit.open_store(a)["l2"], actkit.open_store(b)["l2"], "linear_cka")
    assert data["matrix"][1][1] == pytest.approx(ref, abs=1e-9)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = _run(capsys, "compare", a, a, "--layer-matrix", "--quiet")
    assert code == 0 and "1.000" in out
