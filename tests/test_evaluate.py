"""``actkit evaluate`` / ``actkit.evaluate_postprocessing``: the downstream protocol of Nelson
et al. (Tables 3, 4, 6) on planted data with known answers, its leakage control, its bad-input
errors and its label sources."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit.errors import ActkitError
from actkit.evaluation import (
    between_class_variance,
    concentration,
    haar_rotation,
    read_labels,
)
from tests.cli_helpers import cli_error, run_cli

VERSIONS = ("base", "pca", "pca+ica", "pca+rand")


def planted(seed=0, n=1200, k=24, threshold=0.3):
    """Independent sparse (Bernoulli-Gaussian) latent factors, linearly mixed; label f<j> for
    the rows where factor j exceeds the threshold, ``ctrl`` elsewhere."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, k)) * (rng.random((n, k)) < 0.25)
    X = S @ rng.normal(size=(k, k)).T + 0.05 * rng.standard_normal((n, k))
    y = np.full(n, "ctrl", object)
    for j in range(3):
        y[S[:, j] > threshold] = f"f{j}"
    return X.astype(np.float32), y


@pytest.fixture(scope="module")
def data():
    return planted()


@pytest.fixture(scope="module")
def lightgbm_result(data):
    X, y = data
    return actkit.evaluate_postprocessing(X, y, control="ctrl", n_rotations=2, n_splits=3, n_jobs=1,
                                          progress=False).to_dict()


def test_ica_beats_a_random_rotation_on_planted_sparse_factors(lightgbm_result):
    r = lightgbm_result
    for metric, margin in (("auroc", 0.02), ("sparsity", 0.2), ("concentration", 0.15)):
        assert r["pca+ica"][metric] > r["pca+rand"][metric] + margin, (metric, r["pca+ica"], r["pca+rand"])
        for task in ("f0", "f1", "f2"):
            assert r["pca+ica"]["tasks"][task][metric] > r["pca+rand"]["tasks"][task][metric], (metric, task)
    assert r["pca+ica"]["auroc"] > 0.98  # one factor drives each label: the trees find its axis


def test_json_has_every_version_metric_and_spread(lightgbm_result):
    r = lightgbm_result
    for v in VERSIONS:
        for m in ("auroc", "sparsity", "concentration"):
            assert 0 <= r[v][m] <= 1 and r[v][f"{m}_sd"] >= 0
            assert set(r[v]["tasks"]) == {"f0", "f1", "f2"}
            assert r[v]["tasks"]["f0"][f"{m}_sd"] >= 0
    assert r["pca+rand"]["auroc_sd_rotations"] >= 0 and "auroc_sd_rotations" not in r["pca"]
    assert r["settings"]["classifier"] == "lightgbm" and r["settings"]["control"] == "ctrl"
    assert [t["name"] for t in r["tasks"]] == ["f0", "f1", "f2"]
    assert "top 25%" in r["definitions"]["concentration"] or "ceil(n/4)" in r["definitions"]["concentration"]
    assert all(i["converged"] for i in r["ica"])


def test_a_random_rotation_equals_pca_on_the_logistic_probe(data):
    """The L2 logistic probe is rotation-invariant on whitened rows: PCA+Rand == PCA."""
    X, y = data
    r = actkit.evaluate_postprocessing(X, y, control="ctrl", classifier="logistic", n_rotations=2, n_splits=3,
                                       progress=False).to_dict()
    for task in ("f0", "f1", "f2"):
        assert r["pca+rand"]["tasks"][task]["auroc"] == pytest.approx(r["pca"]["tasks"][task]["auroc"], abs=1e-3)
    # the rotation moves sparsity and concentration, which are not rotation-invariant
    assert r["pca+ica"]["sparsity"] > r["pca"]["sparsity"] + 0.2


