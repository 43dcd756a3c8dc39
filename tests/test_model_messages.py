"""Models actkit cannot run as they are say in one line what to pass (exit 2, nothing written):
quantised checkpoints, whole encoder-decoders, and layer names a model does not have."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from cli_helpers import cli_error

from _model_matrix import FAMILIES

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _family(name):
    return next(f for f in FAMILIES if f.name == name)


@pytest.fixture(scope="module")
def quantised(tmp_path_factory):
    """A tiny Llama folder whose config names a bitsandbytes 4-bit quantisation."""
    path = _family("Llama").build(tmp_path_factory.mktemp("q"))
    config = Path(path) / "config.json"
    cfg = json.loads(config.read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    config.write_text(json.dumps(cfg))
    return path


def test_a_quantised_checkpoint_says_what_to_pass(quantised, text_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "x.h5"
    line = cli_error(capsys, "extract", quantised, "--inputs", text_file, "--layers", "resid.0", "--out", out)
    if importlib.util.find_spec("bitsandbytes") is None:
        assert "pip install bitsandbytes" in line and "--device cuda" in line
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes"
                        else real(name, *a))
    line = cli_error(capsys, "extract", quantised, "--inputs", text_file, "--layers", "resid.0", "--out", out)
    assert "bitsandbytes-quantised and runs on a GPU: pass --device cuda" in line
    line = cli_error(capsys, "layers", quantised)
    assert "--device cuda" in line
    assert not list(tmp_path.iterdir())


def test_an_encoder_decoder_that_cannot_run_is_one_line(tmp_path, capsys):
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from _model_matrix import tokenizer

    tok = tokenizer()
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(tok), d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
                   decoder_start_token_id=0, pad_token_id=0)
    T5ForConditionalGeneration(cfg).save_pretrained(tmp_path / "t5", safe_serialization=True)
    tok.save_pretrained(tmp_path / "t5")
    capsys.readouterr()
    line = cli_error(capsys, "layers", tmp_path / "t5")
    assert "encoder-decoder (T5Model)" in line and "T5EncoderModel" in line
