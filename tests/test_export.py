"""``actkit export``: a layer with its index (and labels) as parquet or a Hugging Face dataset."""

from __future__ import annotations

import numpy as np
import pytest

from cli_helpers import cli_error, run_cli

from actkit.store import LayerSpec, create_store


@pytest.fixture
def store(tmp_path):
    rows, d = 50, 3
    X = np.random.default_rng(0).normal(size=(rows, d)).astype(np.float32)
    index = np.stack([np.arange(rows) // 5, np.arange(rows) % 5], 1)  # 10 samples of 5 tokens
    w = create_store(tmp_path / "s.h5", [LayerSpec("L", rows, d, index=index), LayerSpec("M", rows, 2, index=index)],
                     n_samples=10, request={"t": 1})
    w.append("L", X)
    w.append("M", X[:, :2])
    w.checkpoint(10, force=True)
    return w.finalize(), X, index


def test_parquet_streams_rows_index_and_labels(store, tmp_path, capsys):
    import pyarrow.parquet as pq

    path, X, index = store
    labels = tmp_path / "labels.txt"
    labels.write_text("\n".join(f"class{i % 3}" for i in range(10)) + "\n")
    out = tmp_path / "x.parquet"
    run_cli(capsys, "export", str(path), "--format", "parquet", "--out", str(out), "--layer", "L",
            "--labels", str(labels), "--quiet")
    t = pq.read_table(out)
    np.testing.assert_array_equal(np.stack(t["activation"].to_numpy(zero_copy_only=False)), X)
    np.testing.assert_array_equal(t["sample"].to_numpy(), index[:, 0])
    np.testing.assert_array_equal(t["position"].to_numpy(), index[:, 1])
    assert t["label"].to_pylist()[:6] == ["class0"] * 5 + ["class1"]
    from actkit.export import export_store

    export_store(path, tmp_path / "b.parquet", layer="M", block_rows=10, progress=False)
    f = pq.ParquetFile(tmp_path / "b.parquet")
    assert f.metadata.num_row_groups == 5  # streamed: one row group per block
    np.testing.assert_array_equal(np.stack(f.read()["activation"].to_numpy(zero_copy_only=False)), X[:, :2])


def test_hf_datasets_folder_loads_with_load_from_disk(store, tmp_path, capsys):
    import datasets
    path, X, index = store
    out = tmp_path / "ds"
    labels = tmp_path / "l.npy"
    np.save(labels, np.arange(10) % 2)
    run_cli(capsys, "export", str(path), "--format", "hf-datasets", "--out", str(out), "--layer", "L",
            "--labels", str(labels), "--quiet")
    ds = datasets.load_from_disk(str(out))
    assert len(ds) == 50 and ds.features["activation"].length == 3
    np.testing.assert_allclose(np.asarray(ds.with_format("numpy")["activation"]), X)
    assert ds[7]["sample"] == 1 and ds[7]["position"] == 2 and ds[7]["label"] == 1


def test_export_errors_are_one_line(store, tmp_path, capsys):
    path, _, _ = store
    assert "holds 2 layers" in cli_error(capsys, "export", str(path), "--format", "parquet", "--out",
                                         str(tmp_path / "a.parquet"))
    bad = tmp_path / "l.txt"
    bad.write_text("a\nb\n")
    assert "one per sample (10)" in cli_error(capsys, "export", str(path), "--format", "parquet", "--layer", "L",
                                              "--out", str(tmp_path / "a.parquet"), "--labels", str(bad))
    (tmp_path / "b.parquet").write_text("x")
    assert "--overwrite" in cli_error(capsys, "export", str(path), "--format", "parquet", "--layer", "L",
                                      "--out", str(tmp_path / "b.parquet"))


def test_label_columns_the_store_recorded_are_exported(tmp_path, capsys):
    """``extract --label-column topic`` keeps ``label:topic`` (codes per sample) and its names;
    both formats carry it as the column ``topic``, per row of the sample."""
    import pyarrow.parquet as pq

    rows, d = 12, 2
    X = np.arange(rows * d, dtype=np.float32).reshape(rows, d)
    index = np.stack([np.arange(rows) // 3, np.arange(rows) % 3], 1)  # 4 samples of 3 tokens
    w = create_store(tmp_path / "lab.h5", [LayerSpec("L", rows, d, index=index)], n_samples=4, request={"t": 2},
                     params={"label:topic": np.array([1, 0, 2, 1], dtype=np.int64)},
                     provenance={"label_names": {"topic": ["art", "bio", "cs"]}})
    w.append("L", X)
    w.checkpoint(4, force=True)
    path = w.finalize()
    run_cli(capsys, "export", str(path), "--format", "parquet", "--out", str(tmp_path / "a.parquet"), "--quiet")
    t = pq.read_table(tmp_path / "a.parquet")
    assert t.column_names == ["sample", "position", "activation", "topic"]
    assert t["topic"].to_pylist() == ["bio"] * 3 + ["art"] * 3 + ["cs"] * 3 + ["bio"] * 3
    import datasets
    run_cli(capsys, "export", str(path), "--format", "hf-datasets", "--out", str(tmp_path / "ds"), "--quiet")
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    assert ds[4]["topic"] == "art" and ds[4]["sample"] == 1 and ds[4]["position"] == 1


@pytest.mark.parametrize("fmt,name", [("parquet", "e.parquet"), ("hf-datasets", "e-hf")])
def test_a_corrupt_block_is_not_exported(store, tmp_path, capsys, fmt, name):
    """Issue 20 #1: an export imported back (``actkit import e.parquet``) would carry fresh
    checksums over a flipped byte; the export checks every block as it reads it and refuses
    with ``actkit verify``'s line, leaving nothing."""
    import h5py

    path, _, _ = store
    with h5py.File(path, "r") as f:
        offset = f["layers/L/data"].id.get_offset() + (31 * 3 + 1) * 4 + 2
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))
    verify = cli_error(capsys, "verify", str(path))
    assert "layer L block 0 (rows 0-49) does not match its checksum" in verify
    out = tmp_path / "x" / name
    out.parent.mkdir()
    assert cli_error(capsys, "export", str(path), "--format", fmt, "--layer", "L", "--out", str(out)) == verify
    assert list(out.parent.iterdir()) == []
