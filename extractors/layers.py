"""``list_layers``: every module of a model with its output shape, from one probe pass."""

from __future__ import annotations


import torch

from actkit.errors import InputError

from ._hooks import probe_forward

from ._options import FINAL_HIDDEN


def list_layers(model, *, inputs=None, revision=None, checkpoint=None, device="cpu", dtype="float32",
                trust_remote_code=False, allow_pickle=False) -> list[dict]:
    """Every module of ``model`` with its output shape, from one probe forward pass.

    The probe runs on the first sample of ``inputs`` or, without inputs, on a dummy input
    (a short sentence, a grey image of the model's input size).

    Returns
    -------
    list of dict
        ``{"name", "type", "shape" (one sample, batch axis dropped, or None), "calls",
        "extractable", "note"}``, in ``named_modules()`` order; causal LMs end with
        ``final_hidden``.
    """
    from .inputs import read_inputs
    from .registry import load_model

    adapter = load_model(model, revision=revision, checkpoint=checkpoint, device=device, dtype=dtype,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
    if inputs is not None:
        data = read_inputs(inputs, max_samples=1)
        if data.kind not in adapter.kind.split("+"):
            raise InputError(f"{adapter.name} takes {adapter.kind} inputs but {data.source} holds {data.kind}s")
        parts = [adapter.for_inputs(data.kind)]
        parts[0].prepare(data, None)
        with torch.inference_mode():
            batches = [parts[0].batch(data, 0, 1)]
    else:
        parts = list(getattr(adapter, "towers", [adapter]))  # a two-tower model: probe each tower
        with torch.inference_mode():
            batches = [part.dummy_batch() for part in parts]
    seen, widths = {}, {}
    for part, batch in zip(parts, batches):
        with torch.inference_mode():
            found = probe_forward(part, batch)
        seen.update(found)
        widths.update({n: None if batch.mask is None else int(batch.mask.shape[1]) for n in found})
    result = []
    for name, module in adapter.model.named_modules():
        if not name:
            continue
        calls, shape, mtype = seen.get(name, (0, None, type(module).__name__))
        note, ok = "", True
        if calls == 0:
            note, ok = "does not run", False
        elif calls > 1:
            note, ok = f"runs {calls} times per forward", False
        elif shape is None:
            note, ok = "returns no tensor", False
        elif not (
            (len(shape) == 3 and widths[name] in (None, shape[1]))
            or (len(shape) == 4 and adapter.kind != "text")
            or len(shape) == 2
        ):
            note, ok = "shape not storable as rows", False
        result.append({"name": name, "type": mtype, "shape": None if shape is None else list(shape[1:]),
                       "calls": calls, "extractable": ok, "note": note})
    if getattr(adapter, "causal", False):
        base = adapter.final_module()
        base_name = next(n for n, m in adapter.model.named_modules() if m is base)
        entry = next((x for x in result if x["name"] == base_name), None)
        result.append({"name": FINAL_HIDDEN, "type": "final hidden state (after the final norm)",
                       "shape": entry["shape"] if entry else None, "calls": 1, "extractable": True, "note": ""})
    return result
