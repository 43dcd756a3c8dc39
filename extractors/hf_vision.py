"""Vision models from ``transformers``: ViT, ViTMAE (and other ``pixel_values`` models).

Images go through the checkpoint's own image processor (``AutoImageProcessor``).

ViTMAE shuffles its patches before the encoder, even with ``mask_ratio=0``: it argsorts a
per-sample noise tensor. We set ``mask_ratio = 0`` and pass ordered noise
(``noise[b, p] = p``), so the argsort is the identity: the encoder sees every patch, in
patch order, deterministically, and token ``1 + p`` is patch ``p`` (row-major), token 0 the
CLS token -- the same layout as ViT.
"""

from __future__ import annotations

import json

import torch
from PIL import Image

from actkit.store import image_record

from ._base import Adapter, Batch


class VisionAdapter(Adapter):
    """Adapter for ``AutoModel`` vision transformers.

    Parameters
    ----------
    processor : transformers image processor
    """

    def __init__(self, *, model, name, device, info, processor, dtype):
        super().__init__(kind="image", model=model, name=name, device=device, info=info)
        self.processor = processor
        self.dtype = dtype
        self.is_mae = getattr(model.config, "model_type", "") == "vit_mae"
        if self.is_mae:
            model.config.mask_ratio = 0.0

    def final_module(self):
        """The model itself: its output's first tensor is ``last_hidden_state``."""
        return self.model

    def preprocessing(self) -> dict:
        cfg = self.processor.to_dict()
        return {"image_processor": json.loads(json.dumps(cfg, sort_keys=True, default=str))}

    def record_inputs(self, inputs) -> dict:
        """Each image's source and the processor's geometry (size, centre crop, ViT patch grid)."""
        sources, location = inputs.sources()
        proc = self.processor
        size = dict(getattr(proc, "size", None) or {})
        resize = ({"shortest_edge": int(size["shortest_edge"])} if "shortest_edge" in size else
                  {"height": int(size["height"]), "width": int(size["width"])})
        resample = getattr(proc, "resample", None)
        names = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}
        resize["resample"] = names.get(int(getattr(resample, "value", resample)), "bicubic") if resample is not None \
            else "bilinear"
        crop = dict(getattr(proc, "crop_size", None) or {}) if getattr(proc, "do_center_crop", False) else {}
        image_size = ((crop["height"], crop["width"]) if crop else
                      (resize["height"], resize["width"]) if "height" in resize else (resize["shortest_edge"],) * 2)
        cfg = getattr(self.model.config, "vision_config", self.model.config)
        patch = getattr(cfg, "patch_size", None)
        patch = (patch, patch) if isinstance(patch, int) else patch
        grid = None if not patch else (int(image_size[0]) // int(patch[0]), int(image_size[1]) // int(patch[1]))
        return image_record(sources, location=location, image_size=image_size, resize=resize, patch_grid=grid,
                            prefix_tokens=1 if grid else 0)

    def _pixels(self, images) -> torch.Tensor:
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return pixels.to(self.device, self.dtype)

    def _batch(self, pixels) -> Batch:
        kwargs = {"pixel_values": pixels}
        if self.is_mae:
            n_patches = self.model.embeddings.patch_embeddings.num_patches
            noise = torch.arange(n_patches, device=self.device, dtype=torch.float32)
            kwargs["noise"] = noise.expand(pixels.shape[0], n_patches)
        return Batch(kwargs=kwargs, size=pixels.shape[0])

    def batch(self, inputs, start, stop):
        return self._batch(self._pixels(inputs.images(start, stop)))

    def dummy_batch(self):
        size = getattr(self.model.config, "image_size", 224)
        size = size if isinstance(size, (tuple, list)) else (size, size)
        img = Image.new("RGB", (int(size[1]), int(size[0])), (128, 128, 128))
        return self._batch(self._pixels([img]))
