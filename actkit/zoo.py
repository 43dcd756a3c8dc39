"""The shipped zoo: small, genuinely trained checkpoints for every model family, offline.

``data/zoo`` holds two training seeds of four families, each saved in its framework's own
format so that extraction loads it through the same code path as a hub checkpoint:

==================  ==========================================  ===============================
name                architecture (framework)                    trained on
==================  ==========================================  ===============================
pythia-tiny-seedS   GPTNeoXForCausalLM + byte-level BPE (HF)    Python language reference text
vit-tiny-seedS      ViTForImageClassification (HF)              shapes: all 7 factors
mae-tiny-seedS      ViTMAEForPreTraining (HF)                   shapes: masked reconstruction
resnet-tiny-seedS   timm ResNet (``save_for_hf``, safetensors)  shapes: all 7 factors
==================  ==========================================  ===============================

with S in {0, 1}. Address them with :func:`model_spec` (a local directory for HF models,
``timm:local-dir:<dir>`` for timm). Evaluation inputs live beside them
(:func:`text_inputs`, :func:`image_inputs`), and ``zoo.json`` records every model's
configuration, weights hash, training hyper-parameters, loss curve and held-out scores.

Retrain (deterministic given the seeds; 15 min measured on a busy shared 2-core machine,
about 6 min estimated on an idle one; see docs/zoo.md)::

    python -m actkit.zoo train                       # everything, into data/zoo
    python -m actkit.zoo train --only resnet-tiny-seed0 --out /tmp/zoo
    python -m actkit.zoo list

The training data are generated (:mod:`actkit.synthetic.shapes`) or shipped
(``data/zoo/corpus/python_reference.txt``, built once by :func:`build_corpus` from the
Python documentation that every CPython installation carries in ``pydoc_data``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from actkit.errors import ActkitError

__all__ = [
    "FAMILIES",
    "MODELS",
    "SEEDS",
    "build_corpus",
    "image_inputs",
    "list_models",
    "load_metadata",
    "model_path",
    "model_spec",
    "text_inputs",
    "train_model",
    "train_zoo",
    "zoo_dir",
]

SEEDS = (0, 1)
FAMILIES = ("pythia", "mae", "resnet", "vit")
MODELS = tuple(f"{family}-tiny-seed{seed}" for family in FAMILIES for seed in SEEDS)

IMAGE_SIZE = 32
TRAIN_IMAGES = 20000
TRAIN_IMAGES_SEED = 12345  # the training images are the same for both seeds
EVAL_IMAGES = 512
EVAL_IMAGES_SEED = 2026  # held-out evaluation images (shipped as inputs/shapes.npy)
HELDOUT_EVERY = 16  # every 16th corpus paragraph is held out (shipped as inputs/text.txt)
MAX_HELDOUT_LINES = 400
TOKENIZER_VOCAB = 1024
CONTEXT = 64  # training sequence length of the language models
IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)
EOS = "<|endoftext|>"

# training hyper-parameters of each family (the seed changes initialisation and data order)
TRAIN = {
    "pythia": {"steps": 300, "batch_size": 32, "lr": 3e-3, "warmup": 20, "weight_decay": 0.01},
    "vit": {"steps": 600, "batch_size": 64, "lr": 1.5e-3, "warmup": 40, "weight_decay": 0.05},
    # MAE: 1500 steps, where the held-out masked-patch MSE and the effective rank of
    # encoder.layer.3 stop improving (400 / 1500 / 3000 steps: MSE 0.0350 / 0.0345 / 0.0344,
    # k99 5 / 11 / 12; docs/zoo.md)
    "mae": {"steps": 1500, "batch_size": 64, "lr": 1.5e-3, "warmup": 30, "weight_decay": 0.05},
    "resnet": {"steps": 400, "batch_size": 64, "lr": 3e-3, "warmup": 20, "weight_decay": 0.01},
}


# ----------------------------------------------------------------------------- locations
def zoo_dir() -> Path:
    """The zoo's folder: ``$ACTKIT_ZOO`` if set, else ``data/zoo`` of the source checkout."""
    env = os.environ.get("ACTKIT_ZOO")
    path = Path(env) if env else Path(__file__).resolve().parents[1] / "data" / "zoo"
    return path


