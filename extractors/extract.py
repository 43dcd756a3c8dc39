"""The extraction driver: model + inputs + layers -> one crash-safe store.

Order of work (everything that can fail on a user mistake fails before the store exists):

1. validate options and the output path; read the inputs (all of them are checked);
2. load the model (:mod:`extractors.registry`) and resolve the layer names;
3. tokenise all text (exact row counts) and probe the layers on the first sample (output
   shapes, each module runs exactly once);
4. create (or resume) the store with exact row counts and row indices;
5. stream batches from ``writer.samples_done``: one forward pass per batch, hooks pool in
   torch and copy only what is stored, the forward stops after the deepest layer; rows go
   to the store in large appends; a checkpoint every few seconds; finalise.

Rows (``pool``)
---------------
``none``
    one row per real token (text, padding excluded), per token (ViT: CLS first, then the
    patches), or per spatial position of a ``(C, H, W)`` map (h, then w); sample-major.
    The index holds ``[sample, position]``.
``mean``
    one row per sample: the mean of that sample's ``none`` rows (real tokens, all ViT tokens,
    all spatial positions).
``last``
    the sample's last ``none`` row (last real token).
``cls``
    the first token (position 0); sequence outputs only.

Pooled rows have index ``[sample, -1]``. A layer whose output has no sequence/spatial axis
(shape ``(B, C)``) gives one row per sample whatever ``pool`` is.
"""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from actkit.errors import ActkitError, InputError, LayerError

from ._base import DTYPES
from ._hooks import Capture, probe_all, resolve_layers

POOLS = ("none", "mean", "last", "cls")
STORAGE_DTYPES = ("float32", "float16")
FINAL_HIDDEN = "final_hidden"
_APPEND_BYTES = 16 * 2**20  # buffer rows per layer up to this size before writing
_DIRECT_BYTES = 2**20  # blocks at least this big are written as they come

#: Wall-clock seconds of the phases of the last :func:`extract` call in this process
#: (``load``, ``prepare``, ``stream``, ``finalize``; ``stream_cpu``: CPU seconds of this
#: process while streaming) and the samples streamed; read by the
#: benchmark. Never written into the store (stores are bitwise reproducible).
LAST_RUN: dict = {}


@dataclass
class LayerPlan:
    """How one layer's output becomes rows.

    Attributes
    ----------
    name : str
    geometry : {"seq", "map", "vec"}
        ``(B, T, C)`` sequence, ``(B, C, H, W)`` map, or ``(B, C)`` vector output.
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


def _check_options(pool, batch_size, dtype, storage_dtype, compression):
    if pool not in POOLS:
        raise ActkitError(f"unknown pool {pool!r}; choose one of {', '.join(POOLS)}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ActkitError(f"--batch-size must be a positive integer, got {batch_size}")
    if dtype not in DTYPES:
        raise ActkitError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if storage_dtype is None:
        storage_dtype = dtype if dtype in STORAGE_DTYPES else "float32"
    if storage_dtype not in STORAGE_DTYPES:
        raise ActkitError(f"unknown storage dtype {storage_dtype!r}; choose float32 or float16")
    if compression not in (None, "gzip", "lzf"):
        raise ActkitError(f"unknown compression {compression!r}; choose gzip or lzf")
    return storage_dtype


def check_output_path(out: Path) -> None:
    """Fail early (before loading a model) when ``out`` cannot be written."""
    if out.is_dir():
        raise ActkitError(f"output path {out} is a directory; give a file name like {out}/store.h5")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise ActkitError(f"cannot write {out}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ActkitError(f"cannot write {out}: folder {parent} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ActkitError(f"cannot write {out}: the file is not writable")


def plan_layers(adapter, names, probe_batch, extra_modules=None) -> dict:
    """Probe the layers on one sample: output geometry and feature count of each.

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
        mtype = type(modules[name]).__name__
        if len(shape) == 3 and (width is None or shape[1] == width):
            plan = LayerPlan(name, "seq", shape[2], shape[1], shape[1:], mtype)
        elif len(shape) == 4 and adapter.kind == "image":
            plan = LayerPlan(name, "map", shape[1], shape[2] * shape[3], shape[1:], mtype)
        elif len(shape) == 2:
            plan = LayerPlan(name, "vec", shape[1], 1, shape[1:], mtype)
        else:
            raise LayerError(
                f"layer {name!r} outputs shape {list(shape)}, which is not (batch, tokens, features), "
                "(batch, channels, height, width) or (batch, features); pick another module"
            )
        plans[name] = plan
    return plans