def test_permuted_labels_score_chance_for_every_version(data):
    """Whitening and ICA are fitted on training folds only: no version beats chance on
    label-permuted rows."""
    X, y = data
    y = np.random.default_rng(9).permutation(y)
    r = actkit.evaluate_postprocessing(X, y, control="ctrl", n_rotations=1, n_splits=3, n_jobs=1,
                                       progress=False).to_dict()
    for v in VERSIONS:
        assert abs(r[v]["auroc"] - 0.5) < 0.07, (v, r[v]["auroc"])


def test_one_vs_rest_with_groups():
    X, y = planted(n=500, k=8)
    groups = np.array([f"{lab}-g{i % 2}" for i, lab in enumerate(y)], dtype=object)
    r = actkit.evaluate_postprocessing(X, y, groups=groups, classifier="logistic", n_rotations=1, n_splits=2,
                                       progress=False)
    assert [t.name for t in r.tasks] == ["ctrl", "f0", "f1", "f2"]  # one-vs-rest: every label
    assert r.tasks[1].groups == ["f0-g0", "f0-g1"]
    assert r.scores["pca"][1].shape == (2, 1, 2, 3)  # groups, draws, folds, metrics
    np.testing.assert_array_equal(r.tasks[1].negatives, np.flatnonzero(y != "f0"))


def test_lightgbm_with_one_and_two_workers_agree_bitwise():
    X, y = planted(n=400, k=8)
    keep = np.isin(y, ["ctrl", "f0"])
    kw = {"control": "ctrl", "n_rotations": 1, "n_splits": 2, "progress": False}
    one = actkit.evaluate_postprocessing(X[keep], y[keep], n_jobs=1, **kw)
    two = actkit.evaluate_postprocessing(X[keep], y[keep], n_jobs=2, **kw)
    for v in VERSIONS:
        np.testing.assert_array_equal(one.scores[v][0], two.scores[v][0])


def test_a_fit_on_shared_bins_is_lightgbm_s_own_fit():
    """Binning once per version and fold changes nothing but where the bin edges come from:
    on the task's own rows it is the Table 6 LGBMClassifier fit, bit for bit."""
    from actkit.evaluation._scores import (
        SharedBins,
        auroc,
        lightgbm_params,
        make_classifier,
    )

    X, y = planted(n=800, k=8)
    lab = (y != "ctrl").astype(np.int64)
    rows, test = np.arange(0, 600, 2), np.arange(1, 800, 2)
    X_pos, X_neg = X[test[lab[test] == 1]], X[test[lab[test] == 0]]
    for max_bin in (63, 255):
        own = auroc(make_classifier("lightgbm", 3, max_bin), X[rows], lab[rows], X_pos, X_neg)
        bins = SharedBins(X[rows], rows, lightgbm_params(3, max_bin))
        shuffled = np.random.default_rng(0).permutation(len(rows))  # any order of the task's rows
        assert bins.auroc(rows[shuffled], lab[rows][shuffled], X_pos, X_neg) == own
    # bins found on more training rows (every task's), the fit on a subset: the same model up to the edges
    wide = np.arange(0, 800, 2)
    assert SharedBins(X[wide], wide, lightgbm_params(3)).auroc(rows, lab[rows], X_pos, X_neg) == \
        pytest.approx(own, abs=0.03)


def test_training_subsets_are_balanced_and_share_the_control_draw():
    from actkit.evaluation._protocol import _fold_tasks
    from actkit.evaluation._tasks import build_tasks

    y = np.array(["ctrl"] * 900 + ["a"] * 300 + ["b"] * 240 + ["c"] * 20, dtype=object)
    tasks, _ = build_tasks(y, control="ctrl", n_splits=2)
    in_train = np.zeros(len(y), bool)
    in_train[::2] = True
    (sa,), (sb,), (sc,) = _fold_tasks(tasks, in_train, 200, np.random.default_rng(0))
    assert [len(s[0]) for s in (sa, sb, sc)] == [100, 100, 10]  # up to half positives, a rare class whole
    assert [len(s[1]) for s in (sa, sb, sc)] == [100, 100, 190]  # the negatives fill the rest
    np.testing.assert_array_equal(sa[1], sb[1])  # one draw of 100 control rows for the tasks that need 100
    for s in (sa, sb, sc):
        assert in_train[np.concatenate(s[:2])].all() and len(np.unique(s[1])) == len(s[1])
        assert set(y[s[1]]) == {"ctrl"}
    assert len(_fold_tasks(tasks, in_train, None, np.random.default_rng(0))[0][0][1]) == 450  # None: all


