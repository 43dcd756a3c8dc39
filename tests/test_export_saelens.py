"""``actkit export --format saelens``: the cached-activations dataset SAELens's trainer reads,
checked with datasets and with SAELens's own ``ActivationsStore`` reading it."""

from __future__ import annotations

import numpy as np
import pytest

from actkit.cli import main
from tests.test_sae_eval import make_store


@pytest.fixture
def store(tmp_path):
    X = np.random.default_rng(0).normal(size=(1000, 6)).astype(np.float32)
    return make_store(tmp_path / "s.h5", X, name="blocks.2"), X


def test_export_saelens_layout(tmp_path, store):
    import datasets

    path, X = store
    out = tmp_path / "cache"
    assert main(["export", str(path), "--format", "saelens", "--layer", "blocks.2", "--out", str(out),
                 "--hook-name", "blocks.2.hook_resid_post", "--context-size", "64", "--quiet"]) == 0
    ds = datasets.load_from_disk(str(out))
    assert ds.column_names == ["blocks.2.hook_resid_post"]
    feat = ds.features["blocks.2.hook_resid_post"]
    assert isinstance(feat, datasets.Array2D) and feat.shape == (64, 6) and feat.dtype == "float32"
    assert len(ds) == 1000 // 64  # 15 contexts; the last 1000 % 64 = 40 rows are left out
    ds.set_format("numpy")
    got = ds["blocks.2.hook_resid_post"][:]
    np.testing.assert_array_equal(np.asarray(got).reshape(-1, 6), X[: 15 * 64])
    assert not (tmp_path / "cache.partial").exists()


def test_export_saelens_defaults_and_small_blocks(tmp_path, store):
    import datasets

    from actkit.export import export_store

    path, X = store
    export_store(path, tmp_path / "c", format="saelens", block_rows=100, progress=False)  # 100 -> 1 context
    ds = datasets.load_from_disk(str(tmp_path / "c"))
    assert ds.column_names == ["blocks.2"] and ds.features["blocks.2"].shape == (128, 6) and len(ds) == 7
    ds.set_format("numpy")
    np.testing.assert_array_equal(np.asarray(ds["blocks.2"][:]).reshape(-1, 6), X[: 7 * 128])


def test_saelens_activations_store_reads_it(tmp_path, store):
    import torch
    from sae_lens.training import activations_store as sae_lens_store
    path, X = store
    out = tmp_path / "cache"
    assert main(["export", str(path), "--format", "saelens", "--out", str(out), "--hook-name", "hook",
                 "--context-size", "32", "--quiet"]) == 0
    acts = sae_lens_store.ActivationsStore(
        model=None, dataset=None, streaming=False, hook_name="hook", hook_head_index=None, context_size=32, d_in=6,
        n_batches_in_buffer=2, total_training_tokens=1000, store_batch_size_prompts=4, train_batch_size_tokens=64,
        prepend_bos=False, normalize_activations="none", device=torch.device("cpu"), dtype="float32",
        cached_activations_path=str(out))
    first, tokens = acts._load_raw_llm_batch_from_cached(raise_on_epoch_end=False)
    second, _ = acts._load_raw_llm_batch_from_cached(raise_on_epoch_end=False)
    assert tokens is None
    np.testing.assert_array_equal(first.numpy(), X[:128])
    np.testing.assert_array_equal(second.numpy(), X[128:256])


@pytest.mark.parametrize("args,msg", [(["--context-size", "0"], "--context-size"),
                                      (["--context-size", "5000"], "fewer than one context")])
def test_export_saelens_errors(tmp_path, store, capsys, args, msg):
    path, _ = store
    code = main(["export", str(path), "--format", "saelens", "--out", str(tmp_path / "c"), *args, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and msg in err and err.count("\n") == 1, err
    assert not (tmp_path / "c").exists() and not (tmp_path / "c.partial").exists()
