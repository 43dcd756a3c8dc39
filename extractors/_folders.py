"""A saved model folder on disk: its ``config.json`` and its weight files (safetensors, or
pickle files that are loaded only with ``--allow-pickle``). Shared by the transformers and
timm loaders of :mod:`.registry`.
"""

from __future__ import annotations

import json
from pathlib import Path

from actkit.errors import ModelError

from ._hub import _short

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _read_config(path: Path) -> dict:
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelError(f"{path} holds no config.json: not a saved transformers or timm model")
    try:
        return json.loads(cfg_file.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {cfg_file}: {_short(exc)}") from None


def _weight_files(path: Path) -> tuple[list, list]:
    safe = sorted(p for p in path.iterdir() if p.suffix == ".safetensors")
    pickled = sorted(p for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
    return safe, pickled


def _check_safetensors_dir(path: Path, allow_pickle: bool) -> None:
    safe, pickled = _weight_files(path)
    if not safe and pickled and not allow_pickle:
        raise ModelError(
            f"{path} has only pickle weights ({pickled[0].name}); they can run code when loaded. "
            "Convert them to safetensors, or pass --allow-pickle if you trust them"
        )