def test_two_labels_one_vs_rest_is_one_task():
    X, y = planted(n=400, k=6)
    y = np.where(y == "ctrl", "a", "b")
    r = actkit.evaluate_postprocessing(X, y, classifier="logistic", n_rotations=1, n_splits=2, progress=False)
    assert [t.name for t in r.tasks] == ["b"]


def test_concentration_and_rotation_helpers():
    b = np.array([3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    assert concentration(b, b) == pytest.approx(0.4)  # the top 2 of 8 features carry 4 of 10
    assert concentration(np.arange(8.0), b) == pytest.approx(0.2)  # ranked on other rows: features 6, 7
    bv = between_class_variance(np.array([2.0, 0.0]), 2, np.array([0.0, 0.0]), 2)
    np.testing.assert_allclose(bv, [0.25, 0.0])  # means 1 and 0, equal classes: 1/4
    Q = haar_rotation(5, np.random.default_rng(0))
    np.testing.assert_allclose(Q @ Q.T, np.eye(5), atol=1e-12)


@pytest.mark.parametrize("case, message", [
    ("count", "labels for 1200 embedding rows"),
    ("control", "control label 'dmso' does not occur"),
    ("small", "has 2 rows, fewer than the 3 folds"),
    ("nan", "NaN or Inf values (first in row 7)"),
    ("single", "single class"),
])
def test_bad_input_is_one_clear_error(data, case, message):
    X, y = data
    kw = {"control": "ctrl", "n_splits": 3, "progress": False}
    if case == "count":
        y = y[:-1]
    elif case == "control":
        kw["control"] = "dmso"
    elif case == "small":
        y = y.copy()
        y[[0, 1]] = "rare"
    elif case == "nan":
        X = X.copy()
        X[7, 3] = np.nan
    elif case == "single":
        y, kw["control"] = np.full(len(y), "ctrl", object), None
    with pytest.raises(ActkitError, match=message.replace("(", r"\(").replace(")", r"\)")):
        actkit.evaluate_postprocessing(X, y, **kw)


def test_cli_table_json_plot_and_label_sources(tmp_path, capsys, data):
    import pyarrow as pa
    import pyarrow.parquet as pq

    X, y = data
    np.save(tmp_path / "emb.npy", X)
    (tmp_path / "labels.txt").write_text("\n".join(y) + "\n")
    np.save(tmp_path / "labels.npy", y.astype(str))
    pq.write_table(pa.table({"emb": list(X), "label": list(y)}), tmp_path / "emb.parquet")
    pq.write_table(pa.table({"cond": list(y)}), tmp_path / "meta.parquet")
    for emb, labels in [("emb.npy", tmp_path / "labels.txt"), ("emb.npy", tmp_path / "labels.npy"),
                        ("emb.parquet", "label"), ("emb.npy", f"{tmp_path / 'meta.parquet'}:cond")]:
        np.testing.assert_array_equal(read_labels(labels, source=tmp_path / emb), y)
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.parquet", "--labels", "label", "--control", "ctrl",
                             "--classifier", "logistic", "--n-splits", "3", "--n-rotations", "2",
                             "--json", tmp_path / "r.json", "--plot", tmp_path / "r.png")
    assert code == 0, err
    assert "Mean AUROC" in out and "PCA+Rand" in out and "f2 (" in out and "PCA+ICA vs PCA+Rand" in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert set(VERSIONS) <= set(r) and r["source"]["labels"] == "label"
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert "has no column 'nope'" in cli_error(capsys, "evaluate", tmp_path / "emb.parquet", "--labels", "nope")
    line = cli_error(capsys, "evaluate", tmp_path / "emb.npy", "--labels", tmp_path / "missing.txt")
    assert "not found" in line
    line = cli_error(capsys, "evaluate", tmp_path / "emb.npy", "--labels", tmp_path / "labels.txt",
                     "--control", "dmso", "--n-splits", "3")
    assert "control label 'dmso' does not occur" in line
    bad = X.copy()
    bad[3, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    assert "NaN" in cli_error(capsys, "evaluate", tmp_path / "nan.npy", "--labels", tmp_path / "labels.txt")


def test_extract_keeps_a_label_column_that_evaluate_reads(tmp_path, capsys, tiny_gpt_neox, torch_one_thread):
    """``extract --label-column`` keeps one label per sample next to the rows; ``evaluate
    STORE --labels COLUMN`` spreads it over each sample's rows (here per token)."""
    import datasets

    texts = [f"{w} number {i} says hello" for i, w in enumerate(["red", "blue"] * 10)]
    ds = datasets.Dataset.from_dict({"text": texts, "colour": ["red", "blue"] * 10,
                                     "kind": [i % 2 for i in range(20)]})
    ds = ds.cast_column("kind", datasets.ClassLabel(names=["even", "odd"]))
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "texts.parquet"))
    out = tmp_path / "s.h5"
    code, _, err = run_cli(capsys, "extract", tiny_gpt_neox, "--inputs", tmp_path / "texts.parquet",
                           "--layers", "gpt_neox.layers.1", "--label-column", "colour", "--out", out, "--no-progress")
    assert code == 0, err
    layer = actkit.open_store(out)["gpt_neox.layers.1"]
    labels = read_labels("colour", source=out, layer=layer)
    np.testing.assert_array_equal(labels, np.array(["red", "blue"] * 10, object)[layer.groups])
    assert layer.store.provenance["label_names"] == {"colour": ["blue", "red"]}
    code, _outp, err = run_cli(capsys, "evaluate", out, "--labels", "colour", "--classifier", "logistic",
                              "--n-splits", "2", "--n-rotations", "1", "--quiet", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["tasks"][0]["name"] == "red"
    # a ClassLabel column of a saved dataset keeps its names, and a datasets folder's column reads as FILE:COLUMN
    code, _, err = run_cli(capsys, "extract", tiny_gpt_neox, "--inputs", tmp_path / "saved", "--pool", "mean",
                           "--layers", "gpt_neox.layers.1", "--label-column", "kind", "--out", tmp_path / "k.h5",
                           "--no-progress")
    assert code == 0, err
    k = actkit.open_store(tmp_path / "k.h5")["gpt_neox.layers.1"]
    assert list(read_labels("kind", source=tmp_path / "k.h5", layer=k)[:3]) == ["even", "odd", "even"]
    assert list(read_labels(f"{tmp_path / 'saved'}:kind")[:2]) == ["even", "odd"]
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", tmp_path / "texts.parquet", "--layers",
                     "gpt_neox.layers.1", "--label-column", "nope", "--out", tmp_path / "n.h5", "--no-progress")
    assert "no label column 'nope'" in line
    assert not (tmp_path / "n.h5").exists()


