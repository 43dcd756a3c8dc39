"""``list_layers``: every module of a model with its output shape, from one probe pass."""

from __future__ import annotations

import torch

from actkit.errors import InputError

from . import registry
from ._hooks import probe_forward
from .inputs import read_inputs
from .naming import EMBED, FINAL_HIDDEN, alias_table, names_of


def list_layers(model, *, inputs=None, revision=None, checkpoint=None, device="cpu", dtype="float32",
                trust_remote_code=False, allow_pickle=False) -> list[dict]:
    """Every module of ``model`` with its output shape, from one probe forward pass.

    The probe runs on the first sample of ``inputs`` or, without inputs, on a dummy input
    (a short sentence, a grey image of the model's input size).

    Returns
    -------
    list of dict
        ``{"name", "alias", "type", "shape" (one sample, batch axis dropped, or None),
        "calls", "extractable", "note"}``, in ``named_modules()`` order; ``alias`` is the
        architecture-independent name of the module (``resid.3``, ``vision.resid.3``; see
        :mod:`actkit.extractors.naming`) or ``""``. Then ``embed`` and ``final_hidden`` (per
        tower of a two-tower model), whose ``module`` says what they read.
    """
    adapter = registry.load_model(model, revision=revision, checkpoint=checkpoint, device=device, dtype=dtype,
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
    table = alias_table(adapter)
    taps = {a: module for a, (_, module) in table.items() if a.endswith((EMBED, FINAL_HIDDEN))}
    names = [n for n, _ in adapter.model.named_modules() if n] + list(taps)
    seen, widths = {}, {}
    for part, batch in zip(parts, batches):
        found = probe_forward(part, batch, names=names, extra_modules=taps)
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
    for x in result:  # the alias of each module, e.g. resid.3 (resid.-1 also works)
        x["alias"] = ",".join(a for a in names_of(table, x["name"])[1:] if not a.split(".")[-1].startswith("-"))
    for alias in taps:  # embed and final_hidden, with what they read
        calls, shape, _ = seen.get(alias, (0, None, ""))
        path = table[alias][0]
        result.append({"name": alias, "alias": alias, "module": path,
                       "type": "final hidden state" if alias.endswith(FINAL_HIDDEN) else "embeddings",
                       "shape": None if shape is None else list(shape[1:]), "calls": calls,
                       "extractable": calls == 1 and shape is not None,
                       "note": "" if calls == 1 and shape is not None else "does not run"})
    return result
