"""Token windows (``--context-length L``, ``--max-tokens N``): exactly-L windows, BOS first,
rows known before the first batch, index ``[window, position]``, packing in the provenance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import actkit
from actkit.errors import InputError
from cli_helpers import cli_error
from conftest import SENTENCES
from actkit.extractors.windows import pack_windows

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TEXTS = [" ".join(SENTENCES[(i + k) % 7] for k in range(1 + i % 3)) for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer(tiny_gpt_neox):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_gpt_neox))


def _stream(tokenizer, texts):
    """The documented stream: each text's tokens (no special tokens) then EOS, concatenated."""
    out = []
    for t in texts:
        out += tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return np.asarray(out)


def test_windows_are_bos_then_consecutive_stream_tokens(tokenizer):
    windows, packing = pack_windows(tokenizer, TEXTS, 16, progress=False)
    stream = _stream(tokenizer, TEXTS)
    assert windows.shape == (stream.size // 15, 16)
    assert (windows[:, 0] == tokenizer.bos_token_id).all()
    np.testing.assert_array_equal(windows[:, 1:].ravel(), stream[: windows.shape[0] * 15])
    assert packing["windows"] == windows.shape[0] and packing["tokens"] == windows.size
    assert packing["dropped_tokens"] == stream.size - windows.shape[0] * 15 < 15
    assert packing["bos"] == packing["separator"] == tokenizer.eos_token_id


def test_no_bos_token_means_plain_l_token_pieces(tokenizer):
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.bos_token = None
    windows, packing = pack_windows(tok, TEXTS, 16, progress=False)
    stream = _stream(tokenizer, TEXTS)
    np.testing.assert_array_equal(windows.ravel(), stream[: windows.shape[0] * 16])
    assert packing["bos"] is None


class CountingTexts(list):
    """A list that records the highest row handed out (what the packer read)."""

    read = 0

    def __getitem__(self, key):
        if isinstance(key, slice):
            self.read = max(self.read, min(len(self), key.stop))
        return super().__getitem__(key)


def test_max_tokens_bounds_the_run_and_the_reading(tokenizer):
    texts = CountingTexts(TEXTS * 100)  # 4000 texts
    windows, packing = pack_windows(tokenizer, texts, 16, max_tokens=100, progress=False)
    assert windows.shape == (6, 16)  # 100 // 16
    assert texts.read <= 64  # one small tokenizer chunk, not the whole corpus
    assert packing["rows_used"] < 20 and packing["max_tokens"] == 100


def test_bad_window_options(tokenizer):
    with pytest.raises(InputError, match="larger than the model's position table"):
        pack_windows(tokenizer, TEXTS, 200, model_positions=128, progress=False)
    with pytest.raises(InputError, match="smaller than one window"):
        pack_windows(tokenizer, TEXTS, 16, max_tokens=10, progress=False)
    with pytest.raises(InputError, match="fewer than one window"):
        pack_windows(tokenizer, ["End."], 64, progress=False)


def test_extraction_equals_the_forward_pass_on_the_windows(tiny_gpt_neox, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    src = tmp_path / "texts.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "w.h5"
    actkit.extract(str(tiny_gpt_neox), src, out, layers="gpt_neox.layers.1", context_length=16, max_tokens=400,
                   batch_size=4, progress=False)
    windows, _ = pack_windows(tokenizer, TEXTS, 16, max_tokens=400, progress=False)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_gpt_neox)).eval()
    with torch.no_grad():
        hidden = model(input_ids=torch.from_numpy(windows), output_hidden_states=True).hidden_states[2]
    with actkit.open_store(out) as store:
        layer = store["gpt_neox.layers.1"]
        assert store.n_samples == 25 and layer.shape == (25 * 16, 32)
        np.testing.assert_allclose(np.asarray(layer), hidden.reshape(-1, 32).numpy(), atol=1e-5)
        index = layer.index
        np.testing.assert_array_equal(index[:, 0], np.repeat(np.arange(25), 16))
        np.testing.assert_array_equal(index[:, 1], np.tile(np.arange(16), 25))
        packing = store.provenance["packing"]
        assert packing["context_length"] == 16 and packing["windows"] == 25 and packing["max_tokens"] == 400
        assert store.request["request"]["packing"] == packing


def test_pooled_windows_and_parquet_source(tiny_gpt_neox, tmp_path):
    import datasets

    datasets.Dataset.from_dict({"text": TEXTS}).to_parquet(str(tmp_path / "d.parquet"))
    src = tmp_path / "texts.txt"
    src.write_text("\n".join(TEXTS) + "\n")
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    actkit.extract(str(tiny_gpt_neox), src, a, layers="gpt_neox.layers.0", context_length=32, pool="none",
                   progress=False)
    actkit.extract(str(tiny_gpt_neox), tmp_path / "d.parquet", b, layers="gpt_neox.layers.0", context_length=32,
                   pool="mean", progress=False)
    with actkit.open_store(a) as sa, actkit.open_store(b) as sb:
        rows = np.asarray(sa["gpt_neox.layers.0"]).reshape(sb.n_samples, 32, -1).mean(1)
        np.testing.assert_allclose(np.asarray(sb["gpt_neox.layers.0"]), rows, atol=1e-5)
        assert (sb["gpt_neox.layers.0"].index[:, 1] == -1).all()
        # same texts, same tokenizer, same windows: the same inputs to `compare`
        assert sa.inputs_fingerprint == sb.inputs_fingerprint


def test_window_cli_errors_write_nothing(tiny_gpt_neox, text_file, tmp_path, capsys):
    base = ["extract", tiny_gpt_neox, "--inputs", text_file, "--layers", "gpt_neox.layers.0",
            "--out", tmp_path / "x.h5"]
    assert "position table (128 positions)" in cli_error(capsys, *base, "--context-length", "129")
    assert "give --context-length too" in cli_error(capsys, *base, "--max-tokens", "100")
    assert "fixed length" in cli_error(capsys, *base, "--context-length", "8", "--max-length", "4")
    assert not (tmp_path / "x.h5").exists()
