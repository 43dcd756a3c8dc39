"""Sharded stores: one store file per worker (or rank) plus a virtual-dataset index.

Layout (the same as the torchrun sharded extraction)::

    OUT.h5                        the index: an actkit store whose /layers/<name>/data and
                                  /layers/<name>/index are HDF5 virtual datasets
    OUT.h5.shards/rank-R-of-K.h5  shard R: a complete actkit store holding rows
                                  [start_R, stop_R) of every layer, in row order

Readers need nothing special: :func:`actkit.open_store` on the index gives layers whose
rows are the shards' rows concatenated (plain h5py resolves the shard paths relative to
the index file). A missing shard would read as fill values (NaN); actkit's Dask reader
refuses it instead (:mod:`actkit._dask`).

:func:`write_sharded` is the Dask writer behind :func:`actkit.transform_store` (and the analysis
commands' ``--scheduler``): the chunks of a dask array are split into K contiguous runs (K =
workers), the task for run R is pinned to worker R (another worker may take it over if R
dies), computes its chunks one at a time, transforms them and writes shard R through the
ordinary :func:`~actkit.store.create_store` writer (preallocated, crash-safe). When every
shard is complete the index is written to ``OUT.partial`` and renamed onto ``OUT``; with
``overwrite`` an existing ``OUT`` and its shards are replaced only then.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from actkit.errors import StoreError
from actkit.store._format import (FORMAT, attr_value, canonical_json, created_at_now, decode_attr, h5py_module,
                                  looks_like_hdf5, partial_path, request_hash)

SHARDS_SUFFIX = ".shards"


def shard_dir(path) -> Path:
    return Path(str(path) + SHARDS_SUFFIX)


def shard_name(rank: int, world: int) -> str:
    return f"rank-{rank}-of-{world}.h5"


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
    from actkit.store._create import LayerSpec, create_store

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
    runner : actkit._dask.Runner
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
        Rows' ``[sample, position]`` (e.g. :class:`actkit._dask.H5Rows` over the source's
        index, read by the workers); default ``[row, -1]``.

    Returns
    -------
    Path of the index file.
    """
    from tqdm.auto import tqdm

    from actkit._dask import check_chunks

    X = check_chunks(X)
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise StoreError(f"cannot write {out}: folder {parent} does not exist")
    full_request = {"request": dict(request), "compression": None, "sharded": True}
    rhash = request_hash(full_request)
    if out.exists() and not overwrite:
        if _finished_request_hash(out) == rhash:
            return out
        raise StoreError(f"{out} already holds another store; pass --overwrite (overwrite=True) to replace it")
    k_want = runner.n_workers
    if len(X.chunks[0]) < k_want and X.shape[0] >= k_want:  # one shard per worker: split the rows finer
        X = X.rechunk({0: -(-int(X.shape[0]) // k_want)})
    runs = _split_chunks(list(X.chunks[0]), k_want)
    k = len(runs)
    tmp_dir = Path(str(shard_dir(out)) + ".partial")
    shutil.rmtree(tmp_dir, ignore_errors=True)
    tmp_dir.mkdir()
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    spec_attrs = dict(layer_attrs or {})
    shard_paths = [tmp_dir / shard_name(r, k) for r in range(k)]
    rows = [int(starts[hi] - starts[lo]) for lo, hi in runs]
    try:
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
        _write_index(out, tmp_dir, shard_paths, rows, layer=layer, n_out=int(n_out), n_samples=n_samples,
                     full_request=full_request, provenance=provenance, params=params,
                     inputs_fingerprint=inputs_fingerprint, layer_attrs=spec_attrs)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        partial_path(out).unlink(missing_ok=True)
        raise
    final_dir = shard_dir(out)
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)
    os.replace(partial_path(out), out)
    return out


def _finished_request_hash(path):
    """The request hash of the finished store at ``path`` (None for anything else)."""
    if not looks_like_hdf5(path):
        return None
    try:
        with h5py_module().File(path, "r") as f:
            if f.attrs.get("actkit_format") != FORMAT or not bool(f.attrs.get("complete")):
                return None
            return str(decode_attr(f.attrs["request_hash"]))
    except Exception:  # unreadable: not our store
        return None


def _follow(jobs, shard_paths, rows, bar):
    """Wait for the shard tasks; the bar follows the rows each shard's cursor reports."""
    from actkit.store._format import progress_path

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


def _write_index(out, tmp_dir, shard_paths, rows, *, layer, n_out, n_samples, full_request, provenance, params,
                 inputs_fingerprint, layer_attrs):
    """The index store: virtual /layers/<layer>/data and /index over the shards, in order."""
    import hashlib

    import h5py

    total = int(sum(rows))
    rel_dir = shard_dir(out).name  # shard paths relative to the index file's folder
    data = h5py.VirtualLayout(shape=(total, n_out), dtype=np.float32)
    index = h5py.VirtualLayout(shape=(total, 2), dtype=np.int64)
    s = 0
    for path, n in zip(shard_paths, rows):
        if n:
            name = f"{rel_dir}/{Path(path).name}"
            data[s : s + n] = h5py.VirtualSource(name, f"layers/{layer}/data", shape=(n, n_out))
            index[s : s + n] = h5py.VirtualSource(name, f"layers/{layer}/index", shape=(n, 2))
        s += n
    created_at = created_at_now()
    rhash = request_hash(full_request)
    fingerprint = hashlib.sha256(canonical_json({"request_hash": rhash, "inputs": inputs_fingerprint,
                                                 "created_at": created_at}).encode()).hexdigest()
    prov = dict(provenance or {})
    prov["shards"] = [f"{rel_dir}/{Path(p).name}" for p in shard_paths]
    partial = partial_path(out)
    with h5py.File(partial, "w", libver=("v110", "latest")) as f:
        f.attrs["actkit_format"] = FORMAT
        f.attrs["complete"] = True
        f.attrs["n_samples"] = np.int64(n_samples)
        f.attrs["created_at"] = created_at
        f.attrs["fingerprint"] = fingerprint
        f.attrs["inputs_fingerprint"] = inputs_fingerprint or ""
        f.attrs["request"] = canonical_json(full_request)
        f.attrs["request_hash"] = rhash
        f.attrs["provenance"] = canonical_json(prov)
        f.attrs["layer_order"] = canonical_json([layer])
        f.attrs["shards"] = len(shard_paths)
        g = f.create_group("provenance")
        for key in sorted(prov):
            g.attrs[key] = attr_value(prov[key])
        grp = f.create_group("layers").create_group(layer)
        grp.attrs["rows"] = np.int64(total)
        grp.attrs["features"] = np.int64(n_out)
        for key in sorted(layer_attrs):
            grp.attrs[key] = attr_value(layer_attrs[key])
        grp.create_virtual_dataset("data", data, fillvalue=np.nan)
        grp.create_virtual_dataset("index", index, fillvalue=-1)
        pg = f.create_group("params")
        for key in sorted(params or {}):
            pg.create_dataset(key, data=np.asarray(params[key]))
