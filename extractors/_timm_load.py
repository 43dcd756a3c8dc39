"""Loading a timm model (``timm:NAME``, ``--checkpoint FILE``, ``timm:local-dir:PATH``) for
:func:`.registry.load_model`: the weights from safetensors (pickle only with
``--allow-pickle``), timm's own pretrained weights from the cache without network, and the
model's adapter.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import torch
from safetensors.torch import load_file

from actkit.errors import ActkitError, ModelError

from ._base import DTYPES, library_versions, sha256_file, state_sha256
from ._folders import _read_config, _weight_files
from ._hub import _cache_only, _hub_offline_reason, _offline_error, _short, _weights_error, _why


def _load_timm(name, checkpoint, dev, dtype, allow_pickle):
    import timm  # timm: ~2 s at import beyond torch (measured), not for transformers models

    info = {"source": "timm", "versions": library_versions()}
    if name.startswith("local-dir:"):
        path = Path(name[len("local-dir:"):]).expanduser()
        if not path.is_dir():
            raise ModelError(f"model directory not found: {path}")
        cfg = _read_config(path)
        if "architecture" not in cfg:
            raise ModelError(f"{path}/config.json has no \"architecture\": not a timm model folder")
        safe, pickled = _weight_files(path)
        if not safe and not pickled:
            raise ModelError(f"{path} holds no weights (model.safetensors)")
        if not safe and not allow_pickle:
            raise ModelError(
                f"{path} has only pickle weights ({pickled[0].name}); they can run code when loaded. "
                "Convert them to safetensors, or pass --allow-pickle if you trust them"
            )
        if checkpoint is not None:
            raise ActkitError("--checkpoint cannot be combined with a timm local directory")
        try:
            model = timm.create_model("local-dir:" + str(path), pretrained=True)
        except Exception as exc:  # noqa: BLE001 - safetensors errors are not OSErrors
            raise (_weights_error(str(path), exc)
                   or ModelError(f"cannot load timm model from {path}{_why(exc)}")) from None
        info.update(model=str(path), weights_sha256={p.name: sha256_file(p) for p in (safe or pickled)})
    else:
        base = name.split(".", 1)[0]
        if not name or not timm.is_model(base):
            close = difflib.get_close_matches(base, timm.list_models(), n=3, cutoff=0.6)
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise ModelError(f"unknown timm model {name!r}{hint}")
        if checkpoint is not None:
            ckpt = Path(checkpoint).expanduser()
            if not ckpt.is_file():
                raise ModelError(f"checkpoint file not found: {ckpt}")
            model = timm.create_model(name, pretrained=False)
            state = _read_checkpoint(ckpt, allow_pickle)
            try:
                model.load_state_dict(state, strict=True)
            except RuntimeError as exc:
                raise ModelError(f"checkpoint {ckpt} does not fit timm:{name}: {_short(exc)[:300]}") from None
            info.update(model=f"timm:{name}", checkpoint=str(ckpt), weights_sha256={ckpt.name: sha256_file(ckpt)})
        else:
            model = _timm_pretrained(timm, name)
            info.update(model=f"timm:{name}", weights_sha256={"state_dict": state_sha256(model)})
    model.eval().to(dev, DTYPES[dtype])
    info["model_class"] = type(model).__name__
    info["architecture"] = getattr(model, "pretrained_cfg", {}).get("architecture")
    from .timm_vision import TimmAdapter  # imports timm (above): timm models only

    return TimmAdapter(model=model, name=info["model"], device=dev, info=info, dtype=DTYPES[dtype])


def _read_checkpoint(path: Path, allow_pickle: bool) -> dict:
    if path.suffix == ".safetensors":
        try:
            return load_file(str(path), device="cpu")
        except Exception as exc:
            raise (_weights_error(str(path), exc)
                   or ModelError(f"cannot read safetensors checkpoint {path}{_why(exc)}")) from None
    if not allow_pickle:
        raise ModelError(
            f"checkpoint {path} is not safetensors; pickle checkpoints can run code when loaded. "
            "Convert it to .safetensors, or pass --allow-pickle if you trust it"
        )
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise (_weights_error(str(path), exc) or ModelError(f"cannot read checkpoint {path}{_why(exc)}")) from None
    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    return state


def _timm_pretrained(timm, name):
    """timm's own pretrained weights: from the cache without network, else one quick check
    that the hub answers before timm's download (which retries for a minute when offline)."""
    def create():
        return timm.create_model(name, pretrained=True)

    try:
        with _cache_only():
            return create()
    except Exception:  # noqa: BLE001 - not cached (or not downloadable): see below
        pass
    reason = _hub_offline_reason()
    if reason is not None:
        raise _offline_error(f"timm:{name}", reason, timm=True) from None
    try:
        return create()
    except Exception as exc:  # network / cache errors come in many types
        raise ModelError(f"cannot get pretrained weights for timm:{name}{_why(exc, 200)}; pass --checkpoint "
                         "FILE.safetensors or use timm:local-dir:PATH") from None
