"""``actkit sae-eval`` / ``sae_metrics`` over a store (one streaming pass), checked against
the metrics computed in numpy from the reference formulas of ``tests/test_sae.py``."""

from __future__ import annotations

import json

import numpy as np
import pytest

import actkit
from actkit.cli import main
from tests.test_sae import D_IN, reference_saelens, saelens_folder


def make_store(path, X, name="blocks.0"):
    from actkit.store import LayerSpec, create_store

    n = X.shape[0]
    index = np.c_[np.arange(n) // 4, np.arange(n) % 4].astype(np.int64)
    w = create_store(path, [LayerSpec(name, n, X.shape[1], index=index)], n_samples=n // 4,
                     request={"src": str(path)}, provenance={"model": "toy"}, inputs_fingerprint="abc")
    w.append(name, X.astype(np.float32))
    w.checkpoint(n // 4, force=True)
    w.finalize()
    return path


@pytest.fixture
def X():
    rng = np.random.default_rng(3)
    X = (rng.normal(size=(1000, D_IN)) * 1.5 + 3.0).astype(np.float32)
    X[:, 0] *= 0.01  # a latent or two stay dead, some are dense
    return X


def expected(codes, X, Y):
    x, y = X.astype(np.float64), Y.astype(np.float64)
    err = ((x - y) ** 2).sum()
    cos = (x * y).sum(1) / np.maximum(np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1), 1e-8)
    active = (codes != 0).sum(0)
    return {"n_rows": len(x), "n_latents": codes.shape[1], "l0": (codes != 0).sum(1).mean(),
            "fvu": err / ((x - x.mean(0)) ** 2).sum(), "mse": err / len(x), "mean_cosine": cos.mean(),
            "dead_latents": int((active == 0).sum()), "dense_latents": int((active > 0.1 * len(x)).sum())}


@pytest.mark.parametrize("arch,norm", [("topk", "none"), ("jumprelu", "layer_norm"), ("gated", "none")])
def test_sae_metrics_match_numpy(tmp_path, X, arch, norm):
    w = saelens_folder(tmp_path / "sae", arch, norm=norm)
    store = make_store(tmp_path / "s.h5", X)
    codes, Y = reference_saelens(w, X, arch, norm=norm)
    want = expected(codes, X, Y)
    with actkit.open_store(store) as s:
        got = actkit.sae_metrics(str(tmp_path / "sae"), s["blocks.0"], block_rows=96, progress=False)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    # the block size does not change the result beyond float32 rounding
    with actkit.open_store(store) as s:
        again = actkit.sae_metrics(actkit.load_sae(tmp_path / "sae"), s["blocks.0"], block_rows=1000, progress=False)
    assert again["fvu"] == pytest.approx(got["fvu"], rel=1e-6) and again["dead_latents"] == got["dead_latents"]


def test_cli_sae_eval(tmp_path, X, capsys):
    w = saelens_folder(tmp_path / "sae", "topk")
    store = make_store(tmp_path / "s.h5", X)
    assert main(["sae-eval", str(store), "--layer", "blocks.0", "--sae", str(tmp_path / "sae"),
                 "--json", str(tmp_path / "m.json"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "FVU" in out and "dead latents" in out
    got = json.loads((tmp_path / "m.json").read_text())
    codes, Y = reference_saelens(w, X, "topk")
    assert got["l0"] == pytest.approx(expected(codes, X, Y)["l0"]) and got["architecture"] == "topk"
    assert got["fvu"] == pytest.approx(expected(codes, X, Y)["fvu"], rel=1e-5)


@pytest.mark.parametrize("args,msg", [
    (["--sae", "{tmp}/nosuch"], "SAE folder not found"),
    (["--sae", "{tmp}/sae", "--layer", "nope"], "no layer"),
    (["--sae", "{tmp}/wide"], "features"),
    (["--sae", "{tmp}/sae", "--json", "{tmp}/missing/m.json"], "--json"),
    (["--sae", "{tmp}/sae", "--device", "bogus"], "unknown device 'bogus'"),
])
def test_cli_sae_eval_errors_are_one_line(tmp_path, X, capsys, args, msg):
    saelens_folder(tmp_path / "sae", "standard")
    store = make_store(tmp_path / "s.h5", X[:, :D_IN])
    make_store(tmp_path / "w.h5", np.c_[X, X][:, : D_IN + 1], name="blocks.0")
    (tmp_path / "wide").mkdir()
    args = [a.format(tmp=tmp_path) for a in args]
    src = str(tmp_path / "w.h5") if "wide" in " ".join(args) else str(store)
    if "wide" in " ".join(args):  # an SAE of another width than the layer
        args = ["--sae", str(tmp_path / "sae")]
    code = main(["sae-eval", src, *args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and msg in err and err.count("\n") == 1, err


@pytest.mark.parametrize("arch", ["topk", "jumprelu"])
def test_transform_store_writes_sparse_codes(tmp_path, X, arch):
    import h5py
    from scipy.sparse import csr_matrix

    saelens_folder(tmp_path / "sae", arch)
    sae = actkit.load_sae(tmp_path / "sae")
    store = make_store(tmp_path / "s.h5", X)
    with actkit.open_store(store) as s:
        out = actkit.transform_store(sae, s["blocks.0"], tmp_path / "codes.h5", block_rows=70, progress=False)
        index = np.asarray(s["blocks.0"].index)
    with h5py.File(out, "r") as f:  # plain h5py, as docs/store-format.md shows
        assert f.attrs["actkit_format"] == b"actkit-codes/1" and f.attrs["complete"]
        g = f["codes/blocks.0"]
        codes = csr_matrix((g["values"][:], g["indices"][:], g["indptr"][:]), shape=(len(X), sae.n_components_))
        np.testing.assert_array_equal(g["index"][:], index)
        np.testing.assert_array_equal(f["params/W_dec"][:], sae.W_dec_)
        meta = json.loads(f["meta"][()].tobytes())
    assert meta["provenance"]["sae"]["architecture"] == arch and meta["nnz"] == codes.nnz
    want = sae.transform(X)
    np.testing.assert_allclose(codes.toarray(), want, atol=1e-6)
    assert codes.nnz == int((want != 0).sum())
    layer, part = actkit.store.read_codes(out, slice(10, 20))
    assert layer == "blocks.0"
    np.testing.assert_allclose(part.toarray(), want[10:20], atol=1e-6)
    stamp = out.stat().st_mtime_ns
    with actkit.open_store(store) as s:  # the identical request: a no-op
        assert actkit.transform_store(sae, s["blocks.0"], out, progress=False) == out
    assert out.stat().st_mtime_ns == stamp
    with actkit.open_store(store) as s, pytest.raises(actkit.ActkitError, match="exists"):
        actkit.transform_store(sae, s["blocks.0"], out, settings={"note": "other"})
    with actkit.open_store(store) as s:  # overwrite replaces a codes store of another request
        actkit.transform_store(sae, s["blocks.0"], out, overwrite=True, progress=False, settings={"note": "other"})
    assert actkit.store.codes_meta(out)["request"]["note"] == "other"


def test_transform_store_sae_errors_leave_nothing(tmp_path, X):
    saelens_folder(tmp_path / "sae", "topk")
    sae = actkit.load_sae(tmp_path / "sae")
    store = make_store(tmp_path / "w.h5", np.c_[X, X[:, :1]])
    with actkit.open_store(store) as s, pytest.raises(actkit.ActkitError, match="features"):
        actkit.transform_store(sae, s["blocks.0"], tmp_path / "c.h5")
    assert not list(tmp_path.glob("c.h5*"))
    (tmp_path / "other.h5").write_text("not mine")
    store = make_store(tmp_path / "s.h5", X)
    with actkit.open_store(store) as s, pytest.raises(actkit.ActkitError, match="not an actkit codes store"):
        actkit.transform_store(sae, s["blocks.0"], tmp_path / "other.h5", overwrite=True)
    assert (tmp_path / "other.h5").read_text() == "not mine"
