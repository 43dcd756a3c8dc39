"""timm models (resnet*, vit_*, MAE-pretrained ViTs such as ``vit_base_patch16_224.mae``).

Images go through the model's own data config and eval transform
(``timm.data.resolve_model_data_config`` + ``create_transform(is_training=False)``).
Layer names are the dotted paths of ``named_modules()`` (``layer3``, ``blocks.5``); a
ResNet stage gives a (C, H, W) map, stored as one row per spatial position (h, then w).
CNNs run in channels-last memory format (same values to float rounding, ~1e-7; faster, and
the per-position rows need no transpose).
"""

from __future__ import annotations

import math

import timm.data
import torch
from PIL import Image

from actkit.store import image_record

from ._base import Adapter, Batch
from .naming import Scheme, find_blocks


class TimmAdapter(Adapter):
    """Adapter for ``timm.create_model`` models."""

    def __init__(self, *, model, name, device, info, dtype):
        super().__init__(kind="image", model=model, name=name, device=device, info=info)
        self.dtype = dtype
        # CNNs run in channels-last memory format: faster convolutions on CPU (oneDNN) and GPU,
        # and a (B, C, H, W) map is then laid out as (B, H, W, C) -- exactly the rows of
        # pool="none" (sample, h, w) -- so storing it needs no transpose copy
        n_conv = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
        self.channels_last = n_conv > 1
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
        self.features = None  # final_hidden: the output of forward_features, when the model has one
        if callable(getattr(model, "forward_features", None)) and callable(getattr(model, "forward_head", None)):
            self.features = torch.nn.Identity()
            self.features.output_fmt = _fmt(model) or "NCHW"
        self.data_config = timm.data.resolve_model_data_config(model)
        self.transform = timm.data.create_transform(**self.data_config, is_training=False)

    def preprocessing(self) -> dict:
        cfg = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.data_config.items()}
        return {"timm_data_config": cfg, "transform": repr(self.transform)}

    def record_inputs(self, inputs) -> dict:
        """Each image's source and timm's eval geometry (resize the shorter side to
        ``size / crop_pct``, centre crop to ``size``; a ViT's patch grid and prefix tokens)."""
        sources, location = inputs.sources()
        _, h, w = self.data_config["input_size"]
        crop_pct = float(self.data_config.get("crop_pct") or 1.0)
        if self.data_config.get("crop_mode", "center") == "squash":
            resize = {"height": int(math.floor(h / crop_pct)), "width": int(math.floor(w / crop_pct))}
        else:
            resize = {"shortest_edge": int(math.floor(min(h, w) / crop_pct))}
        resize["resample"] = str(self.data_config.get("interpolation") or "bilinear")
        grid = getattr(getattr(self.model, "patch_embed", None), "grid_size", None)
        grid = None if grid is None else tuple(int(g) for g in grid)
        return image_record(sources, location=location, image_size=(h, w), resize=resize, patch_grid=grid,
                            prefix_tokens=int(getattr(self.model, "num_prefix_tokens", 0) or 0) if grid else 0)

    def _stack(self, images) -> Batch:
        pixels = torch.stack([self.transform(img) for img in images]).to(self.device, self.dtype)
        if self.channels_last:
            pixels = pixels.contiguous(memory_format=torch.channels_last)
        return Batch(kwargs={"x": pixels}, size=len(images))

    def forward(self, batch):
        if self.features is None:
            return self.model(batch.kwargs["x"])
        # timm's forward is forward_head(forward_features(x)); the tap in between is final_hidden
        return self.model.forward_head(self.features(self.model.forward_features(batch.kwargs["x"])))

    def final_module(self):
        if self.features is None:
            return super().final_module()
        return self.features

    def alias_scheme(self):
        """``resid.{i}``: the modules of ``model.feature_info``, which are the intermediates of
        ``forward_intermediates`` in its order; ``embed``: the input of the first one when it is
        a block of a list (``blocks.0``, ``stages.0``), not a stem; ``final_hidden``: the output
        of ``forward_features``."""
        known = {n for n, _ in self.model.named_modules()}
        blocks = [f.get("module") for f in (getattr(self.model, "feature_info", None) or [])]
        if not blocks or not all(b in known for b in blocks):
            blocks = find_blocks(self.model)
        return Scheme(prefix="", blocks=blocks, final=self.features, final_path="forward_features()",
                      embed=bool(blocks) and blocks[0].endswith(".0"), source="timm feature_info")

    def map_layout(self, name, module):
        """Channels-last (``"NHWC"``) or channels-first: the module's own ``output_fmt``, else
        what its kind of layer implies (``Linear`` and ``LayerNorm`` act on the last axis,
        convolutions, batch norms and pools on axis 1), else the ``output_fmt`` of the nearest
        enclosing module that has one (timm marks Swin, MambaOut, Sequencer... as ``"NHWC"``
        at the model and patch-embedding level), else ``"NCHW"``."""
        path = next((n for n, m in self.model.named_modules() if m is module), name)  # an alias: its module
        return timm_layout(self.model, path, module)

    def batch(self, inputs, start, stop):
        return self._stack(inputs.images(start, stop))

    def dummy_batch(self):
        _, h, w = self.data_config["input_size"]
        return self._stack([Image.new("RGB", (w, h), (128, 128, 128))])


_NCHW_LAYERS = (torch.nn.modules.conv._ConvNd, torch.nn.modules.batchnorm._BatchNorm,
                torch.nn.modules.pooling._MaxPoolNd, torch.nn.modules.pooling._AvgPoolNd,
                torch.nn.modules.pooling._AdaptiveAvgPoolNd, torch.nn.modules.pooling._AdaptiveMaxPoolNd)


def _fmt(module) -> str | None:
    fmt = getattr(module, "output_fmt", None)
    fmt = getattr(fmt, "value", fmt)  # timm.layers.Format is a str Enum
    return str(fmt) if fmt in ("NCHW", "NHWC") else None


def timm_layout(model, name: str, module) -> str:
    """See :meth:`TimmAdapter.map_layout`."""
    if hasattr(module, "path") and hasattr(module, "module"):  # an InputTap: what enters a block
        name, module = module.path, None
    else:
        own = _fmt(module)
        if own is not None:
            return own
        if isinstance(module, _NCHW_LAYERS):
            return "NCHW"
        # a leaf acting on the last axis (timm's *2d norms permute to act on the channels), or a
        # container of such leaves and elementwise ones (the Mlp inside a ConvNeXt block)
        leaves = [m for m in module.modules() if not list(m.children())]
        if any(_last_axis(m) for m in leaves) and all(_last_axis(m) or _elementwise(m) for m in leaves):
            return "NHWC"
    parts = name.split(".")
    for k in range(len(parts) - 1, -1, -1):
        path = ".".join(parts[:k])
        fmt = _fmt(model.get_submodule(path) if path else model)
        if fmt is not None:
            return fmt
    return "NCHW"


def _last_axis(module) -> bool:
    """A layer that acts on the last axis (``Linear``, ``LayerNorm``, timm's ``RmsNorm``)."""
    cls = type(module).__name__
    return (isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm, torch.nn.RMSNorm))
            or cls in ("RmsNorm", "SimpleNorm")) and not cls.lower().endswith("2d")


def _elementwise(module) -> bool:
    """A layer that keeps every axis where it is (activations, dropout, identity)."""
    where = type(module).__module__
    return (where.startswith(("torch.nn.modules.activation", "torch.nn.modules.dropout", "timm.layers.activations"))
            or type(module).__name__ in ("Identity", "DropPath", "Dropout", "GELU", "GELUTanh", "QuickGELU"))
