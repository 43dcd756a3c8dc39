"""The four zoo trainers: Pythia (GPT-NeoX), ViT, MAE and ResNet on their data."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from actkit.zoo import CHECKPOINTS, CONTEXT, HELDOUT_EVERY, IMAGE_MEAN, IMAGE_SIZE, IMAGE_STD, TRAIN, TRAIN_IMAGES, TRAIN_IMAGES_SEED
from actkit.zoo._fitting import factor_accuracy, factor_labels, factor_loss, fit, image_processor


def train_pythia(seed: int, out: Path, data: dict) -> dict:
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM  # ~3 s (measured), not for a ResNet

    tokenizer = AutoTokenizer.from_pretrained(data["tokenizer_dir"])
    cfg = TRAIN["pythia"]
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=128,
        rotary_pct=0.25,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = GPTNeoXForCausalLM(config)
    stream = data["train_tokens"]  # (T,) int64: the training paragraphs, eos-separated
    n_windows = (len(stream) - 1) // CONTEXT

    def batch_loss(step, gen):
        idx = torch.randint(0, n_windows, (cfg["batch_size"],), generator=gen) * CONTEXT
        x = torch.stack([stream[i : i + CONTEXT] for i in idx.tolist()])
        return model(input_ids=x, labels=x).loss

    def save(step):  # a training checkpoint: a model folder of its own, tokenizer included
        folder = out / "checkpoints" / f"step-{step}"
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)

    name = f"pythia-tiny-seed{seed}"
    record = fit(model, cfg, batch_loss, seed, name, save_at=CHECKPOINTS.get(name, ()), save=save)
    if name in CHECKPOINTS:
        record["checkpoints"] = [f"checkpoints/step-{n}" for n in CHECKPOINTS[name]]
    with torch.no_grad():  # held-out loss on the evaluation text, per token
        total, count = 0.0, 0
        for line in data["heldout_lines"]:
            ids = tokenizer(line, truncation=True, max_length=CONTEXT, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            total += float(model(input_ids=ids, labels=ids).loss) * (ids.shape[1] - 1)
            count += ids.shape[1] - 1
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    record["data"] = (
        f"corpus/python_reference.txt minus every {HELDOUT_EVERY}th paragraph, "
        f"{len(stream)} tokens, random {CONTEXT}-token windows"
    )
    heldout = {"loss_per_token": round(total / count, 4), "uniform_loss": round(math.log(config.vocab_size), 4)}
    return result(model, record, heldout)


# the transformer encoder of both vision transformers, ViT and MAE (their patch sizes differ)
VIT_ENCODER = {
    "image_size": IMAGE_SIZE,
    "num_channels": 3,
    "hidden_size": 96,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "intermediate_size": 192,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}


def train_vit(seed: int, out: Path, data: dict) -> dict:
    from transformers import ViTConfig, ViTForImageClassification  # ~3.5 s at import (measured), not for a ResNet

    labels = factor_labels()
    cfg = TRAIN["vit"]
    config = ViTConfig(
        **VIT_ENCODER,
        patch_size=8,
        num_labels=len(labels),
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    model = ViTForImageClassification(config)

    def logits(pixels):
        return model(pixel_values=pixels).logits

    record, heldout = fit_factors(model, logits, cfg, seed, f"vit-tiny-seed{seed}", data)
    model.save_pretrained(out, safe_serialization=True)
    image_processor().save_pretrained(out)
    return result(model, record, heldout)


def train_mae(seed: int, out: Path, data: dict) -> dict:
    from transformers import ViTMAEConfig, ViTMAEForPreTraining  # ~3.5 s at import (measured), not for a ResNet

    cfg = TRAIN["mae"]
    config = ViTMAEConfig(
        **VIT_ENCODER,
        patch_size=4,
        decoder_hidden_size=64,
        decoder_num_hidden_layers=2,
        decoder_num_attention_heads=4,
        decoder_intermediate_size=128,
        mask_ratio=0.75,
        norm_pix_loss=False,
    )
    model = ViTMAEForPreTraining(config)
    x_all = data["train_pixels"]

    def batch_loss(step, gen):
        idx = torch.randint(0, len(x_all), (cfg["batch_size"],), generator=gen)
        return model(pixel_values=x_all[idx]).loss  # masking noise from the seeded global RNG

    record = fit(model, cfg, batch_loss, seed, f"mae-tiny-seed{seed}")
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        n_patches = (IMAGE_SIZE // config.patch_size) ** 2
        noise = torch.rand(len(data["eval_pixels"]), n_patches, generator=g)
        loss = float(model(pixel_values=data["eval_pixels"], noise=noise).loss)
    model.save_pretrained(out, safe_serialization=True)
    image_processor().save_pretrained(out)
    record["data"] = shapes_data_note()
    record["objective"] = "MAE masked-patch reconstruction (mask ratio 0.75, pixel MSE)"
    heldout = {"masked_reconstruction_mse": round(loss, 5),
               "pixel_variance": round(float(data["eval_pixels"].var()), 5)}
    return result(model, record, heldout)


RESNET_ARGS = {
    "layers": [1, 1, 1, 1],
    "channels": [16, 32, 64, 128],
    "stem_width": 16,
    "num_classes": 50,
}


def train_resnet(seed: int, out: Path, data: dict) -> dict:
    import timm  # timm: ~2 s at import beyond torch (measured); only the ResNet family needs it

    cfg = TRAIN["resnet"]
    model = timm.create_model("resnet18", pretrained=False, **RESNET_ARGS)
    record, heldout = fit_factors(model, model, cfg, seed, f"resnet-tiny-seed{seed}", data)
    timm.models.save_for_hf(
        model,
        out,
        model_args=dict(RESNET_ARGS),
        safe_serialization=True,
        data_config={
            "input_size": (3, IMAGE_SIZE, IMAGE_SIZE),
            "interpolation": "bilinear",
            "crop_pct": 1.0,
            "crop_mode": "center",
            "mean": IMAGE_MEAN,
            "std": IMAGE_STD,
        },
        model_config={
            "pretrained_cfg": {
                "tag": "actkit_zoo",
                "license": "apache-2.0",
                "origin_url": "actkit.zoo (python -m actkit.zoo train)",
                "paper_ids": "",
                "label_names": list(factor_labels().values()),
            }
        },
    )
    cls = "timm resnet18 (layers [1,1,1,1], channels [16,32,64,128], stem_width 16)"
    return result(model, record, heldout, framework="timm", cls=cls)


TRAINERS = {"pythia": train_pythia, "vit": train_vit, "mae": train_mae, "resnet": train_resnet}


def fit_factors(model, logits_of, cfg: dict, seed: int, desc: str, data: dict) -> tuple[dict, dict]:
    """Train a shapes-factor classifier (ViT, ResNet) and score it on the held-out images.

    The loss is :func:`~actkit.zoo._fitting.factor_loss` of ``logits_of(pixels)`` (n, 50) on
    random minibatches of the training images; returns the training record (with its data and
    objective) and ``{"factor_accuracy": {factor: accuracy}}`` on the evaluation images.
    """
    x_all, f_all = data["train_pixels"], data["train_factors"]

    def batch_loss(step, gen):
        idx = torch.randint(0, len(x_all), (cfg["batch_size"],), generator=gen)
        return factor_loss(logits_of(x_all[idx]), f_all[idx])

    record = fit(model, cfg, batch_loss, seed, desc)
    with torch.no_grad():
        acc = factor_accuracy(logits_of(data["eval_pixels"]), data["eval_factors"])
    record["data"] = shapes_data_note()
    record["objective"] = "mean over the 7 factors of the cross-entropy of its slice of the 50 logits"
    return record, {"factor_accuracy": acc}


def result(model, record: dict, heldout: dict, *, framework: str = "transformers", cls: str | None = None) -> dict:
    """What a trainer returns: the trained model, its training record, its held-out scores, and
    its framework and class as ``zoo.json`` records them (``cls`` default: the model's class name)."""
    return {"framework": framework, "class": cls or type(model).__name__, "model": model, "train": record,
            "heldout": heldout}


def shapes_data_note() -> str:
    return (
        f"actkit.zoo.shapes.render_shapes({TRAIN_IMAGES}, size={IMAGE_SIZE}, "
        f"random_state={TRAIN_IMAGES_SEED}); random minibatches drawn with the seed"
    )
