"""Hooks: capture by dotted path, early stop, shared modules, name resolution."""

from __future__ import annotations

import pytest
import torch

from actkit.errors import LayerError
from actkit.extractors._base import Adapter, Batch
from actkit.extractors._hooks import Capture, first_tensor, resolve_layers
from actkit.extractors._plan import plan_layers


class Toy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(4)])
        self.act = torch.nn.ReLU()  # shared: runs after every block
        self.head = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, x):
        for block in self.blocks:
            x = self.act(block(x))
        return self.head(x)


class ToyAdapter(Adapter):
    """The smallest concrete adapter: the toy model takes ``x`` of shape (B, 4)."""

    def preprocessing(self):
        return {"toy": True}

    def batch(self, inputs, start, stop):
        return Batch(kwargs={"x": torch.as_tensor(inputs[start:stop])}, size=stop - start)

    def dummy_batch(self):
        return Batch(kwargs={"x": torch.zeros(1, 4)}, size=1)


def _adapter(model):
    return ToyAdapter(kind="image", model=model, name="toy", device=torch.device("cpu"))


def test_capture_stops_after_deepest_layer_and_copies():
    torch.manual_seed(0)
    model = Toy()
    fired = []
    for i, block in enumerate(model.blocks):
        block.register_forward_hook(lambda *a, i=i: fired.append(i))
    model.head.register_forward_hook(lambda *a: fired.append("head"))
    got = {}
    x = torch.randn(3, 4)
    cap = Capture(model, ["blocks.2", "blocks.0"], lambda n, t: got.__setitem__(n, t.clone()))
    with cap:
        assert cap.run(lambda: model(x)) is True
    assert fired == [0, 1, 2]  # blocks.3 and the head never ran
    ref = model.blocks[0](x)
    torch.testing.assert_close(got["blocks.0"], ref)
    torch.testing.assert_close(got["blocks.2"], model.blocks[2](model.act(model.blocks[1](model.act(ref)))))
    fired.clear()
    model(x)  # hooks removed on exit: the full model runs again
    assert fired == [0, 1, 2, 3, "head"]


def test_shared_unused_and_unknown_modules_are_refused():
    model = _adapter(Toy())
    batch = Batch(kwargs={"x": torch.randn(2, 4)}, size=2)
    model.forward = lambda b: model.model(b.kwargs["x"])
    with pytest.raises(LayerError, match="runs 4 times"):
        plan_layers(model, ["act", "blocks.1"], batch)
    with pytest.raises(LayerError, match="does not run"):
        plan_layers(model, ["unused"], batch)
    plans = plan_layers(model, ["blocks.1", "head"], batch)
    assert plans["blocks.1"].geometry == "vec" and plans["head"].features == 2
    with pytest.raises(LayerError, match=r"closest: blocks\.1"):
        resolve_layers(model.model, ["block.1"])
    with pytest.raises(LayerError, match="no layers requested"):
        resolve_layers(model.model, " , ")
    assert resolve_layers(model.model, "blocks.1, head,blocks.1") == ["blocks.1", "head"]


def test_first_tensor():
    t = torch.zeros(1)
    assert first_tensor(t) is t
    assert first_tensor((t, None)) is t
    assert first_tensor({"last_hidden_state": t}) is t
    assert first_tensor((None,)) is None