def _check_name(name: str) -> str:
    if name not in MODELS:
        raise ActkitError(f"unknown zoo model {name!r}; the zoo has: {', '.join(MODELS)}")
    return name


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise ActkitError(
            f"{what} not found at {path}: the zoo is missing (set ACTKIT_ZOO to its folder, "
            "or rebuild it with `python -m actkit.zoo train`)"
        )
    return path


def model_path(name: str) -> Path:
    """Directory of one zoo checkpoint, e.g. ``model_path("vit-tiny-seed0")``."""
    return _require(zoo_dir() / _check_name(name), f"zoo model {name!r}")


def model_spec(name: str) -> str:
    """The model string to give ``actkit.extract`` for a zoo checkpoint.

    HF models are addressed by their directory, timm models as
    ``timm:local-dir:<directory>`` (loaded by ``timm.create_model``).
    """
    path = model_path(name)
    return f"timm:local-dir:{path}" if name.startswith("resnet") else str(path)


def text_inputs() -> Path:
    """Held-out text lines (one sample a line) for the language models."""
    return _require(zoo_dir() / "inputs" / "text.txt", "zoo text inputs")


def image_inputs() -> Path:
    """Held-out shapes images, ``.npy`` uint8 of shape (512, 32, 32, 3)."""
    return _require(zoo_dir() / "inputs" / "shapes.npy", "zoo image inputs")


def image_factors() -> tuple[np.ndarray, tuple[str, ...]]:
    """Factors of :func:`image_inputs`: int64 array (512, 7) and the factor names."""
    from actkit.synthetic.shapes import FACTOR_NAMES

    path = _require(zoo_dir() / "inputs" / "shapes_factors.npy", "zoo image factors")
    return np.load(path), FACTOR_NAMES


def load_metadata() -> dict:
    """The zoo's ``zoo.json``: per model config, weights hash, training record, loss curve."""
    path = _require(zoo_dir() / "zoo.json", "zoo metadata")
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def list_models() -> list[dict]:
    """One dict per zoo model: name, family, seed, spec, params, final train loss, held-out score."""
    meta = load_metadata()["models"]
    rows = []
    for name in MODELS:
        m = meta.get(name)
        if m is None:
            continue
        rows.append(
            {
                "name": name,
                "family": m["family"],
                "seed": m["seed"],
                "spec": model_spec(name),
                "parameters": m["parameters"],
                "train_loss_first": m["train"]["loss_curve"][0],
                "train_loss_last": m["train"]["loss_curve"][-1],
                "heldout": m["heldout"],
                "train_seconds": m["train"]["seconds"],
            }
        )
    return rows


# ----------------------------------------------------------------------------- the corpus
def build_corpus(path: str | os.PathLike, *, max_chars: int = 1_200_000) -> int:
    """Write the text corpus from the Python documentation that ships with CPython.

    Two sources, both under the PSF licence and present on every CPython installation:
    the language reference behind ``help('if')`` (``pydoc_data.topics``, sorted by topic),
    then the docstrings of the standard library's top-level modules (sorted by file name,
    parsed with :mod:`ast`, never imported). Each is cut into paragraphs, one per line,
    whitespace collapsed; lines under 40 characters and duplicates are dropped; the file
    stops at ``max_chars``. The zoo ships the result, so retraining does not depend on the
    local Python version.

    Returns
    -------
    n_lines : int
    """
    import ast
    import sysconfig

    from pydoc_data import topics

    seen, lines, total = set(), [], 0

    def add(text: str) -> bool:
        nonlocal total
        for para in text.split("\n\n"):
            line = " ".join(para.split())
            if len(line) >= 40 and line not in seen:
                if total + len(line) + 1 > max_chars:
                    return False
                seen.add(line)
                lines.append(line)
                total += len(line) + 1
        return True

    texts = [topics.topics[key] for key in sorted(topics.topics)]
    for file in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    texts.append(doc)
    for text in texts:
        if not add(text):
            break
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _split_corpus(corpus: Path) -> tuple[list[str], list[str]]:
    lines = [ln for ln in corpus.read_text(encoding="utf-8").splitlines() if ln.strip()]
    train = [ln for i, ln in enumerate(lines) if i % HELDOUT_EVERY != 0]
    heldout = [ln for i, ln in enumerate(lines) if i % HELDOUT_EVERY == 0][:MAX_HELDOUT_LINES]
    return train, heldout


