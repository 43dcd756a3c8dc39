"""Text extraction (GPT-NeoX) equals the model's own forward pass, per token and pooled."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import actkit
from conftest import SENTENCES

pytestmark = pytest.mark.usefixtures("torch_one_thread")

N = len(SENTENCES)


@pytest.fixture(scope="module")
def reference(tiny_gpt_neox):
    """Per-sample, unpadded forward passes: hidden states and the last layer's hooked output."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_gpt_neox)
    model = AutoModelForCausalLM.from_pretrained(tiny_gpt_neox).eval()
    out = []
    hooked = {}
    model.gpt_neox.layers[2].register_forward_hook(lambda m, a, o: hooked.__setitem__("x", o))
    with torch.no_grad():
        for text in SENTENCES:
            ids = tok(text, return_tensors="pt")["input_ids"]
            r = model(ids, output_hidden_states=True)
            hs = [h[0].numpy() for h in r.hidden_states]
            out.append({"embed": hs[0], "l0": hs[1], "l1": hs[2], "l2": hooked["x"][0].numpy(),
                        "final": hs[-1], "ids": ids[0].numpy()})
    return out, model.get_output_embeddings().weight.detach().numpy()


def _extract(model_dir, text_file, tmp_path, name, **kw):
    kw.setdefault("batch_size", 3)
    return actkit.extract(str(model_dir), text_file, tmp_path / name, progress=False, **kw)


def test_per_token_rows_equal_hidden_states(tiny_gpt_neox, text_file, tmp_path, reference):
    ref, W = reference
    layers = ["gpt_neox.embed_in", "gpt_neox.layers.0", "gpt_neox.layers.1", "gpt_neox.layers.2"]
    path = _extract(tiny_gpt_neox, text_file, tmp_path, "tok.h5", layers=layers, final_hidden=True,
                    unembedding=True)
    store = actkit.open_store(path)
    assert store.layers == layers + ["final_hidden"]
    lengths = [len(r["ids"]) for r in ref]
    for name, key in zip(store.layers, ["embed", "l0", "l1", "l2", "final"]):
        layer = store[name]
        expected = np.concatenate([r[key] for r in ref])
        assert layer.shape == (sum(lengths), 32)
        np.testing.assert_allclose(np.asarray(layer), expected, atol=1e-5, rtol=0)
        sample = np.repeat(np.arange(N), lengths)
        position = np.concatenate([np.arange(n) for n in lengths])
        np.testing.assert_array_equal(layer.index, np.stack([sample, position], 1))
    np.testing.assert_array_equal(store.params["unembedding"], W)
    assert store.params["unembedding"].shape == (W.shape[0], 32)
    prov = store.provenance
    assert prov["model"] == str(tiny_gpt_neox) and prov["pool"] == "none"
    assert "model.safetensors" in prov["weights_sha256"]
    assert prov["versions"]["transformers"] and prov["inputs_fingerprint"] == store.inputs_fingerprint


