"""Shared plumbing of ``actkit whiten | ica | dictionary``: read a store layer, fit, write a
derived store (transformed rows + fitted parameters) that every later command can read.

The output keeps the source layer's name and row index, the source's ``n_samples`` and
``inputs_fingerprint`` (so ``compare`` can pair derived stores), and records the source
store's path and ``fingerprint`` in its provenance. On any error the partial output is
deleted (``writer.abort()``), so a failed command never leaves a half-written store.
"""

from __future__ import annotations

import contextlib
import os
import sys

import numpy as np


def add_common_arguments(p) -> None:
    p.add_argument("store", metavar="STORE", help="source store (.h5) written by extract or another command")
    p.add_argument("--layer", required=True, help="layer of the source store to analyse")
    p.add_argument("--out", required=True, metavar="OUT.h5", help="output store to write")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it holds another store")
    p.add_argument("--block-rows", type=int, default=None, help="rows read per block (default: ~32 MiB)")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    add_scheduler_argument(p)


def add_scheduler_argument(p) -> None:
    p.add_argument("--scheduler", metavar="ADDRESS|local:N", default=None,
                   help="run every pass on Dask: the address of a running scheduler (tcp://host:8786) "
                        "or local:N for N local worker processes; the output is then one shard per "
                        "worker plus a virtual-dataset index (docs/dask.md)")


@contextlib.contextmanager
def cluster(args):
    """The Dask runner of ``--scheduler`` (None without it), kept for the whole command."""
    if not getattr(args, "scheduler", None):
        args.runner = None
        yield None
        return
    from actkit._dask import use_scheduler

    with use_scheduler(args.scheduler) as runner:
        args.runner = runner
        try:
            yield runner
        finally:
            args.runner = None


def open_layer(args):
    """Open the source store and layer (one-line errors for missing/incomplete/unknown)."""
    import actkit
    from actkit.errors import InputError

    if not os.path.exists(args.store):
        raise InputError(f"store {args.store} does not exist")
    store = actkit.open_store(args.store)
    layer = store[args.layer]
    if len(layer) < 2:
        raise InputError(f"layer {args.layer} of {args.store} has {len(layer)} rows; need at least 2")
    if os.path.abspath(args.out) == os.path.abspath(args.store):
        raise InputError("--out must differ from the source store")
    return store, layer


def check_n_components(n, layer, what="--n-components"):
    from actkit.errors import InputError

    if n is None:
        return
    if n < 1 or n > layer.shape[1]:
        raise InputError(f"{what}={n} must be between 1 and the layer's {layer.shape[1]} features")