def _train_tokenizer(train_lines: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(train_lines, trainer=trainer)
    # like Pythia's: bos = eos = unk = <|endoftext|>, and NO pad token
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, model_max_length=128
    )


# ----------------------------------------------------------------------------- training utils
@contextlib.contextmanager
def _deterministic(seed: int, threads: int | None):
    import torch

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


def _lr_at(step: int, cfg: dict) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    t = (step - cfg["warmup"]) / max(1, cfg["steps"] - cfg["warmup"])
    return cfg["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def _fit(model, cfg: dict, batch_loss, seed: int, desc: str) -> dict:
    """AdamW loop; ``batch_loss(step, generator) -> loss``; returns the training record."""
    import torch
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    gen = torch.Generator().manual_seed(10_000 + seed)  # data order
    losses = []
    t0 = time.perf_counter()
    model.train()
    bar = tqdm(range(cfg["steps"]), desc=desc, disable=None, leave=False)
    for step in bar:
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        loss = batch_loss(step, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return {
        **cfg,
        "optimizer": "AdamW, linear warm-up + cosine decay to 0.1 lr, grad-norm clip 1.0",
        "seconds": round(time.perf_counter() - t0, 1),
        "loss_curve": [float(f"{x:.6g}") for x in losses],
    }


def _pixels(images_uint8):
    """uint8 (N, H, W, 3) numpy -> normalised float32 (N, 3, H, W), as the saved processors do."""
    import torch

    x = torch.from_numpy(np.ascontiguousarray(images_uint8)).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD).view(1, 3, 1, 1)
    return (x - mean) / std


def _factor_loss(logits, factors):
    """Mean over the 7 factors of the cross-entropy of each factor's slice of the logits."""
    import torch.nn.functional as F

    from actkit.synthetic.shapes import FACTOR_SIZES

    loss, start = 0.0, 0
    for j, k in enumerate(FACTOR_SIZES):
        loss = loss + F.cross_entropy(logits[:, start : start + k], factors[:, j])
        start += k
    return loss / len(FACTOR_SIZES)


def _factor_accuracy(logits, factors) -> dict:
    from actkit.synthetic.shapes import FACTOR_NAMES, FACTOR_SIZES

    acc, start = {}, 0
    for j, (name, k) in enumerate(zip(FACTOR_NAMES, FACTOR_SIZES)):
        pred = logits[:, start : start + k].argmax(1)
        acc[name] = round(float((pred == factors[:, j]).float().mean()), 4)
        start += k
    return acc


def _factor_labels() -> dict:
    from actkit.synthetic.shapes import FACTOR_NAMES, FACTOR_SIZES, SHAPE_NAMES

    labels = []
    for name, k in zip(FACTOR_NAMES, FACTOR_SIZES):
        for level in range(k):
            labels.append(f"{name}={SHAPE_NAMES[level] if name == 'shape' else level}")
    return dict(enumerate(labels))


def _n_params(model) -> int:
    return int(sum(p.numel() for p in model.parameters()))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _image_processor():
    from transformers import ViTImageProcessor

    return ViTImageProcessor(
        do_resize=True,
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        do_rescale=True,
        do_normalize=True,
        image_mean=list(IMAGE_MEAN),
        image_std=list(IMAGE_STD),
    )


# ----------------------------------------------------------------------------- families
def _train_pythia(seed: int, out: Path, data: dict) -> dict:
    import torch
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

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

    record = _fit(model, cfg, batch_loss, seed, f"pythia-tiny-seed{seed}")
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
    return {
        "framework": "transformers",
        "class": "GPTNeoXForCausalLM",
        "model": model,
        "train": record,
        "heldout": {"loss_per_token": round(total / count, 4), "uniform_loss": round(math.log(config.vocab_size), 4)},
    }


def _train_vit(seed: int, out: Path, data: dict) -> dict:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    labels = _factor_labels()
    cfg = TRAIN["vit"]
    config = ViTConfig(
        image_size=IMAGE_SIZE,
        patch_size=8,
        num_channels=3,
        hidden_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=192,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=len(labels),
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
    )
    model = ViTForImageClassification(config)
    x_all, f_all = data["train_pixels"], data["train_factors"]

    def batch_loss(step, gen):
        idx = torch.randint(0, len(x_all), (cfg["batch_size"],), generator=gen)
        return _factor_loss(model(pixel_values=x_all[idx]).logits, f_all[idx])

    record = _fit(model, cfg, batch_loss, seed, f"vit-tiny-seed{seed}")
    with torch.no_grad():
        acc = _factor_accuracy(model(pixel_values=data["eval_pixels"]).logits, data["eval_factors"])
    model.save_pretrained(out, safe_serialization=True)
    _image_processor().save_pretrained(out)
    record["data"] = _shapes_data_note()
    record["objective"] = "mean over the 7 factors of the cross-entropy of its slice of the 50 logits"
    return {
        "framework": "transformers",
        "class": "ViTForImageClassification",
        "model": model,
        "train": record,
        "heldout": {"factor_accuracy": acc},
    }


def _train_mae(seed: int, out: Path, data: dict) -> dict:
    import torch
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    cfg = TRAIN["mae"]
    config = ViTMAEConfig(
        image_size=IMAGE_SIZE,
        patch_size=4,
        num_channels=3,
        hidden_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=192,
        decoder_hidden_size=64,
        decoder_num_hidden_layers=2,
        decoder_num_attention_heads=4,
        decoder_intermediate_size=128,
        mask_ratio=0.75,
        norm_pix_loss=False,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = ViTMAEForPreTraining(config)
    x_all = data["train_pixels"]

    def batch_loss(step, gen):
        idx = torch.randint(0, len(x_all), (cfg["batch_size"],), generator=gen)
        return model(pixel_values=x_all[idx]).loss  # masking noise from the seeded global RNG

    record = _fit(model, cfg, batch_loss, seed, f"mae-tiny-seed{seed}")
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        n_patches = (IMAGE_SIZE // config.patch_size) ** 2
        noise = torch.rand(len(data["eval_pixels"]), n_patches, generator=g)
        loss = float(model(pixel_values=data["eval_pixels"], noise=noise).loss)
    model.save_pretrained(out, safe_serialization=True)
    _image_processor().save_pretrained(out)
    record["data"] = _shapes_data_note()
    record["objective"] = "MAE masked-patch reconstruction (mask ratio 0.75, pixel MSE)"
    return {
        "framework": "transformers",
        "class": "ViTMAEForPreTraining",
        "model": model,
        "train": record,
        "heldout": {"masked_reconstruction_mse": round(loss, 5), "pixel_variance": round(float(data["eval_pixels"].var()), 5)},
    }


RESNET_ARGS = {
    "layers": [1, 1, 1, 1],
    "channels": [16, 32, 64, 128],
    "stem_width": 16,
    "num_classes": 50,
}


def _train_resnet(seed: int, out: Path, data: dict) -> dict:
    import timm
    import torch

    cfg = TRAIN["resnet"]
    model = timm.create_model("resnet18", pretrained=False, **RESNET_ARGS)
    x_all, f_all = data["train_pixels"], data["train_factors"]

    def batch_loss(step, gen):
        idx = torch.randint(0, len(x_all), (cfg["batch_size"],), generator=gen)
        return _factor_loss(model(x_all[idx]), f_all[idx])

    record = _fit(model, cfg, batch_loss, seed, f"resnet-tiny-seed{seed}")
    with torch.no_grad():
        acc = _factor_accuracy(model(data["eval_pixels"]), data["eval_factors"])
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
                "label_names": list(_factor_labels().values()),
            }
        },
    )
    record["data"] = _shapes_data_note()
    record["objective"] = "mean over the 7 factors of the cross-entropy of its slice of the 50 logits"
    return {
        "framework": "timm",
        "class": "timm resnet18 (layers [1,1,1,1], channels [16,32,64,128], stem_width 16)",
        "model": model,
        "train": record,
        "heldout": {"factor_accuracy": acc},
    }


