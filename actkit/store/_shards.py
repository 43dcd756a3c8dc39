"""Sharded stores: one ordinary store per rank, and a store of virtual datasets over them.

(Exported by :mod:`actkit.store`: ``write_virtual_store``, ``consolidate``, ``check_shards``,
``shard_list``, ``finished_request_hash``.)

A ``torchrun`` extraction with K ranks leaves::

    run.h5                       the store: /layers/<name>/data and /index are HDF5 virtual
                                 datasets (VDS) that map, in rank order, onto the shards
    run.h5.shards/rank-0-of-K.h5 ordinary stores, rank r holding samples [n r / K, n (r+1) / K)
    ...

To :func:`actkit.open_store`, to plain ``h5py`` and to every analysis command ``run.h5`` is an
ordinary store (same attributes and layout as a single-process store; the provenance adds
``shards`` and ``world_size``, the root attribute ``shards`` lists the shard files). Shard
paths are stored relative to the folder of ``run.h5``, which HDF5 searches, so the pair can be
moved together. A virtual dataset whose shard file is missing would read as fill values
(NaN), so :func:`check_shards` (called by ``open_store``) refuses a store with a missing
or unfinished shard. :func:`consolidate` copies a sharded store into one ordinary file.

The virtual store is written to ``run.h5.partial`` and renamed into place; it is a pure
function of the shards (``created_at`` is taken from shard 0), so rewriting it after a resumed
run gives the same bytes.

:func:`write_sharded` is the Dask writer behind :func:`actkit.transform_store` (and the analysis
commands' ``--scheduler``): the chunks of a dask array are split into K contiguous runs (K =
workers), the task for run R is pinned to worker R (another worker may take it over if R
dies), computes its chunks one at a time, transforms them and writes shard R through the
ordinary :func:`~actkit.store.create_store` writer (preallocated, crash-safe). When every
shard is complete the shard folder is moved into place and the index is written by
:func:`write_virtual_store`, exactly as for a torchrun extraction.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from actkit.errors import StoreError
from actkit.store._create import _create_preallocated, _existing_request_hash
from actkit.store._format import (FORMAT, attr_value, canonical_json, decode_attr, h5py_module, partial_path,
                                  request_hash)

SHARDS_ATTR = "shards"


def write_virtual_store(out, shard_paths: Sequence, *, request: Mapping[str, Any],
                        provenance: Mapping[str, Any], n_samples: int,
                        inputs_fingerprint: str | None = None, compression: str | None = None) -> Path:
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

    Returns
    -------
    pathlib.Path
    """
    h5py = h5py_module()

    out = Path(out)
    shard_paths = [Path(p) for p in shard_paths]
    rel = [os.path.relpath(p, out.parent if str(out.parent) else ".") for p in shard_paths]
    shards = [h5py.File(p, "r") for p in shard_paths]
    try:
        for p, f in zip(shard_paths, shards):
            if not bool(f.attrs.get("complete")):
                raise StoreError(f"shard {p} is not finished")
        first = shards[0]
        names = json.loads(decode_attr(first.attrs["layer_order"]))
        created_at = decode_attr(first.attrs["created_at"])
        full_request = {"request": dict(request), "compression": compression}
        rhash = request_hash(full_request)
        prov = dict(provenance)
        prov["shards"] = rel
        prov["world_size"] = len(rel)
        fingerprint = hashlib.sha256(
            canonical_json({"request_hash": rhash, "inputs": inputs_fingerprint, "created_at": created_at}).encode()
        ).hexdigest()
        partial = partial_path(out)
        with h5py.File(partial, "w", libver=("v110", "v110"), track_order=False) as f:
            f.attrs["actkit_format"] = FORMAT
            f.attrs["complete"] = True
            f.attrs["n_samples"] = np.int64(n_samples)
            f.attrs["created_at"] = created_at
            f.attrs["fingerprint"] = fingerprint
            f.attrs["inputs_fingerprint"] = inputs_fingerprint or ""
            f.attrs["request"] = canonical_json(full_request)
            f.attrs["request_hash"] = rhash
            f.attrs["provenance"] = canonical_json(prov)
            f.attrs["layer_order"] = canonical_json(names)
            f.attrs[SHARDS_ATTR] = canonical_json(rel)
            g = f.create_group("provenance")
            for key in sorted(prov):
                g.attrs[key] = attr_value(prov[key])
            lg = f.create_group("layers")
            for name in names:
                src = first[f"layers/{name}"]
                grp = lg.create_group(name)
                rows = [int(s[f"layers/{name}/data"].shape[0]) for s in shards]
                total = sum(rows)
                for key, value in src.attrs.items():
                    grp.attrs[key] = value
                grp.attrs["rows"] = np.int64(total)
                for what, fill in (("data", np.nan), ("index", np.iinfo(np.int64).min)):
                    ds0 = src[what]
                    width = int(ds0.shape[1])
                    layout = h5py.VirtualLayout(shape=(total, width), dtype=ds0.dtype)
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
    finally:
        for f in shards:
            f.close()
    os.replace(partial, out)
    return out


