"""The shipped zoo (data/zoo) and the shapes renderer behind it.

- the renderer: deterministic, every factor visible, bad arguments rejected;
- the zoo: every model present, genuinely trained (recorded loss curves fall, held-out
  scores beat chance and are reproduced from the shipped weights), data/ within budget;
- extraction of every zoo checkpoint equals the framework's own forward pass;
- retraining one model with ``python -m actkit.zoo train`` is bitwise deterministic on one
  machine and follows the shipped loss curve (within a stated tolerance) on any machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from actkit import zoo
from actkit.zoo import _corpus, _fitting, shapes
from actkit.zoo.__main__ import main as zoo_main

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- shapes
def test_render_shapes_shapes_and_determinism():
    im1, f1, names = shapes.render_shapes(50, size=32, random_state=3)
    im2, f2, _ = shapes.render_shapes(50, size=32, random_state=3)
    im3, _, _ = shapes.render_shapes(50, size=32, random_state=4)
    assert im1.shape == (50, 32, 32, 3) and im1.dtype == np.uint8
    assert f1.shape == (50, 7) and f1.dtype == np.int64
    assert names == shapes.FACTOR_NAMES
    assert np.array_equal(im1, im2) and np.array_equal(f1, f2)
    assert not np.array_equal(im1, im3)
    assert ((f1 >= 0) & (f1 < np.array(shapes.FACTOR_SIZES))).all()
    im64 = shapes.render_factors(f1[:4], size=64)
    assert im64.shape == (4, 64, 64, 3)


@pytest.mark.parametrize("j", range(7))
def test_every_factor_changes_the_image(j):
    """Changing any single factor level changes the image (each factor is visible)."""
    base = np.array([[1, 2, 3, 3, 4, 2, 5]])
    for level in range(shapes.FACTOR_SIZES[j]):
        f = base.copy()
        f[0, j] = level
        if level == base[0, j]:
            continue
        a, b = shapes.render_factors(base), shapes.render_factors(f)
        assert np.abs(a.astype(int) - b.astype(int)).sum() > 0, (shapes.FACTOR_NAMES[j], level)


def test_object_is_where_the_position_factor_says():
    f = np.array([[0, 5, 3, 0, 7, 0, 4], [0, 5, 3, 7, 0, 0, 4]])
    im = shapes.render_factors(f, size=32).astype(float)
    bg = im[:, 0, 0]  # corner pixel is background at these positions
    diff = np.abs(im - bg[:, None, None, :]).sum(-1) > 30
    ys, xs = np.nonzero(diff[0])
    assert xs.mean() < 12 and ys.mean() > 20  # left, bottom
    ys, xs = np.nonzero(diff[1])
    assert xs.mean() > 20 and ys.mean() < 12  # right, top


def test_disentanglement_style_keeps_the_factors_and_changes_only_the_levels():
    """``style="disentanglement"``: same factor draw, larger objects, hues on an arc; the
    default style (the zoo's data) is unchanged by the option."""
    im, f, _ = shapes.render_shapes(40, size=16, random_state=0)
    im_d, f_d, _ = shapes.render_shapes(40, size=16, random_state=0, style="disentanglement")
    assert np.array_equal(f, f_d) and not np.array_equal(im, im_d)
    assert np.array_equal(im, shapes.render_factors(f, size=16, style="default"))
    hue = shapes.factor_values("object_hue", style="disentanglement")
    assert hue.shape == (8,) and hue[0] == 0 and hue[-1] < 0.75
    assert (shapes.factor_values("scale", style="disentanglement")
            > shapes.factor_values("scale").max()).all()
    with pytest.raises(ValueError, match="style"):
        shapes.render_shapes(3, style="nope")


@pytest.mark.parametrize(
    "kwargs",
    [dict(n=0), dict(n=2.5), dict(n=3, size=4)],
)
def test_render_shapes_rejects_bad_arguments(kwargs):
    n = kwargs.pop("n")
    with pytest.raises(ValueError):
        shapes.render_shapes(n, **kwargs)


def test_render_factors_rejects_out_of_range():
    with pytest.raises(ValueError, match="shape"):
        shapes.render_factors(np.array([[4, 0, 0, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        shapes.render_factors(np.zeros((2, 6), int))


# ----------------------------------------------------------------------------- the zoo
def test_zoo_lists_every_model_and_data_is_small():
    meta = zoo.load_metadata()
    assert set(meta["models"]) == set(zoo.MODELS)
    rows = zoo.list_models()
    assert [r["name"] for r in rows] == list(zoo.MODELS)
    for r in rows:
        assert 150_000 <= r["parameters"] <= 1_500_000, r
        assert Path(zoo.model_path(r["name"])).is_dir()
    total = sum(p.stat().st_size for p in (ROOT / "data").rglob("*") if p.is_file())
    assert total <= 40 * 2**20, f"data/ is {total / 2**20:.1f} MiB"
    images = np.load(zoo.image_inputs())
    factors, names = zoo.image_factors()
    assert images.dtype == np.uint8 and images.shape == (zoo.EVAL_IMAGES, 32, 32, 3)
    assert factors.shape == (zoo.EVAL_IMAGES, 7)
    # the shipped evaluation images are exactly what the renderer gives for their seed
    ref, ref_f, _ = shapes.render_shapes(zoo.EVAL_IMAGES, size=32, random_state=zoo.EVAL_IMAGES_SEED)
    assert np.array_equal(images, ref) and np.array_equal(factors, ref_f)
    lines = zoo.text_inputs().read_text(encoding="utf-8").splitlines()
    assert 200 <= len(lines) <= 1000 and all(lines)
    corpus = set((zoo.zoo_dir() / "corpus" / "python_reference.txt").read_text().splitlines())
    train_lines, held = _corpus.split_corpus(zoo.zoo_dir() / "corpus" / "python_reference.txt")
    assert held == lines and not set(held) & set(train_lines) and set(held) <= corpus


def test_zoo_models_are_genuinely_trained():
    meta = zoo.load_metadata()["models"]
    for name, m in meta.items():
        curve = np.array(m["train"]["loss_curve"])
        assert len(curve) == m["train"]["steps"] and np.isfinite(curve).all()
        # initial loss (first 5 steps) vs the last 10% of the steps; a window of the first
        # 10% would already hold the trained plateau of the 1500-step MAE schedule
        k = max(5, len(curve) // 10)
        first, last = curve[:5].mean(), curve[-k:].mean()
        assert last < 0.7 * first, f"{name}: loss {first:.3f} -> {last:.3f}"
        assert m["weights_sha256"] == _fitting.sha256(zoo.model_path(name) / "model.safetensors")
    for seed in zoo.SEEDS:
        h = meta[f"pythia-tiny-seed{seed}"]["heldout"]
        assert h["loss_per_token"] < h["uniform_loss"] - 2.0
        h = meta[f"mae-tiny-seed{seed}"]["heldout"]
        assert h["masked_reconstruction_mse"] < 0.5 * h["pixel_variance"]
        for fam in ("vit", "resnet"):
            acc = meta[f"{fam}-tiny-seed{seed}"]["heldout"]["factor_accuracy"]
            chance = {n: 1.0 / k for n, k in zip(shapes.FACTOR_NAMES, shapes.FACTOR_SIZES)}
            # the short training learns hues, position, shape and scale well above chance;
            # orientation (8 levels within +-40 degrees at 32 px) stays near chance (docs/zoo.md)
            above = [n for n in acc if acc[n] > chance[n] + 0.15]
            assert len(above) >= 6, (fam, seed, acc)
            assert acc["object_hue"] > 0.9 and acc["background_hue"] > 0.9
    # the two seeds really differ
    assert meta["vit-tiny-seed0"]["weights_sha256"] != meta["vit-tiny-seed1"]["weights_sha256"]


def test_shipped_weights_reproduce_recorded_accuracy():
    """Loading the shipped ViT through transformers gives the held-out accuracy recorded at training."""
    import torch
    from transformers import AutoImageProcessor, ViTForImageClassification

    path = zoo.model_path("vit-tiny-seed1")
    model = ViTForImageClassification.from_pretrained(path).eval()
    proc = AutoImageProcessor.from_pretrained(path)
    images = np.load(zoo.image_inputs())
    factors, _ = zoo.image_factors()
    with torch.no_grad():
        logits = model(**proc(list(images), return_tensors="pt")).logits
    acc = _fitting.factor_accuracy(logits, torch.from_numpy(factors))
    recorded = zoo.load_metadata()["models"]["vit-tiny-seed1"]["heldout"]["factor_accuracy"]
    for k in acc:
        assert abs(acc[k] - recorded[k]) <= 2 / len(images), (k, acc[k], recorded[k])


def test_unknown_zoo_model_is_a_one_line_error():
    from actkit.errors import ActkitError

    with pytest.raises(ActkitError, match="unknown zoo model 'gpt2'.*pythia-tiny-seed0"):
        zoo.model_spec("gpt2")


def test_actkit_zoo_path_prints_the_folder_a_pip_user_needs(tmp_path, capsys, monkeypatch):
    """Issue 39: the README's tour starts from ``Z=$(actkit zoo path)``: the command prints
    ``zoo_dir()`` (the folder holding zoo.json, the models and the inputs), follows
    ``ACTKIT_ZOO``, and a folder without a zoo is one line, exit 2."""
    import subprocess
    import sys

    from cli_helpers import cli_error, run_cli

    code, out, _ = run_cli(capsys, "zoo", "path")
    assert code == 0 and out == f"{zoo.zoo_dir()}\n"
    here = Path(out.strip())
    assert (here / "zoo.json").is_file() and (here / "inputs" / "text.txt").is_file()
    assert all((here / name).is_dir() for name in zoo.MODELS)
    shell = subprocess.run(["bash", "-c", 'Z=$("$0" -m actkit zoo path) && ls "$Z/pythia-tiny-seed0/config.json"',
                            sys.executable], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert shell.returncode == 0 and shell.stdout.strip() == str(here / "pythia-tiny-seed0" / "config.json")
    code, out, _ = run_cli(capsys, "zoo", "list")
    assert code == 0 and out == zoo.format_models() + "\n" and len(out.splitlines()) == 1 + len(zoo.MODELS)
    monkeypatch.setenv("ACTKIT_ZOO", str(tmp_path))
    line = cli_error(capsys, "zoo", "path")
    assert f"no zoo at {tmp_path}" in line and "ACTKIT_ZOO" in line


def test_tokenizer_has_no_pad_token_like_pythia():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(zoo.model_path("pythia-tiny-seed0"))
    assert tok.pad_token is None and tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0
    assert len(tok) == zoo.TOKENIZER_VOCAB


# ----------------------------------------------------------------------------- extraction == forward
def _rows(store_path, layer):
    import actkit

    layer_ = actkit.open_store(store_path)[layer]
    return np.asarray(layer_), np.asarray(layer_.index)


@pytest.mark.parametrize("seed", zoo.SEEDS)
def test_extract_pythia_zoo_equals_forward(tmp_path, seed):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import actkit

    name = f"pythia-tiny-seed{seed}"
    out = actkit.extract(zoo.model_spec(name), zoo.text_inputs(), tmp_path / "p.h5",
                         layers=["gpt_neox.layers.1", "final_hidden"], max_samples=5,
                         max_length=24, batch_size=2, progress=False)
    path = zoo.model_path(name)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    lines = zoo.text_inputs().read_text(encoding="utf-8").splitlines()[:5]
    ref1, reff, index = [], [], []
    with torch.no_grad():
        for i, line in enumerate(lines):
            ids = tok(line, truncation=True, max_length=24, return_tensors="pt")["input_ids"]
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
            ref1.append(hs[2][0].numpy())
            reff.append(hs[-1][0].numpy())
            index += [[i, p] for p in range(ids.shape[1])]
    got1, idx = _rows(out, "gpt_neox.layers.1")
    gotf, _ = _rows(out, "final_hidden")
    np.testing.assert_array_equal(idx, np.array(index))
    np.testing.assert_allclose(got1, np.concatenate(ref1), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(gotf, np.concatenate(reff), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["vit-tiny-seed0", "vit-tiny-seed1", "mae-tiny-seed0", "mae-tiny-seed1"])
def test_extract_hf_vision_zoo_equals_forward(tmp_path, name):
    import torch
    from transformers import AutoImageProcessor, AutoModel

    import actkit

    out = actkit.extract(zoo.model_spec(name), zoo.image_inputs(), tmp_path / "v.h5",
                         layers=["encoder.layer.1", "encoder.layer.3"], max_samples=7,
                         batch_size=3, progress=False)
    path = zoo.model_path(name)
    kwargs = {"mask_ratio": 0.0} if name.startswith("mae") else {}
    model = AutoModel.from_pretrained(path, **kwargs).eval()
    proc = AutoImageProcessor.from_pretrained(path)
    images = np.load(zoo.image_inputs())[:7]
    pixels = proc(list(images), return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        extra = {}
        if name.startswith("mae"):
            n_patches = (32 // model.config.patch_size) ** 2
            extra["noise"] = torch.arange(n_patches, dtype=torch.float32).expand(7, n_patches)
        hs = model(pixel_values=pixels, output_hidden_states=True, **extra).hidden_states
    for layer, k in (("encoder.layer.1", 2), ("encoder.layer.3", 4)):
        got, idx = _rows(out, layer)
        ref = hs[k].numpy()
        assert got.shape == (ref.shape[0] * ref.shape[1], ref.shape[2])
        np.testing.assert_allclose(got, ref.reshape(-1, ref.shape[2]), atol=1e-5, rtol=1e-5)
        assert (idx[:, 0] == np.repeat(np.arange(7), ref.shape[1])).all()


@pytest.mark.parametrize("seed", zoo.SEEDS)
def test_extract_timm_resnet_zoo_equals_forward(tmp_path, seed):
    import timm
    import torch

    import actkit

    name = f"resnet-tiny-seed{seed}"
    spec = zoo.model_spec(name)
    assert spec.startswith("timm:local-dir:")
    out = actkit.extract(spec, zoo.image_inputs(), tmp_path / "r.h5", layers=["layer3", "layer4"],
                         max_samples=9, batch_size=4, progress=False)
    pooled = actkit.extract(spec, zoo.image_inputs(), tmp_path / "rp.h5", layers=["layer4"],
                            pool="mean", max_samples=9, batch_size=4, progress=False)
    model = timm.create_model("local-dir:" + str(zoo.model_path(name)), pretrained=True).eval()
    cfg = timm.data.resolve_data_config(model=model)
    assert cfg["input_size"] == (3, 32, 32)
    tf = timm.data.create_transform(**cfg)
    from PIL import Image

    x = torch.stack([tf(Image.fromarray(im)) for im in np.load(zoo.image_inputs())[:9]])
    with torch.no_grad():
        feats = model.forward_intermediates(x, indices=[3, 4], intermediates_only=True)
        logits = model(x)
    for layer, f in zip(("layer3", "layer4"), feats):
        got, idx = _rows(out, layer)
        ref = f.permute(0, 2, 3, 1).reshape(-1, f.shape[1]).numpy()  # sample, h, w
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    got, _ = _rows(pooled, "layer4")
    ref = feats[1].mean(dim=(2, 3))
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(model.fc(ref).numpy(), logits.numpy(), atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------- retraining
def test_retraining_is_bitwise_deterministic_on_one_machine(tmp_path, monkeypatch):
    """Two retrainings on the same machine give bitwise-identical weights and loss curves.

    (Shortened to 30 steps: determinism is a property of every step.) Across machines
    bitwise equality is not promised: another CPU's kernels round differently, see
    ``test_retraining_matches_the_shipped_loss_curve``."""
    from safetensors.numpy import load_file

    name = "resnet-tiny-seed0"
    monkeypatch.setitem(zoo.TRAIN, "resnet", {**zoo.TRAIN["resnet"], "steps": 30})
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        out.mkdir()
        assert zoo_main(["train", "--only", name, "--out", str(out), "--threads", "1"]) == 0
        meta = json.loads((out / "zoo.json").read_text())["models"][name]
        runs.append((load_file(out / name / "model.safetensors"), meta))
    (w0, m0), (w1, m1) = runs
    assert w0.keys() == w1.keys()
    assert all(np.array_equal(w0[k], w1[k]) for k in w0)
    assert m0["weights_sha256"] == m1["weights_sha256"]
    assert m0["train"]["loss_curve"] == m1["train"]["loss_curve"]
    assert len(m0["train"]["loss_curve"]) == 30


#: How closely a retraining on another machine follows the shipped loss curve: the first
#: steps (before rounding differences compound) to LOSS_EARLY_TOL, the curve's means over
#: windows of 50 steps to LOSS_WINDOW_TOL (another CPU ended at 0.681 against the shipped
#: 0.6826, with BatchNorm running variances up to 47 apart: the weights themselves are not
#: comparable across machines, the training run is).
LOSS_EARLY_STEPS, LOSS_EARLY_TOL, LOSS_WINDOW_TOL = 10, 1e-3, 0.02


def test_retraining_matches_the_shipped_loss_curve(tmp_path):
    """``python -m actkit.zoo train --only resnet-tiny-seed0`` retrains the shipped model.

    Training is deterministic on one machine (seeded init and data order, deterministic
    algorithms, 1 thread; see the bitwise test above). On another CPU it follows the
    shipped loss curve within the tolerances above and reaches the same held-out accuracy;
    that the shipped weights compute what the framework computes is checked by
    ``test_extract_timm_resnet_zoo_equals_forward``."""
    name = "resnet-tiny-seed0"
    assert zoo_main(["train", "--only", name, "--out", str(tmp_path), "--threads", "1"]) == 0
    new_meta = json.loads((tmp_path / "zoo.json").read_text())["models"][name]
    old_meta = zoo.load_metadata()["models"][name]
    new = np.array(new_meta["train"]["loss_curve"])
    old = np.array(old_meta["train"]["loss_curve"])
    assert new.shape == old.shape
    np.testing.assert_allclose(new[:LOSS_EARLY_STEPS], old[:LOSS_EARLY_STEPS], atol=LOSS_EARLY_TOL)
    w = 50
    np.testing.assert_allclose(new.reshape(-1, w).mean(axis=1), old.reshape(-1, w).mean(axis=1),
                               atol=LOSS_WINDOW_TOL)
    assert math.isclose(sum(new_meta["heldout"]["factor_accuracy"].values()),
                        sum(old_meta["heldout"]["factor_accuracy"].values()), abs_tol=0.05)