def _rows_and_index(plan: LayerPlan, pool: str, n: int, lengths):
    """Row count and ``[sample, position]`` index of one layer."""
    if plan.geometry == "vec" or pool != "none":
        if pool == "cls" and plan.geometry == "map":
            raise ActkitError(f"--pool cls needs a token sequence; layer {plan.name} outputs a feature map")
        index = np.stack([np.arange(n, dtype=np.int64), np.full(n, -1, np.int64)], 1)
        return n, index
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
            rows = x[mask] if mask is not None else x.reshape(-1, x.shape[-1])
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


class _RowBuffer:
    """Collects row blocks of one layer and writes them in large appends."""

    def __init__(self, writer, name):
        self.writer, self.name = writer, name
        self.blocks, self.nbytes = [], 0

    def add(self, rows: np.ndarray):
        if not self.blocks and rows.nbytes >= _DIRECT_BYTES:
            self.writer.append(self.name, rows)  # already a big block: no concatenation copy
            return
        self.blocks.append(rows)
        self.nbytes += rows.nbytes
        if self.nbytes >= _APPEND_BYTES:
            self.flush()

    def flush(self):
        if not self.blocks:
            return
        rows = self.blocks[0] if len(self.blocks) == 1 else np.concatenate(self.blocks)
        self.writer.append(self.name, rows)
        self.blocks, self.nbytes = [], 0


