"""Reading a community SAE folder into ``(spec, weights)``: SAELens or EleutherAI sparsify.

Only JSON and safetensors are read (never pickle, never code). ``spec`` is a plain dict:

* ``format``: ``"saelens"`` or ``"sparsify"``;
* ``architecture``: ``standard``, ``topk``, ``abstopk``, ``jumprelu``, ``gated``,
  ``matching_pursuit`` (SAELens) or ``topk`` / ``groupmax`` (sparsify);
* ``k``, ``rescale_acts_by_decoder_norm`` (topk, abstopk), ``residual_threshold``,
  ``max_iterations``, ``stop_on_duplicate_support`` (matching_pursuit), ``apply_b_dec_to_input``,
  ``normalize_activations`` (``none``, ``expected_average_only_in``, ``constant_norm_rescale``,
  ``layer_norm``), ``d_in``, ``d_sae``, ``hook_name``, ``dtype``.

``weights`` holds float32 (float64 for a float64 SAE) numpy arrays in SAELens's orientation:
``W_enc`` (d_in, d_sae), ``W_dec`` (d_sae, d_in), ``b_enc`` (d_sae,), ``b_dec`` (d_in,), and
per architecture ``threshold`` (jumprelu), ``b_gate``, ``b_mag``, ``r_mag`` (gated), ``W_skip``
(d_in, d_in; sparsify's skip connection). A matching-pursuit SAE stores only ``W_dec`` and
``b_dec`` (its encoder is tied: ``W_enc = W_dec^T``, as SAELens's ``MatchingPursuitSAE.W_enc``).
Every tensor must be finite: a NaN or infinite weight (a diverged or corrupt SAE) is refused
on load, never evaluated.

SAELens's rules (``sae_lens/loading/pretrained_sae_loaders.py``: ``handle_config_defaulting``,
``handle_pre_6_0_config``, ``read_sae_components_from_disk``): a config without
``sae_lens_version`` (top level or in ``metadata``) or older than 6.0 is converted --
``activation_fn_str`` is ``activation_fn``; ``activation_fn == "topk"`` with
``activation_fn_kwargs.k`` is architecture ``topk`` with that ``k``; a missing architecture is
``standard``; a boolean ``normalize_activations`` is ``expected_average_only_in`` (True) or
``none``; a missing ``apply_b_dec_to_input`` is True. A ``scaling_factor`` tensor of ones is
dropped; a jumprelu ``log_threshold`` is ``threshold = exp(log_threshold)``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from packaging.version import InvalidVersion, Version
from safetensors import safe_open

from actkit.errors import InputError, ValidationError

__all__ = ["read_folder", "SAELENS_ARCHITECTURES", "NORMALIZATIONS"]

SAELENS_ARCHITECTURES = ("standard", "topk", "abstopk", "jumprelu", "gated", "matching_pursuit")
NORMALIZATIONS = ("none", "expected_average_only_in", "constant_norm_rescale", "layer_norm")
SAELENS_WEIGHTS = "sae_weights.safetensors"
SPARSIFY_WEIGHTS = "sae.safetensors"

# the tensors of each SAELens architecture (what SAELens's strict load_state_dict accepts)
_SAELENS_KEYS = {
    "standard": {"W_enc", "W_dec", "b_enc", "b_dec"},
    "topk": {"W_enc", "W_dec", "b_enc", "b_dec"},
    "abstopk": {"W_enc", "W_dec", "b_enc", "b_dec"},
    "matching_pursuit": {"W_dec", "b_dec"},
    "jumprelu": {"W_enc", "W_dec", "b_enc", "b_dec", "threshold"},
    "gated": {"W_enc", "W_dec", "b_dec", "b_gate", "b_mag", "r_mag"},
}


def read_folder(path) -> tuple[dict, dict]:
    """``(spec, weights)`` of a SAELens or sparsify folder; one-line errors for anything else."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"SAE folder not found: {folder}")
    cfg_path = folder / "cfg.json"
    if not cfg_path.is_file():
        raise InputError(f"{folder}: no cfg.json (a SAELens or sparsify SAE folder has one)")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{cfg_path}: not a JSON document ({exc})") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{cfg_path}: expected a JSON object, got {type(cfg).__name__}")
    if (folder / SAELENS_WEIGHTS).is_file():
        return _saelens(folder, cfg)
    if (folder / SPARSIFY_WEIGHTS).is_file():
        return _sparsify(folder, cfg)
    raise InputError(f"{folder}: neither {SAELENS_WEIGHTS} (SAELens) nor {SPARSIFY_WEIGHTS} (sparsify)")


