"""The extraction driver: model + inputs + layers -> one crash-safe store.

Order of work (everything that can fail on a user mistake fails before the store exists):

1. validate options and the output path; read the inputs (all of them are checked);
2. load the model (:mod:`actkit.extractors.registry`) and resolve the layer names;
3. tokenise all text (exact row counts) and probe the layers on the first sample (output
   shapes, each module runs exactly once);
4. create (or resume) the store with exact row counts and row indices;
5. stream batches from ``writer.samples_done``: text is length-sorted within windows of
   batches and cut by a token budget (:mod:`actkit.extractors._batching`); one forward pass
   per batch, hooks pool in torch and copy only what is stored, the forward stops after the
   deepest layer; a window's rows go to the store in input order, in large appends; a
   checkpoint (at a window's end) every few seconds; finalise.

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

import numpy as np
import torch
from tqdm.auto import tqdm

from actkit._faults import fault
from actkit._threads import follows_thread_policy, torch_region
from actkit._warn import warn_user
from actkit.errors import ActkitError, InputError, LayerError
from actkit.store import create_store

from . import distributed, registry
from ._base import DTYPES
from ._batching import Batching, check_batching_options, check_token_budget, take
from ._buffer import RowBuffer
from ._hooks import Capture
from ._budget import check_budget_before_load
from ._options import FINAL_HIDDEN, check_options, check_output_path, check_window_options
from ._plan import plan_layers, to_rows
from ._records import (INIT_SEED, keep_labels, layer_specs, provenance_record, request_record,
                       samples_fingerprint)
from .inputs import read_inputs
from .naming import resolve_names

#: What the last :func:`extract` call in this process did: ``outcome`` (``"written"``,
#: ``"resumed"`` or ``"complete"``: already finished, nothing computed), ``resumed_from``
#: and ``n_samples``; and the wall-clock seconds of its phases (``load``, ``prepare``,
#: ``stream``, ``finalize``; ``stream_cpu``: CPU seconds of this process while streaming)
#: and the samples streamed, read by the benchmark. Never written into the store (stores
#: are bitwise reproducible).
LAST_RUN: dict = {}


@follows_thread_policy
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
    threads: int | None = None,
    label_column: str | None = None,
    skip_special_tokens: bool = False,
    max_batch_tokens: int | None = None,
    sort_by_length: bool = True,
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
        ``out`` as virtual datasets over the shards (see :mod:`actkit.extractors.distributed`).
    layers : str or sequence of str
        Dotted module paths from ``model.named_modules()`` (comma-separated in a string), or
        the names every model shares (:mod:`actkit.extractors.naming`): ``"embed"``,
        ``"resid.3"``, ``"resid.-1"``, ``"resid.all"``, ``"final_hidden"`` (the final hidden
        state after the final norm); two-tower models take ``"vision."``/``"text."`` first.
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
        Most samples per forward pass.
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
        Also store the final hidden state (after the final norm, ``last_hidden_state``) as
        layer ``final_hidden``.
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
        tokenizer has one; :mod:`actkit.extractors.windows`); samples are then windows and the index
        holds ``[window, position]``.
    max_tokens : int, optional
        With ``context_length``: at most ``max_tokens // context_length`` windows; texts are
        tokenised only until they are filled.
    device_map : str, optional
        ``"auto"``: let ``accelerate`` spread a model too large for one device over the
        available devices (transformers models; replaces ``device``; single process only).
    threads : int, optional
        CPU threads (torch, BLAS and actkit's own); default: ``OMP_NUM_THREADS``, else the
        CPUs this process may run on, divided between torchrun ranks (:mod:`actkit._threads`).
        The stored rows do not depend on it.
    label_column : str, optional
        Keep this column of a datasets input (one label per sample) in the store, for
        ``actkit evaluate STORE --labels COLUMN``: parameter ``label:COLUMN`` (int64 code per
        sample), names in ``provenance["label_names"][COLUMN]``.
    skip_special_tokens : bool
        Leave the tokenizer's special tokens ([CLS], [SEP], BOS, EOS...) out of the per-token
        rows (``pool="none"``); the index keeps their true token positions, and the store's
        recorded inputs keep every token.
    max_batch_tokens : int, optional
        Text: most padded tokens per forward pass (samples × the longest one's tokens);
        ``batch_size`` stays a cap. Every input must fit alone (after ``max_length``), else
        one line naming the longest input, before the model loads.
    sort_by_length : bool
        Text: run each window of up to 64 batches sorted by token count, so batches hold
        texts of similar length and little padding; the store's rows stay in input order,
        equal to an input-order run to float rounding. ``False``: batches of consecutive
        samples, in input order. Images always run in input order.

    The store records what each input sample was (``store.inputs``: the token ids and the
    tokenizer's vocabulary, or each image's source and the model's preprocessing geometry),
    and holds the layers in the order they run in the model (depth), whatever order they
    were asked in.

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
    t0 = time.perf_counter()
    LAST_RUN.clear()
    store_dtype_name = check_options(pool, batch_size, dtype, storage_dtype, compression, checkpoint_every)
    check_window_options(context_length, max_tokens, max_length)
    check_batching_options(max_batch_tokens, context_length)
    batch_size = int(batch_size)
    out = Path(out).expanduser()
    check_output_path(out)
    # warnings about the inputs and the model are said once, after the store says there is
    # work to do (a rerun of a finished request computes nothing and warns about nothing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prepared = _prepare(model, inputs, out, layers=layers, pool=pool, revision=revision,
                            checkpoint=checkpoint, batch_size=batch_size, device=device, dtype=dtype,
                            store_dtype_name=store_dtype_name, max_length=max_length,
                            max_samples=max_samples, final_hidden=final_hidden, unembedding=unembedding,
                            overwrite=overwrite, trust_remote_code=trust_remote_code,
                            allow_pickle=allow_pickle, compression=compression, progress=progress,
                            column=column, split=split, config=config, context_length=context_length,
                            max_tokens=max_tokens, device_map=device_map, label_column=label_column,
                            skip_special_tokens=skip_special_tokens,
                            batching=(bool(sort_by_length), max_batch_tokens))
    if not isinstance(prepared, tuple):  # a torchrun rank: ``prepared`` runs the sharded extraction
        # the warnings are said once (rank 0), when there is something to compute
        path = prepared(checkpoint_every, on_work=lambda: _replay(caught))
        LAST_RUN.setdefault("outcome", "written")
        LAST_RUN.update(total=time.perf_counter() - t0)
        return path
    adapter, data, writer, plans, names, extra, t_load, batching = prepared
    n = adapter.n_samples(data)
    LAST_RUN.update(n_samples=n, resumed_from=writer.resumed_from,
                    outcome="complete" if writer.complete else "resumed" if writer.resumed_from else "written")
    if writer.complete:
        return out
    _replay(caught)
    t_prepare, c_prepare = time.perf_counter(), time.process_time()
    start = writer.samples_done
    try:
        _run(adapter, data, writer, plans, names, extra, pool, batch_size, DTYPES[store_dtype_name],
             progress, checkpoint_every, batching=batching)
    except BaseException:
        writer.close()  # the partial store and its cursor stay: the same command resumes
        raise
    t_stream, c_stream = time.perf_counter(), time.process_time()
    path = writer.finalize()
    LAST_RUN.update(load=t_load - t0, prepare=t_prepare - t_load, stream=t_stream - t_prepare,
                    stream_cpu=c_stream - c_prepare,
                    finalize=time.perf_counter() - t_stream, samples=n - start)
    return path


def _replay(caught) -> None:
    """Say the recorded warnings once each."""
    seen = set()
    for w in caught:
        if str(w.message) not in seen:
            seen.add(str(w.message))
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _prepare(model, inputs, out, *, layers, pool, revision, checkpoint, batch_size, device, dtype,
             store_dtype_name, max_length, max_samples, final_hidden, unembedding, overwrite,
             trust_remote_code, allow_pickle, compression, progress, column, split, config,
             context_length, max_tokens, device_map, label_column=None, skip_special_tokens=False,
             batching=(True, None)):
    """Everything before streaming: inputs, model, layers, row counts, the store (a torchrun
    rank gets back a function of ``checkpoint_every`` that runs its sharded extraction)."""
    world = distributed.world_from_env()
    device_arg = str(device)
    if world is not None:
        if device_map is not None:
            raise ActkitError("--device-map spreads one model over the devices of one process; it does not "
                              "combine with torchrun ranks")
        device = world.device(device)
        progress = progress and world.rank == 0
    data = read_inputs(inputs, max_samples=max_samples, column=column, split=split, config=config)
    sort_by_length, max_batch_tokens = batching
    tokenized = check_budget_before_load(model, data, max_batch_tokens, max_length, context_length, revision,
                                          trust_remote_code)
    adapter = registry.load_model(model, revision=revision, checkpoint=checkpoint, device=device, dtype=dtype,
                                  trust_remote_code=trust_remote_code, allow_pickle=allow_pickle,
                                  init_seed=INIT_SEED, device_map=device_map)
    t_load = time.perf_counter()
    fault("model-loaded")
    if data.kind not in adapter.kind.split("+"):
        raise InputError(f"{adapter.name} takes {adapter.kind} inputs but {data.source} holds {data.kind}s")
    adapter = adapter.for_inputs(data.kind)
    names, extra, modules_of, aliases_of, final_hidden, random_init = _resolve_layers(adapter, layers, final_hidden)
    params, final_norm = {}, None
    if unembedding:
        params["unembedding"] = adapter.unembedding()
        final_norm = getattr(adapter, "final_norm", lambda: None)()  # what the logit lens folds in
        if final_norm is not None:
            params["final_norm_gain"] = final_norm.pop("gain")

    if context_length is not None:
        adapter.prepare_windows(data, context_length, max_tokens, progress=progress)
    else:
        adapter.prepare(data, max_length, **({} if tokenized is None else {"tokenized": tokenized}))
    packing = getattr(adapter, "packing", None) if context_length is not None else None
    if skip_special_tokens:
        if pool != "none":
            raise ActkitError(f"--skip-special-tokens leaves special tokens out of per-token rows (--pool none); "
                              f"--pool {pool} gives one row per sample")
        adapter.skip_special_tokens()
    n = adapter.n_samples(data)
    lengths = adapter.lengths()
    check_token_budget(lengths, max_batch_tokens, getattr(data, "texts", None), data.source)
    with torch.inference_mode():
        probe = adapter.batch(data, 0, 1)
    plans = plan_layers(adapter, names, probe, extra_modules=extra)

    specs = layer_specs(adapter, plans, pool, n, lengths, modules_of, aliases_of, store_dtype_name)

    # the fingerprint names the samples and the user's options that choose them (so stores of
    # different models on the same inputs agree, which `compare` checks); the model's own
    # preprocessing (tokenizer, image processor) goes into the request and the provenance
    preprocessing = adapter.preprocessing()
    fingerprint = samples_fingerprint(data, adapter, max_length, max_tokens, packing)
    label_names = keep_labels(params, inputs, label_column, n, packing, split, config, max_samples)
    device_name = str(adapter.device) if world is None else device_arg
    request = request_record(adapter, data, names, pool, dtype, store_dtype_name, max_length, n, fingerprint,
                              preprocessing, batch_size, device_name, unembedding, random_init, revision,
                              sort_by_length, max_batch_tokens)
    run_batching = Batching.for_layers(lengths if data.kind == "text" else None, specs, n,
                                       sort_by_length=sort_by_length, max_batch_tokens=max_batch_tokens)
    extra_request = {"packing": packing, "device_map": device_map, "label_column": label_column,
                     "skip_special_tokens": True if skip_special_tokens else None,
                     "world_size": None if world is None else world.world_size}
    request.update({k: v for k, v in extra_request.items() if v is not None})
    provenance = provenance_record(adapter, data, specs, request, dtype, store_dtype_name, pool, n, fingerprint,
                                    preprocessing, max_length, batch_size, device_name, final_hidden, unembedding)
    extra_provenance = {"inputs_column": data.column, "inputs_split": split, "inputs_config": config,
                        "packing": packing, "device_map": device_map, "label_names": label_names,
                        "final_norm": final_norm}
    provenance.update({k: v for k, v in extra_provenance.items() if v is not None})
    recorded = adapter.record_inputs(data)  # what each sample was: the store's /inputs
    if world is not None:
        return _sharded_runner(world, out, adapter, data, plans, names, extra, pool, batch_size, store_dtype_name,
                               progress, run_batching, specs, request, provenance, params, fingerprint,
                               overwrite, compression, recorded, n)
    writer = create_store(out, specs, n_samples=n, request=request, provenance=provenance, params=params,
                          inputs_fingerprint=fingerprint, overwrite=overwrite, compression=compression,
                          inputs=recorded)
    return adapter, data, writer, plans, names, extra, t_load, run_batching


def _resolve_layers(adapter, layers, final_hidden):
    """The asked layers of ``adapter``: ``(names, extra, modules_of, aliases_of, final_hidden,
    random_init)`` (:func:`resolve_names`' four, whether a final hidden state is among them, and
    the checkpoint's randomly initialised weights); warns for each layer that reads those.
    Raises :class:`LayerError` where no layer is asked."""
    names, extra, modules_of, aliases_of = resolve_names(adapter, layers, final_hidden)
    final_hidden = final_hidden or any(name.endswith(FINAL_HIDDEN) for name in names)
    random_init = adapter.info.get("randomly_initialised") or []
    for name in names:
        hit = [k for k in random_init if k.startswith(modules_of[name] + ".")]
        if hit:
            warn_user(f"layer {name!r} reads weights that are not in the checkpoint and were randomly "
                      f"initialised with seed {INIT_SEED}, the same in every run ({', '.join(hit[:3])})")
    if not names:
        raise LayerError("no layers requested; pass --layers NAME[,NAME...] (see `actkit layers MODEL`)")
    return names, extra, modules_of, aliases_of, final_hidden, random_init


def _sharded_runner(world, out, adapter, data, plans, names, extra, pool, batch_size, store_dtype_name,
                    progress, run_batching, specs, request, provenance, params, fingerprint, overwrite,
                    compression, recorded, n):
    """A torchrun rank's extraction: a function of ``checkpoint_every`` (and ``on_work``) that
    streams this rank's share of the ``n`` samples into the sharded store at ``out``."""
    def run_sharded(checkpoint_every, on_work=None):
        LAST_RUN["n_samples"] = n
        def run_block(writer, first, last):
            _run(adapter, data, writer, plans, names, extra, pool, batch_size, DTYPES[store_dtype_name],
                 progress, checkpoint_every, first=first, last=last, batching=run_batching)

        return distributed.extract_sharded(world, out, specs, run_block, device=str(adapter.device), n=n,
                                           request=request, provenance=provenance, params=params,
                                           fingerprint=fingerprint, overwrite=overwrite,
                                           compression=compression, report=LAST_RUN, on_work=on_work,
                                           inputs=recorded)

    return run_sharded


def _run(adapter, data, writer, plans, names, extra, pool, batch_size, store_dtype, progress, every, *,
         first=0, last=None, batching=None):
    """Stream samples ``first + writer.samples_done`` to ``last`` (default: all) into ``writer``,
    window by window (:class:`~actkit.extractors._batching.Batching`; default: input order)."""
    n = adapter.n_samples(data) if last is None else last
    start = first + writer.samples_done
    batching = Batching(None) if batching is None else batching
    buffers = {name: RowBuffer(writer, name) for name in names}
    counter = {"rows": sum(writer.rows_done.values())}
    current = {}

    def callback(name, tensor):
        rows = to_rows(tensor, plans[name], pool, current["batch"], store_dtype)
        counter["rows"] += rows.shape[0]
        if current["sorted"] is None:
            buffers[name].add(rows)
        else:
            current["sorted"].add(name, rows)

    cap = Capture(adapter.model, names, callback, stop_early=True, extra_modules=extra)
    last_checkpoint = time.monotonic()
    bar = tqdm(total=n - first, initial=start - first, unit="samples", desc="extracting", dynamic_ncols=True,
               disable=None if progress else True, smoothing=0.1)
    try:
        with torch_region(), torch.inference_mode(), cap:
            for window in batching.windows(start, n, first=first, batch_size=batch_size):
                current["sorted"] = batching.sink(window)  # rows of a sorted window: back to input order
                for ids in window.batches:
                    batch = take(adapter, data, ids)
                    current["batch"] = batch
                    cap.run(lambda: adapter.forward(batch))
                    if len(cap.fired) != len(names):
                        missing = [m for m in names if m not in cap.fired]
                        raise LayerError(f"layers {missing} did not run for samples {_span(ids)}")
                    bar.update(len(ids))
                    bar.set_postfix(rows=f"{counter['rows']:,}", refresh=False)
                if current["sorted"] is not None:
                    for name in names:
                        buffers[name].add(current["sorted"].in_input_order(name))
                if time.monotonic() - last_checkpoint >= every or window.stop == n:
                    for buf in buffers.values():
                        buf.flush()
                    # ``every`` is the user's interval (0: every window): the store's own
                    # throttle must not stretch it; a window is written whole or not at all
                    writer.checkpoint(window.stop - first, force=True)
                    last_checkpoint = time.monotonic()
    finally:
        bar.close()


def _span(ids) -> str:
    """``lo:hi`` of consecutive sample ids, else the ids."""
    lo, hi = int(ids[0]), int(ids[-1]) + 1
    return f"{lo}:{hi}" if hi - lo == len(ids) and np.all(np.diff(ids) == 1) else str([int(i) for i in ids])