def extract(
    model,
    inputs,
    out,
    *,
    layers,
    pool: str = "none",
    revision: str | None = None,
    checkpoint=None,
    batch_size: int = 32,
    device: str = "cpu",
    dtype: str = "float32",
    storage_dtype: str | None = None,
    max_length: int | None = None,
    max_samples: int | None = None,
    final_hidden: bool = False,
    unembedding: bool = False,
    overwrite: bool = False,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
    compression: str | None = None,
    progress: bool = True,
    checkpoint_every: float = 5.0,
    column: str | None = None,
    split: str | None = None,
    config: str | None = None,
    context_length: int | None = None,
    max_tokens: int | None = None,
    device_map: str | None = None,
) -> Path:
    """Extract layer activations of a pretrained model into an HDF5 store.

    One forward pass per batch captures every requested layer (by hooks on the modules) and
    stops after the deepest one. The store is written crash-safely: if the process dies, the
    identical call resumes where it stopped and ends with the same bytes as an uninterrupted
    run; the identical call on a finished store returns at once; a different call aimed at an
    existing store is refused unless ``overwrite=True``.

    Parameters
    ----------
    model : str
        A Hugging Face hub id (``"EleutherAI/pythia-70m"``), a local ``save_pretrained``
        directory, ``"timm:NAME"`` (``"timm:resnet18"``, ``"timm:vit_base_patch16_224.mae"``),
        ``"timm:local-dir:PATH"``, or a local timm folder (``config.json`` with
        ``"architecture"``).
    inputs : str or path
        ``.txt`` (one sample per line), ``.jsonl`` (``"text"`` field), a folder of images
        (recursive, sorted), a uint8 ``.npy`` array of shape (N, H, W, 3), or a Hugging Face
        dataset: a ``save_to_disk`` folder, a ``.parquet`` / ``.arrow`` file or glob, or
        ``"hf:NAME"`` (``split``, ``config``; streamed when ``max_samples`` is given).
    out : str or path
        The store to write (``.h5``). Under ``torchrun`` (``WORLD_SIZE`` > 1) every rank
        writes its block of samples to ``OUT.shards/rank-R-of-K.h5`` and rank 0 then writes
        ``out`` as virtual datasets over the shards (see :mod:`extractors.distributed`).
    layers : str or sequence of str
        Dotted module paths from ``model.named_modules()`` (comma-separated in a string);
        ``"final_hidden"`` (causal LMs) is the final hidden state after the final norm.
        ``actkit layers MODEL`` lists them.
    pool : {"none", "mean", "last", "cls"}
        ``none``: one row per real token / ViT token / spatial position, index
        ``[sample, position]``; ``mean``: mean of those rows per sample; ``last``: the last
        real token; ``cls``: the first token. Pooled rows have index ``[sample, -1]``.
    revision : str, optional
        Hub revision (branch, tag or commit), e.g. ``"step143000"`` for Pythia.
    checkpoint : path, optional
        Weights for ``timm:NAME`` (``.safetensors``; pickle only with ``allow_pickle``).
    batch_size : int
    device : str
        ``"cpu"``, ``"cuda"``, ``"cuda:1"``...
    dtype : {"float32", "float16", "bfloat16"}
        Compute dtype.
    storage_dtype : {"float32", "float16"}, optional
        Default: ``dtype`` for float32/float16, float32 for bfloat16.
    max_length : int, optional
        Truncate texts to this many tokens.
    max_samples : int, optional
        Use only the first ``max_samples`` inputs.
    final_hidden : bool
        Also store the final hidden state (after the final norm) as layer ``final_hidden``.
    unembedding : bool
        Store the unembedding (lm_head) matrix, shape (vocab_size, hidden_size), as the
        store parameter ``unembedding``.
    overwrite : bool
        Replace an existing store made by a different call.
    trust_remote_code : bool
        Allow models whose code comes from their repository.
    allow_pickle : bool
        Allow pickle weight files (``.bin``, ``.pt``), which can run code when loaded.
    compression : {None, "gzip", "lzf"}
        HDF5 compression (slower writes; off by default).
    progress : bool
        Show a tqdm bar (samples/s and rows written) when on a terminal.
    checkpoint_every : float
        Seconds between resume checkpoints.
    column : str, optional
        Dataset column of the samples (default ``text``, or ``image`` / ``img``).
    split, config : str, optional
        Dataset split (default ``train``) and configuration (``hf:NAME``).
    context_length : int, optional
        Pack the text stream into windows of exactly this many tokens (BOS first where the
        tokenizer has one; :mod:`extractors.windows`); samples are then windows and the index
        holds ``[window, position]``.
    max_tokens : int, optional
        With ``context_length``: at most ``max_tokens // context_length`` windows; texts are
        tokenised only until they are filled.
    device_map : str, optional
        ``"auto"``: let ``accelerate`` spread a model too large for one device over the
        available devices (transformers models; replaces ``device``; single process only).

    Returns
    -------
    pathlib.Path
        The finished store; open it with :func:`actkit.open_store`.

    Raises
    ------
    actkit.errors.ActkitError
        Unknown model or layer, missing or unreadable inputs, unwritable output, a store
        made by a different call, ...

    Examples
    --------
    >>> import actkit  # doctest: +SKIP
    >>> path = actkit.extract("EleutherAI/pythia-70m", "texts.txt", "pythia.h5",
    ...                       layers=["gpt_neox.layers.3"], revision="step143000")
    >>> actkit.open_store(path)["gpt_neox.layers.3"].shape
    (n_tokens, 512)
    """
    from actkit.store import LayerSpec, create_store

    from .inputs import inputs_fingerprint, read_inputs
    from .registry import load_model

    from . import distributed

    t0 = time.perf_counter()
    LAST_RUN.clear()
    store_dtype_name = _check_options(pool, batch_size, dtype, storage_dtype, compression)
    _check_window_options(context_length, max_tokens, max_length)
    batch_size = int(batch_size)
    out = Path(out).expanduser()
    check_output_path(out)
    world = distributed.world_from_env()
    device_arg = str(device)
    if world is not None:
        if device_map is not None:
            raise ActkitError("--device-map spreads one model over the devices of one process; it does not "
                              "combine with torchrun ranks")
        device = world.device(device)
        progress = progress and world.rank == 0
    data = read_inputs(inputs, max_samples=max_samples, column=column, split=split, config=config)
    adapter = load_model(model, revision=revision, checkpoint=checkpoint, device=device, dtype=dtype,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle, device_map=device_map)
    t_load = time.perf_counter()
    if data.kind != adapter.kind:
        raise InputError(f"{adapter.name} takes {adapter.kind} inputs but {data.source} holds {data.kind}s")
    if isinstance(layers, str):
        layers = layers.split(",")
    layers = [str(name).strip() for name in layers if str(name).strip()]
    requested = [name for name in layers if name != FINAL_HIDDEN]
    if FINAL_HIDDEN in layers:
        final_hidden = True
    aliases = {}  # transformers 4.x names -> current module paths
    names = resolve_layers(adapter.model, requested, model_name=adapter.name, aliases=aliases) if requested else []
    extra = {name: adapter.model.get_submodule(path) for name, path in aliases.items()}
    random_init = adapter.info.get("randomly_initialised") or []
    for name in names:
        path = aliases.get(name, name)
        hit = [k for k in random_init if k.startswith(path + ".")]
        if hit:
            warnings.warn(f"layer {name!r} reads weights that are not in the checkpoint and were randomly "
                          f"initialised ({', '.join(hit[:3])})", stacklevel=2)
    if final_hidden:
        extra[FINAL_HIDDEN] = adapter.final_module()
        names.append(FINAL_HIDDEN)
    if not names:
        raise LayerError("no layers requested; pass --layers NAME[,NAME...] (see `actkit layers MODEL`)")
    params = {}
    if unembedding:
        params["unembedding"] = adapter.unembedding()

    if context_length is not None:
        adapter.prepare_windows(data, context_length, max_tokens, progress=progress)
    else:
        adapter.prepare(data, max_length)
    packing = getattr(adapter, "packing", None) if context_length is not None else None
    n = adapter.n_samples(data)
    lengths = adapter.lengths()
    with torch.inference_mode():
        probe = adapter.batch(data, 0, 1)
    plans = plan_layers(adapter, names, probe, extra_modules=extra)

    specs = []
    for name in names:
        plan = plans[name]
        rows, index = _rows_and_index(plan, pool, n, lengths)
        module_path = aliases.get(name, "<final hidden state>" if name == FINAL_HIDDEN else name)
        attrs = {
            "module": module_path,
            "pool": pool,
            "module_type": plan.module_type,
            "geometry": plan.geometry,
            "module_output_shape": list(plan.shape),
        }
        specs.append(LayerSpec(name, rows, plan.features, dtype=store_dtype_name, index=index, attrs=attrs))

    # the fingerprint names the samples and the user's options that choose them (so stores of
    # different models on the same inputs agree, which `compare` checks); the model's own
    # preprocessing (tokenizer, image processor) goes into the request and the provenance
    preprocessing = adapter.preprocessing()
    if packing is None:
        fingerprint = inputs_fingerprint(data, {"kind": data.kind, "max_length": max_length})
    else:  # the texts read and the windows cut from them (same tokenizer, same rows)
        fingerprint = inputs_fingerprint(
            data, {"kind": "token_windows", "context_length": packing["context_length"], "max_tokens": max_tokens,
                   "windows_sha256": hashlib.sha256(adapter.windows.tobytes()).hexdigest()},
            digest=data.rows_digest(packing["rows_used"]))
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
        "device": str(adapter.device) if world is None else device_arg,
        "unembedding": bool(unembedding),
    }
    extra_request = {"packing": packing, "device_map": device_map,
                     "world_size": None if world is None else world.world_size}
    request.update({k: v for k, v in extra_request.items() if v is not None})
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
        "device": str(adapter.device) if world is None else device_arg,
        "final_hidden": bool(final_hidden),
        "unembedding": bool(unembedding),
    }
    extra_provenance = {"inputs_column": data.column, "inputs_split": split, "inputs_config": config,
                        "packing": packing, "device_map": device_map}
    provenance.update({k: v for k, v in extra_provenance.items() if v is not None})
    if world is not None:
        def run_block(writer, first, last):
            _run(adapter, data, writer, plans, names, extra, pool, batch_size, DTYPES[store_dtype_name], progress,
                 checkpoint_every, first=first, last=last)

        path = distributed.extract_sharded(world, out, specs, run_block, device=str(adapter.device), n=n,
                                           request=request, provenance=provenance, params=params,
                                           fingerprint=fingerprint, overwrite=overwrite, compression=compression)
        LAST_RUN.update(load=t_load - t0, total=time.perf_counter() - t0)
        return path
    writer = create_store(out, specs, n_samples=n, request=request, provenance=provenance, params=params,
                          inputs_fingerprint=fingerprint, overwrite=overwrite, compression=compression)
    if writer.complete:
        return out
    t_prepare, c_prepare = time.perf_counter(), time.process_time()
    start = writer.samples_done
    try:
        _run(adapter, data, writer, plans, names, extra, pool, batch_size, DTYPES[store_dtype_name],
             progress, checkpoint_every)
    except BaseException:
        writer.close()  # the partial store and its cursor stay: the same command resumes
        raise
    t_stream, c_stream = time.perf_counter(), time.process_time()
    path = writer.finalize()
    LAST_RUN.update(load=t_load - t0, prepare=t_prepare - t_load, stream=t_stream - t_prepare,
                    stream_cpu=c_stream - c_prepare,
                    finalize=time.perf_counter() - t_stream, samples=n - start)
    return path


