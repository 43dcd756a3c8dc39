"""Two-tower models from ``transformers`` (CLIP, SigLIP...): loaded whole, one tower per input kind.

Text inputs run the text tower (``model.get_text_features``: ``text_model`` then
``text_projection``), images the vision tower (``model.get_image_features``:
``vision_model`` then ``visual_projection``). Layer names are the whole model's module
paths (``vision_model.encoder.layers.3``) or the tower-prefixed aliases of
:mod:`actkit.extractors.naming` (``vision.resid.3``, ``text.final_hidden``).
"""

from __future__ import annotations

from PIL import Image

from actkit.errors import InputError

from ._base import Adapter
from .hf_text import TextAdapter
from .hf_vision import VisionAdapter

#: tower prefix -> (attribute of the tower module, input kind)
TOWERS = {"text": ("text_model", "text"), "vision": ("vision_model", "image")}


class TextTower(TextAdapter):
    """The text tower of a two-tower model."""

    tower = "text"

    def forward(self, batch):
        return self.model.get_text_features(**batch.kwargs)


class VisionTower(VisionAdapter):
    """The vision tower of a two-tower model."""

    tower = "vision"

    def forward(self, batch):
        return self.model.get_image_features(**batch.kwargs)

    def dummy_batch(self):
        size = getattr(self.model.config.vision_config, "image_size", 224)
        size = size if isinstance(size, (tuple, list)) else (size, size)
        img = Image.new("RGB", (int(size[1]), int(size[0])), (128, 128, 128))
        return self._batch(self._pixels([img]))


class TwoTowerAdapter(Adapter):
    """A whole two-tower model; :meth:`for_inputs` gives the tower that runs the inputs.

    Attributes
    ----------
    towers : list of Adapter
        The text tower, then the vision tower (both hold the whole model).
    """

    def __init__(self, *, model, name, device, info, tokenizer, processor, dtype):
        super().__init__(kind="text+image", model=model, name=name, device=device, info=info)
        self.text = TextTower(model=model, name=name, device=device, info=info, tokenizer=tokenizer, causal=False)
        self.vision = VisionTower(model=model, name=name, device=device, info=info, processor=processor,
                                  dtype=dtype)
        self.towers = [self.text, self.vision]
        for tower in self.towers:  # each tower knows the others (the whole model's layer names)
            tower.towers = self.towers

    def for_inputs(self, kind):
        for tower in self.towers:
            if tower.kind == kind:
                return tower
        raise InputError(f"{self.name} takes text or image inputs, not {kind}s")

    def preprocessing(self):
        return {**self.text.preprocessing(), **self.vision.preprocessing()}

    def batch(self, inputs, start, stop):
        return self.for_inputs(inputs.kind).batch(inputs, start, stop)

    def dummy_batch(self):
        return self.text.dummy_batch()
