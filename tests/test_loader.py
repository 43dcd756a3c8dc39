"""The torch loader over stores: exactly once, reproducible, resumable, split over workers and
ranks, checksummed (``actkit/loader/``)."""

from __future__ import annotations

import numpy as np
import pytest

import torch

from actkit.errors import StoreError, ValidationError  # noqa: E402
from actkit.loader import ActivationDataset  # noqa: E402
from actkit.store import LayerSpec, create_store, open_store, write_virtual_store  # noqa: E402


def _write(path, data, name="L", lo=0, extra=None):
    rows = len(data)
    index = np.stack([np.arange(lo, lo + rows), np.full(rows, -1)], 1)
    specs = [LayerSpec(name, rows, data.shape[1], index=index)]
    if extra is not None:
        specs.append(LayerSpec("M", rows, extra.shape[1], index=index))
    w = create_store(path, specs, n_samples=rows, request={"lo": lo})
    w.append(name, data)
    if extra is not None:
        w.append("M", extra)
    w.checkpoint(rows, force=True)
    w.finalize()
    return path


def _rows(n, d=4):
    """Row i holds i in its first column (so a batch says which rows it carries)."""
    X = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    X[:, 0] = np.arange(n)
    return X


@pytest.fixture
def store(tmp_path):
    X = _rows(1000)
    with open_store(_write(tmp_path / "s.h5", X, extra=-X[:, :2] * 2)) as s:
        yield s, X


def _ids(batches):
    return np.concatenate([b[:, 0].numpy() for b in batches]).astype(np.int64)


def test_an_epoch_yields_every_row_once_in_a_seeded_order(store):
    s, X = store
    ds = s["L"].to_torch(64, seed=3, buffer_rows=200, block_rows=50)
    first = list(ds)
    assert [tuple(b.shape) for b in first[:-1]] == [(64, 4)] * 15 and first[-1].shape == (1000 - 15 * 64, 4)
    ids = _ids(first)
    assert sorted(ids) == list(range(1000))
    np.testing.assert_array_equal(torch.cat(first).numpy(), X[ids])  # rows are intact
    assert ds.epoch == 1
    second = _ids(list(ds))  # the next epoch: another order
    assert sorted(second) == list(range(1000)) and not np.array_equal(ids, second)
    again = s["L"].to_torch(64, seed=3, buffer_rows=200, block_rows=50)
    np.testing.assert_array_equal(_ids(list(again)), ids)  # reproducible from seed and epoch
    again.set_epoch(1)
    np.testing.assert_array_equal(_ids(list(again)), second)
    other = _ids(list(s["L"].to_torch(64, seed=4, buffer_rows=200, block_rows=50)))
    assert not np.array_equal(ids, other)
    # well mixed: rows far apart in the store meet in one batch (a window holds 4 blocks)
    assert np.ptp(ids[:64]) > 400
    plain = _ids(list(s["L"].to_torch(64, shuffle=False)))
    np.testing.assert_array_equal(plain, np.arange(1000))


def test_drop_last_and_len(store):
    s, _ = store
    ds = s["L"].to_torch(64, seed=1, drop_last=True, buffer_rows=128, block_rows=30)
    batches = list(ds)
    assert len(batches) == 15 and len(ds) == 15  # 1000 // 64
    assert all(b.shape == (64, 4) for b in batches)
    ids = _ids(batches)
    assert len(set(ids)) == len(ids)  # still never twice


def test_several_layers_stay_aligned_with_the_row_index(store):
    s, X = store
    ds = ActivationDataset([s["L"], s["M"]], 100, seed=0, return_index=True, buffer_rows=300)
    seen = []
    for a, m, idx in ds:
        np.testing.assert_array_equal(a[:, 0].numpy().astype(np.int64), idx.numpy())
        np.testing.assert_array_equal(m.numpy(), -2 * X[idx.numpy(), :2])
        seen.append(idx.numpy())
    assert sorted(np.concatenate(seen)) == list(range(1000))


