"""The training loop of the zoo models and its helpers (determinism, schedule, losses)."""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from actkit.zoo import IMAGE_MEAN, IMAGE_SIZE, IMAGE_STD
from actkit.zoo.shapes import FACTOR_NAMES, FACTOR_SIZES, SHAPE_NAMES


@contextlib.contextmanager
def deterministic(seed: int, threads: int | None):
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    if threads:
        torch.set_num_threads(int(threads))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old_det)
        torch.set_num_threads(old_threads)


def lr_at(step: int, cfg: dict) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    t = (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"])
    return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def fit(model, cfg: dict, batch_loss, seed: int, desc: str, save_at=(), save=None) -> dict:
    """AdamW loop; ``batch_loss(step, generator) -> loss``; returns the training record.
    ``save(n)`` is called after optimizer step ``n`` for every ``n`` in ``save_at`` (the
    training itself is unchanged: saving draws no random numbers)."""
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    gen = torch.Generator().manual_seed(10_000 + seed)  # data order
    losses = []
    t0 = time.perf_counter()
    model.train()
    bar = tqdm(range(cfg["steps"]), desc=desc, disable=None, leave=False)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = lr_at(step, cfg)
        loss = batch_loss(step, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if save is not None and step + 1 in save_at:
            model.eval()
            save(step + 1)
            model.train()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return {
        **cfg,
        "optimizer": "AdamW, linear warm-up + cosine decay to 0.1 lr, grad-norm clip 1.0",
        "seconds": round(time.perf_counter() - t0, 1),
        "loss_curve": [float(f"{x:.6g}") for x in losses],
    }


def pixels(images_uint8):
    """uint8 (N, H, W, 3) numpy -> normalised float32 (N, 3, H, W), as the saved processors do."""
    x = torch.from_numpy(np.ascontiguousarray(images_uint8)).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def factor_loss(logits, factors):
    """Mean over the 7 factors of the cross-entropy of each factor's slice of the logits."""
    loss, start = 0.0, 0
    for j, k in enumerate(FACTOR_SIZES):
        loss = loss + F.cross_entropy(logits[:, start : start + k], factors[:, j])
        start += k
    return loss / len(FACTOR_SIZES)


def factor_accuracy(logits, factors) -> dict:
    acc, start = {}, 0
    for j, (name, k) in enumerate(zip(FACTOR_NAMES, FACTOR_SIZES)):
        pred = logits[:, start : start + k].argmax(1)
        acc[name] = round(float((pred == factors[:, j]).float().mean()), 4)
        start += k
    return acc


def factor_labels() -> dict:
    labels = []
    for name, k in zip(FACTOR_NAMES, FACTOR_SIZES):
        for level in range(k):
            labels.append(f"{name}={SHAPE_NAMES[level] if name == 'shape' else level}")
    return dict(enumerate(labels))


def n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def image_processor():
    from transformers import ViTImageProcessor  # ~3.5 s at import (measured), only the ViT and MAE families

    return ViTImageProcessor(
        do_resize=True,
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_rescale=True,
        do_normalize=True,
        image_mean=list(IMAGE_MEAN),
        image_std=list(IMAGE_STD),
    )
