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


# ----------------------------------------------------------------------------- issue 20
class _Inline:
    """A Dask runner without a cluster: :func:`write_sharded` runs its shard tasks in turn."""

    client = None

    def __init__(self, n_workers):
        self.n_workers = n_workers

    def workers(self):
        return []


def _dask_store(out, *, seed=0, workers=2, rows=40, overwrite=False):
    """A sharded store written by the Dask writer (``seed`` is part of its request)."""
    import dask.array as da

    from actkit.store._shards import write_sharded

    data = np.random.default_rng(seed).normal(size=(rows, 3)).astype(np.float32)
    write_sharded(_Inline(workers), da.from_array(data, chunks=10), out, layer="L", transform=np.asarray,
                  n_out=3, n_samples=rows, request={"command": "test", "seed": seed}, overwrite=overwrite)
    return data


def _flip_byte(path, dataset, row, col):
    """Flip one byte of a stored value in the file's raw bytes (as a bad disk would)."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        offset = ds.id.get_offset() + (row * ds.shape[1] + col) * ds.dtype.itemsize + ds.dtype.itemsize - 2
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([byte[0] ^ 0x01]))


def test_consolidate_refuses_a_flipped_byte_instead_of_laundering_it(tmp_path, capsys):
    from cli_helpers import cli_error

    out = tmp_path / "run.h5"
    _dask_store(out)
    shard = sorted((tmp_path / "run.h5.shards").glob("rank-1-of-2*.h5"))[0]
    _flip_byte(shard, "layers/L/data", 3, 1)
    verify = cli_error(capsys, "verify", out)
    assert "does not match its checksum" in verify
    line = cli_error(capsys, "consolidate", out, "--out", tmp_path / "cons.h5")
    assert line == verify  # the verify message, word for word
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5", "run.h5.shards"]  # nothing written
    # an ordinary store too: no fresh checksums over a corrupt block
    single = tmp_path / "single.h5"
    consolidate(_good_copy(tmp_path), single)
    _flip_byte(single, "layers/L/data", 0, 0)
    with pytest.raises(StoreError, match="block 0 .* does not match its checksum"):
        consolidate(single, tmp_path / "again.h5")
    assert not (tmp_path / "again.h5").exists() and not (tmp_path / "again.h5.partial").exists()


def _good_copy(tmp_path):
    good = tmp_path / "good" / "run.h5"
    good.parent.mkdir()
    _dask_store(good, seed=3)
    return good


def test_plain_h5py_never_reads_another_runs_shards(tmp_path, monkeypatch):
    """Issue 20 #2: HDF5 looks for a missing source file under the current directory too."""
    mine, other = tmp_path / "mine" / "run.h5", tmp_path / "other" / "run.h5"
    mine.parent.mkdir()
    other.parent.mkdir()
    _dask_store(mine, seed=0)
    theirs = _dask_store(other, seed=1)
    names = lambda p: sorted(x.name for x in (p.parent / "run.h5.shards").iterdir())  # noqa: E731
    assert set(names(mine)).isdisjoint(names(other))  # the request hash is in the name
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for name in ("run.h5", "run.h5.shards"):
        (mine.parent / name).rename(elsewhere / name)
    import shutil

    shutil.rmtree(elsewhere / "run.h5.shards")
    monkeypatch.chdir(other.parent)  # the other run's folder: its run.h5.shards/ is right here
    with h5py.File(elsewhere / "run.h5", "r") as f:
        data, index = f["layers/L/data"][:], f["layers/L/index"][:]
    assert np.isnan(data).all() and not np.isclose(data, theirs).any()  # fill values, not their rows
    assert (index == np.iinfo(np.int64).min).all()
    with pytest.raises(StoreError, match="is missing"):
        open_store(elsewhere / "run.h5")


def test_moving_the_pair_works_and_renaming_it_says_exactly_what_to_do(tmp_path):
    run = tmp_path / "a" / "run.h5"
    run.parent.mkdir()
    data = _dask_store(run)
    moved = tmp_path / "b"
    moved.mkdir()
    for name in ("run.h5", "run.h5.shards"):
        (run.parent / name).rename(moved / name)
    with open_store(moved / "run.h5") as s, h5py.File(moved / "run.h5", "r") as f:
        np.testing.assert_array_equal(np.asarray(s["L"]), data)
        np.testing.assert_array_equal(f["layers/L/data"][:], data)
    (moved / "run.h5").rename(moved / "seed0.h5")
    (moved / "run.h5.shards").rename(moved / "seed0.h5.shards")
    with pytest.raises(StoreError) as err:
        open_store(moved / "seed0.h5")
    text = str(err.value)
    assert f"mv {moved / 'seed0.h5.shards'} {moved / 'run.h5.shards'}" in text and "next to it" not in text
    (moved / "seed0.h5.shards").rename(moved / "run.h5.shards")  # the advice, followed
    with open_store(moved / "seed0.h5", verify=True) as s, h5py.File(moved / "seed0.h5", "r") as f:
        np.testing.assert_array_equal(np.asarray(s["L"]), data)
        np.testing.assert_array_equal(f["layers/L/data"][:], data)


