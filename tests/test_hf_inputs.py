"""Hugging Face ``datasets`` inputs, built locally: save_to_disk folders, parquet/arrow files
(and globs), local ``hf:`` datasets through ``datasets.load_dataset`` (also streamed)."""

from __future__ import annotations

import io

import numpy as np
import pytest

import actkit
from actkit.errors import InputError
from cli_helpers import cli_error
from conftest import SENTENCES, make_images
from actkit.extractors.inputs import read_inputs

import datasets  # noqa: E402  (a core dependency)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def text_ds(tmp_path_factory):
    """The 7 test sentences with a label column, as a saved folder, parquet, arrow and a hub-style folder."""
    root = tmp_path_factory.mktemp("hf")
    ds = datasets.Dataset.from_dict({"text": SENTENCES, "label": list(range(7))})
    ds.save_to_disk(str(root / "saved"))
    ds.to_parquet(str(root / "all.parquet"))
    (root / "parts").mkdir()
    ds.select(range(4)).to_parquet(str(root / "parts" / "a-0.parquet"))
    ds.select(range(4, 7)).to_parquet(str(root / "parts" / "a-1.parquet"))
    hub = root / "hub" / "data"
    hub.mkdir(parents=True)
    ds.to_parquet(str(hub / "train-00000-of-00001.parquet"))
    datasets.DatasetDict({"train": ds, "validation": ds.select(range(2))}).save_to_disk(str(root / "dict"))
    arrow = next((root / "saved").glob("*.arrow"))
    return root, arrow


def test_every_dataset_form_gives_the_same_samples_and_digest_as_a_txt(text_ds, text_file):
    root, arrow = text_ds
    reference = read_inputs(text_file)
    for spec in (root / "saved", root / "all.parquet", arrow, str(root / "parts" / "*.parquet"),
                 f"hf:{root / 'hub'}", root / "dict"):
        data = read_inputs(spec)
        assert data.kind == "text" and list(data.texts) == SENTENCES, spec
        assert data.rows_digest() == reference.digest, spec  # content, not path
        assert data.column == "text"
    assert list(read_inputs(root / "dict", split="validation").texts) == SENTENCES[:2]
    assert list(read_inputs(root / "all.parquet", max_samples=3).texts) == SENTENCES[:3]


def test_hub_dataset_is_streamed_with_max_samples(text_ds, monkeypatch):
    root, _ = text_ds
    calls = []
    real = datasets.load_dataset

    def spy(*args, **kwargs):
        calls.append(kwargs.get("streaming", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", spy)
    data = read_inputs(f"hf:{root / 'hub'}", max_samples=2)
    assert list(data.texts) == SENTENCES[:2] and calls == [True]


def test_column_errors_list_the_columns(text_ds):
    root, _ = text_ds
    with pytest.raises(InputError, match="no column 'body'; its columns are: text, label"):
        read_inputs(root / "saved", column="body")
    with pytest.raises(InputError, match="holds int64 values, not text or images"):
        read_inputs(root / "all.parquet", column="label")
    with pytest.raises(InputError, match="no split 'test'; its splits are: train, validation"):
        read_inputs(root / "dict", split="test")
    with pytest.raises(InputError, match="apply to Hugging Face datasets"):
        read_inputs(root / "x.txt", column="text")


def test_dataset_not_cached_offline_is_one_line(tiny_gpt_neox, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-cache"))
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", "hf:nobody/not-a-cached-dataset",
                     "--layers", "gpt_neox.layers.0", "--out", tmp_path / "x.h5")
    assert "not-a-cached-dataset" in line and "cache" in line
    assert not (tmp_path / "x.h5").exists()


def test_extraction_from_a_dataset_equals_the_txt_extraction(tiny_gpt_neox, text_ds, text_file, tmp_path):
    root, _ = text_ds
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    actkit.extract(str(tiny_gpt_neox), text_file, a, layers="gpt_neox.layers.1", progress=False)
    actkit.extract(str(tiny_gpt_neox), root / "all.parquet", b, layers="gpt_neox.layers.1", column="text",
                   progress=False)
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        np.testing.assert_array_equal(np.asarray(sa["gpt_neox.layers.1"]), np.asarray(sb["gpt_neox.layers.1"]))
        assert sa.inputs_fingerprint == sb.inputs_fingerprint
        assert sb.provenance["inputs_column"] == "text"


def test_wrong_column_kind_for_the_model_writes_nothing(tiny_vit, text_ds, tmp_path, capsys):
    root, _ = text_ds
    line = cli_error(capsys, "extract", tiny_vit, "--inputs", root / "saved", "--layers", "encoder.layer.0",
                     "--out", tmp_path / "x.h5")
    assert "takes image inputs" in line and "texts" in line
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def image_ds(tmp_path_factory):
    """The 7 test images as a dataset with an Image feature ("img") and as PNG bytes in parquet."""
    from PIL import Image

    root = tmp_path_factory.mktemp("hf_images")
    pngs = []
    for arr in make_images():
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="PNG")
        pngs.append(buf.getvalue())
    features = datasets.Features({"img": datasets.Image(), "label": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict({"img": [{"bytes": b, "path": None} for b in pngs], "label": list(range(7))},
                                    features=features)
    ds.save_to_disk(str(root / "saved"))
    ds.to_parquet(str(root / "imgs.parquet"))
    return root


def test_image_column_equals_the_image_array(tiny_vit, image_ds, image_npy, tmp_path):
    data = read_inputs(image_ds / "saved")
    assert data.kind == "image" and data.column == "img" and len(data) == 7
    np.testing.assert_array_equal(np.asarray(data.image(3)), make_images()[3])
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    actkit.extract(str(tiny_vit), image_npy, a, layers="encoder.layer.1", pool="cls", progress=False)
    actkit.extract(str(tiny_vit), image_ds / "imgs.parquet", b, layers="encoder.layer.1", pool="cls",
                   progress=False)
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        np.testing.assert_array_equal(np.asarray(sa["encoder.layer.1"]), np.asarray(sb["encoder.layer.1"]))
    assert read_inputs(image_ds / "saved").digest == read_inputs(image_ds / "imgs.parquet").digest


def test_parquet_is_read_lazily_one_row_group_at_a_time(tiny_gpt_neox, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from actkit.extractors import hf_datasets

    texts = [SENTENCES[i % 7] + f" number {i}" for i in range(5000)]
    pq.write_table(pa.table({"text": texts}), tmp_path / "big.parquet", row_group_size=100)
    read = set()
    real = hf_datasets.ParquetColumn._group

    def spy(self, k):
        read.add(k)
        return real(self, k)

    monkeypatch.setattr(hf_datasets.ParquetColumn, "_group", spy)
    data = read_inputs(tmp_path / "big.parquet")
    assert len(data) == 5000 and data.texts[4321] == texts[4321] and read == {43}
    read.clear()
    out = tmp_path / "w.h5"
    actkit.extract(str(tiny_gpt_neox), tmp_path / "big.parquet", out, layers="gpt_neox.layers.0", context_length=16,
                   max_tokens=320, progress=False)
    assert actkit.open_store(out).n_samples == 20
    assert max(read) <= 1  # the windows came from the first row groups; the other 48 were never read
    pq.write_table(pa.table({"text": ["a", None, "b"]}), tmp_path / "null.parquet")
    with pytest.raises(InputError, match="row 1 of column 'text' .* is empty"):
        read_inputs(tmp_path / "null.parquet")
