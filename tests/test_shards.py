"""The virtual-dataset store over shard stores (no processes: shards written directly)."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from actkit.errors import StoreError
from actkit.store import consolidate, write_virtual_store
from actkit.store import LayerSpec, create_store, open_store


def _shard(path, rows, lo, features=3, seed=0, finish=True, overwrite=False):
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(rows, features)).astype(np.float32)
    index = np.stack([np.arange(lo, lo + rows), np.full(rows, -1)], 1)
    w = create_store(path, [LayerSpec("L", rows, features, index=index, attrs={"pool": "mean"})],
                     n_samples=rows, request={"run": "r", "lo": lo}, params={"p": np.arange(3.0)},
                     overwrite=overwrite)
    w.append("L", data)
    w.checkpoint(rows, force=True)
    if finish:
        w.finalize()
    else:
        w.close()
    return data


def test_virtual_store_reads_the_shards_in_order_and_is_reproducible(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    paths = [folder / f"rank-{r}-of-3.h5" for r in range(3)]
    parts = [_shard(paths[0], 4, 0, seed=1), _shard(paths[1], 0, 4, seed=2), _shard(paths[2], 5, 4, seed=3)]
    out = tmp_path / "run.h5"
    kw = dict(request={"x": 1}, provenance={"model": "m"}, n_samples=9, inputs_fingerprint="abc")
    write_virtual_store(out, paths, **kw)
    first = out.read_bytes()
    with open_store(out) as s:
        layer = s["L"]
        np.testing.assert_array_equal(np.asarray(layer), np.concatenate(parts))
        np.testing.assert_array_equal(layer.index[:, 0], np.arange(9))
        np.testing.assert_array_equal(layer[[7, 1, 5]], np.concatenate(parts)[[7, 1, 5]])
        assert layer.attrs["rows"] == 9 and layer.attrs["pool"] == "mean"
        assert s.provenance["shards"] == [f"run.h5.shards/rank-{r}-of-3.h5" for r in range(3)]
        assert s.inputs_fingerprint == "abc" and s.n_samples == 9
        np.testing.assert_array_equal(s.params["p"], np.arange(3.0))
    write_virtual_store(out, paths, **kw)
    assert out.read_bytes() == first  # a pure function of the shards
    single = consolidate(out, tmp_path / "single.h5")
    with h5py.File(single) as f:
        assert not f["layers/L/data"].is_virtual
        np.testing.assert_array_equal(f["layers/L/data"][:], np.concatenate(parts))


def test_missing_or_unfinished_shards_are_refused(tmp_path):
    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    paths = [folder / f"rank-{r}-of-2.h5" for r in range(2)]
    _shard(paths[0], 3, 0)
    _shard(paths[1], 3, 3, finish=False)
    out = tmp_path / "run.h5"
    with pytest.raises(StoreError, match="not finished"):
        write_virtual_store(out, [paths[0], paths[1].with_name(paths[1].name + ".partial")], request={},
                            provenance={}, n_samples=6)
    assert not out.exists()
    _shard(paths[1], 3, 3, seed=5, overwrite=True)  # a finished shard this time
    write_virtual_store(out, paths, request={}, provenance={}, n_samples=6)
    paths[1].unlink()
    with pytest.raises(StoreError, match="rank-1-of-2.h5 is missing"):
        open_store(out)
    with pytest.raises(StoreError, match="missing"):
        consolidate(out, tmp_path / "c.h5")
    assert not (tmp_path / "c.h5").exists()


def test_sharded_store_is_new_format_and_verify_checks_every_shard(tmp_path):
    from actkit.store import _integrity as integrity

    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    paths = [folder / f"rank-{r}-of-2.h5" for r in range(2)]
    parts = [_shard(paths[0], 4, 0, seed=1), _shard(paths[1], 5, 4, seed=2)]
    out = tmp_path / "run.h5"
    write_virtual_store(out, paths, request={"x": 1}, provenance={}, n_samples=9)
    with h5py.File(out, "r") as f:  # metadata in /meta, no variable-length string attributes
        assert "meta" in f and "shards" not in f.attrs
        assert not any(integrity.is_variable_length_string(f.attrs, k) for k in f.attrs)
    with open_store(out) as s:
        assert s.meta["shards"] == [f"run.h5.shards/rank-{r}-of-2.h5" for r in range(2)]
        got = s.verify()
        assert got["layers"] == 1 and got["params"] == 1 and got["bytes"] == 9 * 3 * 4
    single = consolidate(out, tmp_path / "single.h5")
    with open_store(single, verify=True) as c, open_store(out) as s:  # its own checksums
        assert "shards" not in c.meta and c.fingerprint == s.fingerprint
        np.testing.assert_array_equal(np.asarray(c["L"]), np.concatenate(parts))
    # a flipped byte in a shard's rows is found by verifying the index store
    with h5py.File(paths[1], "r+") as f:
        f["layers/L/data"][2, 1] = f["layers/L/data"][2, 1] + 1
    with pytest.raises(StoreError, match="rank-1-of-2.h5: layer L block 0 .* does not match"):
        open_store(out, verify=True)
    # another finished store put in a shard's place is refused on opening
    _shard(paths[1], 5, 5, seed=7, overwrite=True)  # another request
    with pytest.raises(StoreError, match="another store"):
        open_store(out)
