"""Sharded stores: one ordinary store per rank, and a store of virtual datasets over them.

(Exported by :mod:`actkit.store`: ``write_virtual_store``, ``consolidate``, ``check_shards``,
``shard_list``, ``finished_request_hash``.)

A ``torchrun`` extraction with K ranks leaves::

    run.h5                       the store: /layers/<name>/data and /index are HDF5 virtual
                                 datasets (VDS) that map, in rank order, onto the shards
    run.h5.shards/rank-0-of-K.<h>.h5  ordinary stores, rank r holding samples [n r / K, n (r+1) / K);
    ...                               <h>: 16 hex digits of the run's request hash (see _shard_state)

To :func:`actkit.open_store`, to plain ``h5py`` and to every analysis command ``run.h5`` is an
ordinary store (same format, written by the same ``store_meta`` / ``write_header``; the
provenance adds ``shards`` and ``world_size``, the ``/meta`` fields ``shards`` and
``shard_fingerprints`` list the shard files). Its layers have no ``checksums`` dataset:
:func:`verify_shards` verifies each shard against its own. Shard
paths are stored relative to the folder of ``run.h5``, which HDF5 searches, so the pair can be
moved together (renamed, :func:`check_shards` says how to rename the folder back). A virtual
dataset whose shard file is missing would read as fill values (NaN), so :func:`check_shards`
(called by ``open_store``) refuses a store with a missing, unfinished or replaced shard.
:func:`consolidate` copies a sharded (or any) store into one ordinary file, checking every
source block against its checksum as it reads it.

The virtual store is written in a temporary folder of its own (``.run.h5.????????.partial``,
:class:`actkit._atomic.Temporary`) and renamed into place; it is a pure function of the shards (``created_at`` is taken from shard 0), so rewriting it after a resumed
run gives the same bytes.

:func:`write_sharded` is the Dask writer behind :func:`actkit.transform_store` (and the analysis
commands' ``--scheduler``): the chunks of a dask array are split into K contiguous runs (K =
workers), the task for run R is pinned to worker R (another worker may take it over if R
dies), computes its chunks one at a time, transforms them and writes shard R through the
ordinary :func:`~actkit.store.create_store` writer (preallocated, crash-safe), in a
temporary folder of the run's own. When every shard is complete the shard folder is moved
into place and the index is written by
:func:`write_virtual_store`, exactly as for a torchrun extraction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from h5py import h5d, h5s, h5t

from actkit._atomic import Temporary, move_into_place
from actkit._faults import fault
from actkit.errors import StoreError
from actkit.store import _inputs as recorded_inputs
from actkit.store import _integrity as integrity
from actkit.store._create import LayerSpec, _existing_request, create_store, layer_group, store_meta, write_header
from actkit.store._format import (h5py_module, open_read, progress_path, refuse_foreign_shards,
                                  request_hash)
from actkit.store._lock import WriterLock
from actkit.store._reader import open_store
from actkit.store._shard_state import SHARDS, rerun_state, shard_dir, shard_name


def write_virtual_store(out, shard_paths: Sequence, *, request: Mapping[str, Any],
                        provenance: Mapping[str, Any], n_samples: int,
                        inputs_fingerprint: str | None = None, compression: str | None = None,
                        inputs: Mapping[str, Any] | None = None) -> Path:
    """Write ``out``: a store whose layers are virtual datasets over finished shard stores.

    Parameters
    ----------
    out : path
    shard_paths : sequence of path
        Finished stores, in row order (rank order); every shard holds the same layers.
    request : dict
        The request of the whole run (the shards record it with their rank and block).
    provenance : dict
        The provenance of the whole run; ``shards`` and ``world_size`` are added.
    n_samples : int
    inputs_fingerprint : str, optional
    compression : {None, "gzip", "lzf"}
        The shards' compression (part of the request, as for a single store).
    inputs : dict, optional
        What each input sample of the whole run was (``/inputs``; the shards do not repeat it).

    Returns
    -------
    pathlib.Path
    """
    h5py = h5py_module()

    out = Path(out)
    shard_paths = [Path(p) for p in shard_paths]
    rel = [os.path.relpath(p, out.parent if str(out.parent) else ".") for p in shard_paths]
    with contextlib.ExitStack() as stack:
        shards = []
        for p in shard_paths:
            with integrity.h5_errors(p):
                f = stack.enter_context(open_read(p))
                shards.append(f)
                if not bool(f.attrs.get("complete")):
                    raise StoreError(f"shard {p} is not finished")
        metas = [integrity.read_meta(f, p) for f, p in zip(shards, shard_paths)]
        first, meta0 = shards[0], metas[0]
        names = list(meta0["layer_order"])
        prov = {**dict(provenance), "shards": rel, "world_size": len(rel)}
        layers = {}
        for name in names:
            entries = [m["layers"][name] for m in metas]
            digest = hashlib.sha256()
            for f in shards:
                digest.update(np.ascontiguousarray(f[f"layers/{name}/index"][()]).tobytes())
            layers[name] = {**{k: entries[0][k] for k in ("features", "dtype", "attrs")},
                            "rows": sum(int(e["rows"]) for e in entries),
                            "block_rows": None,  # checksums: the shards' own (verify_shards)
                            "index_sha256": digest.hexdigest()}
        meta = store_meta(n_samples=n_samples, created_at=meta0["created_at"], inputs_fingerprint=inputs_fingerprint,
                          full_request={"request": dict(request), "compression": compression}, provenance=prov,
                          layers=layers, params_sha256=meta0.get("params_sha256", {}),
                          **{SHARDS: rel, "shard_fingerprints": [m["fingerprint"] for m in metas]},
                          **({} if inputs is None else {recorded_inputs.META_KEY: recorded_inputs.meta_entry(inputs)}))
        tmp = stack.enter_context(Temporary(out))  # renamed into place whole; a killed run's is removed
        with h5py.File(tmp.file(), "w", libver=("v110", "v110"), track_order=False) as f:
            write_header(f, meta, complete=True)
            lg = f.create_group("layers")
            for name in names:
                entry = layers[name]
                grp = layer_group(lg, name, entry["rows"], entry["features"], entry["attrs"])
                rows = [int(m["layers"][name]["rows"]) for m in metas]
                for what, fill in (("data", np.nan), ("index", np.iinfo(np.int64).min)):
                    ds0 = first[f"layers/{name}/{what}"]
                    width = int(ds0.shape[1])
                    layout = h5py.VirtualLayout(shape=(entry["rows"], width), dtype=ds0.dtype)
                    start = 0
                    for path, n in zip(rel, rows):
                        if n:
                            layout[start : start + n] = h5py.VirtualSource(path, f"layers/{name}/{what}",
                                                                           shape=(n, width))
                        start += n
                    _create_virtual(grp, what, layout, fill)
            pg = f.create_group("params")
            for key in sorted(first["params"]) if "params" in first else []:
                pg.create_dataset(key, data=first[f"params/{key}"][()])
            if inputs is not None:
                recorded_inputs.write_inputs(f, inputs)
        os.replace(tmp.file(), out)
    return out


def _create_virtual(parent, name: str, layout, fill) -> None:
    """``create_virtual_dataset`` without object timestamps (the file stays reproducible)."""
    dtype = np.dtype(layout.dtype)
    dcpl = layout._get_dcpl(parent.file.filename)
    dcpl.set_fill_value(np.array([fill], dtype=dtype))
    dcpl.set_obj_track_times(False)
    h5d.create(parent.id, name=name.encode(), tid=h5t.py_create(dtype, logical=1),
               space=h5s.create_simple(tuple(layout.shape)), dcpl=dcpl)


def consolidate(src, out, *, overwrite: bool = False, block_bytes: int = 64 * 2**20, progress: bool = False) -> Path:
    """Copy a (sharded) store into one ordinary file.

    Written by :func:`~actkit.store.create_store` (crash-safe, block checksums of its own)
    with the source's request, inputs fingerprint and ``created_at``, so its request hash and
    fingerprint are those of the run; layer attributes, indices and parameters are copied;
    the provenance gains ``consolidated_from``. Every source block is checked against its
    checksum as it is read (:func:`~actkit.store.verify_store`), and the row indices and
    parameters too, before the copy is finalised: new checksums are never written over
    rows that did not match theirs.

    Raises
    ------
    StoreError
        ``out`` exists and is not the finished copy of ``src`` (without ``overwrite``; the
        copy itself is returned as it is: a rerun), equals ``src``, ``src`` is not a finished
        store, or a block, index or parameter of ``src`` does not match its checksum (the
        message of ``actkit verify``; ``out`` is not written).
    """
    from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise StoreError("--out must differ from the store being consolidated")
    done = out.exists() and not overwrite  # the finished copy of `src` (a rerun): nothing to do
    if done and not _copy_of(out, src):
        raise StoreError(f"{out} already exists; pass --overwrite to replace it")
    if out.is_dir() or not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise StoreError(f"cannot write {out}: not a file in an existing folder")
    with open_store(src) as store:  # every check: format, complete, shards present
        meta = store.meta
        specs = [LayerSpec(name, *store[name].shape, dtype=str(store[name].dtype), index=store[name].index,
                           attrs=dict(meta["layers"][name]["attrs"])) for name in store.layers]
        full_request = meta["request"]
        kw = dict(n_samples=store.n_samples, request=full_request["request"],
                  provenance={**store.provenance, "consolidated_from": str(src)}, params=store.params,
                  inputs_fingerprint=meta.get("inputs_fingerprint") or None, overwrite=not done,
                  compression=full_request.get("compression"), created_at=meta["created_at"],
                  inputs=store.inputs.as_record() if meta.get(recorded_inputs.META_KEY) else None)
        writer = create_store(out, specs, **kw)
        if writer.complete:
            return writer.path
        if writer.samples_done:  # an interrupted copy: start again
            writer.abort()
            writer = create_store(out, specs, **kw)
        total = sum(s.rows for s in specs)
        try:
            with tqdm(total=total, desc="consolidate", unit="row", unit_scale=True, leave=False,
                      disable=None if progress else True) as bar:
                def copy(name, first, rows):  # rows that matched their checksums
                    writer.write_rows(name, first, rows)
                    bar.update(len(rows))

                integrity.verify_store(store, read_bytes=block_bytes, on_rows=copy)
            writer.checkpoint(store.n_samples, force=True)
            return writer.finalize()
        except BaseException:
            writer.abort()
            raise


def _copy_of(out: Path, src: Path) -> bool:
    """Whether ``out`` is a finished store of the same run as the finished store ``src`` (the
    same fingerprint: request, inputs and ``created_at``), as :func:`consolidate` writes it."""
    def fingerprint(path):
        try:
            with open_read(path) as f:
                return f.attrs.get("fingerprint") if bool(f.attrs.get("complete")) else None
        except Exception:  # unreadable: not a copy
            return None

    mine = fingerprint(out)
    return mine is not None and mine == fingerprint(src)


def finished_request_hash(path) -> str | None:
    """The request hash of the finished store at ``path``, or None (missing, unfinished, foreign)."""
    existing = _existing_request(Path(path))
    return None if existing is None or existing[0] == "old-format" else existing[0]


def _split_chunks(chunk_rows, k):
    """K contiguous runs of chunks with about equal rows: list of (lo, hi) chunk indices."""
    bounds = np.concatenate([[0], np.cumsum(chunk_rows)])
    total = bounds[-1]
    cuts = [0]
    for r in range(1, k):
        cuts.append(int(np.searchsorted(bounds, total * r / k)))
    cuts.append(len(chunk_rows))
    cuts = sorted(set(min(max(c, 0), len(chunk_rows)) for c in cuts))
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def _write_shard(X, lo, hi, row0, path, layer, n_out, transform, index_reader, spec_attrs, kw):
    """Task: compute chunks lo:hi of X one at a time, transform them, write one shard."""
    rows = int(sum(X.chunks[0][lo:hi]))
    index = None
    if index_reader is not None:
        index = np.asarray(index_reader[row0 : row0 + rows], dtype=np.int64)
    else:
        index = np.stack([np.arange(row0, row0 + rows, dtype=np.int64), -np.ones(rows, np.int64)], 1)
    spec = LayerSpec(layer, rows, int(n_out), dtype="float32", index=index, attrs=spec_attrs)
    writer = create_store(path, [spec], overwrite=True, **kw)
    # overwrite=True: a retried task (its worker died) starts its shard again from scratch
    try:
        done = 0
        for i in range(lo, hi):
            block = np.asarray(X.blocks[i].compute(scheduler="sync"))
            out = np.asarray(transform(block), dtype=np.float32)
            fault("shard-rows")
            if not np.all(np.isfinite(out)):
                raise ValueError(f"the output has non-finite values (rows {row0 + done}..); check the input data")
            writer.append(layer, out)
            done += out.shape[0]
            writer.checkpoint(0)  # the cursor doubles as the progress the client shows
        writer.checkpoint(kw["n_samples"], force=True)
        writer.finalize()
    except BaseException:
        writer.abort()
        raise
    return str(path)


def write_sharded(runner, X, out, *, layer, transform, n_out, n_samples, request, provenance=None,
                  params=None, inputs_fingerprint=None, index_reader=None, layer_attrs=None,
                  overwrite=False, desc="transform", progress=None):
    """Transform the rows of a dask array into a sharded store at ``out``.

    Parameters
    ----------
    runner : actkit.runners._dask.Runner
    X : dask.array.Array of shape (n_rows, n_features), one column chunk
    out : path of the index file (shards go to ``out + ".shards"``)
    layer : str
        Layer name in the output.
    transform : callable (rows, n_features) ndarray -> (rows, n_out) ndarray
        Must pickle (run on the workers).
    n_out : int
    n_samples : int
    request, provenance, params, inputs_fingerprint
        As for :func:`actkit.store.create_store` (the request decides whether a rerun is a
        no-op); every shard gets the same, plus its rank.
    index_reader : array-like, optional
        Rows' ``[sample, position]`` (e.g. :class:`actkit.runners._dask.H5Rows` over the source's
        index, read by the workers); default ``[row, -1]``.

    Returns
    -------
    Path of the index file.
    """
    if X.ndim != 2 or len(X.chunks[1]) != 1:  # the runners give whole rows (actkit.runners: as_dask)
        raise ValueError(f"write_sharded takes a 2-D dask array of whole rows (one column chunk), "
                         f"got shape {X.shape} in chunks {X.chunks}")
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise StoreError(f"cannot write {out}: folder {parent} does not exist")
    sharded_request = {**dict(request), "sharded": True}
    full_request = {"request": sharded_request, "compression": None}  # as write_virtual_store records it
    rhash = request_hash(full_request)
    with WriterLock(out):  # a second writer of `out` is refused here, before it touches anything
        if rerun_state(out, full_request, overwrite=overwrite, resumable=False) == "complete":
            return out
        return _write_sharded_locked(runner, X, out, rhash, layer=layer, transform=transform, n_out=n_out,
                                     n_samples=n_samples, sharded_request=sharded_request,
                                     full_request=full_request, provenance=provenance, params=params,
                                     inputs_fingerprint=inputs_fingerprint, index_reader=index_reader,
                                     layer_attrs=layer_attrs, desc=desc, progress=progress)


def _write_sharded_locked(runner, X, out, rhash, *, layer, transform, n_out, n_samples, sharded_request,
                          full_request, provenance, params, inputs_fingerprint, index_reader, layer_attrs,
                          desc, progress):
    k_want = runner.n_workers
    if len(X.chunks[0]) < k_want and X.shape[0] >= k_want:  # one shard per worker: split the rows finer
        X = X.rechunk({0: -(-int(X.shape[0]) // k_want)})
    runs = _split_chunks(list(X.chunks[0]), k_want)
    k = len(runs)
    final_dir = shard_dir(out)
    with Temporary(final_dir) as tmp:  # the shards are written here, then moved into place together
        tmp_dir = tmp.file()
        tmp_dir.mkdir()
        shard_paths = _run_shard_tasks(runner, X, tmp_dir, runs, rhash, layer=layer, transform=transform,
                                       n_out=n_out, n_samples=n_samples, full_request=full_request,
                                       provenance=provenance, params=params, inputs_fingerprint=inputs_fingerprint,
                                       index_reader=index_reader, layer_attrs=layer_attrs, desc=desc,
                                       progress=progress)
        if final_dir.exists():
            refuse_foreign_shards(final_dir)
        move_into_place(tmp_dir, final_dir)
    # the index is the torchrun layout's virtual store over the finished shards
    final_paths = [final_dir / p.name for p in shard_paths]
    write_virtual_store(out, final_paths, request=sharded_request, provenance=dict(provenance or {}),
                        n_samples=int(n_samples), inputs_fingerprint=inputs_fingerprint)
    return out


def _run_shard_tasks(runner, X, tmp_dir, runs, rhash, *, layer, transform, n_out, n_samples, full_request,
                     provenance, params, inputs_fingerprint, index_reader, layer_attrs, desc, progress):
    """Write shard r of ``runs`` (contiguous chunk runs) into ``tmp_dir`` on worker r (in this
    process without a client), following their progress on one bar; the shard paths."""
    from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

    k = len(runs)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    spec_attrs = dict(layer_attrs or {})
    shard_paths = [tmp_dir / shard_name(r, k, rhash) for r in range(k)]
    rows = [int(starts[hi] - starts[lo]) for lo, hi in runs]
    jobs = []
    workers = runner.workers()
    for r, (lo, hi) in enumerate(runs):
        kw = dict(n_samples=int(n_samples), request={**full_request, "shard": r, "of": k},
                  provenance={**dict(provenance or {}), "shard": {"rank": r, "of": k,
                                                                  "rows": [int(starts[lo]), int(starts[hi])]}},
                  params=params, inputs_fingerprint=inputs_fingerprint)
        args = (X, lo, hi, int(starts[lo]), str(shard_paths[r]), layer, n_out, transform, index_reader,
                spec_attrs, kw)
        if runner.client is not None:
            jobs.append(runner.client.submit(_write_shard, *args, workers=[workers[r % len(workers)]],
                                             allow_other_workers=True, pure=False, key=f"actkit-shard-{r}-"
                                             f"{os.getpid()}-{time.monotonic_ns()}"))
        else:
            jobs.append(args)
    total = int(starts[-1])
    with tqdm(total=total, desc=f"{desc} ({k} shard{'s' * (k > 1)})", unit="row", unit_scale=True,
              leave=False, disable=None if progress is None else not progress) as bar:
        if runner.client is None:
            for args in jobs:
                _write_shard(*args)
                bar.update(int(sum(X.chunks[0][args[1]:args[2]])))
        else:
            _follow(jobs, shard_paths, rows, bar)
    return shard_paths


def _follow(jobs, shard_paths, rows, bar):
    """Wait for the shard tasks; the bar follows the rows each shard's cursor reports."""
    shown = 0
    while True:
        finished = [j.done() for j in jobs]
        now = 0
        for ok, path, n in zip(finished, shard_paths, rows):
            if ok:
                now += n
                continue
            try:
                with open(progress_path(path)) as fh:
                    now += sum(json.load(fh).get("rows_done", {}).values())
            except (OSError, ValueError):
                pass
        if now > shown:
            bar.update(now - shown)
            shown = now
        if all(finished):
            break
        time.sleep(0.25)
    for j in jobs:
        j.result()  # re-raise a shard's error here