def test_lightgbm_with_table_6_hyperparameters_is_the_default():
    """The paper's Table 6, exactly, and the default of the API and of the command."""
    import inspect

    from actkit.cli import build_parser
    from actkit.evaluation._scores import make_classifier

    table6 = {"is_unbalance": True, "learning_rate": 0.05, "num_leaves": 31, "feature_fraction": 0.6,
              "reg_alpha": 5.0, "reg_lambda": 1.0}
    params = make_classifier("lightgbm", 0).get_params()
    assert {k: params[k] for k in table6} == table6
    assert type(make_classifier("lightgbm", 0)).__name__ == "LGBMClassifier"
    assert type(make_classifier("logistic", 0)).__name__ == "LogisticRegression"
    assert inspect.signature(actkit.evaluate_postprocessing).parameters["classifier"].default == "lightgbm"
    assert build_parser().parse_args(["evaluate", "e.npy", "--labels", "l.txt"]).classifier == "lightgbm"


def test_progress_bar_counts_folds_versions_and_tasks(data, capsys):
    X, y = planted(n=300, k=6)
    keep = np.isin(y, ["ctrl", "f0", "f1"])
    actkit.evaluate_postprocessing(X[keep], y[keep], control="ctrl", classifier="logistic", n_rotations=2,
                                   n_splits=2, progress=True)
    err = capsys.readouterr().err
    total = 2 * (3 + 2) * 2  # folds x (base, pca, pca+ica + 2 rotations) x tasks
    assert "evaluate" in err and f"{total}/{total}" in err and "fold 2/2 pca+rand rotation 2" in err, err[-500:]