_TRAINERS = {"pythia": _train_pythia, "vit": _train_vit, "mae": _train_mae, "resnet": _train_resnet}


def _shapes_data_note() -> str:
    return (
        f"actkit.synthetic.shapes.render_shapes({TRAIN_IMAGES}, size={IMAGE_SIZE}, "
        f"random_state={TRAIN_IMAGES_SEED}); random minibatches drawn with the seed"
    )


# ----------------------------------------------------------------------------- orchestration
def _prepare_data(families: set[str], root: Path, corpus: Path) -> dict:
    """Build (and write under ``root``) what the requested families train and evaluate on."""
    import torch

    from actkit.synthetic.shapes import render_shapes

    data: dict = {}
    inputs = root / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    if families & {"vit", "mae", "resnet"}:
        images, factors, _ = render_shapes(TRAIN_IMAGES, size=IMAGE_SIZE, random_state=TRAIN_IMAGES_SEED)
        data["train_pixels"] = _pixels(images)
        data["train_factors"] = torch.from_numpy(factors)
        ev_images, ev_factors, _ = render_shapes(EVAL_IMAGES, size=IMAGE_SIZE, random_state=EVAL_IMAGES_SEED)
        np.save(inputs / "shapes.npy", ev_images)
        np.save(inputs / "shapes_factors.npy", ev_factors)
        data["eval_pixels"] = _pixels(ev_images)
        data["eval_factors"] = torch.from_numpy(ev_factors)
    if "pythia" in families:
        train_lines, heldout = _split_corpus(corpus)
        (inputs / "text.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
        tokenizer = _train_tokenizer(train_lines)
        tok_dir = root / "_tokenizer"
        tokenizer.save_pretrained(tok_dir)
        encodings = tokenizer.backend_tokenizer.encode_batch(train_lines, add_special_tokens=False)
        stream = [t for enc in encodings for t in (*enc.ids, tokenizer.eos_token_id)]
        data["tokenizer_dir"] = tok_dir
        data["train_tokens"] = torch.tensor(stream, dtype=torch.int64)
        data["heldout_lines"] = heldout
    return data


def train_model(name: str, out_dir: str | os.PathLike, *, data: dict, threads: int | None = 1) -> dict:
    """Train one zoo model into ``out_dir/<name>`` (written atomically); returns its metadata.

    Parameters
    ----------
    name : str
        One of :data:`MODELS`.
    out_dir : path
        The zoo folder to write into.
    data : dict
        Training data from ``_prepare_data`` (built by :func:`train_zoo`).
    threads : int or None, default=1
        ``torch.set_num_threads`` during training (restored afterwards). One thread is the
        default: on a shared machine two OpenMP threads ran 5x slower than one (spin waits).
    """
    import torch

    family, seed = name.split("-tiny-seed")[0], int(name.rsplit("seed", 1)[1])
    out_dir = Path(out_dir)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))
    try:
        with _deterministic(seed, threads):
            info = _TRAINERS[family](seed, tmp, data)
        model = info.pop("model")
        weights = tmp / "model.safetensors"
        final = out_dir / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        os.chmod(final, 0o755)
        for f in final.iterdir():
            os.chmod(f, 0o644)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "family": family,
        "seed": seed,
        **info,
        "path": name,
        "parameters": _n_params(model),
        "weights_sha256": _sha256(final / weights.name),
        "versions": {"torch": torch.__version__, **_lib_versions()},
    }


