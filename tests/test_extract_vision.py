"""Vision extraction (HF ViT / ViTMAE, timm resnet / vit) equals the frameworks' own forward passes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import actkit
from conftest import make_images

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("torch_one_thread")

N = 7


def _pil(images):
    from PIL import Image

    return [Image.fromarray(img) for img in images]


def _hf_pixels(model_dir):
    from transformers import AutoImageProcessor

    proc = AutoImageProcessor.from_pretrained(model_dir)
    return proc(images=_pil(make_images()), return_tensors="pt")["pixel_values"]


def _rows(per_sample, pool):
    """Reference rows from a list of (T, C) arrays, one per sample."""
    if pool == "none":
        return np.concatenate(per_sample)
    reduce = {"mean": lambda a: a.mean(0), "last": lambda a: a[-1], "cls": lambda a: a[0]}[pool]
    return np.stack([reduce(a) for a in per_sample])


@pytest.fixture(scope="module")
def vit_reference(tiny_vit):
    from transformers import ViTModel

    model = ViTModel.from_pretrained(tiny_vit).eval()
    pixels = _hf_pixels(tiny_vit)
    with torch.no_grad():  # one image at a time: batching in the extractor must not matter
        hs = [model(pixel_values=pixels[i : i + 1], output_hidden_states=True).hidden_states for i in range(N)]
    return {f"layers.{k}": [h[k + 1][0].numpy() for h in hs] for k in range(3)}


@pytest.mark.parametrize("pool", ["none", "mean", "cls", "last"])
def test_vit_equals_hidden_states(tiny_vit, image_npy, tmp_path, vit_reference, pool):
    layers = ["layers.0", "layers.2"]
    path = actkit.extract(str(tiny_vit), image_npy, tmp_path / "vit.h5", layers=layers, pool=pool,
                          batch_size=3, progress=False)
    store = actkit.open_store(path)
    for name in layers:
        expected = _rows(vit_reference[name], pool)
        np.testing.assert_allclose(np.asarray(store[name]), expected, atol=1e-5, rtol=0)
    if pool == "none":  # 17 tokens per image: CLS then 16 patches
        idx = store["layers.0"].index
        np.testing.assert_array_equal(idx[:, 0], np.repeat(np.arange(N), 17))
        np.testing.assert_array_equal(idx[:, 1], np.tile(np.arange(17), N))


def test_image_folder_equals_npy(tiny_vit, image_npy, image_dir, tmp_path):
    a = actkit.open_store(actkit.extract(str(tiny_vit), image_npy, tmp_path / "a.h5", layers="layers.1",
                                         pool="mean", batch_size=4, progress=False))
    b = actkit.open_store(actkit.extract(str(tiny_vit), image_dir, tmp_path / "b.h5", layers="layers.1",
                                         pool="mean", batch_size=4, progress=False))
    np.testing.assert_array_equal(np.asarray(a["layers.1"]), np.asarray(b["layers.1"]))


def test_vitmae_sees_every_patch_in_order(tiny_vitmae, image_npy, tmp_path):
    from transformers import ViTMAEModel

    model = ViTMAEModel.from_pretrained(tiny_vitmae, mask_ratio=0.0).eval()
    pixels = _hf_pixels(tiny_vitmae)
    layers = ["embeddings", "layers.1", "layers.2"]
    path = actkit.extract(str(tiny_vitmae), image_npy, tmp_path / "mae.h5", layers=layers, batch_size=3,
                          progress=False)
    store = actkit.open_store(path)
    n_patches = 16
    with torch.no_grad():
        # independent of ViTMAE's shuffling: patch embedding + position embedding, patch order
        emb = model.embeddings
        patches = emb.patch_embeddings(pixels) + emb.position_embeddings[:, 1:]
        cls = (emb.cls_token + emb.position_embeddings[:, :1]).expand(N, 1, -1)
        expected_emb = torch.cat([cls, patches], 1).reshape(-1, 32).numpy()
        # the framework's own forward with ordered noise gives the encoder layers
        noise = torch.arange(n_patches, dtype=torch.float32).expand(1, n_patches)
        outs = [model(pixel_values=pixels[i : i + 1], noise=noise, output_hidden_states=True) for i in range(N)]
    np.testing.assert_allclose(np.asarray(store["embeddings"]), expected_emb, atol=1e-5, rtol=0)
    for out in outs:
        np.testing.assert_array_equal(out.ids_restore[0].numpy(), np.arange(n_patches))
        assert out.mask.sum() == 0
    for k in (1, 2):
        expected = np.concatenate([o.hidden_states[k + 1][0].numpy() for o in outs])
        np.testing.assert_allclose(np.asarray(store[f"layers.{k}"]), expected, atol=1e-5, rtol=0)
    assert store["layers.1"].shape == (N * (1 + n_patches), 32)
    # deterministic: a second run gives the same numbers
    again = actkit.open_store(actkit.extract(str(tiny_vitmae), image_npy, tmp_path / "mae2.h5", layers=layers,
                                             batch_size=2, progress=False))
    np.testing.assert_allclose(np.asarray(again["layers.2"]), np.asarray(store["layers.2"]),
                               atol=1e-6, rtol=0)


def _timm_pixels(model):
    import timm.data

    cfg = timm.data.resolve_model_data_config(model)
    tf = timm.data.create_transform(**cfg, is_training=False)
    return torch.stack([tf(img) for img in _pil(make_images())])


@pytest.mark.parametrize("pool", ["none"])
def test_timm_resnet_checkpoint_equals_forward_intermediates(timm_resnet, image_npy, tmp_path, pool):
    import timm
    from safetensors.torch import load_file

    name, ckpt = timm_resnet
    model = timm.create_model(name, pretrained=False).eval()
    model.load_state_dict(load_file(str(ckpt)))
    n = 3
    pixels = _timm_pixels(model)[:n]
    with torch.no_grad():
        feats = model.forward_intermediates(pixels, indices=[1, 3], intermediates_only=True)
    layers = ["layer1", "layer3"]
    path = actkit.extract(f"timm:{name}", image_npy, tmp_path / "r.h5", layers=layers, checkpoint=ckpt,
                          pool=pool, batch_size=2, max_samples=n, progress=False)
    store = actkit.open_store(path)
    for layer, f in zip(layers, feats):
        per_sample = [x.permute(1, 2, 0).reshape(-1, x.shape[0]).numpy() for x in f]  # (h, w) row-major
        np.testing.assert_allclose(np.asarray(store[layer]), _rows(per_sample, pool), atol=1e-5, rtol=0)
    if pool == "none":
        h, w = feats[1].shape[2:]
        np.testing.assert_array_equal(store["layer3"].index[: h * w * 2, 1], np.tile(np.arange(h * w), 2))
        assert store.provenance["weights_sha256"]["weights.safetensors"]


@pytest.mark.parametrize("pool", ["none", "cls"])
def test_timm_vit_local_dir_equals_forward_intermediates(tiny_timm_vit, image_dir, tmp_path, pool):
    import timm

    model = timm.create_model(f"local-dir:{tiny_timm_vit}", pretrained=True).eval()
    pixels = _timm_pixels(model)
    with torch.no_grad():
        feats = model.forward_intermediates(pixels, indices=[0, 2], output_fmt="NLC", intermediates_only=True,
                                            return_prefix_tokens=True)
    layers = ["blocks.0", "blocks.2"]
    # a plain local folder with a timm config.json is detected as timm
    path = actkit.extract(str(tiny_timm_vit), image_dir, tmp_path / "v.h5", layers=layers, pool=pool,
                          batch_size=3, progress=False)
    store = actkit.open_store(path)
    for layer, (spatial, prefix) in zip(layers, feats):
        tokens = torch.cat([prefix, spatial], 1)
        np.testing.assert_allclose(np.asarray(store[layer]), _rows(list(tokens.numpy()), pool), atol=1e-5, rtol=0)


def test_timm_local_dir_prefix_and_early_stop(tiny_timm_resnet, image_npy, tmp_path, monkeypatch):
    import timm

    import actkit.extractors.registry as registry

    calls = {"layer2": 0, "layer3": 0, "fc": 0}
    real = registry.load_model

    def spy(*args, **kwargs):
        adapter = real(*args, **kwargs)
        for key in calls:
            adapter.model.get_submodule(key).register_forward_hook(
                lambda *a, key=key: calls.__setitem__(key, calls[key] + 1))
        return adapter

    monkeypatch.setattr(registry, "load_model", spy)
    path = actkit.extract(f"timm:local-dir:{tiny_timm_resnet}", image_npy, tmp_path / "s.h5",
                          layers=["layer2", "layer1.0.act1"], pool="mean", batch_size=4, progress=False)
    assert calls == {"layer2": 1 + 2, "layer3": 1, "fc": 1}  # probe runs all; 2 batches stop at layer2
    model = timm.create_model(f"local-dir:{tiny_timm_resnet}", pretrained=True).eval()
    with torch.no_grad():
        f = model.forward_intermediates(_timm_pixels(model), indices=[2], intermediates_only=True)[0]
    store = actkit.open_store(path)
    np.testing.assert_allclose(np.asarray(store["layer2"]), f.mean((2, 3)).numpy(), atol=1e-5, rtol=0)
    assert store["layer1.0.act1"].shape == (N, 64)


def test_transformers4_layer_names_are_aliases(tiny_vit, image_npy, tmp_path, vit_reference):
    path = actkit.extract(str(tiny_vit), image_npy, tmp_path / "alias.h5", layers=["encoder.layer.1"], pool="mean",
                          batch_size=4, progress=False)
    store = actkit.open_store(path)
    assert store.layers == ["encoder.layer.1"]
    assert store.provenance["layers"]["encoder.layer.1"]["module"] == "layers.1"
    np.testing.assert_allclose(np.asarray(store["encoder.layer.1"]), _rows(vit_reference["layers.1"], "mean"),
                               atol=1e-5, rtol=0)


def test_inputs_fingerprint_is_shared_across_models(tiny_vit, tiny_timm_vit, image_npy, image_dir, tmp_path):
    a = actkit.open_store(actkit.extract(str(tiny_vit), image_npy, tmp_path / "a.h5", layers="layers.0",
                                         pool="cls", progress=False))
    b = actkit.open_store(actkit.extract(str(tiny_timm_vit), image_npy, tmp_path / "b.h5", layers="blocks.0",
                                         pool="cls", progress=False))
    c = actkit.open_store(actkit.extract(str(tiny_timm_vit), image_dir, tmp_path / "c.h5", layers="blocks.0",
                                         pool="cls", progress=False, max_samples=6))
    assert a.inputs_fingerprint == b.inputs_fingerprint != c.inputs_fingerprint
    assert a.provenance["preprocessing"] != b.provenance["preprocessing"]


def test_output_changed_in_place_later_is_copied_first(tiny_timm_resnet, image_npy, tmp_path):
    """timm's ReLU(inplace=True) overwrites bn1's output after bn1's hook: rows keep the pre-ReLU values."""
    import timm

    model = timm.create_model(f"local-dir:{tiny_timm_resnet}", pretrained=True).eval()
    pixels = _timm_pixels(model)[:3]
    with torch.no_grad():
        pre = model.bn1(model.conv1(pixels))
    path = actkit.extract(str(tiny_timm_resnet), image_npy, tmp_path / "bn.h5", layers=["bn1"], batch_size=2,
                          max_samples=3, progress=False)
    rows = np.asarray(actkit.open_store(path)["bn1"])
    assert rows.min() < 0
    np.testing.assert_allclose(rows, pre.permute(0, 2, 3, 1).reshape(-1, pre.shape[1]).numpy(), atol=1e-5, rtol=0)


def test_random_init_weights_warn_only_for_the_layers_that_read_them(tmp_path):
    # the zoo's ViT is a classification checkpoint: ViTModel's pooler head is not in it
    import warnings

    vit = REPO / "data" / "zoo" / "vit-tiny-seed0"
    images = REPO / "data" / "zoo" / "inputs" / "shapes.npy"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        path = actkit.extract(str(vit), images, tmp_path / "a.h5", layers="layernorm", pool="cls",
                              max_samples=4, progress=False)
    assert not [w for w in caught if "randomly" in str(w.message)]
    assert any(k.startswith("pooler.") for k in actkit.open_store(path).provenance["randomly_initialised"])
    with pytest.warns(UserWarning, match="'pooler' reads weights .* randomly initialised"):
        actkit.extract(str(vit), images, tmp_path / "b.h5", layers="pooler", max_samples=4, progress=False)