def _tensors(path: Path) -> tuple[dict, str]:
    """The tensors of a safetensors file as numpy float arrays, and their stored dtype. Only
    the safetensors format is parsed (a JSON header and raw bytes): a pickle is an error."""
    out, dtype = {}, None
    try:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                t = f.get_tensor(key)
                dtype = dtype or str(t.dtype).replace("torch.", "")
                if not t.is_floating_point():
                    raise InputError(f"{path}: tensor {key} is {t.dtype}, expected floats")
                out[key] = t.double().numpy() if t.dtype == _torch().float64 else t.float().numpy()
                if not np.isfinite(out[key]).all():
                    bad = int(np.size(out[key]) - np.isfinite(out[key]).sum())
                    raise InputError(f"{path}: tensor {key} holds {bad} NaN or infinite value(s) of "
                                     f"{np.size(out[key])}: a diverged or corrupt SAE, not evaluated")
    except InputError:
        raise
    except Exception as exc:  # safetensors' own errors: a header that is not safetensors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{path}: not a safetensors file ({first})") from None
    return out, dtype or "float32"


def _torch():
    import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

    return torch


def _version_lt_6(version) -> bool:
    if not version:
        return True
    try:
        return Version(str(version)) < Version("6.0.0-rc.0")
    except InvalidVersion:
        raise InputError(f"cfg.json: sae_lens_version {version!r} is not a version") from None


def _saelens_config(cfg: dict) -> dict:
    """The 6.x config of ``cfg`` (older configs converted as SAELens does)."""
    version = cfg.get("sae_lens_version") or (cfg.get("metadata") or {}).get("sae_lens_version")
    cfg = dict(cfg)
    if _version_lt_6(version):
        if "activation_fn_str" in cfg:
            cfg["activation_fn"] = cfg.pop("activation_fn_str")
        if "hook_point" in cfg:
            cfg["hook_name"] = cfg.pop("hook_point")
        cfg.setdefault("apply_b_dec_to_input", True)
        cfg.setdefault("architecture", "standard")
        kwargs = cfg.get("activation_fn_kwargs") or {}
        if cfg.get("activation_fn", "relu") == "topk" and kwargs.get("k") is not None:
            cfg["architecture"] = "topk"
            cfg["k"] = kwargs["k"]
        norm = cfg.get("normalize_activations")
        if isinstance(norm, bool):
            cfg["normalize_activations"] = "expected_average_only_in" if norm else "none"
        if cfg.get("normalize_activations") is None:
            cfg["normalize_activations"] = "none"
    elif "architecture" not in cfg:
        raise InputError("cfg.json: a SAELens 6.x config names its architecture (key 'architecture')")
    return cfg


def _saelens(folder: Path, cfg: dict):
    cfg = _saelens_config(cfg)
    arch = cfg.get("architecture")
    if arch not in SAELENS_ARCHITECTURES:
        raise InputError(f"{folder}: unknown SAE architecture {arch!r}; actkit reads "
                         f"{', '.join(SAELENS_ARCHITECTURES)} (SAELens) and sparsify's TopK")
    norm = cfg.get("normalize_activations", "none")
    if norm not in NORMALIZATIONS:
        raise InputError(f"{folder}: normalize_activations={norm!r} is not supported "
                         f"(one of {', '.join(NORMALIZATIONS)})")
    if cfg.get("reshape_activations", "none") not in ("none", "hook_z"):
        raise InputError(f"{folder}: reshape_activations={cfg['reshape_activations']!r} is not supported")
    weights, dtype = _tensors(folder / SAELENS_WEIGHTS)
    if "scaling_factor" in weights:
        sf = weights.pop("scaling_factor")
        if not np.allclose(sf, 1.0):
            raise InputError(f"{folder}: a fine-tuning scaling_factor other than 1 (SAELens 6 loads none)")
    if arch == "jumprelu" and "log_threshold" in weights and "threshold" not in weights:
        weights["threshold"] = np.exp(weights.pop("log_threshold"))
    _expect_keys(folder / SAELENS_WEIGHTS, weights, _SAELENS_KEYS[arch])
    d_in, d_sae = _dims(cfg)
    spec = {"format": "saelens", "architecture": arch, "d_in": d_in, "d_sae": d_sae,
            "apply_b_dec_to_input": bool(cfg.get("apply_b_dec_to_input", True)),
            "normalize_activations": norm, "dtype": str(cfg.get("dtype", dtype)).replace("torch.", ""),
            "hook_name": cfg.get("hook_name") or (cfg.get("metadata") or {}).get("hook_name")}
    if arch in ("topk", "abstopk"):
        spec["k"] = _k(cfg.get("k", 100), d_sae)
        spec["rescale_acts_by_decoder_norm"] = bool(cfg.get("rescale_acts_by_decoder_norm", False))
    if arch == "matching_pursuit":
        spec.update(_pursuit_config(cfg, d_in))
        weights["W_enc"] = np.ascontiguousarray(weights["W_dec"].T)  # tied, as SAELens's W_enc property
    shapes = {"W_enc": (d_in, d_sae), "W_dec": (d_sae, d_in), "b_enc": (d_sae,), "b_dec": (d_in,),
              "threshold": (d_sae,), "b_gate": (d_sae,), "b_mag": (d_sae,), "r_mag": (d_sae,)}
    _check_shapes(folder / SAELENS_WEIGHTS, weights, shapes)
    return spec, weights


