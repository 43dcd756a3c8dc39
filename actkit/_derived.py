"""``transform_store``: a fitted estimator's ``transform`` streamed over a store layer into a
new (derived) store that holds the transformed rows and the fitted parameters.

A community SAE (:class:`~actkit.sae.SparseAutoencoder`, :func:`actkit.load_sae`) writes its
codes in the sparse codes store instead (``actkit-codes/1``: CSR, ``actkit/store/_codes.py``,
``docs/store-format.md``): its codes have far more columns than non-zeros.

This is what ``actkit whiten | ica | dictionary`` write: the output keeps the source layer's
name and row index, the source's ``n_samples`` and ``inputs_fingerprint`` (so ``compare``
can pair derived stores), and records the source store's path and ``fingerprint`` in its
provenance. On any error the partial output is deleted, so a failed call never leaves a
half-written store; the identical request on a finished output is a no-op.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import actkit
from actkit._data import iter_blocks
from actkit._faults import fault
from actkit._params import check_fitted
from actkit.errors import StoreError, ValidationError
from actkit.runners import chunked_rows, file_rows, is_chunked, portable, runner_for
from actkit.store import (CodesWriter, Layer, LayerSpec, SourceRows, codes_meta, create_store, is_codes_file, shard_dir,
                          write_sharded)

__all__ = ["transform_store"]

# estimator class -> (kind recorded in the store, fitted parameters stored under /params,
# what the fit reported (provenance "fit"))
_KINDS = {
    "Whitener": ("whiten",
                 {"mean": "mean_", "whitening": "whitening_", "dewhitening": "dewhitening_",
                  "explained_variance": "explained_variance_"},
                 {"n_components": ("n_components_", int), "rank": ("rank_", int)}),
    "FastICA": ("ica",
                {"mean": "mean_", "whitening": "whitening_", "unmixing": "components_",
                 "mixing": "mixing_"},
                {"n_components": ("n_components_", int), "n_iter": ("n_iter_", int),
                 "converged": ("converged_", bool)}),
    "ICASources": ("ica", {"mean": "mean_", "unmixing": "unmixing_", "mixing": "mixing_"},  # compare's sources
                   {"n_components": ("n_components_", int)}),
    "SparseDictionary": ("dictionary", {"dictionary": "dictionary_"},
                         {"reconstruction_error": ("reconstruction_error_", float),
                          "mean_active": ("mean_active_", float)}),
}


def _jsonable_params(estimator) -> dict:
    out = {}
    for key, value in estimator.get_params(deep=False).items():
        if value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
    return out


def _describe(estimator):
    """(kind, params, fit results) of a fitted estimator."""
    name = type(estimator).__name__
    if name in _KINDS:
        kind, param_attrs, result_attrs = _KINDS[name]
        params = {key: getattr(estimator, attr) for key, attr in param_attrs.items()}
        results = {key: cast(getattr(estimator, attr)) for key, (attr, cast) in result_attrs.items()}
        if getattr(estimator, "stability_", None) is not None:  # actkit dictionary --restarts
            results["stability"] = estimator.stability_
        return kind, params, results
    # any other fitted transformer: its fitted array attributes
    params = {k.rstrip("_"): v for k, v in vars(estimator).items()
              if k.endswith("_") and not k.startswith("_") and isinstance(v, np.ndarray)}
    return name.lower(), params, {}


def transform_store(estimator, layer, out, *, overwrite=False, block_rows=None, settings=None,
                    progress=None, echo=None, scheduler=None):
    """Stream ``estimator.transform`` over every row of a store layer into a new store.

    Parameters
    ----------
    estimator : fitted transformer
        :class:`~actkit.Whitener`, :class:`~actkit.FastICA`, :class:`~actkit.SparseDictionary`
        (their fitted parameters are stored: ``mean``/``whitening``/``dewhitening``/
        ``explained_variance``; ``mean``/``whitening``/``unmixing``/``mixing``;
        ``dictionary``) or any fitted transformer with ``n_features_in_`` (its fitted array
        attributes are stored). A :class:`~actkit.sae.SparseAutoencoder` (``load_sae``)
        writes a sparse codes store (CSR, ``actkit-codes/1``; its tensors under ``/params``),
        read with plain h5py or :func:`actkit.store.read_codes`.
    layer : actkit.store.Layer
        The source layer (``open_store(path)[name]``), of shape (n_rows, n_features_in_).
    out : str or os.PathLike
        The output store (``.h5``); it gets one layer of the source layer's name, of shape
        (n_rows, n_out) float32, with the source's row index.
    overwrite : bool, default=False
        Replace ``out`` if it holds another store (it is left untouched until the new one is
        complete).
    block_rows : int, optional
        Rows per streamed block (default about 32 MiB).
    settings : dict, optional
        The hyperparameters recorded in the output's request and provenance (default: the
        estimator's scalar ``get_params()``). The request decides whether an existing
        output is the same store (a no-op) or another one.
    progress : bool, optional
        Progress bar (default: only on a terminal).
    echo : callable, optional
        ``echo(message)`` for the one-line summary (e.g. ``print``).
    scheduler : None, str or distributed.Client, optional
        Dask (``docs/dask.md``): with a scheduler, or for a dask array ``layer``, the rows
        are transformed on the workers and written as one shard per worker,
        ``out + ".shards/rank-R-of-K.h5"``, plus a virtual-dataset index at ``out`` (which
        every reader opens as one store). A dask array gets the row index ``[row, -1]``.

    Returns
    -------
    pathlib.Path
        The finished store.

    Raises
    ------
    StoreError
        ``layer`` is not a store layer, ``out`` is the source store, or ``out`` holds
        another store (without ``overwrite``).
    ValidationError
        The estimator is not fitted on this layer's width, or its output is not finite.
    """
    chunked = is_chunked(layer)
    if hasattr(estimator, "encode_block") and hasattr(estimator, "spec_"):  # an SAE: sparse codes
        if chunked or scheduler is not None:
            raise ValidationError("an SAE's codes store is written in this process (no scheduler, no dask array)")
        return _write_codes(estimator, layer, out, overwrite, block_rows, settings, progress, echo)
    if not chunked:
        store = getattr(layer, "store", None)
        if store is None or not hasattr(layer, "index"):
            raise StoreError("transform_store needs a store layer (actkit.open_store(path)[name])")
    check_fitted(estimator)
    kind, params, results = _describe(estimator)
    settings = _jsonable_params(estimator) if settings is None else dict(settings)
    settings = {k: v for k, v in settings.items() if v is not None}
    job = _array_job if chunked else _store_job
    spec, kw = job(estimator, layer, out, kind, params, results, settings, overwrite)
    # where the rows are transformed: here (one store), or on a scheduler's workers (one shard each)
    with runner_for(layer, scheduler, block_rows=block_rows) as (rows, runner):
        if runner.remote:
            return _write_sharded(runner, rows if chunked else _verified_rows(layer, block_rows), estimator, out,
                                  spec, kw, kind, None if chunked else layer, progress, echo)
    return _write_here(estimator, layer, out, spec, kw, kind, block_rows, progress, echo)


def _store_job(estimator, layer, out, kind, params, results, settings, overwrite):
    """The new store's layer and request for the rows of a store layer (or embedding file)."""
    store, name = layer.store, layer.name
    width = int(layer.shape[1])
    if getattr(estimator, "n_features_in_", width) != width:
        raise ValidationError(f"layer {name} has {width} features, but the "
                              f"{type(estimator).__name__} was fitted on {estimator.n_features_in_}")
    src = os.path.abspath(store.path)
    if os.path.abspath(out) == src:
        raise StoreError("the output store must differ from the source store")
    request = {"command": kind, "source": src, "source_fingerprint": store.fingerprint, "layer": name, **settings}
    provenance = {"command": kind, "source_store": src, "source_fingerprint": store.fingerprint,
                  "source_layer": name, "source_provenance": store.provenance,
                  "actkit_version": actkit.__version__, "settings": settings, "fit": results}
    n = int(layer.shape[0])
    n_out = int(np.asarray(estimator.transform(np.asarray(layer[:1]))).shape[1])
    spec = LayerSpec(name, n, n_out, dtype="float32", index=np.asarray(layer.index),
                     attrs={"transform": kind, "source_layer": name, "source_features": width})
    kw = dict(n_samples=int(store.n_samples) or n, request=request, provenance=provenance,
              params={k: np.asarray(v) for k, v in params.items()},
              inputs_fingerprint=store.inputs_fingerprint or None, overwrite=overwrite)
    return spec, kw


