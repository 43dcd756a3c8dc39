"""``actkit whiten | ica | dictionary``: derived stores, provenance, one-line errors, no debris."""

import os

import numpy as np
import pytest

import actkit
from actkit.cli import main
from actkit.metrics import amari_distance


def _make_store(path, X, *, name="blocks.1", complete=True, fingerprint="inputs-abc"):
    from actkit.store import LayerSpec, create_store

    n = X.shape[0]
    index = np.c_[np.arange(n) // 4, np.arange(n) % 4].astype(np.int64)
    w = create_store(path, [LayerSpec(name, n, X.shape[1], index=index)], n_samples=n // 4,
                     request={"src": str(path)}, provenance={"model": "toy"}, inputs_fingerprint=fingerprint)
    w.append(name, X.astype(np.float32))
    w.checkpoint(n // 4, force=True)
    if complete:
        w.finalize()
    else:
        w.close()
    return path


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    rng = np.random.default_rng(0)
    S = rng.laplace(size=(2400, 5))
    A = rng.normal(size=(8, 5))
    X = S @ A.T + 0.01 * rng.normal(size=(2400, 8)) + 3.0
    path = _make_store(tmp_path_factory.mktemp("src") / "src.h5", X)
    return path, X.astype(np.float32), A


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().err


def test_whiten_writes_derived_store(source, tmp_path, capsys):
    path, X, _ = source
    out = tmp_path / "w.h5"
    code, err = _run(capsys, "whiten", path, "--layer", "blocks.1", "--out", out, "--n-components", 5, "--quiet")
    assert code == 0, err
    src, st = actkit.open_store(path), actkit.open_store(out)
    layer = st["blocks.1"]
    assert layer.shape == (2400, 5)
    np.testing.assert_array_equal(layer.index, src["blocks.1"].index)
    assert st.inputs_fingerprint == src.inputs_fingerprint
    assert st.provenance["source_fingerprint"] == src.fingerprint
    assert st.provenance["source_store"] == os.path.abspath(path)
    Z = np.asarray(layer, dtype=np.float64)
    np.testing.assert_allclose(np.cov(Z, rowvar=False), np.eye(5), atol=1e-3)
    p = st.params
    np.testing.assert_allclose((X - p["mean"]) @ p["whitening"].T, Z, atol=1e-3)


def test_ica_recovers_sources_and_stores_params(source, tmp_path, capsys):
    path, X, A = source
    out = tmp_path / "ica.h5"
    code, err = _run(capsys, "ica", path, "--layer", "blocks.1", "--out", out, "--n-components", 5,
                     "--fit-rows", 1500)
    assert code == 0, err
    assert "wrote" in err
    st = actkit.open_store(out)
    p = st.params
    assert p["unmixing"].shape == (5, 8) and p["mixing"].shape == (8, 5)
    assert amari_distance(p["unmixing"], A) < 0.1
    S = np.asarray(st["blocks.1"])
    np.testing.assert_allclose(S, (X - p["mean"]) @ p["unmixing"].T, atol=1e-3)
    assert st.provenance["settings"]["fit_rows"] == 1500 and st.provenance["fit"]["n_components"] == 5


def test_dictionary_command(source, tmp_path, capsys):
    path, X, _ = source
    out = tmp_path / "d.h5"
    code, err = _run(capsys, "dictionary", path, "--layer", "blocks.1", "--out", out, "--n-components", 10, "--k", 2,
                     "--quiet")
    assert code == 0, err
    st = actkit.open_store(out)
    codes = np.asarray(st["blocks.1"])
    assert codes.shape == (2400, 10) and ((codes != 0).sum(axis=1) <= 2).all()
    D = st.params["dictionary"]
    np.testing.assert_allclose(np.linalg.norm(D, axis=1), 1, atol=1e-5)


def test_user_errors_are_one_line_and_leave_nothing(source, tmp_path, capsys):
    path, X, _ = source
    out = tmp_path / "bad.h5"
    cases = [
        (["whiten", path, "--layer", "nope", "--out", out], "nope"),
        (["ica", path, "--layer", "blocks.1", "--out", out, "--n-components", 9], "between 1 and"),
        (["whiten", tmp_path / "missing.h5", "--layer", "blocks.1", "--out", out], "does not exist"),
        (["dictionary", path, "--layer", "blocks.1", "--out", out, "--n-components", 4, "--k", 5], "--k"),
        (["ica", path, "--layer", "blocks.1", "--out", out, "--device", "gpu0"], "unknown device"),
        (["dictionary", path, "--layer", "blocks.1", "--out", out, "--n-components", 4, "--device", "gpu0"],
         "unknown device"),
    ]
    for argv, needle in cases:
        code, err = _run(capsys, *argv)
        assert code == 2, (argv, err)
        assert err.startswith("actkit: error:") and needle in err and err.count("\n") == 1, err
        assert not out.exists()
        assert not [f for f in os.listdir(tmp_path) if f.startswith("bad")]


def test_nonfinite_data_and_rank(tmp_path, capsys):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 4))
    X[123, 2] = np.nan
    bad = _make_store(tmp_path / "nan.h5", X)
    code, err = _run(capsys, "ica", bad, "--layer", "blocks.1", "--out", tmp_path / "o.h5")
    assert code == 2 and "NaN" in err
    Y = rng.normal(size=(400, 3))
    Y = np.c_[Y, Y[:, 0] - Y[:, 1]]  # rank 3
    low = _make_store(tmp_path / "low.h5", Y)
    code, err = _run(capsys, "whiten", low, "--layer", "blocks.1", "--out", tmp_path / "o.h5", "--n-components", 4)
    assert code == 2 and "rank" in err
    assert not [f for f in os.listdir(tmp_path) if f.startswith("o.h5")]


def test_incomplete_store_is_refused(tmp_path, capsys):
    X = np.random.default_rng(2).normal(size=(200, 4))
    part = _make_store(tmp_path / "part.h5", X, complete=False)
    code, err = _run(capsys, "whiten", part, "--layer", "blocks.1", "--out", tmp_path / "o.h5")
    assert code == 2 and err.startswith("actkit: error:")
    assert not (tmp_path / "o.h5").exists()
