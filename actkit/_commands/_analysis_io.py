"""Shared plumbing of ``actkit whiten | ica | dictionary``: open a store layer (or an embedding
file, :mod:`actkit.matrix_files`), pick the fit rows, and write the derived store with
:func:`actkit.transform_store` (transformed rows + fitted parameters, readable by every later
command)."""

from __future__ import annotations

import contextlib
import os
import sys

import actkit
from actkit.errors import InputError, LayerError


def add_common_arguments(p) -> None:
    p.add_argument("store", metavar="STORE",
                   help="source store (.h5) written by extract or another command, or an embedding file "
                        "(.npy, .safetensors, .parquet)")
    p.add_argument("--layer", help="layer of the source store to analyse (default: its only layer); for an "
                                   "embedding file, the layer's name (default: embeddings)")
    p.add_argument("--key", help="tensor of a .safetensors embedding file (needed when it holds several)")
    p.add_argument("--column", help="list-of-floats column of a .parquet embedding file")
    p.add_argument("--out", required=True, metavar="OUT.h5", help="output store to write")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it holds another store")
    p.add_argument("--block-rows", type=int, default=None, help="rows read per block (default: ~32 MiB)")
    add_verify_argument(p)
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
    from actkit.runners import use_scheduler  # actkit.runners (numpy): ~0.1 s at import (measured); at the top actkit --help would pay it

    with use_scheduler(args.scheduler) as runner:
        args.runner = runner
        try:
            yield runner
        finally:
            args.runner = None


def on_cluster(body):
    """The ``func`` of an analysis command: ``body(args, runner)`` run inside :func:`cluster`
    (with ``--scheduler``, every pass and the transform run on Dask)."""

    def run(args) -> int:
        with cluster(args) as runner:
            return body(args, runner)

    return run


def add_verify_argument(p) -> None:
    p.add_argument("--verify", action="store_true",
                   help="check the source store(s) against their checksums first (reads every row once)")


def check_block_rows(value) -> None:
    if value is not None and value < 1:
        raise InputError(f"--block-rows must be a positive number of rows, got {value}")


def open_layer(args):
    """Open the source store (or embedding file) and layer (one-line errors for
    missing/incomplete/unknown/corrupt: an unfinished source says how to resume it)."""
    from actkit.matrix_files import is_matrix_file, open_source  # actkit.matrix_files (h5py): ~0.15 s at import (measured); at the top actkit --help would pay it

    check_block_rows(args.block_rows)
    store = open_source(args.store, key=args.key, column=args.column,
                        layer=args.layer if is_matrix_file(args.store) else None,
                        verify=getattr(args, "verify", False))
    if args.layer is None:
        if len(store.layers) != 1:
            raise LayerError(f"{args.store} has {len(store.layers)} layers ({', '.join(store.layers[:12])}); "
                             "pick one with --layer")
        args.layer = store.layers[0]
    layer = store[args.layer]
    if len(layer) < 2:
        raise InputError(f"layer {args.layer} of {args.store} has {len(layer)} rows; need at least 2")
    if os.path.abspath(args.out) == os.path.abspath(args.store):
        raise InputError("--out must differ from the source store")
    return store, layer


def check_n_components(n, layer, what="--n-components"):
    if n is None:
        return
    if n < 1 or n > layer.shape[1]:
        raise InputError(f"{what}={n} must be between 1 and the layer's {layer.shape[1]} features")


def write_derived(args, layer, estimator, settings):
    """:func:`actkit.transform_store` of a fitted ``estimator`` over ``layer`` into ``args.out``,
    recording the command's ``settings`` (its hyperparameters) in the request."""

    def echo(message):
        print(message, file=sys.stderr)

    return actkit.transform_store(estimator, layer, args.out, overwrite=args.overwrite,
                                  block_rows=args.block_rows, settings=settings,
                                  progress=False if args.quiet else None,
                                  echo=None if args.quiet else echo, scheduler=getattr(args, "runner", None))


def fit_rows(layer, n_rows, seed, block_rows=None):
    """A sorted random subset of ``n_rows`` rows of ``layer`` read in one streaming pass,
    or the layer itself when ``n_rows`` is None or covers every row."""
    from actkit._data import gather_rows  # actkit._data (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it
    from actkit._rows import sample_rows  # actkit._rows (numpy): ~0.05 s at import (measured); at the top actkit --help would pay it

    n = int(layer.shape[0])
    if n_rows is None or n_rows >= n:
        return layer
    if n_rows < 2:
        raise InputError(f"--fit-rows must be at least 2, got {n_rows}")
    idx = sample_rows(n, n_rows, seed)
    return gather_rows(layer, idx, block_rows)