def test_resume_mid_epoch_continues_with_exactly_the_missing_batches(store):
    s, _ = store
    kw = dict(seed=7, buffer_rows=128, block_rows=40)
    full = _ids(list(s["L"].to_torch(32, **kw)))
    ds = s["L"].to_torch(32, **kw)
    it = iter(ds)
    head = [next(it) for _ in range(11)]
    state = ds.state_dict()
    assert state["batches"] == 11 and state["epoch"] == 0
    fresh = s["L"].to_torch(32, **kw)
    fresh.load_state_dict(state)
    tail = list(fresh)
    np.testing.assert_array_equal(np.concatenate([_ids(head), _ids(tail)]), full)
    with pytest.raises(ValidationError, match="seed=7"):
        s["L"].to_torch(32, seed=8, buffer_rows=128, block_rows=40).load_state_dict(state)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [2, 3])
def test_workers_each_read_their_own_windows_and_resume(store, workers):
    s, _ = store
    kw = dict(seed=2, buffer_rows=96, block_rows=32)
    ref = s["L"].to_torch(32, num_workers=workers, **kw)  # a DataLoader
    ids = _ids(list(ref))
    assert sorted(ids) == list(range(1000))
    inproc = s["L"].to_torch(32, **kw)  # the same round-robin made in this process
    inproc.num_workers = workers
    np.testing.assert_array_equal(_ids(list(inproc)), ids)
    # resume a worker loader after 9 batches, with fresh workers
    loader = s["L"].to_torch(32, num_workers=workers, **kw)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == 9:
            break
    state = loader.dataset.state_dict()
    assert state["batches"] == 9
    again = s["L"].to_torch(32, num_workers=workers, **kw)
    again.load_state_dict(state)
    np.testing.assert_array_equal(np.concatenate([_ids(head), _ids(list(again))]), ids)
    assert again.dataset.epoch == 1


def test_ranks_partition_the_rows(store):
    s, _ = store
    per_rank = [_ids(list(s["L"].to_torch(50, seed=5, rank=r, world_size=3, block_rows=25)))
                for r in range(3)]
    allids = np.concatenate(per_rank)
    assert sorted(allids) == list(range(1000))
    counts = [len(ActivationDataset(s["L"], 50, seed=5, rank=r, world_size=3, drop_last=True, block_rows=25))
              for r in range(3)]
    assert len(set(counts)) == 1  # drop_last: every rank the same number of batches


_RANK_SCRIPT = """
import sys, numpy as np, torch.distributed as dist
from actkit.store import open_store
dist.init_process_group("gloo")
with open_store(sys.argv[1]) as s:
    ds = s["L"].to_torch(50, seed=5, block_rows=25, drop_last=sys.argv[3] == "1")
    ids = np.concatenate([b[:, 0].numpy() for b in ds]).astype(np.int64)
np.save(f"{sys.argv[2]}-{dist.get_rank()}.npy", ids)
dist.destroy_process_group()
"""


def test_torchrun_ranks_take_their_rows_from_torch_distributed(store, tmp_path):
    drop_last = False
    import os
    import subprocess
    import sys
    from pathlib import Path

    s, _ = store
    script = tmp_path / "rank.py"
    script.write_text(_RANK_SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script),
           str(s.path), str(tmp_path / "ids"), str(int(drop_last))]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = [np.load(tmp_path / f"ids-{r}.npy") for r in range(2)]
    for r in range(2):  # what rank r of world 2 reads, computed here
        ref = _ids(list(ActivationDataset(s["L"], 50, seed=5, block_rows=25, rank=r, world_size=2,
                                          drop_last=drop_last)))
        np.testing.assert_array_equal(got[r], ref)
    both = np.concatenate(got)
    assert len(set(both)) == len(both)
    assert sorted(both) == list(range(1000))