@pytest.mark.parametrize("pool", ["mean", "last", "cls"])
def test_pooled_rows(tiny_gpt_neox, text_file, tmp_path, reference, pool):
    ref, _ = reference
    path = _extract(tiny_gpt_neox, text_file, tmp_path, f"{pool}.h5", pool=pool, batch_size=4,
                    layers="gpt_neox.layers.1,gpt_neox.layers.0")
    store = actkit.open_store(path)
    reduce = {"mean": lambda a: a.mean(0), "last": lambda a: a[-1], "cls": lambda a: a[0]}[pool]
    for name, key in [("gpt_neox.layers.1", "l1"), ("gpt_neox.layers.0", "l0")]:
        expected = np.stack([reduce(r[key]) for r in ref])
        np.testing.assert_allclose(np.asarray(store[name]), expected, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(store[name].index, np.stack([np.arange(N), -np.ones(N, int)], 1))


def test_forward_stops_after_deepest_layer(tiny_gpt_neox, text_file, tmp_path, monkeypatch):
    import actkit.extractors.registry as registry

    calls = {"layers.1": 0, "layers.2": 0, "embed_out": 0, "layers.0": 0}
    real = registry.load_model

    def spy(*args, **kwargs):
        adapter = real(*args, **kwargs)
        m = adapter.model
        for key, mod in [("layers.0", m.gpt_neox.layers[0]), ("layers.1", m.gpt_neox.layers[1]),
                         ("layers.2", m.gpt_neox.layers[2]), ("embed_out", m.get_output_embeddings())]:
            mod.register_forward_hook(lambda *a, key=key: calls.__setitem__(key, calls[key] + 1))
        return adapter

    monkeypatch.setattr(registry, "load_model", spy)
    _extract(tiny_gpt_neox, text_file, tmp_path, "early.h5", layers=["gpt_neox.layers.0"])
    # the probe forward runs the whole model once; the 3 extraction batches stop after layers.0
    assert calls == {"layers.0": 1 + 3, "layers.1": 1, "layers.2": 1, "embed_out": 1}


def test_max_length_and_max_samples(tiny_gpt_neox, text_file, tmp_path, reference):
    ref, _ = reference
    path = _extract(tiny_gpt_neox, text_file, tmp_path, "trunc.h5", layers=["gpt_neox.layers.1"],
                    max_length=4, max_samples=5, batch_size=2)
    store = actkit.open_store(path)
    expected = np.concatenate([r["l1"][:4] for r in ref[:5]])  # causal: truncation keeps prefixes
    np.testing.assert_allclose(np.asarray(store["gpt_neox.layers.1"]), expected, atol=1e-5, rtol=0)
    assert store.n_samples == 5


def test_jsonl_equals_txt(tiny_gpt_neox, text_file, tmp_path):
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": s, "id": i}) for i, s in enumerate(SENTENCES)) + "\n")
    a = actkit.open_store(_extract(tiny_gpt_neox, jsonl, tmp_path, "j.h5", layers=["gpt_neox.layers.0"]))
    b = actkit.open_store(_extract(tiny_gpt_neox, text_file, tmp_path, "t.h5", layers=["gpt_neox.layers.0"]))
    np.testing.assert_array_equal(np.asarray(a["gpt_neox.layers.0"]), np.asarray(b["gpt_neox.layers.0"]))
    assert a.inputs_fingerprint == b.inputs_fingerprint


def test_float16_storage_and_bfloat16_compute(tiny_gpt_neox, text_file, tmp_path, reference):
    ref, _ = reference
    expected = np.concatenate([r["l0"] for r in ref])
    s16 = actkit.open_store(_extract(tiny_gpt_neox, text_file, tmp_path, "f16.h5", layers=["gpt_neox.layers.0"],
                                     storage_dtype="float16"))
    assert s16["gpt_neox.layers.0"].dtype == np.float16
    np.testing.assert_allclose(np.asarray(s16["gpt_neox.layers.0"], dtype=np.float32), expected, atol=2e-2)
    bf = actkit.open_store(_extract(tiny_gpt_neox, text_file, tmp_path, "bf.h5", layers=["gpt_neox.layers.0"],
                                    dtype="bfloat16"))
    assert bf["gpt_neox.layers.0"].dtype == np.float32  # bfloat16 compute is never stored opaquely
    np.testing.assert_allclose(np.asarray(bf["gpt_neox.layers.0"]), expected, atol=0.15)


def test_texts_longer_than_the_position_table_are_truncated_with_a_warning(tiny_gpt_neox, tmp_path):
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["features"] * 300) + "\nshort text\n")
    with pytest.warns(UserWarning, match="1 of 2 samples are longer than the model's 128 positions"):
        path = actkit.extract(str(tiny_gpt_neox), long, tmp_path / "l.h5", layers=["gpt_neox.layers.0"],
                              progress=False)
    index = actkit.open_store(path)["gpt_neox.layers.0"].index
    assert (index[:, 0] == 0).sum() == 128