def _sparsify(folder: Path, cfg: dict):
    if cfg.get("transcode"):
        raise InputError(f"{folder}: a sparsify transcoder (it predicts another layer, not its input)")
    act = cfg.get("activation", "topk")
    if act not in ("topk", "groupmax"):
        raise InputError(f"{folder}: unknown sparsify activation {act!r} (topk or groupmax)")
    raw, dtype = _tensors(folder / SPARSIFY_WEIGHTS)
    want = {"encoder.weight", "encoder.bias", "W_dec", "b_dec"} | ({"W_skip"} if cfg.get("skip_connection") else set())
    _expect_keys(folder / SPARSIFY_WEIGHTS, raw, want)
    if raw["encoder.weight"].ndim != 2:
        raise ValidationError(f"{folder / SPARSIFY_WEIGHTS}: encoder.weight has shape {raw['encoder.weight'].shape}, "
                              "expected (num_latents, d_in)")
    d_sae = int(raw["encoder.weight"].shape[0])
    d_in = cfg.get("d_in")
    if not isinstance(d_in, int) or d_in < 1:
        raise InputError(f"{folder / 'cfg.json'}: d_in must be a positive integer, got {d_in!r}")
    n_lat = cfg.get("num_latents") or d_in * int(cfg.get("expansion_factor", 32))
    if n_lat != d_sae:
        raise ValidationError(f"{folder / SPARSIFY_WEIGHTS}: encoder.weight has {d_sae} latents, cfg.json says {n_lat}")
    _check_shapes(folder / SPARSIFY_WEIGHTS, raw, {"encoder.weight": (d_sae, d_in), "encoder.bias": (d_sae,),
                                                   "W_dec": (d_sae, d_in), "b_dec": (d_in,), "W_skip": (d_in, d_in)})
    k = _k(cfg.get("k", 32), d_sae)
    if act == "groupmax" and d_sae % k:
        raise InputError(f"{folder}: groupmax needs num_latents ({d_sae}) divisible by k ({k})")
    weights = {"W_enc": np.ascontiguousarray(raw["encoder.weight"].T), "b_enc": raw["encoder.bias"],
               "W_dec": raw["W_dec"], "b_dec": raw["b_dec"]}
    if "W_skip" in raw:
        weights["W_skip"] = np.ascontiguousarray(raw["W_skip"].T)  # x @ W_skip.T in sparsify
    spec = {"format": "sparsify", "architecture": act, "d_in": d_in, "d_sae": d_sae, "k": k,
            "apply_b_dec_to_input": True, "normalize_activations": "none", "dtype": dtype,
            "rescale_acts_by_decoder_norm": False, "hook_name": folder.name}
    return spec, weights


def _pursuit_config(cfg, d_in) -> dict:
    """A matching-pursuit SAE's stopping rules (SAELens's ``MatchingPursuitSAEConfig`` defaults)."""
    thr, its = cfg.get("residual_threshold", 1e-2), cfg.get("max_iterations")
    dup = cfg.get("stop_on_duplicate_support", True)
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not thr == thr:
        raise InputError(f"cfg.json: residual_threshold must be a number, got {thr!r}")
    if its is not None and (isinstance(its, bool) or not isinstance(its, int) or its < 0):
        raise InputError(f"cfg.json: max_iterations must be a non-negative integer or null, got {its!r}")
    if not isinstance(dup, bool):
        raise InputError(f"cfg.json: stop_on_duplicate_support must be true or false, got {dup!r}")
    return {"residual_threshold": float(thr), "max_iterations": d_in if its is None else its,
            "stop_on_duplicate_support": dup}


def _expect_keys(path, weights, want):
    missing, extra = sorted(want - set(weights)), sorted(set(weights) - want)
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unexpected {', '.join(extra)}"] if extra else [])
        raise ValidationError(f"{path}: wrong tensors for this SAE ({'; '.join(parts)})")


def _dims(cfg):
    d_in, d_sae = cfg.get("d_in"), cfg.get("d_sae")
    for name, v in (("d_in", d_in), ("d_sae", d_sae)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"cfg.json: {name} must be a positive integer, got {v!r}")
    return d_in, d_sae


def _k(k, d_sae):
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= d_sae:
        raise InputError(f"cfg.json: k must be an integer between 1 and d_sae={d_sae}, got {k!r}")
    return k


def _check_shapes(path, weights, shapes):
    for key, arr in weights.items():
        if key in shapes and tuple(arr.shape) != shapes[key]:
            raise ValidationError(f"{path}: {key} has shape {tuple(arr.shape)}, expected {shapes[key]} "
                                  "(from cfg.json's d_in and d_sae)")
