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

The training data are generated (:mod:`actkit.zoo.shapes`) or shipped
(``data/zoo/corpus/python_reference.txt``, built once by :func:`build_corpus` from the
Python documentation that every CPython installation carries in ``pydoc_data``).

Layout: this module is the runtime half (names, paths, metadata; all that extraction and
the demo need). The training half -- ``_corpus`` (corpus and tokenizer), ``_fitting``
(the training loop and its helpers), ``_families`` (the four trainers) and ``training``
(:func:`~actkit.zoo.training.train_model`, :func:`~actkit.zoo.training.train_zoo`) -- is
imported only by ``python -m actkit.zoo`` (``actkit/zoo/__main__.py``; torch only for
``train``). ``shapes`` renders the shapes images the vision models are trained and
evaluated on.
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

from actkit.errors import ActkitError
from actkit.zoo.shapes import FACTOR_NAMES

__all__ = [
    "FAMILIES",
    "MODELS",
    "SEEDS",
    "image_inputs",
    "list_models",
    "format_models",
    "load_metadata",
    "model_path",
    "model_spec",
    "text_inputs",
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

# training checkpoints kept (``<model>/checkpoints/step-N``, for ``actkit sweep --checkpoints``):
# Pythia-tiny seed 0 after these optimizer steps (the model itself is step 300)
CHECKPOINTS = {"pythia-tiny-seed0": (10, 30, 100, 200)}

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
    """The zoo's folder.

    ``$ACTKIT_ZOO`` if set; else the zoo installed with the package (package data
    ``actkit/zoo/data`` of a wheel or sdist install, found through ``importlib.resources``);
    else ``data/zoo`` of the source checkout (an editable install or a plain checkout, where
    setup.py's package data comes from).
    """
    env = os.environ.get("ACTKIT_ZOO")
    if env:
        return Path(env)
    shipped = Path(str(resources.files("actkit.zoo").joinpath("data")))
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / "data" / "zoo"


def check_name(name: str) -> str:
    if name not in MODELS:
        raise ActkitError(f"unknown zoo model {name!r}; the zoo has: {', '.join(MODELS)}")
    return name


def require(path: Path, what: str) -> Path:
    if not path.exists():
        raise ActkitError(
            f"{what} not found at {path}: the zoo is missing (set ACTKIT_ZOO to its folder, "
            "or rebuild it with `python -m actkit.zoo train`)"
        )
    return path


def model_path(name: str) -> Path:
    """Directory of one zoo checkpoint, e.g. ``model_path("vit-tiny-seed0")``."""
    return require(zoo_dir() / check_name(name), f"zoo model {name!r}")


def model_spec(name: str) -> str:
    """The model string to give ``actkit.extract`` for a zoo checkpoint.

    HF models are addressed by their directory, timm models as
    ``timm:local-dir:<directory>`` (loaded by ``timm.create_model``).
    """
    path = model_path(name)
    return f"timm:local-dir:{path}" if name.startswith("resnet") else str(path)


def text_inputs() -> Path:
    """Held-out text lines (one sample a line) for the language models."""
    return require(zoo_dir() / "inputs" / "text.txt", "zoo text inputs")


def image_inputs() -> Path:
    """Held-out shapes images, ``.npy`` uint8 of shape (512, 32, 32, 3)."""
    return require(zoo_dir() / "inputs" / "shapes.npy", "zoo image inputs")


def image_factors() -> tuple[np.ndarray, tuple[str, ...]]:
    """Factors of :func:`image_inputs`: int64 array (512, 7) and the factor names."""
    path = require(zoo_dir() / "inputs" / "shapes_factors.npy", "zoo image factors")
    return np.load(path), FACTOR_NAMES


def load_metadata() -> dict:
    """The zoo's ``zoo.json``: per model config, weights hash, training record, loss curve."""
    path = require(zoo_dir() / "zoo.json", "zoo metadata")
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


def format_models() -> str:
    """:func:`list_models` as a table: name, parameters, first and last training loss, held-out
    scores (what ``actkit zoo list`` prints)."""
    lines = [f"{'name':20s} {'params':>9s} {'loss first -> last':>20s}  held-out"]
    for row in list_models():
        lines.append(f"{row['name']:20s} {row['parameters']:9,d} {row['train_loss_first']:8.3f} -> "
                     f"{row['train_loss_last']:7.3f}  {json.dumps(row['heldout'])}")
    return "\n".join(lines)