def _array_job(estimator, X, out, kind, params, results, settings, overwrite):
    """The new store's layer and request for the rows of a chunked array (no source store:
    layer ``data``, row index ``[row, -1]``)."""
    if getattr(estimator, "n_features_in_", X.shape[1]) != X.shape[1]:
        raise ValidationError(f"the dask array has {X.shape[1]} features, but the {type(estimator).__name__} "
                              f"was fitted on {estimator.n_features_in_}")
    first = np.asarray(X[:1].compute(scheduler="sync"))
    n_out = int(np.asarray(portable(estimator).transform(first)).shape[1])
    request = {"command": kind, "source": X.name, **settings}
    provenance = {"command": kind, "source": X.name, "actkit_version": actkit.__version__, "settings": settings,
                  "fit": results}
    spec = LayerSpec("data", int(X.shape[0]), n_out, dtype="float32", attrs={"transform": kind})
    kw = dict(n_samples=int(X.shape[0]), request=request, provenance=provenance,
              params={k: np.asarray(v) for k, v in params.items()}, inputs_fingerprint=None, overwrite=overwrite)
    return spec, kw


def _write_here(estimator, layer, out, spec, kw, kind, block_rows, progress, echo):
    """The rows transformed in this process into one store, read block by block (a store's
    blocks checked against their checksums as read)."""
    name, n = spec.name, spec.rows
    writer = create_store(out, [spec], **kw)
    if writer.complete:
        if echo is not None:
            echo(f"{out}: already complete for this request; nothing to do")
        return writer.path
    if writer.samples_done:  # an interrupted run of the same request: recompute from scratch
        writer.abort()
        writer = create_store(out, [spec], **kw)
    def write(block):
        rows = np.asarray(estimator.transform(block), dtype=np.float32)
        if not np.all(np.isfinite(rows)):
            raise ValidationError(f"the {kind} output has non-finite values; check the input data")
        fault("derived-rows")
        writer.append(name, rows)

    path = _fill(writer, layer, write, block_rows, f"{kind}: transform", progress,
                 lambda: writer.checkpoint(kw["n_samples"], force=True))
    if echo is not None:
        echo(f"wrote {out}: layer {name}, {n} rows x {spec.features} ({kind}); "
             f"params: {', '.join(sorted(kw['params']))}")
    return path