def _lib_versions() -> dict:
    import timm
    import tokenizers
    import transformers

    return {"transformers": transformers.__version__, "timm": timm.__version__, "tokenizers": tokenizers.__version__}


def train_zoo(
    out_dir: str | os.PathLike | None = None,
    *,
    only: list[str] | None = None,
    threads: int | None = 1,
    corpus: str | os.PathLike | None = None,
) -> dict:
    """Retrain zoo models and write them, their inputs and ``zoo.json`` to ``out_dir``.

    Deterministic given the seeds: on the same machine and library versions the weights
    are bitwise identical to the shipped ones (``tests/test_zoo.py`` checks one model).

    Parameters
    ----------
    out_dir : path or None
        Destination (default: :func:`zoo_dir`). Existing models of the same names are replaced;
        ``zoo.json`` entries of other models are kept.
    only : list of str or None
        Names from :data:`MODELS` to train (default: all eight).
    threads : int or None, default=1
        Torch CPU threads used for training (see :func:`train_model`).
    corpus : path or None
        The text corpus (default: the shipped ``corpus/python_reference.txt`` of the zoo;
        built with :func:`build_corpus` when neither exists).

    Returns
    -------
    metadata : dict
        The content written to ``zoo.json``.
    """
    names = list(MODELS) if not only else [_check_name(n) for n in only]
    out = Path(out_dir) if out_dir is not None else zoo_dir()
    out.mkdir(parents=True, exist_ok=True)
    if corpus is None:
        corpus = zoo_dir() / "corpus" / "python_reference.txt"
        if not corpus.exists():
            corpus = out / "corpus" / "python_reference.txt"
            corpus.parent.mkdir(parents=True, exist_ok=True)
            build_corpus(corpus)
    corpus = Path(corpus)
    if not corpus.exists():
        raise ActkitError(f"corpus {corpus} not found")
    if (out / "corpus" / corpus.name).resolve() != corpus.resolve():
        (out / "corpus").mkdir(exist_ok=True)
        shutil.copyfile(corpus, out / "corpus" / corpus.name)

    meta_path = out / "zoo.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.setdefault("models", {})
    t0 = time.perf_counter()
    data = _prepare_data({n.split("-")[0] for n in names}, out, corpus)
    try:
        for name in names:
            print(f"training {name} ...", file=sys.stderr, flush=True)
            meta["models"][name] = train_model(name, out, data=data, threads=threads)
            m = meta["models"][name]
            print(
                f"  {name}: {m['parameters']:,} params, loss {m['train']['loss_curve'][0]:.3f} -> "
                f"{m['train']['loss_curve'][-1]:.3f} in {m['train']['seconds']} s",
                file=sys.stderr,
                flush=True,
            )
    finally:
        shutil.rmtree(out / "_tokenizer", ignore_errors=True)
    meta["zoo_version"] = 1
    meta["retrain"] = "python -m actkit.zoo train [--only NAME ...] [--out DIR] [--threads 1]"
    meta["inputs"] = {
        "text": {
            "path": "inputs/text.txt",
            "description": f"every {HELDOUT_EVERY}th paragraph of corpus/python_reference.txt "
            f"(never trained on), first {MAX_HELDOUT_LINES}",
        },
        "images": {
            "path": "inputs/shapes.npy",
            "factors": "inputs/shapes_factors.npy",
            "description": f"render_shapes({EVAL_IMAGES}, size={IMAGE_SIZE}, random_state={EVAL_IMAGES_SEED})",
        },
    }
    meta["corpus"] = {
        "path": f"corpus/{corpus.name}",
        "source": "pydoc_data.topics of CPython (the Python language reference; PSF licence), "
        "built by actkit.zoo.build_corpus",
        "sha256": _sha256(corpus),
    }
    meta["last_run_seconds"] = round(time.perf_counter() - t0, 1)
    tmp = meta_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, meta_path)
    return meta