def test_overwrite_removes_the_old_shards(tmp_path):
    out = tmp_path / "run.h5"
    _dask_store(out, workers=2)
    _dask_store(out, workers=3, seed=1, overwrite=True)
    left = sorted(p.name for p in (tmp_path / "run.h5.shards").iterdir())
    assert len(left) == 3 and all("-of-3." in n for n in left)
    # a single-process store over a sharded one: the shards go too
    w = create_store(out, [LayerSpec("L", 2, 3)], n_samples=2, request={"x": 1}, overwrite=True)
    w.append("L", np.ones((2, 3), np.float32))
    w.checkpoint(2, force=True)
    w.finalize()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5"]


def test_dask_rerun_recomputes_a_deleted_shard(tmp_path):
    out = tmp_path / "run.h5"
    data = _dask_store(out)
    sorted((tmp_path / "run.h5.shards").glob("rank-0-*.h5"))[0].unlink()
    with pytest.raises(StoreError, match="is missing"):
        open_store(out)
    _dask_store(out)  # the same request, no --overwrite: repaired
    with open_store(out, verify=True) as s:
        np.testing.assert_array_equal(np.asarray(s["L"]), data)


def test_a_second_sharded_writer_of_the_same_output_is_refused(tmp_path):
    from actkit.store._lock import WriterLock

    out = tmp_path / "run.h5"
    with WriterLock(out):  # as a running writer holds it
        with pytest.raises(StoreError, match="is being written by another command"):
            _dask_store(out)
        assert not (tmp_path / "run.h5.shards").exists() and not out.exists()
    _dask_store(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.h5", "run.h5.shards"]  # no lock file left


def test_info_of_a_sharded_run_still_writing_says_how_far(tmp_path, capsys):
    from cli_helpers import cli_error

    from actkit.store._shard_state import shard_name

    out = tmp_path / "run.h5"
    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    run = {"n_samples": 9, "world_size": 2}
    w = create_store(folder / shard_name(0, 2, "ab" * 32), [LayerSpec("L", 4, 3)], n_samples=4,
                     request={"run": run, "rank": 0, "world_size": 2, "samples": [0, 4]})
    w.append("L", np.ones((3, 3), np.float32))
    w.checkpoint(3, force=True)
    w.close()
    line = cli_error(capsys, "info", out)
    assert "is being written by a sharded run of 2 ranks (3/9 samples written so far)" in line


def test_plain_h5py_can_open_a_store_actkit_has_open(tmp_path):
    out = tmp_path / "run.h5"
    data = _dask_store(out)
    single = consolidate(out, tmp_path / "single.h5")
    for path in (out, single):
        with open_store(path) as s, h5py.File(path, "r") as f:
            np.testing.assert_array_equal(f["layers/L/data"][:], np.asarray(s["L"]))
            np.testing.assert_array_equal(f["layers/L/data"][:], data)


@pytest.mark.slow
def test_two_ica_commands_on_local_clusters_one_refused_in_one_line(tmp_path):
    """Issue 20 #7: ``actkit ica big.h5 --out same.h5 --scheduler local:2`` twice, the second
    0.5 s after the first is writing: the second is refused in one line, the first finishes,
    nothing is left behind. (The first's workers wait at their first block until the second
    has answered: ``ACTKIT_FAULT=wait:shard-rows``.)"""
    import os
    import subprocess
    import sys
    import time

    from cli_helpers import wait_at_gate

    big = tmp_path / "data" / "big.h5"
    big.parent.mkdir()
    rng = np.random.default_rng(0)
    rows = rng.laplace(size=(3000, 6)) @ rng.normal(size=(6, 6))
    w = create_store(big, [LayerSpec("L", 3000, 6)], n_samples=3000, request={"big": 1})
    w.append("L", rows.astype(np.float32))
    w.checkpoint(3000, force=True)
    w.finalize()
    out = big.parent / "same.h5"
    gate = tmp_path / "gate"
    argv = [sys.executable, "-m", "actkit", "ica", str(big), "--layer", "L", "--out", str(out), "--scheduler",
            "local:2", "--overwrite", "--quiet"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    first = subprocess.Popen(argv, env=dict(env, ACTKIT_FAULT="wait:shard-rows", ACTKIT_FAULT_RELEASE=str(gate)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_at_gate(first, gate)
        time.sleep(0.5)
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    finally:
        gate.touch()
        _, err = first.communicate(timeout=300)
    assert second.returncode == 2  # a user error, as every one-line refusal
    assert second.stderr.strip().splitlines() == [
        f"actkit: error: {out} is being written by another command right now (it holds {out}.lock); wait for it "
        "to finish, or stop it and rerun"]
    assert first.returncode == 0, err[-3000:]
    assert sorted(p.name for p in big.parent.iterdir()) == ["big.h5", "same.h5", "same.h5.shards"]
    with open_store(out, verify=True) as s:
        assert s["L"].shape == (3000, 6)


def test_a_derived_store_refuses_a_corrupt_source_block(tmp_path):
    """``transform_store`` (whiten / ica / dictionary outputs) checks the source rows' checksums
    as it reads them: no fresh checksums over a flipped byte."""
    import actkit
    from actkit._derived import transform_store

    src = tmp_path / "src.h5"
    data = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    w = create_store(src, [LayerSpec("L", 300, 4)], n_samples=300, request={"s": 1})
    w.append("L", data)
    w.checkpoint(300, force=True)
    w.finalize()
    with open_store(src) as s:
        white = actkit.Whitener().fit(s["L"])
        ok = transform_store(white, s["L"], tmp_path / "ok.h5", block_rows=7)
    with open_store(ok) as o:  # the blocks of iter_blocks: rows equal to one transform of all
        np.testing.assert_allclose(np.asarray(o["L"]), white.transform(data), rtol=1e-5, atol=1e-5)
    _flip_byte(src, "layers/L/data", 200, 2)
    for scheduler in (None, "sync"):  # in this process, and the shard writer of Dask
        with open_store(src) as s, pytest.raises(StoreError,
                                                 match=r"block 0 \(rows 0-299\) does not match its checksum"):
            transform_store(white, s["L"], tmp_path / "w.h5", scheduler=scheduler, block_rows=70)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.h5", "src.h5"], scheduler


@pytest.mark.parametrize("block_rows", [None, 2, 3, 100])
def test_verified_blocks_of_a_sharded_store_cover_every_shard(tmp_path, block_rows):
    """for_each_verified (what whiten/ica --out stream through) hands over every row of every
    shard, in order, in blocks of ``block_rows`` (the last shorter), also when the short tail
    gathers rows of several shards."""
    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    paths = [folder / f"rank-{r}-of-3.h5" for r in range(3)]
    parts = [_shard(paths[0], 4, 0, seed=1), _shard(paths[1], 2, 4, seed=2), _shard(paths[2], 5, 6, seed=3)]
    out = tmp_path / "run.h5"
    write_virtual_store(out, paths, request={}, provenance={}, n_samples=11)
    got = []
    with open_store(out) as s:
        s["L"].for_each_verified(lambda b: got.append(np.array(b)), block_rows)
    np.testing.assert_array_equal(np.concatenate(got), np.concatenate(parts))
    want = [block_rows or 11] * (11 // (block_rows or 11))
    want += [11 % (block_rows or 11)] if 11 % (block_rows or 11) else []
    assert [len(b) for b in got] == want



@pytest.mark.slow
def test_a_derived_store_on_a_local_cluster_refuses_a_corrupt_source_in_one_line(tmp_path, capsys):
    """``actkit whiten corrupt.h5 --scheduler local:2``: the workers check the source blocks as
    they read them (they wrote fresh checksums over the flipped byte), and the line is
    ``actkit verify``'s, with no worker log on stderr."""
    import os
    import subprocess
    import sys

    from cli_helpers import cli_error

    src = tmp_path / "src.h5"
    w = create_store(src, [LayerSpec("L", 3000, 4)], n_samples=3000, request={"s": 1})
    w.append("L", np.random.default_rng(0).normal(size=(3000, 4)).astype(np.float32))
    w.checkpoint(3000, force=True)
    w.finalize()
    _flip_byte(src, "layers/L/data", 2000, 2)
    proc = subprocess.run([sys.executable, "-m", "actkit", "whiten", str(src), "--layer", "L", "--out",
                           str(tmp_path / "w.h5"), "--scheduler", "local:2", "--quiet"], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"), check=False)
    assert proc.returncode == 2
    verify = cli_error(capsys, "verify", src)
    assert "layer L block 0 (rows 0-2999) does not match its checksum" in verify
    assert proc.stderr.strip().splitlines() == [verify]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.h5"]
