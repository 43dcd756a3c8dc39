"""Which transformers class loads a checkpoint, and what a quantised checkpoint needs."""

from __future__ import annotations

import importlib.util

from actkit.errors import ModelError


QUANT_PACKAGES = {"bitsandbytes": "bitsandbytes", "gptq": "gptqmodel / optimum", "awq": "autoawq",
                  "aqlm": "aqlm", "eetq": "eetq", "hqq": "hqq", "quanto": "optimum-quanto"}


def quantisation(config) -> str | None:
    """The quantisation method a checkpoint's config names (``"bitsandbytes"``, ``"gptq"``...)."""
    q = getattr(config, "quantization_config", None)
    if q is None:
        return None
    method = q.get("quant_method") if isinstance(q, dict) else getattr(q, "quant_method", None)
    method = getattr(method, "value", method)
    return str(method or "unknown")


def check_quantised(spec, method, dev, device_map) -> None:
    """A quantised checkpoint on the CPU, or without its package: one line saying what to pass."""
    package = {"bitsandbytes": "bitsandbytes", "awq": "awq", "gptq": "gptqmodel"}.get(method)
    if package is not None and importlib.util.find_spec(package) is None and not (
            method == "gptq" and importlib.util.find_spec("auto_gptq") is not None):
        raise ModelError(f"model {spec} is {method}-quantised: pip install {QUANT_PACKAGES[method]}, then pass "
                         "--device cuda or --device-map auto")
    if dev.type == "cpu" and device_map is None and method in ("bitsandbytes", "awq", "gptq"):
        raise ModelError(f"model {spec} is {method}-quantised and runs on a GPU: pass --device cuda "
                         "(or --device-map auto)")


def is_causal(archs) -> bool:
    """A causal LM: a ``*ForCausalLM`` architecture, or one transformers maps to causal LM
    heads under another name (``GPT2LMHeadModel``, ``TransfoXLLMHeadModel``...)."""
    from transformers.models.auto import modeling_auto  # transformers: ~0.8 s at import (measured), not for timm

    known = set()
    for value in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        known.update(value if isinstance(value, (tuple, list)) else [value])
    return any(a.endswith("ForCausalLM") or a in known for a in archs)


def is_two_tower(config, archs) -> bool:
    """A text tower and a vision tower in one model (CLIP, SigLIP...; not a vision-language
    decoder, whose architecture is ``*ForConditionalGeneration``)."""
    return (hasattr(config, "text_config") and hasattr(config, "vision_config")
            and all(a.endswith("Model") for a in archs))


def base_class(transformers, archs):
    """``AutoModel``, unless the checkpoint names a bare model class of its own that
    ``AutoModel`` would not pick (``T5EncoderModel``: AutoModel builds the whole
    encoder-decoder, with a randomly initialised decoder)."""
    for arch in archs[:1]:
        cls = getattr(transformers, arch, None) if "For" not in arch and "LMHead" not in arch else None
        if cls is not None and hasattr(cls, "from_pretrained"):
            return cls
    return transformers.AutoModel
