"""Four bugs found while building the model matrix, each checked against the framework itself:
timm Swin's channels-last maps, ``T5EncoderModel`` folders, whole ``CLIPModel`` folders and
GPT-2's ``GPT2LMHeadModel`` as a causal LM."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import actkit
from actkit.extractors.registry import load_model
from cli_helpers import run_cli

from _model_matrix import FAMILIES

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _build(tmp_path_factory, name):
    family = next(f for f in FAMILIES if f.name == name)
    return family.build(tmp_path_factory.mktemp(name.replace(" ", "_")))


@pytest.fixture(scope="module")
def timm_swin(tmp_path_factory):
    return _build(tmp_path_factory, "timm Swin")


@pytest.fixture(scope="module")
def t5_encoder(tmp_path_factory):
    return _build(tmp_path_factory, "T5 encoder")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return _build(tmp_path_factory, "CLIP")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return _build(tmp_path_factory, "GPT-2")


def test_timm_swin_rows_equal_timm_features(timm_swin, image_npy, tmp_path):
    """Swin stage outputs are (B, H, W, C): rows must be timm's own NCHW features per position."""
    out = actkit.extract(timm_swin, image_npy, tmp_path / "s.h5", layers="layers.1,patch_embed,layers.3",
                         max_samples=3, progress=False)
    mean = actkit.extract(timm_swin, image_npy, tmp_path / "m.h5", layers="layers.1", pool="mean",
                          max_samples=3, progress=False)
    adapter = load_model(timm_swin)
    data = actkit.extractors.inputs.read_inputs(image_npy, max_samples=3)
    x = adapter.batch(data, 0, 3).kwargs["x"]
    with torch.inference_mode():
        feats = adapter.model.forward_intermediates(x, indices=[1, 3], intermediates_only=True)
        embed = adapter.model.patch_embed(x)
    store = actkit.open_store(out)
    for name, ref in (("layers.1", feats[0]), ("layers.3", feats[1]), ("patch_embed", embed.permute(0, 3, 1, 2))):
        rows = ref.permute(0, 2, 3, 1).reshape(-1, ref.shape[1]).numpy()  # (sample, h, w) rows, C features
        assert store[name].shape == rows.shape, name
        np.testing.assert_allclose(store[name][:], rows, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(actkit.open_store(mean)["layers.1"][:], feats[0].mean((2, 3)).numpy(),
                               atol=1e-5, rtol=1e-5)
    assert store.provenance["layers"]["layers.1"]["layout"] == "NHWC"


@pytest.fixture(scope="module")
def timm_convnext(tmp_path_factory):
    """ConvNeXt with its norm and Mlp in channels-last (``conv_mlp=False``, as convnext_tiny...)."""
    from _model_matrix import _timm

    build = _timm("convnext_atto", 32, dims=(8, 16, 24, 32), depths=(1, 1, 1, 1), conv_mlp=False)
    return build(tmp_path_factory.mktemp("convnext_nhwc"))


def test_channels_last_layers_inside_a_channels_first_model(timm_convnext, image_npy, tmp_path):
    """A ConvNeXt block permutes to (B, H, W, C) for its norm and Mlp, and back: each module's
    rows are its own output's positions x channels."""
    names = ["stages.1.blocks.0.norm", "stages.1.blocks.0.mlp", "stages.1.blocks.0.mlp.fc1", "stages.1.blocks.0",
             "stages.1.blocks.0.conv_dw"]
    out = actkit.extract(timm_convnext, image_npy, tmp_path / "c.h5", layers=names, max_samples=2, progress=False)
    adapter = load_model(timm_convnext)
    data = actkit.extractors.inputs.read_inputs(image_npy, max_samples=2)
    seen = {}
    for name in names:
        adapter.model.get_submodule(name).register_forward_hook(lambda m, a, o, name=name: seen.update({name: o}))
    with torch.inference_mode():
        adapter.model(adapter.batch(data, 0, 2).kwargs["x"])
    store = actkit.open_store(out)
    for name in names:
        x = seen[name]
        channels_last = name.endswith(("norm", "mlp", "fc1"))
        rows = (x if channels_last else x.permute(0, 2, 3, 1)).reshape(-1, x.shape[-1 if channels_last else 1])
        assert store[name].attrs["layout"] == ("NHWC" if channels_last else "NCHW"), name
        np.testing.assert_allclose(store[name][:], rows.numpy(), atol=1e-5, rtol=1e-5, err_msg=name)


def test_t5_encoder_folder_loads_the_encoder_only(t5_encoder, text_file, tmp_path, capsys):
    code, out, err = run_cli(capsys, "layers", t5_encoder)
    assert code == 0, err
    assert "encoder.block.2" in out and "decoder" not in out
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "randomly initialised" decoder
        path = actkit.extract(t5_encoder, text_file, tmp_path / "t5.h5", layers="encoder.block.1",
                              max_samples=2, progress=False)
    store = actkit.open_store(path)
    assert store.provenance["model_class"] == "T5EncoderModel"
    from transformers import AutoTokenizer, T5EncoderModel

    tok = AutoTokenizer.from_pretrained(t5_encoder)
    model = T5EncoderModel.from_pretrained(t5_encoder).eval()
    ids = tok(text_file.read_text().splitlines()[0], return_tensors="pt")
    with torch.inference_mode():
        ref = model(**ids, output_hidden_states=True).hidden_states[2][0]
    np.testing.assert_allclose(store["encoder.block.1"][: ref.shape[0]], ref.numpy(), atol=1e-5, rtol=1e-5)


def test_whole_clip_lists_both_towers_and_extracts_each(clip, text_file, image_npy, tmp_path, capsys):
    code, out, err = run_cli(capsys, "layers", clip)
    assert code == 0, err
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    for name in ("vision_model.encoder.layers.2", "text_model.encoder.layers.2", "visual_projection",
                 "text_projection"):
        assert name in lines and "does not run" not in lines[name], name
    img = actkit.extract(clip, image_npy, tmp_path / "i.h5", layers="vision_model.encoder.layers.1",
                         max_samples=2, progress=False)
    txt = actkit.extract(clip, text_file, tmp_path / "t.h5", layers="text_model.encoder.layers.1",
                         max_samples=1, progress=False)
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    model = CLIPModel.from_pretrained(clip).eval()
    pixels = AutoImageProcessor.from_pretrained(clip)(images=list(np.load(image_npy)[:2]),
                                                      return_tensors="pt")["pixel_values"]
    ids = AutoTokenizer.from_pretrained(clip)(text_file.read_text().splitlines()[0], return_tensors="pt")
    with torch.inference_mode():
        vis = model.vision_model(pixel_values=pixels, output_hidden_states=True).hidden_states[2]
        tex = model.text_model(**ids, output_hidden_states=True).hidden_states[2]
    np.testing.assert_allclose(actkit.open_store(img)["vision_model.encoder.layers.1"][:],
                               vis.reshape(-1, vis.shape[-1]).numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(actkit.open_store(txt)["text_model.encoder.layers.1"][:], tex[0].numpy(),
                               atol=1e-5, rtol=1e-5)


def test_gpt2_is_a_causal_lm(gpt2, text_file, tmp_path):
    path = actkit.extract(gpt2, text_file, tmp_path / "g.h5", layers="transformer.h.0", final_hidden=True,
                          unembedding=True, max_samples=2, progress=False)
    store = actkit.open_store(path)
    from transformers import AutoTokenizer, GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(gpt2).eval()
    ids = AutoTokenizer.from_pretrained(gpt2)(text_file.read_text().splitlines()[0], return_tensors="pt")
    with torch.inference_mode():
        ref = model.transformer(**ids).last_hidden_state[0]
    np.testing.assert_allclose(store["final_hidden"][: ref.shape[0]], ref.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(store.params["unembedding"], model.lm_head.weight.detach().numpy())
