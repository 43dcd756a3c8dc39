"""Hugging Face hub helpers of the model and dataset loaders: one-line load errors, and
cache-only loading when the hub cannot be reached (no torch: the dataset readers use it)."""

from __future__ import annotations

import pickle
import sys
import urllib.error
import urllib.request

from huggingface_hub import constants

from actkit.errors import ModelError


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _why(exc: BaseException, limit: int = 300) -> str:
    """The error's text as ``": text"`` when it is short enough for one line, else nothing
    (a message is never cut mid-word; ACTKIT_DEBUG=1 shows the whole traceback)."""
    text = _short(exc)
    return f": {text}" if len(text) <= limit else f" ({type(exc).__name__}; ACTKIT_DEBUG=1 shows details)"


def _weights_error(where: str, exc: BaseException) -> ModelError | None:
    """One line for weight files that are not what their name says, or that torch refuses."""
    text = _short(exc)
    if type(exc).__name__ == "SafetensorError" or "header too large" in text or "HeaderTooLarge" in text:
        return ModelError(f"cannot load {where}: a .safetensors file there is not valid safetensors "
                          "(corrupt, or another format such as a pickle file renamed)")
    if isinstance(exc, pickle.UnpicklingError) or "weights_only" in text:
        return ModelError(f"cannot load {where}: torch refused a pickle weight file (it holds objects other "
                          "than tensors, which could run code; actkit loads pickles only with weights_only)")
    return None


class _Offline(Exception):
    """The hub cannot be reached (or HF_HUB_OFFLINE is set)."""


def _hub_offline_reason() -> str | None:
    """Why the Hugging Face hub is unusable now (``HF_HUB_OFFLINE``, or one failed connection),
    or None when it answers. One request, 5 s at most: no retries."""
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    try:
        urllib.request.urlopen(constants.ENDPOINT.rstrip("/") + "/api/models", timeout=5).close()
    except urllib.error.HTTPError:  # it answered
        return None
    except (OSError, ValueError) as exc:
        return f"no connection to {constants.ENDPOINT}: {_short(getattr(exc, 'reason', exc))}"
    return None


class _cache_only:
    """Make huggingface_hub (and transformers, timm, datasets through it) use only the local
    cache: no request at all, so nothing retries against an unreachable hub."""

    def __enter__(self):
        self._flags = [(constants, constants.HF_HUB_OFFLINE)]
        dconfig = sys.modules.get("datasets.config")  # datasets keeps its own copy of the flag
        if dconfig is not None and hasattr(dconfig, "HF_HUB_OFFLINE"):
            self._flags.append((dconfig, dconfig.HF_HUB_OFFLINE))
        for module, _ in self._flags:
            module.HF_HUB_OFFLINE = True

    def __exit__(self, *exc):
        for module, before in self._flags:
            module.HF_HUB_OFFLINE = before


def _offline_error(spec: str, reason: str, timm: bool = False) -> ModelError:
    alt = "--checkpoint FILE.safetensors, timm:local-dir:PATH" if timm else "a local model folder (save_pretrained)"
    return ModelError(f"cannot load {spec}: it is not in the local Hugging Face cache and the hub cannot be "
                      f"reached ({reason}); pass {alt}, or run once online to cache it")

