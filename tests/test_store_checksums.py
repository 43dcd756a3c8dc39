"""Block checksums: xxh3_128 since actkit-store/3 (and in /4, which adds the recorded inputs, and /5, their text),
and actkit-store/2 stores (sha256) still read and verified (tests/data/store_v2.h5.gz was
written by the actkit-store/2 code, see tests/data/make_store_v2.py; tests/data/store_v3.h5.gz
by the actkit-store/3 code: a 2-sample store of 7 rows, rows ``arange(42).reshape(7, 6) / 7``,
``SOURCE_DATE_EPOCH=0``)."""

import gzip
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import xxhash

from actkit.errors import StoreError
from actkit.store import FORMAT, LayerSpec, create_store, open_store

V2_FIXTURE = Path(__file__).parent / "data" / "store_v2.h5.gz"
V3_FIXTURE = Path(__file__).parent / "data" / "store_v3.h5.gz"


def _v2_rows():  # the rows tests/data/make_store_v2.py wrote into layer "a"
    i, j = np.mgrid[:600, :1024]
    return (((i * 7 + j) % 13) / 13).astype(np.float16)


@pytest.fixture
def v2_store(tmp_path):
    path = tmp_path / "v2.h5"
    with gzip.open(V2_FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _write(path, rows, compression=None):
    w = create_store(path, [LayerSpec("a", len(rows), rows.shape[1])], n_samples=len(rows),
                     request={"model": "m"}, compression=compression)
    for s in range(0, len(rows), 700):
        w.append("a", rows[s:s + 700])
        w.checkpoint(min(len(rows), s + 700))
    w.finalize()


def test_new_stores_record_xxh3_128_and_its_block_digests(tmp_path):
    rows = np.random.default_rng(0).standard_normal((3000, 300)).astype(np.float32)
    _write(tmp_path / "s.h5", rows)
    with open_store(tmp_path / "s.h5", verify=True) as st:
        assert FORMAT == "actkit-store/5" == st.file.attrs["actkit_format"].decode()
        assert st.meta["checksum"] == "xxh3_128"
        br = st.meta["layers"]["a"]["block_rows"]
        sums = st.file["layers/a/checksums"][()]
        assert sums.shape == (-(-3000 // br), 16)
        for b in range(len(sums)):  # each digest is XXH3-128 of the block's raw bytes
            assert sums[b].tobytes() == xxhash.xxh3_128_digest(rows[b * br:(b + 1) * br].tobytes())


def test_compressed_store_keeps_dataset_attributes_and_verifies(tmp_path):
    rows = np.random.default_rng(1).standard_normal((3000, 300)).astype(np.float32)
    _write(tmp_path / "z.h5", rows, compression="gzip")
    with open_store(tmp_path / "z.h5", verify=True) as st:
        np.testing.assert_array_equal(st["a"][:], rows)
        assert st.file["meta"].attrs["sha256"] and st.file["layers/a/checksums"].attrs["block_rows"]


def test_v2_store_written_by_the_old_code_reads_and_verifies(v2_store):
    with open_store(v2_store, verify=True) as st:
        assert st.meta["actkit_format"] == "actkit-store/2" and st.meta["checksum"] == "sha256"
        assert st.file["layers/a/checksums"].shape == (2, 32)
        np.testing.assert_array_equal(st["a"][:], _v2_rows())
        assert st.verify() == {"layers": 2, "blocks": 3, "bytes": 600 * 2048 + 40 * 64, "params": 1}


def test_v3_store_written_by_the_old_code_reads_without_recorded_inputs(tmp_path):
    path = tmp_path / "v3.h5"
    with gzip.open(V3_FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with open_store(path, verify=True) as st:
        assert st.attrs["actkit_format"] == "actkit-store/3" and st.inputs is None
        layer = st["resid.0"]
        assert np.array_equal(np.asarray(layer), (np.arange(42, dtype=np.float32).reshape(7, 6) / 7))
        assert np.array_equal(layer.drop_rows(positions=[0]).index, [[0, 1], [0, 2], [1, 1], [1, 2], [1, 3]])
        assert "inputs" not in st.info()


def test_v2_store_corruption_is_found_by_sha256(v2_store):
    with h5py.File(v2_store, "r+") as f:
        f["layers/a/data"][550, 3] += 1  # block 1 (block_rows 512)
    with pytest.raises(StoreError, match=r"layer a block 1 \(rows 512-599\) does not match its checksum"):
        open_store(v2_store, verify=True)


def test_unknown_checksum_algorithm_is_one_line(v2_store):
    with h5py.File(v2_store, "r") as f:
        meta = json.loads(f["meta"][()].tobytes())
    meta["checksum"] = "md5"
    from actkit.store._integrity import checksum_algorithm

    with pytest.raises(StoreError, match="unknown block checksum algorithm 'md5'"):
        checksum_algorithm(meta)


@pytest.mark.parametrize("version", ["v3", "v2"])
def test_the_loader_verifies_blocks_with_the_stores_own_algorithm(tmp_path, v2_store, version):
    import torch
    if version == "v3":
        path, rows = tmp_path / "s.h5", np.random.default_rng(2).standard_normal((1500, 64)).astype(np.float32)
        _write(path, rows)
    else:
        path, rows = v2_store, _v2_rows()
    with open_store(path) as st:
        got = np.concatenate([b.numpy() for b in st["a"].to_torch(256, shuffle=False)])
    np.testing.assert_array_equal(got, rows)
    with h5py.File(path, "r+") as f:
        f["layers/a/data"][len(rows) - 1, 3] += 1  # the last block
    with open_store(path) as st, pytest.raises(StoreError, match=r"layer a block \d+ .* does not match its checksum"):
        list(st["a"].to_torch(256, shuffle=False))
