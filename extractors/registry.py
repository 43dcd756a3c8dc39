"""Model spec string -> loaded :class:`~extractors._base.Adapter`.

Accepted specs
--------------
``org/name`` or ``name``
    A Hugging Face hub id (``--revision`` picks a branch/tag/commit, e.g. Pythia's
    ``step143000``), loaded with ``from_pretrained``: ``AutoModelForCausalLM`` when the
    config names a ``*ForCausalLM`` architecture, ``AutoModel`` otherwise.
a local directory
    Saved with ``save_pretrained`` (transformers), or holding a timm ``config.json``
    (with an ``"architecture"`` field), which is loaded like ``timm:local-dir:PATH``.
``timm:NAME``
    ``timm.create_model(NAME)``: with ``--checkpoint FILE.safetensors`` the weights come
    from that file (``pretrained=False`` then ``load_state_dict``), otherwise timm's own
    pretrained weights (downloaded / cached by timm).
``timm:local-dir:PATH``
    timm's local-folder loader (``config.json`` + ``model.safetensors``).

Safety: only safetensors weights are loaded unless ``allow_pickle=True``; models that
need custom code from the hub are refused unless ``trust_remote_code=True``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch

from actkit._device import resolve_device
from actkit._warn import warn_user
from actkit.errors import ActkitError, ModelError

from ._base import DTYPES, library_versions, sha256_file, state_sha256
from ._hf_classes import QUANT_PACKAGES, base_class, check_quantised, is_causal, is_two_tower, quantisation
from ._hub import _cache_only, _hub_offline_reason, _Offline, _offline_error, _short, _weights_error, _why
from .hf_text import TextAdapter, position_limit
from .hf_towers import TwoTowerAdapter
from .hf_vision import VisionAdapter
from ._folders import _check_safetensors_dir, _read_config, _weight_files
from ._timm_load import _load_timm

def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "./", "../", "~", "."))
        or spec.count("/") > 1
        or "\\" in spec
        or os.path.exists(os.path.expanduser(spec))
    )


def load_model(
    spec: str,
    *,
    revision: str | None = None,
    checkpoint=None,
    device: str = "cpu",
    dtype: str = "float32",
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    init_seed: int | None = None,
    device_map: str | None = None,
):
    """Load the model named by ``spec`` with its preprocessing.

    Parameters
    ----------
    spec : str
        Hub id, local directory, ``timm:NAME`` or ``timm:local-dir:PATH``.
    revision : str, optional
        Hub revision (transformers models only).
    checkpoint : path, optional
        Weights file for ``timm:NAME`` (``.safetensors``; pickle formats need
        ``allow_pickle``).
    device : str
        Torch device, e.g. ``"cpu"``, ``"cuda:0"``.
    dtype : {"float32", "float16", "bfloat16"}
        Compute dtype.
    init_seed : int, optional
        Seed of torch's RNG while the model is built, so weights the checkpoint does not
        hold (a ViT pooler) are the same in every run; the caller's RNG state is kept.
    device_map : str, optional
        ``"auto"`` (or another ``from_pretrained`` device map): ``accelerate`` places the
        layers over the available GPUs (then CPU); ``device`` is then ignored and the inputs
        go to the device of the input embeddings. transformers models only.

    Returns
    -------
    Adapter

    Raises
    ------
    ModelError
        Unknown model, missing directory, pickle-only weights, custom code required.
    """
    if dtype not in DTYPES:
        raise ActkitError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    dev = resolve_device(device)
    spec = str(spec)
    if device_map is not None:
        if spec.startswith("timm:"):
            raise ActkitError("--device-map applies to transformers models, not timm:NAME")
        try:
            import accelerate  # noqa: F401 - optional dependency (actkit[accelerate]): is it installed?
        except ImportError:
            raise ActkitError("--device-map needs the accelerate package: pip install 'actkit[accelerate]'") from None
    if checkpoint is not None and not spec.startswith("timm:"):
        raise ActkitError("--checkpoint applies to timm:NAME models; transformers models load from their directory")
    if spec.startswith("timm:"):
        if revision is not None:
            raise ActkitError("--revision applies to Hugging Face hub models, not timm:NAME")
        return _load_timm(spec[len("timm:"):], checkpoint, dev, dtype, allow_pickle)
    if _looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.exists():
            raise ModelError(f"model directory not found: {path}")
        if not path.is_dir():
            raise ModelError(f"model path {path} is not a directory (expected a saved model folder)")
        cfg = _read_config(path)
        if "architecture" in cfg and "model_type" not in cfg:
            if device_map is not None:
                raise ActkitError("--device-map applies to transformers models, not timm folders")
            return _load_timm("local-dir:" + str(path), None, dev, dtype, allow_pickle)
        if "auto_map" in cfg and not trust_remote_code:
            raise ModelError(
                f"model {spec} needs custom code from its repository (config.json auto_map); "
                "pass --trust-remote-code if you trust it"
            )
        _check_safetensors_dir(path, allow_pickle)
        with _seeded(init_seed):
            return _load_hf(str(path), revision, dev, dtype, trust_remote_code, allow_pickle, local=path,
                            device_map=device_map)
    with _seeded(init_seed):
        return _load_hf(spec, revision, dev, dtype, trust_remote_code, allow_pickle, local=None,
                        device_map=device_map)


def _seeded(seed):
    """Seed torch's RNG for the weights a checkpoint lacks, without touching the caller's."""
    if seed is None:
        return contextlib.nullcontext()
    rng = torch.random.fork_rng(devices=[])

    class _Ctx:
        def __enter__(self):
            rng.__enter__()
            torch.manual_seed(int(seed))

        def __exit__(self, *exc):
            return rng.__exit__(*exc)

    return _Ctx()


def _remote_code_error(spec: str) -> ModelError:
    return ModelError(
        f"model {spec} needs custom code from its repository; pass --trust-remote-code if you trust it"
    )


def _load_hf(spec, revision, dev, dtype, trust_remote_code, allow_pickle, local, device_map=None):
    from transformers.utils import logging as hf_logging  # transformers: ~0.7 s at import (measured), not for timm

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # our own bar is the one that matters
    # huggingface_hub logs every network retry as a warning; the user gets our one line
    hub_logger = logging.getLogger("huggingface_hub")
    hub_level = hub_logger.level
    hub_logger.setLevel(logging.ERROR)
    try:
        if local is None:
            try:
                with _cache_only():  # cached: no network at all
                    return _load_hf_quiet(spec, revision, dev, dtype, trust_remote_code, allow_pickle, local,
                                          device_map, offline=True)
            except _Offline:
                pass
            reason = _hub_offline_reason()
            if reason is not None:
                raise _offline_error(spec, reason) from None
        return _load_hf_quiet(spec, revision, dev, dtype, trust_remote_code, allow_pickle, local, device_map)
    finally:
        hub_logger.setLevel(hub_level)
        if bars:
            hf_logging.enable_progress_bar()


def _load_hf_quiet(spec, revision, dev, dtype, trust_remote_code, allow_pickle, local, device_map=None,
                   offline=False):
    """Load with transformers; ``offline``: from the cache only, raising :class:`_Offline`
    when something is not cached. Returns the adapter of the model's kind (text, vision or
    two towers)."""
    import transformers  # transformers: ~0.7 s at import (measured), not for timm

    where = str(local) if local is not None else spec
    config = _hf_config(transformers, spec, revision, trust_remote_code, local, where, offline)
    archs, causal, towers, vision = _hf_kind(config)
    auto = transformers.AutoModelForCausalLM if causal else base_class(transformers, archs)
    kwargs, quant = _hf_load_kwargs(config, spec, revision, dev, dtype, trust_remote_code, allow_pickle,
                                    device_map, vision)
    model, loading = _hf_from_pretrained(auto, spec, kwargs, where, dev, quant, offline, allow_pickle)
    random_init = _warn_missing(model, loading, where)
    dev = _hf_place(model, dev, device_map)
    info = {
        "model": spec,
        "source": "transformers",
        "revision": revision,
        "model_class": type(model).__name__,
        "loaded_with": auto.__name__,
        "weights_sha256": _hf_weights_hash(model, spec, revision, local, allow_pickle),
        "randomly_initialised": random_init,
        "versions": library_versions(),
    }
    if device_map is not None:  # where accelerate put each block (absent when all sit on one device)
        placed = getattr(model, "hf_device_map", None) or {}
        info["hf_device_map"] = {k: str(v) for k, v in placed.items()} or {"": str(dev)}
    processor, tokenizer = _hf_preprocessors(transformers, spec, revision, trust_remote_code, where, offline,
                                             vision, towers)
    if towers:
        return TwoTowerAdapter(model=model, name=spec, device=dev, info=info, tokenizer=tokenizer,
                               processor=processor, dtype=DTYPES[dtype])
    if vision:
        return VisionAdapter(model=model, name=spec, device=dev, info=info, processor=processor,
                             dtype=DTYPES[dtype])
    return TextAdapter(model=model, name=spec, device=dev, info=info, tokenizer=tokenizer, causal=causal)


def _hf_config(transformers, spec, revision, trust_remote_code, local, where, offline):
    """The model's ``AutoConfig``; a :class:`ModelError` naming the problem (custom code
    refused, unknown hub id or revision, unreadable local config), or :class:`_Offline`
    when ``offline`` and it is not cached."""
    try:
        return transformers.AutoConfig.from_pretrained(spec, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        msg = _short(exc)
        if "trust_remote_code" in msg:
            raise _remote_code_error(spec) from None
        if offline:
            raise _Offline from None
        if local is None:
            raise ModelError(
                f"cannot load model {spec!r}: not a local directory, and not found on the Hugging Face hub "
                f"(unknown id or revision){_why(exc)}"
            ) from None
        raise ModelError(f"cannot load the model config in {where}{_why(exc)}") from None


def _hf_kind(config):
    """``(architectures, causal, towers, vision)`` of a config: its architecture names, and
    whether it is a causal LM, a two-tower (text + image) model, an image model."""
    archs = list(getattr(config, "architectures", None) or [])
    causal = is_causal(archs)
    towers = is_two_tower(config, archs)
    vision = hasattr(config, "image_size") and not hasattr(config, "vocab_size") and not towers
    if vision or towers:
        causal = False
    return archs, causal, towers, vision


def _hf_load_kwargs(config, spec, revision, dev, dtype, trust_remote_code, allow_pickle, device_map, vision):
    """The keyword arguments of ``from_pretrained`` (revision, dtype, remote code,
    safetensors only unless ``allow_pickle``, MAE without masking, the device map), and the
    quantisation method of the config (None if not quantised; then checked for ``dev``)."""
    kwargs = dict(
        revision=revision,
        dtype=DTYPES[dtype],
        trust_remote_code=trust_remote_code,
        use_safetensors=None if allow_pickle else True,
    )
    if vision and getattr(config, "model_type", "") == "vit_mae":
        kwargs["mask_ratio"] = 0.0
    if device_map is not None:
        kwargs["device_map"] = device_map
    quant = quantisation(config)
    if quant is not None:
        check_quantised(spec, quant, dev, device_map)
        kwargs.pop("dtype")  # the quantisation config chooses the weights' dtypes
    return kwargs, quant


def _hf_from_pretrained(auto, spec, kwargs, where, dev, quant, offline, allow_pickle):
    """``auto.from_pretrained(spec, **kwargs)`` with transformers' load report silenced:
    ``(model, loading_info)``, or the error of :func:`_hf_load_error`."""
    from transformers.utils import logging as hf_logging  # transformers: ~0.7 s at import (measured), not for timm

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the load report lists e.g. MAE decoder weights; we warn ourselves
    try:
        return auto.from_pretrained(spec, output_loading_info=True, **kwargs)
    except Exception as exc:  # noqa: BLE001 - safetensors, pickle and hub errors have many types
        raise _hf_load_error(exc, spec, where, dev, quant, offline, allow_pickle) from None
    finally:
        hf_logging.set_verbosity(verbosity)


def _hf_load_error(exc, spec, where, dev, quant, offline, allow_pickle):
    """The error to raise for ``exc`` from ``from_pretrained``: a :class:`ModelError` naming
    the problem and the fix (custom code, bad weights, out of memory, a quantised model
    without its package or GPU, pickle weights refused), or :class:`_Offline`."""
    msg = _short(exc)
    if "trust_remote_code" in msg:
        return _remote_code_error(spec)
    special = _weights_error(where, exc)
    if special is not None:
        return special
    if "out of memory" in msg.lower():
        return ModelError(f"model {spec} does not fit on {dev}: pass --device-map auto (spreads it over the "
                          "GPUs, then CPU; needs accelerate) or --dtype float16")
    if quant is not None:
        return ModelError(f"cannot load the {quant}-quantised model {spec}{_why(exc)}; it needs its "
                          f"quantisation package ({QUANT_PACKAGES.get(quant, quant)}) and a GPU: pass "
                          "--device cuda or --device-map auto")
    if offline and isinstance(exc, OSError):
        return _Offline()
    if not allow_pickle and "safetensors" in msg.lower():
        return ModelError(
            f"model {spec} has no safetensors weights; pickle weights can run code when loaded. "
            "Pass --allow-pickle if you trust them"
        )
    return ModelError(f"cannot load model {spec}{_why(exc)}")


def _warn_missing(model, loading, where):
    """Warn when weights of ``model`` are not in ``where`` (from the loading info) and were
    randomly initialised; returns every missing key (the pooler's too)."""
    missing = sorted(loading.get("missing_keys") or [])
    # ViTModel builds a pooler head that ViT classification / MAE checkpoints do not carry;
    # it sits after the encoder, so no extracted layer but `pooler` itself reads it: no
    # warning at load (extraction warns if a requested layer needs random weights)
    random_init = missing
    missing = [k for k in missing if not k.startswith("pooler.")]
    if missing:
        warn_user(
            f"{len(missing)} weights of {type(model).__name__} are not in {where} and are randomly "
            f"initialised ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})",
        )
    return random_init


def _hf_place(model, dev, device_map):
    """Put ``model`` in eval mode on ``dev`` (or where ``device_map`` placed it); returns
    the device its inputs go to."""
    if device_map is None:
        model.eval().to(dev)
        return dev
    # accelerate placed the layers; inputs go where the embeddings are
    model.eval()
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(emb, "weight", None)
    return weight.device if weight is not None else next(model.parameters()).device


def _hf_preprocessors(transformers, spec, revision, trust_remote_code, where, offline, vision, towers):
    """``(processor, tokenizer)``: the image processor of a vision or two-tower model and
    the tokenizer of a text or two-tower one (None where not needed); a :class:`ModelError`
    when one cannot be loaded, or :class:`_Offline` when ``offline`` and it is not cached."""
    processor = tokenizer = None
    if vision or towers:
        try:
            processor = transformers.AutoImageProcessor.from_pretrained(spec, revision=revision)
        except (OSError, ValueError, KeyError) as exc:
            if offline:
                raise _Offline from None
            raise ModelError(f"cannot load the image processor of {where}{_why(exc)}") from None
    if not vision:
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(spec, revision=revision,
                                                                   trust_remote_code=trust_remote_code)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if offline:
                raise _Offline from None
            raise ModelError(f"cannot load the tokenizer of {where}{_why(exc)}") from None
    return processor, tokenizer


def _hf_weights_hash(model, spec, revision, local, allow_pickle) -> dict:
    folder = local
    if folder is None:
        try:
            from huggingface_hub import snapshot_download  # ~0.2 s at import (measured); hub models only

            folder = Path(snapshot_download(spec, revision=revision, local_files_only=True,
                                            allow_patterns=["*.safetensors", "*.bin"]))
        except Exception:  # not in the cache layout we expect: hash the loaded tensors
            folder = None
    if folder is not None:
        safe, pickled = _weight_files(Path(folder))
        files = safe or (pickled if allow_pickle else [])
        if files:
            return {p.name: sha256_file(p) for p in files}
    return {"state_dict": state_sha256(model)}


def load_tokenizer(spec, *, revision=None, trust_remote_code=False):
    """The tokenizer and the position limit of a transformers text model, without its weights.

    Read from a local folder or the local Hugging Face cache only (never the network), so a
    check on token counts runs before the model loads (``--max-batch-tokens``).

    Returns
    -------
    (tokenizer, int or None) or None
        ``None`` for timm and vision models, and for anything that does not load this way
        (the model load then says why, or the check runs after it).
    """
    spec = str(spec)
    if spec.startswith("timm:"):
        return None
    import transformers  # transformers: ~0.7 s at import (measured), not for timm
    from transformers.utils import logging as hf_logging  # transformers: ~0.7 s at import (measured), not for timm

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with _cache_only():
            config = transformers.AutoConfig.from_pretrained(spec, revision=revision,
                                                             trust_remote_code=trust_remote_code)
            if not hasattr(config, "vocab_size") or is_two_tower(config, list(config.architectures or [])):
                return None
            tokenizer = transformers.AutoTokenizer.from_pretrained(spec, revision=revision,
                                                                   trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - any failure: the model load reports it in one line
        return None
    finally:
        hf_logging.set_verbosity(verbosity)
    return tokenizer, position_limit(config)
