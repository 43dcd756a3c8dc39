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
