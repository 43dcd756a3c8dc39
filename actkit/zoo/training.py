"""Training the zoo: :func:`train_model` (one checkpoint) and :func:`train_zoo` (all of them).

Imported only by ``python -m actkit.zoo train``; nothing on the runtime path imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

from actkit.errors import ActkitError
from actkit._atomic import Temporary, move_into_place, write_json_atomic
from actkit._versions import library_versions
from actkit.zoo import EVAL_IMAGES, EVAL_IMAGES_SEED, HELDOUT_EVERY, IMAGE_SIZE, MAX_HELDOUT_LINES, MODELS, TRAIN_IMAGES, TRAIN_IMAGES_SEED, check_name, zoo_dir
from actkit.zoo._corpus import build_corpus, split_corpus, train_tokenizer
from actkit.zoo._families import TRAINERS
from actkit.zoo._fitting import deterministic, n_params, pixels, sha256
from actkit.zoo.shapes import render_shapes


def prepare_data(families: set[str], root: Path, corpus: Path) -> dict:
    """Build (and write under ``root``) what the requested families train and evaluate on."""
    data: dict = {}
    inputs = root / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    if families & {"vit", "mae", "resnet"}:
        images, factors, _ = render_shapes(TRAIN_IMAGES, size=IMAGE_SIZE, random_state=TRAIN_IMAGES_SEED)
        data["train_pixels"] = pixels(images)
        data["train_factors"] = torch.from_numpy(factors)
        ev_images, ev_factors, _ = render_shapes(EVAL_IMAGES, size=IMAGE_SIZE, random_state=EVAL_IMAGES_SEED)
        np.save(inputs / "shapes.npy", ev_images)
        np.save(inputs / "shapes_factors.npy", ev_factors)
        data["eval_pixels"] = pixels(ev_images)
        data["eval_factors"] = torch.from_numpy(ev_factors)
    if "pythia" in families:
        train_lines, heldout = split_corpus(corpus)
        (inputs / "text.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
        tokenizer = train_tokenizer(train_lines)
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
        Training data from ``prepare_data`` (built by :func:`train_zoo`).
    threads : int or None, default=1
        ``torch.set_num_threads`` during training (restored afterwards). One thread is the
        default: on a shared machine two OpenMP threads ran 5x slower than one (spin waits).
    """
    family, seed = name.split("-tiny-seed")[0], int(name.rsplit("seed", 1)[1])
    out_dir = Path(out_dir)
    final = out_dir / name
    # trained in a temporary folder of its own beside the model's (a killed run's is removed
    # by the next), then moved into place
    with Temporary(final) as work:
        tmp = work.file()
        tmp.mkdir()
        with deterministic(seed, threads):
            info = TRAINERS[family](seed, tmp, data)
        model = info.pop("model")
        weights = tmp / "model.safetensors"
        os.chmod(tmp, 0o755)
        for f in tmp.rglob("*"):
            os.chmod(f, 0o755 if f.is_dir() else 0o644)
        move_into_place(tmp, final)
    return {
        "family": family,
        "seed": seed,
        **info,
        "path": name,
        "parameters": n_params(model),
        "weights_sha256": sha256(final / weights.name),
        "versions": library_versions(("torch", "transformers", "timm", "tokenizers")),
    }


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
    names = list(MODELS) if not only else [check_name(n) for n in only]
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
    data = prepare_data({n.split("-")[0] for n in names}, out, corpus)
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
        "sha256": sha256(corpus),
    }
    meta["last_run_seconds"] = round(time.perf_counter() - t0, 1)
    write_json_atomic(meta_path, meta, indent=1, sort_keys=True)
    return meta
