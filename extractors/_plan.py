"""Layer plans: what each hooked module outputs and how its output becomes store rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from actkit.errors import ActkitError, LayerError

from ._hooks import Capture



@dataclass
class LayerPlan:
    """How one layer's output becomes rows.

    Attributes
    ----------
    name : str
    geometry : {"seq", "map", "vec"}
        ``(B, T, C)`` sequence, ``(B, C, H, W)`` map (``(B, H, W, C)`` when ``layout`` is
        ``"NHWC"``), or ``(B, C)`` vector output.
    features : int
    positions : int
        Rows per sample with ``pool="none"`` (images; text uses token counts).
    shape : tuple
        Output shape for one sample (batch axis dropped).
    module_type : str
    """

    name: str
    geometry: str
    features: int
    positions: int
    shape: tuple
    module_type: str
    layout: str = "NCHW"




def plan_layers(adapter, names, probe_batch, extra_modules=None) -> dict:
    """Probe the layers on one sample: output geometry and feature count of each, in the
    order the layers run in the forward pass (model depth, whatever order they were asked in).

    Raises
    ------
    LayerError
        A module does not run, runs more than once per forward pass, returns no tensor,
        or returns a shape that cannot be laid out as rows.
    """
    modules = dict(adapter.model.named_modules())
    modules.update(extra_modules or {})
    seen = {}

    def callback(name, tensor):
        n, shape = seen.get(name, (0, None))
        seen[name] = (n + 1, shape if n else (None if tensor is None else tuple(tensor.shape)))

    # a full forward (no early stop), so a shared module that runs again later is caught
    cap = Capture(adapter.model, names, callback, stop_early=False, extra_modules=extra_modules)
    with torch.inference_mode(), cap:
        cap.run(lambda: adapter.forward(probe_batch))
    width = None if probe_batch.mask is None else int(probe_batch.mask.shape[1])
    plans = {}
    for name in names:
        calls, shape = seen.get(name, (0, None))
        if calls == 0:
            raise LayerError(f"layer {name!r} does not run in the forward pass of {adapter.name}")
        if calls > 1:
            raise LayerError(
                f"layer {name!r} runs {calls} times per forward pass (a shared module); "
                "pick a module that runs once, e.g. its parent block"
            )
        if shape is None:
            raise LayerError(f"layer {name!r} returns no tensor; pick another module")
        mtype = getattr(modules[name], "type_name", None) or type(modules[name]).__name__
        if len(shape) == 3 and (width is None or shape[1] == width):
            plan = LayerPlan(name, "seq", shape[2], shape[1], shape[1:], mtype)
        elif len(shape) == 4 and adapter.kind != "text":
            # timm Swin & co. give channels-last maps (B, H, W, C): the adapter knows which
            if adapter.map_layout(name, modules[name]) == "NHWC":
                plan = LayerPlan(name, "map", shape[3], shape[1] * shape[2], shape[1:], mtype, "NHWC")
            else:
                plan = LayerPlan(name, "map", shape[1], shape[2] * shape[3], shape[1:], mtype)
        elif len(shape) == 2:
            plan = LayerPlan(name, "vec", shape[1], 1, shape[1:], mtype)
        else:
            raise LayerError(
                f"layer {name!r} outputs shape {list(shape)}, which is not (batch, tokens, features), "
                "(batch, channels, height, width) or (batch, features); pick another module"
            )
        plans[name] = plan
    return {name: plans[name] for name in seen if name in plans}  # in the order they ran: model depth


def rows_and_index(plan: LayerPlan, pool: str, n: int, lengths, kept=None):
    """Row count and ``[sample, position]`` index of one layer (``kept``: per sample, the token
    positions stored when not all of them are, e.g. without special tokens)."""
    if plan.geometry == "vec" or pool != "none":
        if pool == "cls" and plan.geometry == "map":
            raise ActkitError(f"--pool cls needs a token sequence; layer {plan.name} outputs a feature map")
        index = np.stack([np.arange(n, dtype=np.int64), np.full(n, -1, np.int64)], 1)
        return n, index
    if kept is not None:  # true token positions of the rows kept
        counts = np.fromiter((len(k) for k in kept), dtype=np.int64, count=n)
        position = np.concatenate([np.asarray(k, np.int64) for k in kept]) if n else np.zeros(0, np.int64)
        return int(counts.sum()), np.stack([np.repeat(np.arange(n, dtype=np.int64), counts), position], 1)
    if lengths is not None:
        total = int(lengths.sum())
        sample = np.repeat(np.arange(n, dtype=np.int64), lengths)
        starts = np.cumsum(lengths) - lengths
        position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    else:
        per = plan.positions
        total = n * per
        sample = np.repeat(np.arange(n, dtype=np.int64), per)
        position = np.tile(np.arange(per, dtype=np.int64), n)
    return total, np.stack([sample, position], 1)


def to_rows(x: torch.Tensor, plan: LayerPlan, pool: str, batch, store_dtype: torch.dtype) -> np.ndarray:
    """Turn one layer output into the rows the store keeps (pooling in torch, one copy).

    Parameters
    ----------
    x : torch.Tensor
        Module output, ``(B, T, C)``, ``(B, C, H, W)`` or ``(B, C)``.
    batch : Batch
        Supplies ``mask`` (B, T) and ``lengths`` (B,) for text.

    Returns
    -------
    ndarray of shape (rows, features), C-contiguous, dtype ``store_dtype``, owning its memory.
    """
    x = x.detach()
    src = x
    if x.dtype != torch.float32 and (pool == "mean" or x.dtype == torch.bfloat16):
        x = x.float()
    g = plan.geometry
    if g == "vec":
        rows = x
    elif g == "seq":
        mask, lengths = batch.mask, batch.lengths
        if pool == "none":
            keep = batch.keep if batch.keep is not None else mask  # without special tokens, or the real ones
            rows = x[keep] if keep is not None else x.reshape(-1, x.shape[-1])
        elif pool == "mean":
            if mask is not None:
                w = mask.to(x.dtype)
                rows = torch.bmm(w.unsqueeze(1), x).squeeze(1) / lengths.to(x.dtype).unsqueeze(1)
            else:
                rows = x.mean(1)
        elif pool == "last":
            if lengths is not None:
                rows = x[torch.arange(x.shape[0], device=x.device), lengths - 1]
            else:
                rows = x[:, -1]
        else:  # cls
            rows = x[:, 0]
    elif plan.layout == "NHWC":  # map (B, H, W, C)
        if pool == "none":
            rows = x.reshape(-1, x.shape[-1])
        elif pool == "mean":
            rows = x.mean((1, 2))
        else:  # last
            rows = x[:, -1, -1, :]
    else:  # map (B, C, H, W)
        if pool == "none":
            rows = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
        elif pool == "mean":
            rows = x.mean((2, 3))
        else:  # last
            rows = x[:, :, -1, -1]
    if rows.dtype != store_dtype:
        rows = rows.to(store_dtype)
    if rows.device.type != "cpu":
        rows = rows.to("cpu")
    elif rows.untyped_storage().data_ptr() == src.untyped_storage().data_ptr():
        rows = rows.clone(memory_format=torch.contiguous_format)
    return rows.contiguous().numpy()