def _write_sharded(runner, rows, estimator, out, spec, kw, kind, layer, progress, echo):
    """The rows transformed on the runner's workers, one shard each, under a virtual index."""
    f = getattr(getattr(getattr(layer, "store", None), "file", None), "filename", None)  # None: no store file
    index = None if f is None else file_rows(f, f"/layers/{layer.name}/index", (layer.shape[0], 2), np.int64)
    path = write_sharded(runner, rows, out, layer=spec.name, transform=portable(estimator).transform,
                         n_out=spec.features, n_samples=kw["n_samples"], request=kw["request"],
                         provenance=kw["provenance"], params=kw["params"], index_reader=index,
                         inputs_fingerprint=kw["inputs_fingerprint"], layer_attrs=spec.attrs,
                         overwrite=kw["overwrite"], desc=f"{kind}: transform", progress=progress)
    if echo is not None:
        n = len(list(shard_dir(path).glob("rank-*.h5")))
        echo(f"wrote {out}: layer {spec.name}, {spec.rows} rows x {spec.features} ({kind}) in {n} shard(s) "
             f"under {shard_dir(path)}; params: {', '.join(sorted(kw['params']))}")
    return path


def _verified_rows(layer, block_rows):
    """``layer`` as a chunked array whose every chunk is checked against the source store's
    block checksums as a worker reads it (an embedding file, which has none: its own)."""
    if not isinstance(layer, Layer):
        return layer.to_dask(block_rows)
    token = ("verified", layer.store.fingerprint, os.path.getmtime(layer.store.path))
    return chunked_rows(SourceRows(layer.loader_source()), block_rows, token)


