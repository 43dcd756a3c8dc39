"""Issue 42, extraction: text batched by length within windows, cut by a token budget.

The spec, as tests: the plan covers every sample once, sorts each window longest first and
keeps every batch within ``batch_size`` and ``max_batch_tokens``; the store a sorted run
writes has today's layout (shapes, index, row order) and today's values to float32 rounding;
a run killed mid-way resumes to the bytes of an uninterrupted run; ``--no-sort`` runs the
old batches; a budget no input fits is one line before the model loads.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import actkit
from actkit.extractors import _batching
from actkit.extractors._batching import WindowRows, plan_windows
from actkit.store import partial_path, progress_path
from cli_helpers import cli_error

pytestmark = pytest.mark.usefixtures("torch_one_thread")

REPO = Path(__file__).resolve().parents[1]
EPOCH = "1700000000"
LAYERS = ["gpt_neox.layers.0", "gpt_neox.layers.2"]
WORDS = "the quick brown fox jumps over a lazy dog while features hold in the residual stream".split()


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """300 texts of 1 to 16 words in a shuffled order (lengths vary a lot, as in real text)."""
    rng = np.random.default_rng(0)
    lines = [" ".join(rng.choice(WORDS, size=int(k))) for k in rng.integers(1, 17, size=300)]
    path = tmp_path_factory.mktemp("varied") / "varied.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- the plan
def _lengths(n=1000, seed=1):
    return np.random.default_rng(seed).integers(1, 200, size=n)


@pytest.mark.parametrize("budget", [None, 400, 1000])
@pytest.mark.parametrize("batch_size", [2, 7, 32])
def test_plan_covers_every_sample_once_sorted_within_windows_and_within_the_budget(batch_size, budget):
    lengths = _lengths()
    windows = list(plan_windows(lengths, 0, len(lengths), batch_size=batch_size, max_batch_tokens=budget))
    assert windows[0].start == 0 and windows[-1].stop == len(lengths)
    for before, after in zip(windows, windows[1:]):
        assert before.stop == after.start
    for w in windows:
        assert w.stop - w.start <= _batching.WINDOW_BATCHES * batch_size
        run = np.concatenate(w.batches)
        np.testing.assert_array_equal(np.sort(run), np.arange(w.start, w.stop))
        assert np.all(np.diff(lengths[run]) <= 0)  # longest first
        for ids in w.batches:
            assert 1 <= len(ids) <= batch_size
            if budget is not None:
                assert len(ids) * lengths[ids].max() <= budget
        # ties keep input order
        for a, b in zip(run, run[1:]):
            assert lengths[a] > lengths[b] or a < b


def test_a_resumed_plan_meets_the_same_windows():
    lengths = _lengths()
    full = list(plan_windows(lengths, 0, 1000, batch_size=4, max_batch_tokens=300))
    cut = full[3].start
    resumed = list(plan_windows(lengths, cut, 1000, first=0, batch_size=4, max_batch_tokens=300))
    assert len(resumed) == len(full) - 3
    for a, b in zip(full[3:], resumed):
        assert (a.start, a.stop) == (b.start, b.stop)
        assert all(np.array_equal(x, y) for x, y in zip(a.batches, b.batches))


def test_a_rank_block_counts_its_windows_from_its_first_sample():
    lengths = _lengths(5000)
    block = list(plan_windows(lengths, 2000, 5000, first=2000, batch_size=4))
    assert block[0].start == 2000 and block[0].stop == 2000 + _batching.WINDOW_BATCHES * 4


@pytest.mark.parametrize("n,batch_size,window", [(20, 2, 6), (50, 2, 14), (7, 3, 3), (300, 2, 76), (10_000, 32, 2048)])
def test_a_short_run_has_at_least_four_windows_of_whole_batches(n, batch_size, window):
    """At most a quarter of the run per window (so a short run checkpoints along the way), at
    most 64 batches (300 x 2: a quarter is 38 batches; 10,000 x 32: 64 batches, not 79)."""
    windows = list(plan_windows(_lengths(n), 0, n, batch_size=batch_size))
    assert {w.stop - w.start for w in windows[:-1]} == {window}
    assert len(windows) >= min(4, -(-n // batch_size))


def test_window_bytes_bound_the_memory_of_a_window():
    lengths = _lengths()
    row_bytes = lengths * 4096 * 10  # per-token rows of 10 layers of 1024 float32 features
    for w in plan_windows(lengths, 0, 1000, batch_size=8, row_bytes=row_bytes):
        held = row_bytes[w.start:w.stop].sum()
        assert held <= _batching.WINDOW_BYTES or w.stop - w.start <= 8


@pytest.mark.parametrize("budget", [None, 250])
def test_no_sort_runs_consecutive_samples_in_input_order(budget):
    lengths = _lengths()
    windows = list(plan_windows(lengths, 0, 1000, batch_size=8, max_batch_tokens=budget, sort_by_length=False))
    assert all(w.in_order and len(w.batches) == 1 for w in windows)
    run = np.concatenate([w.batches[0] for w in windows])
    np.testing.assert_array_equal(run, np.arange(1000))
    for w in windows:
        ids = w.batches[0]
        assert len(ids) <= 8
        if budget is None:
            assert len(ids) == 8 or w.stop == 1000
        else:  # greedy: one more sample would break the budget (or the batch is full)
            assert len(ids) * lengths[ids].max() <= budget
            if len(ids) < 8 and w.stop < 1000:
                assert (len(ids) + 1) * max(lengths[ids].max(), lengths[w.stop]) > budget


def test_images_and_equal_lengths_and_batch_size_one_keep_input_order():
    for lengths, bs in [(None, 5), (np.full(40, 16), 5), (_lengths(40), 1)]:
        windows = list(plan_windows(lengths, 0, 40, batch_size=bs))
        assert all(w.in_order for w in windows)
        np.testing.assert_array_equal(np.concatenate([w.batches[0] for w in windows]), np.arange(40))


def test_window_rows_come_back_in_input_order():
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 9, size=50)
    counts = {"tok": lengths.astype(np.int64), "pooled": np.ones(50, np.int64)}

    def block(name, ids):  # reference: row r of sample s is the pair (s, r)
        return np.concatenate([np.stack([np.full(counts[name][s], s), np.arange(counts[name][s])], 1)
                               for s in ids]).astype(np.float32)

    windows = list(plan_windows(lengths, 0, 50, batch_size=4))
    assert not any(w.in_order for w in windows)
    for w in windows:
        rows = WindowRows(w, counts)
        for ids in w.batches:
            rows.add("tok", block("tok", ids))
            rows.add("pooled", block("pooled", ids))
        for name in counts:
            np.testing.assert_array_equal(rows.in_input_order(name), block(name, np.arange(w.start, w.stop)))


# ----------------------------------------------------------------------------- extraction
def _extract(model, texts, out, **kw):
    kw.setdefault("batch_size", 8)
    return actkit.extract(str(model), texts, out, layers=LAYERS, progress=False, **kw)


def _spy_widths(monkeypatch):
    """Record (samples, padded width) of every forward pass after the probe."""
    import actkit.extractors.registry as registry

    shapes, real = [], registry.load_model

    def spy(*args, **kwargs):
        adapter = real(*args, **kwargs)
        embed = adapter.model.gpt_neox.embed_in
        embed.register_forward_hook(lambda m, a, o: shapes.append(tuple(a[0].shape)))
        return adapter

    monkeypatch.setattr(registry, "load_model", spy)
    return shapes


@pytest.mark.parametrize("pool", ["none", "mean"])
def test_sorted_store_has_todays_layout_and_values(tiny_gpt_neox, varied, tmp_path, monkeypatch, pool):
    shapes = _spy_widths(monkeypatch)
    unsorted = _extract(tiny_gpt_neox, varied, tmp_path / "in-order.h5", pool=pool, sort_by_length=False)
    in_order_shapes, shapes[:] = shapes[1:], []
    fast = _extract(tiny_gpt_neox, varied, tmp_path / "sorted.h5", pool=pool, max_batch_tokens=200)
    sorted_shapes = shapes[1:]
    # less padding, every batch within the cap and the budget
    assert sum(b * t for b, t in sorted_shapes) < 0.75 * sum(b * t for b, t in in_order_shapes)
    assert all(b <= 8 and b * t <= 200 for b, t in sorted_shapes)
    assert all(b == 8 for b, _ in in_order_shapes[:-1])
    with actkit.open_store(unsorted) as a, actkit.open_store(fast) as b:
        assert a.layers == b.layers == LAYERS
        for name in LAYERS:
            assert a[name].shape == b[name].shape
            np.testing.assert_array_equal(a[name].index, b[name].index)
            x, y = np.asarray(a[name]), np.asarray(b[name])
            np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5 * np.abs(x).max())
        assert b.request["request"]["batching"] == {"sort_by_length": True, "max_batch_tokens": 200}
        assert a.request["request"]["batching"] == {"sort_by_length": False, "max_batch_tokens": None}


def test_sorted_rows_equal_unpadded_forward_passes(tiny_gpt_neox, varied, tmp_path):
    """Each sample alone (batch_size=1: no padding at all) is the reference of a sorted run."""
    one = _extract(tiny_gpt_neox, varied, tmp_path / "one.h5", batch_size=1, max_samples=60)
    fast = _extract(tiny_gpt_neox, varied, tmp_path / "fast.h5", batch_size=16, max_samples=60)
    with actkit.open_store(one) as a, actkit.open_store(fast) as b:
        for name in LAYERS:
            np.testing.assert_array_equal(a[name].index, b[name].index)
            x = np.asarray(a[name])
            np.testing.assert_allclose(np.asarray(b[name]), x, rtol=1e-5, atol=1e-5 * np.abs(x).max())


def test_cli_flags_and_a_different_batching_is_a_different_request(tiny_gpt_neox, varied, tmp_path, capsys):
    from cli_helpers import run_cli

    out = tmp_path / "cli.h5"
    argv = ["extract", tiny_gpt_neox, "--inputs", varied, "--layers", LAYERS[0], "--out", out, "--no-progress",
            "--max-samples", "40"]
    code, _, err = run_cli(capsys, *argv, "--max-batch-tokens", "300", "--no-sort")
    assert code == 0, err
    with actkit.open_store(out) as s:
        assert s.provenance["batching"] == {"sort_by_length": False, "max_batch_tokens": 300}
    line = cli_error(capsys, *argv)  # sorted now: another request
    assert "--overwrite" in line


def test_killed_sorted_run_resumes_to_the_same_bytes(tiny_gpt_neox, varied, tmp_path):
    """Windows of 38 x 2 samples (a quarter of 300 samples in batches of 2): killed mid-window
    after the first cursor, and right after the second cursor; each resumes (in this process)
    to the bytes of an uninterrupted run."""
    argv = ["extract", str(tiny_gpt_neox), "--inputs", str(varied), "--layers", ",".join(LAYERS),
            "--final-hidden", "--batch-size", "2", "--max-batch-tokens", "128", "--checkpoint-every", "0",
            "--no-progress"]
    env = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    from actkit.cli import main

    saved = {k: os.environ.get(k) for k in ("SOURCE_DATE_EPOCH", "OMP_NUM_THREADS")}
    os.environ.update(SOURCE_DATE_EPOCH=EPOCH, OMP_NUM_THREADS="1")
    try:
        assert main(argv + ["--out", str(tmp_path / "ref.h5")]) == 0
        for fault, done in [("kill:rows:4", 76), ("kill:cursor:2", 152)]:
            out = tmp_path / fault.replace(":", "-") / "out.h5"
            out.parent.mkdir()
            proc = subprocess.run([sys.executable, "-m", "actkit", *argv, "--out", str(out)], cwd=REPO,
                                  env=dict(env, ACTKIT_FAULT=fault), capture_output=True, text=True, timeout=300)
            assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
            assert not out.exists() and partial_path(out).exists()
            import json

            assert json.loads(progress_path(out).read_text())["samples_done"] == done  # a window boundary
            assert main(argv + ["--out", str(out)]) == 0
            assert out.read_bytes() == (tmp_path / "ref.h5").read_bytes()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ----------------------------------------------------------------------------- bad input
def test_a_budget_below_the_longest_input_is_one_line_before_the_model_loads(tiny_gpt_neox, varied, tmp_path,
                                                                             capsys, monkeypatch):
    import actkit.extractors.registry as registry

    def no_model(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(registry, "load_model", no_model)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt_neox)
    texts = varied.read_text().splitlines()
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    longest = int(np.argmax(lengths))
    out = tmp_path / "never.h5"
    argv = ["extract", tiny_gpt_neox, "--inputs", varied, "--layers", LAYERS[0], "--out", out]
    line = cli_error(capsys, *argv, "--max-batch-tokens", lengths[longest] - 1)
    assert f"sample {longest} of" in line and f"is {lengths[longest]} tokens" in line
    assert repr(texts[longest][:40]) in line and "--max-length" in line
    assert not out.exists() and not partial_path(out).exists()
    # --max-length that truncates to the budget is fine: it gets past the check (to the model load)
    with pytest.raises(AssertionError, match="the model was loaded"):
        actkit.extract(str(tiny_gpt_neox), varied, out, layers=LAYERS[:1], max_batch_tokens=20, max_length=20)
    # a --max-length longer than the budget does not save the longest input
    line = cli_error(capsys, *argv, "--max-batch-tokens", "10", "--max-length", "30")
    assert "is 30 tokens" in line


@pytest.mark.parametrize("extra,says", [
    (["--max-batch-tokens", "0"], "--max-batch-tokens must be a positive integer, got 0"),
    (["--max-batch-tokens", "8", "--context-length", "16"], "below one token window of 16 tokens"),
])
def test_bad_budgets_are_one_line(tiny_gpt_neox, varied, tmp_path, capsys, extra, says):
    line = cli_error(capsys, "extract", tiny_gpt_neox, "--inputs", varied, "--layers", LAYERS[0], "--out",
                     tmp_path / "x.h5", *extra)
    assert says in line


def test_a_budget_for_images_is_one_line(tiny_vit, image_npy, tmp_path, capsys):
    line = cli_error(capsys, "extract", tiny_vit, "--inputs", image_npy, "--layers", "layers.0", "--out",
                     tmp_path / "x.h5", "--max-batch-tokens", "100")
    assert "--max-batch-tokens cuts batches of text" in line