def write_derived(args, store, layer, *, transform, n_out, kind, params, settings, results=None):
    """Stream ``transform(block)`` over every row of ``layer`` into a new store at ``args.out``.

    Parameters
    ----------
    transform : callable (rows, D) -> (rows, n_out)
    n_out : int
        Output features per row.
    kind : str
        "whiten", "ica" or "dictionary" (recorded in request/provenance).
    params : dict str -> ndarray
        Fitted parameters to store under ``/params``.
    settings : dict
        The command's hyperparameters (recorded in the request and the provenance).
    results : dict, optional
        What the fit reported (iterations, rank, errors...): provenance ``fit``.
    """
    import actkit
    from actkit.stats import iter_row_blocks
    from actkit.store import LayerSpec, create_store
    from tqdm.auto import tqdm

    src = os.path.abspath(args.store)
    request = {"command": kind, "source": src, "source_fingerprint": store.fingerprint, "layer": args.layer,
               **{k: v for k, v in settings.items() if v is not None}}
    provenance = {
        "command": kind,
        "source_store": src,
        "source_fingerprint": store.fingerprint,
        "source_layer": args.layer,
        "source_provenance": store.provenance,
        "actkit_version": actkit.__version__,
        "settings": {k: v for k, v in settings.items() if v is not None},
        "fit": dict(results or {}),
    }
    spec = LayerSpec(args.layer, int(layer.shape[0]), int(n_out), dtype="float32", index=np.asarray(layer.index),
                     attrs={"transform": kind, "source_layer": args.layer, "source_features": int(layer.shape[1])})
    kw = dict(n_samples=int(store.n_samples) or int(layer.shape[0]), request=request, provenance=provenance,
              params={k: np.asarray(v) for k, v in params.items()},
              inputs_fingerprint=store.inputs_fingerprint or None, overwrite=args.overwrite)
    if getattr(args, "runner", None) is not None:
        return _write_sharded(args, store, layer, spec, transform, kind, kw)
    writer = create_store(args.out, [spec], **kw)
    if writer.complete:
        if not args.quiet:
            print(f"{args.out}: already complete for this request; nothing to do", file=sys.stderr)
        return writer.path
    if writer.samples_done:  # an interrupted run of the same request: recompute from scratch
        writer.abort()
        writer = create_store(args.out, [spec], **kw)
    try:
        n = int(layer.shape[0])
        bar = tqdm(total=n, desc=f"{kind}: transform", unit="row", disable=True if args.quiet else None,
                   leave=False)
        for block in iter_row_blocks(layer, args.block_rows):
            out = np.asarray(transform(block), dtype=np.float32)
            if not np.all(np.isfinite(out)):
                raise ValueError(f"the {kind} output has non-finite values; check the input data")
            writer.append(args.layer, out)
            bar.update(len(block))
        bar.close()
        writer.checkpoint(kw["n_samples"], force=True)
        path = writer.finalize()
    except BaseException:
        writer.abort()
        raise
    if not args.quiet:
        print(f"wrote {args.out}: layer {args.layer}, {layer.shape[0]} rows x {n_out} ({kind}); "
              f"params: {', '.join(sorted(params))}", file=sys.stderr)
    return path


def _write_sharded(args, store, layer, spec, transform, kind, kw):
    """``write_derived`` on Dask: one shard per worker + a virtual-dataset index at OUT."""
    from actkit._dask import H5Rows
    from actkit._dask_passes import portable
    from actkit._shards import shard_dir, write_sharded

    est = getattr(transform, "__self__", None)
    if est is not None:  # a bound estimator method: ship the estimator without its scheduler
        transform = getattr(portable(est), transform.__name__)
    f = store.file.filename
    index = H5Rows(f, f"/layers/{layer.name}/index", (layer.shape[0], 2), np.int64)
    path = write_sharded(args.runner, layer.to_dask(args.block_rows), args.out, layer=spec.name,
                         transform=transform, n_out=spec.features, n_samples=kw["n_samples"], request=kw["request"],
                         provenance=kw["provenance"], params=kw["params"], index_reader=index,
                         inputs_fingerprint=kw["inputs_fingerprint"], layer_attrs=spec.attrs,
                         overwrite=args.overwrite, desc=f"{kind}: transform", progress=False if args.quiet else None)
    if not args.quiet:
        n = len(list(shard_dir(path).glob("rank-*.h5")))
        print(f"wrote {args.out}: layer {args.layer}, {layer.shape[0]} rows x {spec.features} ({kind}) in {n} "
              f"shard(s) under {shard_dir(path)}; params: {', '.join(sorted(kw['params']))}", file=sys.stderr)
    return path


def fit_rows(layer, n_rows, seed, block_rows=None):
    """A sorted random subset of ``n_rows`` rows of ``layer`` read in one streaming pass,
    or the layer itself when ``n_rows`` is None or covers every row."""
    from actkit.errors import InputError
    from actkit.stats import gather_rows

    n = int(layer.shape[0])
    if n_rows is None or n_rows >= n:
        return layer
    if n_rows < 2:
        raise InputError(f"--fit-rows must be at least 2, got {n_rows}")
    idx = np.sort(np.random.default_rng(seed).choice(n, size=n_rows, replace=False))
    return gather_rows(layer, idx, block_rows)
