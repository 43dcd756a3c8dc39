"""The extraction driver: model + inputs + layers -> one crash-safe store.

Order of work (everything that can fail on a user mistake fails before the store exists):

1. validate options and the output path; read the inputs (all of them are checked);
2. load the model (:mod:`actkit.extractors.registry`) and resolve the layer names;
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

import time
import warnings
from pathlib import Path

import torch

from actkit.errors import InputError, LayerError

from ._base import DTYPES
from ._buffer import RowBuffer
from ._hooks import Capture, resolve_layers
from ._options import FINAL_HIDDEN, check_options, check_output_path
from ._plan import plan_layers, rows_and_index, to_rows

#: Wall-clock seconds of the phases of the last :func:`extract` call in this process
#: (``load``, ``prepare``, ``stream``, ``finalize``; ``stream_cpu``: CPU seconds of this
#: process while streaming) and the samples streamed; read by the
#: benchmark. Never written into the store (stores are bitwise reproducible).
LAST_RUN: dict = {}



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
        (recursive, sorted) or a uint8 ``.npy`` array of shape (N, H, W, 3).
    out : str or path
        The store to write (``.h5``).
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

    t0 = time.perf_counter()
    LAST_RUN.clear()
    store_dtype_name = check_options(pool, batch_size, dtype, storage_dtype, compression)
    batch_size = int(batch_size)
    out = Path(out).expanduser()
    check_output_path(out)
    data = read_inputs(inputs, max_samples=max_samples)
    adapter = load_model(model, revision=revision, checkpoint=checkpoint, device=device, dtype=dtype,
                         trust_remote_code=trust_remote_code, allow_pickle=allow_pickle)
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

    adapter.prepare(data, max_length)
    n = len(data)
    lengths = adapter.lengths()
    with torch.inference_mode():
        probe = adapter.batch(data, 0, 1)
    plans = plan_layers(adapter, names, probe, extra_modules=extra)

    specs = []
    for name in names:
        plan = plans[name]
        rows, index = rows_and_index(plan, pool, n, lengths)
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
    fingerprint = inputs_fingerprint(data, {"kind": data.kind, "max_length": max_length})
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
        "device": str(adapter.device),
        "unembedding": bool(unembedding),
    }
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
        "device": str(adapter.device),
        "final_hidden": bool(final_hidden),
        "unembedding": bool(unembedding),
    }
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


def _run(adapter, data, writer, plans, names, extra, pool, batch_size, store_dtype, progress, every):
    from tqdm.auto import tqdm

    n = len(data)
    start = writer.samples_done
    buffers = {name: RowBuffer(writer, name) for name in names}
    counter = {"rows": sum(writer.rows_done.values())}
    current = {}

    def callback(name, tensor):
        rows = to_rows(tensor, plans[name], pool, current["batch"], store_dtype)
        counter["rows"] += rows.shape[0]
        buffers[name].add(rows)

    cap = Capture(adapter.model, names, callback, stop_early=True, extra_modules=extra)
    last_checkpoint = time.monotonic()
    bar = tqdm(total=n, initial=start, unit="samples", desc="extracting", dynamic_ncols=True,
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
                    writer.checkpoint(hi, force=True)
                    last_checkpoint = time.monotonic()
    finally:
        bar.close()