def _write_codes(sae, layer, out, overwrite, block_rows, settings, progress, echo):
    """An SAE's codes of every row of a store layer, as a sparse (CSR) codes store."""
    check_fitted(sae)
    store = getattr(layer, "store", None)
    if store is None or not hasattr(layer, "index"):
        raise StoreError("transform_store needs a store layer (actkit.open_store(path)[name])")
    name, (n, width) = layer.name, (int(layer.shape[0]), int(layer.shape[1]))
    if width != sae.n_features_in_:
        raise ValidationError(f"layer {name} has {width} features, but the SAE reads {sae.n_features_in_}")
    src = os.path.abspath(store.path)
    if os.path.abspath(out) == src:
        raise StoreError("the output store must differ from the source store")
    out = Path(out)
    spec = {k: v for k, v in sae.spec_.items()}
    settings = {"sae": os.path.abspath(str(sae.path)) if sae.path is not None else None, **(settings or {})}
    request = {"command": "sae", "source": src, "source_fingerprint": store.fingerprint, "layer": name, **settings}
    if out.exists():
        mine = is_codes_file(out)
        if mine and codes_meta(out).get("request") == json.loads(json.dumps(request)):
            if echo is not None:
                echo(f"{out}: already complete for this request; nothing to do")
            return out
        if not overwrite:
            raise StoreError(f"{out} exists (another request); pass overwrite=True to replace it")
        if not mine:
            raise StoreError(f"{out} exists and is not an actkit codes store; not replacing it")
    meta = {"request": request, "provenance": {"command": "sae", "source_store": src,
                                               "source_fingerprint": store.fingerprint, "source_layer": name,
                                               "inputs_fingerprint": store.inputs_fingerprint,
                                               "n_samples": int(store.n_samples), "sae": spec,
                                               "actkit_version": actkit.__version__}}
    writer = CodesWriter(out, name, n, sae.n_components_, np.asarray(layer.index), meta, sae.weights_)
    rows = int(block_rows or max(64, min(8192, (64 << 20) // (4 * max(sae.n_components_, width)))))
    def write(block):
        writer.append(*_csr(sae.encode_block(np.asarray(block))))

    path = _fill(writer, layer, write, rows, "sae: codes", progress)
    if echo is not None:
        echo(f"wrote {out}: codes of layer {name}, {n} rows x {sae.n_components_} latents, "
             f"{writer.nnz / max(n, 1):.2f} non-zero per row (CSR)")
    return path


def _fill(writer, layer, write, block_rows, desc, progress, before_finalize=None):
    """Every row block of ``layer`` through ``write`` (:func:`_feed`), then ``before_finalize()``
    and ``writer.finalize()``; on any error (a kill, a full disk) the writer is aborted, so no
    half-written store is left. Returns the finished path."""
    try:
        _feed(layer, write, block_rows, desc, progress)
        if before_finalize is not None:
            before_finalize()
        return writer.finalize()
    except BaseException:
        writer.abort()
        raise


def _feed(layer, write, block_rows, desc, progress):
    """``write(block)`` of every row block of ``layer`` in order (a store's rows checked against
    their checksums as read), counted on a progress bar ``desc`` (``progress``: None shows it
    on a terminal only, False never)."""
    bar = tqdm(total=int(layer.shape[0]), desc=desc, unit="row", leave=False,
               disable=None if progress is None else not progress)

    def step(block):
        write(block)
        bar.update(len(block))

    if hasattr(layer, "for_each_verified"):
        layer.for_each_verified(step, block_rows)
    else:
        for block in iter_blocks(layer, block_rows):
            step(block)
    bar.close()


def _csr(codes):
    """``(indptr, indices, values)`` of one block's codes (``SparseAutoencoder.encode_block``),
    latents in increasing order within a row."""
    import torch  # torch: ~1.5 s at import; only an SAE's codes need it (a Whitener's transform_store runs without)

    if codes[0] == "topk":
        vals, idx = codes[1], codes[2]
        order = torch.argsort(idx, dim=1)
        vals, idx = torch.gather(vals, 1, order), torch.gather(idx, 1, order)
        live = (vals != 0).cpu().numpy()
        counts = live.sum(axis=1)
        indices, values = idx.cpu().numpy()[live], vals.cpu().numpy()[live]
    else:
        dense = codes[1].cpu().numpy()
        live = dense != 0
        counts = live.sum(axis=1)
        rows_, indices = np.nonzero(live)
        values = dense[rows_, indices]
    if not np.all(np.isfinite(values)):
        raise ValidationError("the SAE's codes have non-finite values; check the input data")
    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, indices, values