def test_a_sharded_store_reads_through_its_shards(tmp_path):
    X = _rows(700)
    folder = tmp_path / "run.h5.shards"
    folder.mkdir()
    paths = [_write(folder / f"rank-{r}-of-2.h5", X[a:b], lo=a) for r, (a, b) in enumerate([(0, 300), (300, 700)])]
    out = tmp_path / "run.h5"
    write_virtual_store(out, paths, request={}, provenance={}, n_samples=700)
    with open_store(out) as s:
        ds = s["L"].to_torch(64, seed=0, buffer_rows=128, block_rows=64)
        got = torch.cat(list(ds)).numpy()
    assert sorted(got[:, 0].astype(int)) == list(range(700))
    np.testing.assert_array_equal(got, X[got[:, 0].astype(int)])
    # a flipped byte in a shard: an error naming the shard and block, never a batch
    with open_store(paths[1]) as sh:
        offset = sh["L"].dataset.id.get_offset()
    with open(paths[1], "r+b") as f:
        f.seek(offset + 4 * 4 * 150 + 5)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with open_store(out) as s:
        with pytest.raises(StoreError, match=r"rank-1-of-2.h5: layer L block \d+ .* does not match its checksum"):
            list(s["L"].to_torch(64, seed=0, buffer_rows=128, block_rows=64))
        unchecked = torch.cat(list(s["L"].to_torch(64, seed=0, verify=False)))
        assert len(unchecked) == 700


def test_a_corrupt_block_is_an_error_in_a_worker_too(tmp_path):
    X = _rows(600)
    path = _write(tmp_path / "c.h5", X)
    with open_store(path) as s:
        offset = s["L"].dataset.id.get_offset()
    with open(path, "r+b") as f:
        f.seek(offset + 16 * 500)
        f.write(b"\x00\x01\x02\x03")
    with open_store(path) as s:
        with pytest.raises(StoreError) as err:
            list(s["L"].to_torch(50, num_workers=2, buffer_rows=100, block_rows=100))
        msg = str(err.value)
        assert "\n" not in msg and "does not match its checksum" in msg and "c.h5" in msg


def test_embedding_files(tmp_path):
    from actkit.matrix_files import open_matrix

    X = _rows(300)
    np.save(tmp_path / "e.npy", X)
    lay = open_matrix(tmp_path / "e.npy")["embeddings"]
    got = torch.cat(list(lay.to_torch(40, seed=1, num_workers=2))).numpy()
    np.testing.assert_array_equal(np.sort(got[:, 0]), np.arange(300))
    np.testing.assert_array_equal(got, X[got[:, 0].astype(int)])


def test_bad_arguments_are_one_line_errors(store, tmp_path):
    s, _ = store
    with pytest.raises(ValidationError, match="batch_size"):
        s["L"].to_torch(0)
    with pytest.raises(ValidationError, match="rank 3"):
        s["L"].to_torch(8, rank=3, world_size=2)
    other = _write(tmp_path / "o.h5", _rows(10))
    with open_store(other) as o, pytest.raises(ValidationError, match="rows must align"):
        ActivationDataset([s["L"], o["L"]], 4)


def test_sparse_dictionary_trains_through_the_loader(tmp_path):
    from actkit.dictionary import SparseDictionary

    X = np.random.default_rng(1).normal(size=(3000, 6)).astype(np.float32)
    path = _write(tmp_path / "d.h5", X)
    kw = dict(n_components=5, k=2, batch_size=256, n_epochs=2, warmup_rows=500, random_state=0, max_iter=3)
    with open_store(path) as s:
        via_loader = SparseDictionary(**kw).fit(s["L"])
        plain = SparseDictionary(**kw).fit(s["L"].dataset)  # an h5py.Dataset: plain row blocks
    np.testing.assert_array_equal(via_loader.dictionary_, plain.dictionary_)
    assert via_loader.reconstruction_error_ == plain.reconstruction_error_
    with open_store(path) as s:
        offset = s["L"].dataset.id.get_offset()
    with open(path, "r+b") as f:  # a flipped byte late in the file (not among the warm-up rows' blocks read alone)
        f.seek(offset + 24 * 2900)
        f.write(b"\xff\xff\xff\xff")
    with open_store(path) as s, pytest.raises(StoreError, match="does not match its checksum"):
        SparseDictionary(**kw).fit(s["L"])