def _check_window_options(context_length, max_tokens, max_length):
    if max_tokens is not None and context_length is None:
        raise ActkitError("--max-tokens bounds a run of token windows; give --context-length too")
    if context_length is not None:
        if not isinstance(context_length, (int, np.integer)) or context_length < 1:
            raise ActkitError(f"--context-length must be a positive integer, got {context_length}")
        if max_length is not None:
            raise ActkitError("--max-length truncates texts; token windows (--context-length) have a fixed length")
    if max_tokens is not None and (not isinstance(max_tokens, (int, np.integer)) or max_tokens < 1):
        raise ActkitError(f"--max-tokens must be a positive integer, got {max_tokens}")


def _run(adapter, data, writer, plans, names, extra, pool, batch_size, store_dtype, progress, every, *,
         first=0, last=None):
    """Stream samples ``first + writer.samples_done`` to ``last`` (default: all) into ``writer``."""
    from tqdm.auto import tqdm

    n = adapter.n_samples(data) if last is None else last
    start = first + writer.samples_done
    buffers = {name: _RowBuffer(writer, name) for name in names}
    counter = {"rows": sum(writer.rows_done.values())}
    current = {}

    def callback(name, tensor):
        rows = to_rows(tensor, plans[name], pool, current["batch"], store_dtype)
        counter["rows"] += rows.shape[0]
        buffers[name].add(rows)

    cap = Capture(adapter.model, names, callback, stop_early=True, extra_modules=extra)
    last_checkpoint = time.monotonic()
    bar = tqdm(total=n - first, initial=start - first, unit="samples", desc="extracting", dynamic_ncols=True,
               disable=None if progress else True, smoothing=0.1)
    try:
        with torch.inference_mode(), cap:
            for lo in range(start, n, batch_size):
                hi = min(lo + batch_size, n)
                batch = adapter.batch(data, lo, hi)
                current["batch"] = batch
                cap.run(lambda: adapter.forward(batch))
                if len(cap.fired) != len(names):
                    missing = [m for m in names if m not in cap.fired]
                    raise LayerError(f"layers {missing} did not run for samples {lo}:{hi}")
                bar.update(hi - lo)
                bar.set_postfix(rows=f"{counter['rows']:,}", refresh=False)
                if time.monotonic() - last_checkpoint >= every or hi == n:
                    for buf in buffers.values():
                        buf.flush()
                    # ``every`` is the user's interval (0: every batch): the store's own
                    # throttle must not stretch it
                    writer.checkpoint(hi - first, force=True)
                    last_checkpoint = time.monotonic()
    finally:
        bar.close()


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
        if data.kind != adapter.kind:
            raise InputError(f"{adapter.name} takes {adapter.kind} inputs but {data.source} holds {data.kind}s")
        adapter.prepare(data, None)
        with torch.inference_mode():
            batch = adapter.batch(data, 0, 1)
    else:
        with torch.inference_mode():
            batch = adapter.dummy_batch()
    with torch.inference_mode():
        seen = probe_all(adapter.model, lambda: adapter.forward(batch))
    width = None if batch.mask is None else int(batch.mask.shape[1])
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
            (len(shape) == 3 and (width is None or shape[1] == width))
            or (len(shape) == 4 and adapter.kind == "image")
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