# ----------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actkit.zoo", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_train = sub.add_parser("train", help="retrain zoo models (deterministic given the seeds)")
    p_train.add_argument("--only", nargs="+", metavar="NAME", choices=MODELS, help="models to train")
    p_train.add_argument("--out", default=None, help="zoo folder to write (default: the shipped zoo)")
    p_train.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    p_train.add_argument("--corpus", default=None, help="text corpus (default: the shipped one)")
    sub.add_parser("list", help="list the zoo's models")
    p_corpus = sub.add_parser("corpus", help="rebuild the text corpus from pydoc_data")
    p_corpus.add_argument("path")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "train":
            meta = train_zoo(args.out, only=args.only, threads=args.threads, corpus=args.corpus)
            print(f"zoo written to {args.out or zoo_dir()} in {meta['last_run_seconds']} s")
        elif args.cmd == "corpus":
            print(f"{build_corpus(args.path)} lines written to {args.path}")
        else:
            print(f"{'name':20s} {'params':>9s} {'loss first -> last':>20s}  held-out")
            for row in list_models():
                print(
                    f"{row['name']:20s} {row['parameters']:9,d} "
                    f"{row['train_loss_first']:8.3f} -> {row['train_loss_last']:7.3f}  "
                    f"{json.dumps(row['heldout'])}"
                )
    except ActkitError as exc:
        print(f"actkit: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