def test_dtype_conversion_of_a_float16_store(tmp_path):
    X = _rows(200).astype(np.float16)
    path = tmp_path / "h.h5"
    w = create_store(path, [LayerSpec("L", 200, 4, dtype="float16")], n_samples=200, request={})
    w.append("L", X)
    w.checkpoint(200, force=True)
    w.finalize()
    with open_store(path) as s:
        raw = list(s["L"].to_torch(64, seed=0))
        wide = list(s["L"].to_torch(64, seed=0, dtype=np.float32))
    assert raw[0].dtype == torch.float16 and wide[0].dtype == torch.float32
    np.testing.assert_array_equal(torch.cat(wide).numpy(), torch.cat(raw).numpy().astype(np.float32))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_worker_loader_reuses_its_buffers_across_epochs_without_overwriting_batches(store):
    """Workers hand batches over through reused shared slots (``actkit/loader/_ring.py``):
    every batch kept by the caller stays intact over three epochs of one loader, an
    abandoned epoch does not disturb the next, and the order is the in-process one."""
    s, X = store
    M = -X[:, :2] * 2
    kw = {"seed": 5, "buffer_rows": 96, "block_rows": 32, "return_index": True, "dtype": np.float64}
    from actkit.loader import ActivationDataset, DataLoader

    loader = DataLoader(ActivationDataset([s["L"], s["M"]], 32, **kw), num_workers=2)
    ref = ActivationDataset([s["L"], s["M"]], 32, **kw)
    ref.num_workers = 2
    kept = []
    for epoch in range(3):
        if epoch == 1:  # abandon an epoch after 3 batches, then start it again from the top
            it = iter(loader)
            [next(it) for _ in range(3)]
            loader.dataset.set_epoch(1)
        batches = list(loader)
        want = list(ref)
        assert len(batches) == len(want) == len(loader.dataset)
        for (xl, xm, idx), (wl, wm, widx) in zip(batches, want):
            assert xl.dtype == torch.float64 and idx.dtype == torch.int64
            np.testing.assert_array_equal(idx.numpy(), widx.numpy())
            np.testing.assert_array_equal(xl.numpy(), wl.numpy())
            np.testing.assert_array_equal(xm.numpy(), wm.numpy())
        assert sorted(np.concatenate([b[2].numpy() for b in batches])) == list(range(1000))
        kept += batches
    for xl, xm, idx in kept:  # nothing handed out was overwritten by a later batch
        np.testing.assert_array_equal(xl.numpy(), X[idx.numpy()].astype(np.float64))
        np.testing.assert_array_equal(xm.numpy(), M[idx.numpy()].astype(np.float64))


def test_a_compressed_store_is_read_through_h5py(tmp_path):
    X = _rows(500)
    path = tmp_path / "z.h5"
    index = np.stack([np.arange(500), np.full(500, -1)], 1)
    w = create_store(path, [LayerSpec("L", 500, 4, index=index)], n_samples=500, request={}, compression="gzip")
    w.append("L", X)
    w.checkpoint(500, force=True)
    w.finalize()
    with open_store(path) as s:
        assert s["L"].dataset.compression == "gzip"
        got = torch.cat(list(s["L"].to_torch(64, seed=3, buffer_rows=128, block_rows=50))).numpy()
    assert sorted(got[:, 0].astype(int)) == list(range(500))
    np.testing.assert_array_equal(got, X[got[:, 0].astype(int)])