def test_cli_group_n_components_and_safetensors(tmp_path, capsys):
    """--group FILE averages each label over its groups; --n-components keeps fewer whitened
    dimensions; a .safetensors tensor is an input like any other."""
    from safetensors.numpy import save_file

    X, y = planted(n=600, k=8)
    groups = np.array([f"{lab}-g{i % 2}" for i, lab in enumerate(y)])
    save_file({"emb": X}, str(tmp_path / "emb.safetensors"))
    (tmp_path / "labels.txt").write_text("\n".join(y) + "\n")
    np.save(tmp_path / "guides.npy", groups)
    code, out, err = run_cli(capsys, "evaluate", tmp_path / "emb.safetensors", "--key", "emb", "--labels",
                             tmp_path / "labels.txt", "--control", "ctrl", "--group", tmp_path / "guides.npy",
                             "--classifier", "logistic", "--n-components", "6", "--n-splits", "2",
                             "--n-rotations", "1", "--json", tmp_path / "r.json")
    assert code == 0, err
    assert "task (# groups)" in out and "whitened to 6" in out
    r = json.loads((tmp_path / "r.json").read_text())
    assert [t["groups"] for t in r["tasks"]] == [["f0-g0", "f0-g1"], ["f1-g0", "f1-g1"], ["f2-g0", "f2-g1"]]
    assert r["settings"]["n_components"] == 6 and r["ica"][0]["n_components"] == 6
    # the label's number is the mean of its groups' numbers (the API, same settings)
    res = actkit.evaluate_postprocessing(X, y, control="ctrl", groups=groups, classifier="logistic",
                                         n_components=6, n_splits=2, n_rotations=1, progress=False)
    per_group = res.scores["pca+ica"][0][:, 0, :, 0]  # (groups, folds) AUROC of f0
    assert r["pca+ica"]["tasks"]["f0"]["auroc"] == pytest.approx(per_group.mean())
    # --plot's figure: one panel per metric, the four versions side by side
    from actkit.report import plot_postprocessing

    fig = plot_postprocessing(res)
    assert [ax.get_title() for ax in fig.axes] == ["Mean AUROC (up)", "Sparsity (up)", "Concentration (up)"]
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["Base", "PCA", "PCA+ICA", "PCA+Rand"]


@pytest.mark.parametrize("case, message", [
    ("count", "1199 labels for 1200 embedding rows"),
    ("control", "control label 'dmso' does not occur"),
    ("small", "class 'rare' has 2 rows, fewer than the 5 folds"),
    ("nan", "NaN or Inf values (first in row 7)"),
    ("single", "the labels hold a single class ('ctrl')"),
    ("max-bin", "--max-bin must be >= 2, got 1"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, data, case, message):
    X, y = data[0].copy(), data[1].copy()
    args = []
    if case == "count":
        y = y[:-1]
    elif case == "control":
        args = ["--control", "dmso"]
    elif case == "small":
        y[[0, 1]] = "rare"
    elif case == "nan":
        X[7, 3] = np.nan
    elif case == "single":
        y[:] = "ctrl"
    elif case == "max-bin":
        args = ["--max-bin", "1"]
    np.save(tmp_path / "emb.npy", X)
    (tmp_path / "labels.txt").write_text("\n".join(y) + "\n")
    line = cli_error(capsys, "evaluate", tmp_path / "emb.npy", "--labels", tmp_path / "labels.txt", *args)
    assert message in line, line
