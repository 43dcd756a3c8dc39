"""Embedding files (.npy, .safetensors, .parquet) wherever a store is read, and ``actkit import``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from safetensors.numpy import save_file

import actkit
from actkit.errors import InputError
from actkit.matrix_files import open_matrix
from cli_helpers import cli_error, run_cli


@pytest.fixture(scope="module")
def emb(tmp_path_factory):
    """One (1500, 6) float32 matrix with independent Laplace sources, in every format."""
    root = tmp_path_factory.mktemp("emb")
    rng = np.random.default_rng(0)
    X = (rng.laplace(size=(1500, 6)) @ rng.normal(size=(6, 6))).astype(np.float32)
    np.save(root / "e.npy", X)
    save_file({"emb": X, "other": X[:, :2].copy()}, str(root / "e.safetensors"))
    save_file({"only": X}, str(root / "one.safetensors"))
    table = pa.table({"id": np.arange(1500), "vec": pa.array(list(X), type=pa.list_(pa.float32()))})
    pq.write_table(table, root / "e.parquet", row_group_size=200)  # blocks straddle row groups
    fixed = pa.table({"v": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 6)})
    pq.write_table(fixed, root / "fixed.parquet", row_group_size=333)
    return root, X


def test_every_format_reads_the_same_matrix_in_blocks(emb):
    root, X = emb
    for name, kw in (("e.npy", {}), ("e.safetensors", {"key": "emb"}), ("one.safetensors", {}),
                     ("e.parquet", {}), ("fixed.parquet", {"column": "v"})):
        store = open_matrix(root / name, **kw)
        layer = store["embeddings"]
        assert layer.shape == X.shape and store.n_samples == 1500, name
        np.testing.assert_array_equal(np.asarray(layer), X)
        np.testing.assert_array_equal(layer[190:610], X[190:610])
        idx = np.array([1499, 3, 3, 201, 0])
        np.testing.assert_array_equal(layer[idx], X[idx])
        blocks = list(layer.iter_blocks(block_rows=170))
        np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), X)
        assert store.fingerprint == open_matrix(root / "e.npy").fingerprint  # content, not format
        assert store.inputs_fingerprint == ""
        np.testing.assert_array_equal(layer.index[:, 0], np.arange(1500))


def test_bfloat16_safetensors_is_widened(tmp_path):
    import torch
    from safetensors.torch import save_file as save_torch

    x = torch.randn(50, 4).to(torch.bfloat16)
    save_torch({"e": x}, str(tmp_path / "b.safetensors"))
    layer = open_matrix(tmp_path / "b.safetensors")["embeddings"]
    assert layer.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(layer), x.float().numpy())


def test_ica_of_an_embedding_file_equals_ica_of_the_imported_store(emb, tmp_path, capsys):
    root, X = emb
    store = tmp_path / "imported.h5"
    code, out, err = run_cli(capsys, "import", root / "e.parquet", "--out", store, "--quiet")
    assert code == 0 and out.strip() == str(store), err
    with actkit.open_store(store) as s:
        np.testing.assert_array_equal(np.asarray(s["embeddings"]), X)
        prov = s.provenance
        assert prov["format"] == "parquet" and prov["column"] == "vec" and prov["rows"] == 1500
        assert prov["sha256"] == open_matrix(root / "e.npy").fingerprint
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    assert run_cli(capsys, "ica", root / "e.npy", "--out", a, "--quiet")[0] == 0
    assert run_cli(capsys, "ica", store, "--out", b, "--quiet")[0] == 0
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        assert sa.layers == ["embeddings"]
        np.testing.assert_allclose(np.asarray(sa["embeddings"]), np.asarray(sb["embeddings"]), atol=1e-6)
        assert sa.provenance["source_provenance"]["format"] == "npy"
    # the same matrix against itself: every alignment is exact
    code, out, err = run_cli(capsys, "compare", root / "e.npy", root / "e.safetensors", "--key", "emb",
                             "--methods", "permutation,rigid,linear", "--quiet", "--json", tmp_path / "c.json")
    assert code == 0, err
    import json

    res = json.loads((tmp_path / "c.json").read_text())
    assert res["rigid"] == pytest.approx(0.0, abs=1e-6)


def test_whiten_and_dictionary_take_embedding_files(emb, tmp_path, capsys):
    root, _ = emb
    assert run_cli(capsys, "whiten", root / "e.safetensors", "--key", "emb", "--out", tmp_path / "w.h5",
                   "--quiet")[0] == 0
    assert run_cli(capsys, "dictionary", root / "fixed.parquet", "--layer", "vecs", "--out", tmp_path / "d.h5",
                   "--n-components", "8", "--k", "2", "--quiet")[0] == 0
    assert actkit.open_store(tmp_path / "d.h5").layers == ["vecs"]


def test_bad_embedding_files_are_one_line_and_write_nothing(emb, tmp_path, capsys):
    root, X = emb
    bad = X.copy()
    bad[7, 1] = np.inf
    np.save(tmp_path / "inf.npy", bad)
    np.save(tmp_path / "flat.npy", X[:, 0])
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.save(tmp_path / "ints.npy", np.arange(12).reshape(6, 2))
    out = tmp_path / "out.h5"
    cases = [
        (["ica", tmp_path / "inf.npy"], "NaN or Inf values (first in row 7)"),
        (["ica", tmp_path / "flat.npy"], "(1-D); expected a 2-D"),
        (["whiten", tmp_path / "obj.npy"], "object array"),
        (["whiten", tmp_path / "ints.npy"], "expected floats"),
        (["ica", root / "e.safetensors"], "pick one with --key (emb, other)"),
        (["import", root / "e.safetensors", "--key", "nope"], "no tensor 'nope'"),
        (["ica", root / "e.parquet", "--column", "id"], "not a list or array of floats"),
        (["ica", root / "e.parquet", "--column", "nope"], "its columns are: id, vec"),
        (["ica", root / "e.npy", "--key", "x"], "--key names a tensor"),
        (["compare", root / "e.npy", tmp_path / "inf.npy"], "NaN or Inf"),
    ]
    for argv, expected in cases:
        line = cli_error(capsys, *argv, *(["--out", out] if argv[0] != "compare" else []))
        assert expected in line, (argv, line)
        assert not out.exists()
    with pytest.raises(InputError, match="not found"):
        open_matrix(tmp_path / "missing.npy")
