"""``actkit reproduce``: every experiment's quick mode must reproduce its paper's claim.

The quick modes are the CI budget of the reproduction suite (about 3 minutes in all on 2
cores); each test asserts the qualitative claim the experiment tests, and that its JSON
and figures are written.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from actkit.cli import main
from actkit.synthetic import reproduce as repro
from actkit.synthetic._result import Claim, ExperimentResult, format_table


def _check_files(out, name):
    data = json.loads((Path(out) / f"{name}.json").read_text())
    assert data["name"] == name and data["rows"] and data["claims"]
    assert data["settings"]["quick"] is True
    assert data["figures"], "no figure written"
    for fig in data["figures"]:
        assert Path(fig).stat().st_size > 1000
    return data


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bilipschitz", "complete", "sparse"])
def test_quick_mode_reproduces_the_claim(name, tmp_path):
    (result,) = repro.reproduce(name, quick=True, out=tmp_path)
    assert result.claims
    assert result.passed, result.format()
    data = _check_files(tmp_path, name)
    assert data["passed"] is True


@pytest.mark.slow
def test_disentanglement_quick_reproduces_the_ae_ica_claims(tmp_path):
    """Table 2 with a convolutional AE (spatial broadcast decoder) on the
    ``style="disentanglement"`` shapes: the AE's code encodes the hues and positions
    linearly (the paper's premise), and AE + ICA raises InfoM and InfoC over the AE, keeps
    InfoE, and beats random rotations of the same whitened code."""
    (result,) = repro.reproduce("disentanglement", quick=True, out=tmp_path)
    data = _check_files(tmp_path, "disentanglement")
    by = {r["method"]: r for r in data["rows"]}
    assert list(by) == ["AE", "AE + ICA", "AE + PCA", "AE + PCA + rand", "PCA", "PCA + ICA",
                        "PCA + rand"]
    for r in by.values():
        for key in ("InfoM", "InfoE", "InfoC"):
            assert 0 <= r[key] <= 1, (r["method"], key)
    for m in ("AE + ICA", "AE + PCA", "AE + PCA + rand"):
        assert by[m]["InfoE"] == pytest.approx(by["AE"]["InfoE"], abs=0.02), m
    assert by["PCA + rand"]["InfoE"] == pytest.approx(by["PCA"]["InfoE"], abs=0.02)
    assert by["AE + PCA + rand"]["n_runs"] == data["settings"]["n_rotations"]
    # the premise: the AE code is linear in (at least) the hues and the positions
    per = data["extra"]["ae_infoe_per_factor"]
    for factor in ("object_hue", "background_hue", "x_position", "y_position"):
        assert per[factor] > 0.6, per
    # the claims themselves
    ae, ica, rand = by["AE"], by["AE + ICA"], by["AE + PCA + rand"]
    assert ica["InfoM"] > ae["InfoM"] and ica["InfoC"] > ae["InfoC"], (ae, ica)
    assert ica["InfoM"] > rand["InfoM"] and ica["InfoC"] > rand["InfoC"], (ica, rand)
    assert result.passed, result.format()
    assert data["passed"] is True


@pytest.mark.slow
def test_table1_quick_reproduces_the_ordering_on_every_pair(tmp_path, capsys):
    """Table 1 on the zoo: perm >= ica >= rigid >= linear on every seed0->seed1 pair and
    every ICA efficiency in [0, 1] (the experiment's claims, exit status 0)."""
    rc = main(["reproduce", "table1", "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "[FAIL]" not in out
    data = _check_files(tmp_path, "table1")
    ours = [r for r in data["rows"] if r["source"] == "actkit"]
    assert [r["pair"].split()[0] for r in ours] == ["Pythia-tiny", "MAE-tiny", "ResNet-tiny",
                                                    "ViT-tiny"]
    for r in ours:
        for key in ("perm", "rigid", "linear", "ica", "cka"):
            assert math.isfinite(r[key]), (r["pair"], key)
        assert r["ordering"] == (r["perm"] >= r["ica"] >= r["rigid"] >= r["linear"])
        assert r["perm"] >= r["ica"] >= r["rigid"] >= r["linear"], r
        assert 0 <= r["ica_eff"] <= 1, r
        # diagnostics: effective dimension of each side, ICA source matching
        k_a, k_b = map(int, r["k99"].split("/"))
        assert 1 <= k_a <= r["dims"][0] and 1 <= k_b <= r["dims"][1]
        # the mean |corr| of the sources mapped through ICA; None where ICA mapped none
        assert r["ica_match"] is None or 0 <= r["ica_match"] <= 1
        # compare's reproducibility check travels with the value it qualifies
        assert r["ica_ident"] in (True, False), r
    unidentified = [r["pair"] for r in ours if r["ica_ident"] is False]
    effs = next(c for c in data["claims"] if c["name"].startswith("ICA efficiency"))
    assert (f"ICA not identifiable on {len(unidentified)}" in effs["detail"]) == bool(unidentified)
    assert [c["passed"] for c in data["claims"]] == [True, True] and data["passed"] is True


@pytest.mark.slow
def test_cli_kl_quick_prints_paper_numbers_and_exits_zero(tmp_path, capsys):
    rc = main(["reproduce", "kl", "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "paper_d_kl" in out and "[PASS]" in out and "[FAIL]" not in out
    data = _check_files(tmp_path, "kl")
    ce = [r for r in data["rows"] if r["part"] == "counterexample"]
    assert ce[-1]["d_kl"] < 0.01 * ce[0]["d_kl"]
    assert all(r["d_svd_f"] > 0.5 for r in ce)


def _fake_module(passed):
    class Fake:
        @staticmethod
        def run(*, quick, device, random_state):
            return ExperimentResult(name="fake", title="fake", columns=["a"], rows=[{"a": 1.0}],
                                    claims=[Claim("c", passed, "measured")],
                                    settings={"quick": quick})
    return Fake


@pytest.mark.parametrize("passed, code", [(True, 0), (False, 1)])
def test_cli_exit_code_follows_the_claims(monkeypatch, tmp_path, capsys, passed, code):
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(repro.importlib, "import_module",
                        lambda name: _fake_module(passed) if name == repro.EXPERIMENTS["kl"]
                        else real(name))
    assert main(["reproduce", "kl", "--quick", "--out", str(tmp_path)]) == code
    out = capsys.readouterr().out
    assert ("NOT reproduced" in out) == (not passed)
    assert json.loads((tmp_path / "fake.json").read_text())["passed"] is passed


def test_cli_rejects_unknown_experiment(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "nope"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_cli_bad_device_is_one_line_error_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["reproduce", "kl", "--quick", "--device", "cuda:7", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("actkit: error:") and "\n" not in err
    assert not out.exists()
    assert main(["reproduce", "kl", "--device", "nonsense-device", "--out", str(out)]) == 2


def test_cli_out_must_be_a_directory(tmp_path, capsys):
    f = tmp_path / "file.txt"
    f.write_text("x")
    assert main(["reproduce", "kl", "--quick", "--out", str(f)]) == 2
    assert f"--out {f} is a file, not a folder" in capsys.readouterr().err  # before any work (preflight)


def test_result_json_has_no_nan_and_table_formats(tmp_path):
    r = ExperimentResult(name="t", title="title", columns=["x", "y"],
                         rows=[{"x": float("nan"), "y": np.float32(0.5)}, {"x": 2}],
                         claims=[Claim("ok", True, "fine")], extra={"m": np.eye(2)})
    paths = r.write(tmp_path)
    data = json.loads(Path(paths[0]).read_text())
    assert data["rows"][0]["x"] is None and data["extra"]["m"] == [[1.0, 0.0], [0.0, 1.0]]
    text = r.format()
    assert "[PASS] ok: fine" in text and "nan" in text
    assert format_table(["a"], [{"a": None}]).splitlines()[-1].strip() == "-"
    assert not list(tmp_path.glob(".*tmp"))


def test_tuning_counts_single_latent_units():
    from actkit.synthetic.complete import tuning

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(5000, 3))
    H = np.c_[2 * Z[:, 0] + 1, Z[:, 1] + Z[:, 2], np.maximum(Z[:, 2] + 3, 0), np.zeros(5000)]
    t = tuning(H, Z)
    assert t["n_active"] == 3
    assert t["fraction_tuned"] == pytest.approx(2 / 3)
    assert t["corr"][1, 1] == pytest.approx(1 / math.sqrt(2), abs=0.03)
    assert 0.5 < t["selectivity"] < 1


def test_truncated_dgp_has_box_support_and_affine_bayes_logits():
    """The latents live in the box, and the Bayes cross-entropy is what a multinomial
    logistic regression on z reaches (log p(y|z) is affine in z despite the truncation)."""
    from sklearn.linear_model import LogisticRegression

    from actkit.synthetic.complete import bayes_cross_entropy, truncated_generative_dgp

    X, Z, y, info = truncated_generative_dgp(6000, random_state=1, mixing_state=1)
    assert X.shape == (6000, 6) and Z.shape == (6000, 3) and info["n_classes"] == 27
    assert np.abs(Z).max() <= 1.0 and np.abs(Z).max() > 0.99
    assert set(np.unique(y)) == set(range(27))
    bayes = bayes_cross_entropy(Z, y, info)
    lr = LogisticRegression(C=1e6, max_iter=2000).fit(Z, y)
    ce = -np.mean(np.log(lr.predict_proba(Z)[np.arange(len(y)), y]))
    assert bayes <= ce + 0.01 and ce - bayes < 0.03, (bayes, ce)
    with pytest.raises(ValueError, match="box"):
        truncated_generative_dgp(10, box=0.5)


def test_support_f1_of_matched_codes():
    from actkit.synthetic.sparse import support_f1

    Z = np.array([[1.0, 0, 0], [0, 2.0, 0], [0, 0, 3.0]])
    codes = Z[:, [2, 0, 1]]  # atoms permuted
    assert support_f1(Z, codes, (np.arange(3), np.array([1, 2, 0]))) == 1.0
    assert support_f1(Z, codes, (np.arange(3), np.arange(3))) == 0.0


def test_training_is_deterministic_given_the_seed():
    import torch

    from actkit.synthetic._training import train_autoencoder, train_classifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    y = (X[:, 0] > 0).astype(int)
    threads = torch.get_num_threads()
    a = train_classifier(X, y, width=3, n_steps=30, batch_size=64, seed=1)
    b = train_classifier(X, y, width=3, n_steps=30, batch_size=64, seed=1)
    c = train_classifier(X, y, width=3, n_steps=30, batch_size=64, seed=2)
    np.testing.assert_array_equal(a[0](X), b[0](X))
    assert not np.allclose(a[0](X), c[0](X))
    e1, h1 = train_autoencoder(X, n_latents=2, n_steps=30, batch_size=64, seed=0)
    e2, _ = train_autoencoder(X, n_latents=2, n_steps=30, batch_size=64, seed=0)
    np.testing.assert_array_equal(e1(X), e2(X))
    assert 0 < h1["relative_mse"] < 2
    assert torch.get_num_threads() == threads  # the one-thread context is restored


def test_broadcast_decoder_shapes_and_linear_first_layer():
    """The spatial broadcast decoder maps (n, k) codes to (n, 3, size, size) images, and its
    first layer is linear in the code (so the AE loss has no preferred code basis)."""
    import torch

    from actkit.synthetic._training import conv_autoencoder

    torch.manual_seed(0)
    enc, dec = conv_autoencoder(16, 5, channels=(8, 8), hidden=16, decoder="broadcast",
                                decoder_channels=8, decoder_layers=2)
    x = torch.rand(4, 3, 16, 16)
    z = enc(x)
    assert z.shape == (4, 5) and dec(z).shape == (4, 3, 16, 16)
    first = dec[1]  # the conv after the broadcast
    a, b = torch.randn(2, 5), torch.randn(2, 5)
    lin = lambda v: first(dec[0](v)) - first(dec[0](torch.zeros_like(v)))  # noqa: E731
    torch.testing.assert_close(lin(a + b), lin(a) + lin(b), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="decoder"):
        conv_autoencoder(16, 5, decoder="mlp")