def _create_virtual(parent, name: str, layout, fill) -> None:
    """``create_virtual_dataset`` without object timestamps (the file stays reproducible)."""
    from h5py import h5d, h5s, h5t

    dtype = np.dtype(layout.dtype)
    dcpl = layout._get_dcpl(parent.file.filename)
    dcpl.set_fill_value(np.array([fill], dtype=dtype))
    dcpl.set_obj_track_times(False)
    h5d.create(parent.id, name=name.encode(), tid=h5t.py_create(dtype, logical=1),
               space=h5s.create_simple(tuple(layout.shape)), dcpl=dcpl)


def shard_list(f) -> list[str] | None:
    """The shard files (relative to the store's folder) of an open store, or None."""
    value = f.attrs.get(SHARDS_ATTR)
    if value is None:
        return None
    return json.loads(decode_attr(value))


def check_shards(path, f) -> None:
    """Refuse a sharded store whose shard files are missing or unfinished."""
    h5py = h5py_module()

    rel = shard_list(f)
    if not rel:
        return
    base = Path(path).parent
    for r in rel:
        p = base / r
        if not p.exists():
            raise StoreError(f"store {path} is sharded and its shard {p} is missing; keep {path}.shards/ "
                             f"next to it, or share a copy made by `actkit consolidate`")
        try:
            with h5py.File(p, "r", locking=False) as s:
                ok = bool(s.attrs.get("complete"))
        except OSError:
            ok = False
        if not ok:
            raise StoreError(f"shard {p} of {path} is not a finished store; rerun the extraction")


def consolidate(src, out, *, overwrite: bool = False, block_bytes: int = 64 * 2**20) -> Path:
    """Copy a (sharded) store into one ordinary file.

    Attributes, provenance, layers, indices and parameters are copied as they are (so the
    request and fingerprint stay those of the run); the root attribute ``shards`` is dropped
    and the provenance gains ``consolidated_from``. Written to ``out.partial``, then renamed.

    Raises
    ------
    StoreError
        ``out`` exists (without ``overwrite``), equals ``src``, or ``src`` is not a finished store.
    """
    h5py = h5py_module()

    src, out = Path(src), Path(out)
    if out.resolve() == src.resolve():
        raise StoreError("--out must differ from the store being consolidated")
    if out.exists() and not overwrite:
        raise StoreError(f"{out} already exists; pass --overwrite to replace it")
    if out.is_dir() or not (out.parent if str(out.parent) else Path(".")).is_dir():
        raise StoreError(f"cannot write {out}: not a file in an existing folder")
    from actkit.store._reader import open_store

    with open_store(src):  # every check: format, complete, shards present
        pass
    partial = partial_path(out)
    try:
        with h5py.File(src, "r") as fin, h5py.File(partial, "w", libver="earliest", track_order=False) as fout:
            for k, v in fin.attrs.items():
                if k != SHARDS_ATTR:
                    fout.attrs[k] = v
            prov = json.loads(decode_attr(fin.attrs.get("provenance", "{}")))
            prov["consolidated_from"] = str(src)
            fout.attrs["provenance"] = canonical_json(prov)

            def visit(name, obj):
                if isinstance(obj, h5py.Group):
                    g = fout.require_group(name)
                    for k, v in obj.attrs.items():
                        g.attrs[k] = v
                    return
                rows = obj.shape[0] if obj.ndim else 0
                if name.startswith("layers/") and obj.ndim == 2:
                    out_ds = _create_preallocated(fout[os.path.dirname(name)], os.path.basename(name),
                                                     tuple(obj.shape), obj.dtype)
                    step = max(1, block_bytes // max(1, obj.shape[1] * obj.dtype.itemsize))
                    for s in range(0, rows, step):
                        out_ds[s : s + step] = obj[s : s + step]
                else:
                    fout.create_dataset(name, data=obj[()])

            fin.visititems(visit)
            fout["provenance"].attrs["consolidated_from"] = str(src)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, out)
    return out


def finished_request_hash(path) -> str | None:
    """The request hash of the finished store at ``path``, or None (missing, unfinished, foreign)."""
    return _existing_request_hash(Path(path))


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
    sharded_request = {**dict(request), "sharded": True}
    full_request = {"request": sharded_request, "compression": None}  # as write_virtual_store records it
    rhash = request_hash(full_request)
    if out.exists() and not overwrite:
        if finished_request_hash(out) == rhash:
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
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    final_dir = shard_dir(out)
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(tmp_dir, final_dir)
    # the index is the torchrun layout's virtual store over the finished shards
    final_paths = [final_dir / p.name for p in shard_paths]
    write_virtual_store(out, final_paths, request=sharded_request, provenance=dict(provenance or {}),
                        n_samples=int(n_samples), inputs_fingerprint=inputs_fingerprint)
    return out


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
