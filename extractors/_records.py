"""What an extraction store records about its run, apart from the rows: each layer's
:class:`~actkit.store.LayerSpec` (rows, features, index, attributes), the ``request`` (what
decides the rows), the ``provenance`` (the model, versions, settings), the inputs
fingerprint, and the kept label column of a dataset input. The driver (:mod:`.extract`)
calls these once, before any forward pass.
"""

from __future__ import annotations

import hashlib

import numpy as np

from actkit.errors import InputError
from actkit.store import LayerSpec

from ._plan import rows_and_index
from .hf_datasets import is_hf_inputs, read_label_column
from .inputs import inputs_fingerprint

#: Seed of weights a checkpoint does not hold (e.g. a ViT pooler): set before loading, so
#: every run (and every resume) of a request sees the same random weights; recorded in the
#: request as ``init_seed`` when there are any.
INIT_SEED = 0


def layer_specs(adapter, plans, pool, n, lengths, modules_of, aliases_of, store_dtype_name):
    """One :class:`LayerSpec` per planned layer, in model depth order: its rows (``pool`` over
    ``n`` samples of ``lengths`` tokens), features, storage dtype, row index and attributes."""
    specs = []
    kept = adapter.kept_positions()
    for name in plans:  # the layers in model depth order
        plan = plans[name]
        rows, index = rows_and_index(plan, pool, n, lengths, kept)
        attrs = {
            "module": modules_of[name],
            "aliases": aliases_of[name],
            "pool": pool,
            "module_type": plan.module_type,
            "geometry": plan.geometry,
            "module_output_shape": list(plan.shape),
        }
        if plan.geometry == "map":
            attrs["layout"] = plan.layout  # NCHW, or NHWC (timm Swin...): rows are (sample, h, w)
        specs.append(LayerSpec(name, rows, plan.features, dtype=store_dtype_name, index=index, attrs=attrs))
    return specs


def request_record(adapter, data, names, pool, dtype, store_dtype_name, max_length, n, fingerprint,
                    preprocessing, batch_size, device_name, unembedding, random_init, revision,
                    sort_by_length, max_batch_tokens):
    """The store's ``request``: what the user asked that decides the rows (a dict; the
    optional keys of packing, device map, labels, special tokens and ranks are added by the caller)."""
    request = {
        "model": adapter.info.get("model", adapter.name),
        "revision": revision,
        "weights_sha256": adapter.info.get("weights_sha256"),
        "layers": names,
        "pool": pool,
        "dtype": dtype,
        "storage_dtype": store_dtype_name,
        "max_length": max_length,
        "n_samples": n,
        "inputs_fingerprint": fingerprint,
        "preprocessing": preprocessing,
        "batch_size": batch_size,
        "device": device_name,
        "unembedding": bool(unembedding),
    }
    if random_init:
        request["init_seed"] = INIT_SEED
    if data.kind == "text":  # batch composition changes the floats (in the last bits)
        request["batching"] = {"sort_by_length": sort_by_length, "max_batch_tokens": max_batch_tokens}
    return request


def provenance_record(adapter, data, specs, request, dtype, store_dtype_name, pool, n, fingerprint,
                       preprocessing, max_length, batch_size, device_name, final_hidden, unembedding):
    """The store's ``provenance``: the model's info and versions, the layers' shapes, the
    inputs, and the settings (a dict; the optional input keys are added by the caller)."""
    provenance = {
        **{k: v for k, v in adapter.info.items() if k != "versions"},
        "versions": adapter.info.get("versions"),
        "compute_dtype": dtype,
        "storage_dtype": store_dtype_name,
        "pool": pool,
        "layers": {s.name: {"rows": s.rows, "features": s.features, **s.attrs} for s in specs},
        "inputs": data.source,
        "inputs_kind": data.kind,
        "n_samples": n,
        "inputs_fingerprint": fingerprint,
        "preprocessing": preprocessing,
        "max_length": max_length,
        "batch_size": batch_size,
        "device": device_name,
        "final_hidden": bool(final_hidden),
        "unembedding": bool(unembedding),
    }
    if "batching" in request:
        provenance["batching"] = request["batching"]
    return provenance


def samples_fingerprint(data, adapter, max_length, max_tokens=None, packing=None) -> str:
    """The inputs fingerprint of a store: the samples and the user's options that choose them
    (token windows: the texts read and the windows cut from them)."""
    if packing is None:
        return inputs_fingerprint(data, {"kind": data.kind, "max_length": max_length})
    return inputs_fingerprint(
        data, {"kind": "token_windows", "context_length": packing["context_length"], "max_tokens": max_tokens,
               "windows_sha256": hashlib.sha256(adapter.windows.tobytes()).hexdigest()},
        digest=data.rows_digest(packing["rows_used"]))


def keep_labels(params, inputs, column, n, packing, split, config, max_samples):
    """``--label-column``: one label per sample of a dataset input, kept as the store parameter
    ``label:COLUMN`` (int64 code per sample) with ``{COLUMN: names}`` for the provenance."""
    if column is None:
        return None
    if not is_hf_inputs(inputs):
        raise InputError("--label-column reads a column of a datasets input (.parquet, .arrow, a save_to_disk "
                         "folder, hf:NAME)")
    if packing is not None:
        raise InputError("--label-column keeps one label per sample; token windows (--context-length) cut "
                         "across samples")
    values = read_label_column(inputs, column, split=split, config=config, max_samples=max_samples)[:n]
    names, codes = np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)
    params[f"label:{column}"] = codes.astype(np.int64)
    return {column: [str(v) for v in names]}
