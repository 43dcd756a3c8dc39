"""What is on disk for a sharded store: shard names, reruns, repairs, a run in progress.

Shard files are named ``<out>.shards/rank-R-of-K.<h>.h5``, ``h`` the first 16 hex digits of
the run's request hash (which holds K). No two requests share a shard file name, so HDF5's
fallback for a virtual dataset's missing source (the same relative path under the current
working directory) cannot find another run's shards: a plain-h5py reader of an index whose
shards are gone reads fill values (NaN, int64 minimum), never another run's rows.

Used by the ``torchrun`` extraction (:mod:`actkit.extractors.distributed`) and the Dask
writer (:func:`actkit.store._shards.write_sharded`):

* :func:`rerun_state`: ``"complete"`` (the finished store of this request, every shard
  intact: nothing to do), ``"repair"`` (its index is there but shards are missing,
  unfinished or replaced: recompute those), ``"new"``; refusals name the differing field;
* :func:`remove_stale`: after a run, every other file under ``<out>.shards/`` (the shards of
  an overwritten run, of another world size, of the old unhashed layout);
* :func:`sharded_progress`: ``N/M samples written`` of a sharded run still writing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Mapping

from actkit._atomic import remove_stale_temporaries
from actkit.errors import StoreError
from actkit.store import _integrity as integrity
from actkit.store._create import (_existing_request, _partial_request, describe_difference, occupied_error,
                                  refuse_foreign)
from actkit.store._format import (PARTIAL_SUFFIX, PROGRESS_SUFFIX, open_read, read_json, refuse_foreign_shards,
                                  request_hash, shard_dir)

HASH_DIGITS = 16
SHARDS = "shards"  # the /meta field listing the shard files
_NAME = re.compile(r"^rank-(\d+)-of-(\d+)(?:\.([0-9a-f]+))?\.h5$")


def shard_name(rank: int, world: int, rhash: str) -> str:
    """``rank-R-of-K.<first 16 hex digits of the run's request hash>.h5``."""
    return f"rank-{rank}-of-{world}.{rhash[:HASH_DIGITS]}.h5"


def shard_files(out, world: int, rhash: str) -> list[Path]:
    return [shard_dir(out) / shard_name(r, world, rhash) for r in range(world)]


def _shard_request(partial: Path) -> dict | None:
    """The whole run's request (``{"request", "compression"}``) recorded in a torchrun
    shard, finished or not (``{"request": {"run": ..., "rank": ...}}``)."""
    theirs = _partial_request(partial)
    if not theirs or not isinstance(theirs.get("request"), Mapping) or "run" not in theirs["request"]:
        return None
    return {"request": theirs["request"]["run"], "compression": theirs.get("compression")}


def rerun_state(out, full_request: Mapping, *, overwrite: bool, resumable: bool = True) -> str:
    """``"complete"``, ``"repair"`` or ``"new"`` for a sharded write of ``full_request`` to
    ``out``; raises :class:`StoreError` when ``out`` (or an unfinished sharded run in its
    folder) belongs to another request and ``overwrite`` is off."""
    out = Path(out)
    rhash = request_hash(full_request)
    for path in (out, shard_dir(out)):  # what a run killed while writing them left (a finished one too)
        remove_stale_temporaries(path)
    if overwrite:
        if out.exists():

            refuse_foreign(out)
        refuse_foreign_shards(shard_dir(out))
        return "new"
    if out.exists():
        existing = _existing_request(out)
        if existing is None or existing[0] != rhash:
            raise occupied_error(out, full_request, existing)

        with open_read(out) as f:
            meta = integrity.read_meta(f, out)
        try:
            check_shards(out, meta)
        except StoreError:
            return "repair"
        return "complete"
    if resumable:
        mine = rhash[:HASH_DIGITS]
        for partial in sorted(shard_dir(out).glob(f"rank-*.h5{PARTIAL_SUFFIX}")):
            m = _NAME.match(partial.name[: -len(PARTIAL_SUFFIX)])
            if m is None or m.group(3) == mine:
                continue
            theirs = _shard_request(partial)
            if theirs is None:
                continue
            raise StoreError(f"an unfinished sharded run of a different request is in {shard_dir(out)}/ "
                             f"({describe_difference(full_request, theirs)}); rerun that command to finish it, "
                             "or pass --overwrite to discard it")
    return "new"


def remove_stale(out, keep) -> None:
    """Delete everything under ``<out>.shards/`` but the files named in ``keep``."""
    keep = {Path(p).name for p in keep}
    folder = shard_dir(out)
    if not folder.is_dir():
        return
    refuse_foreign_shards(folder)
    for p in folder.iterdir():
        if p.name in keep:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def sharded_progress(path) -> str | None:
    """``store X is being written ... N/M samples`` when ``<path>.shards/`` holds the cursors
    of a sharded run that has not written its index yet; None otherwise."""
    folder = shard_dir(path)
    cursors = sorted(folder.glob(f"rank-*.h5{PROGRESS_SUFFIX}"), key=lambda p: p.stat().st_mtime_ns) \
        if folder.is_dir() else []
    if not cursors:
        return None
    m = _NAME.match(cursors[-1].name[: -len(PROGRESS_SUFFIX)])
    if m is None:
        return None
    world, tag = int(m.group(2)), m.group(3)
    done, total = 0, None
    for r in range(world):
        name = f"rank-{r}-of-{world}" + (f".{tag}" if tag else "") + ".h5"
        shard, cursor = folder / name, folder / (name + PROGRESS_SUFFIX)
        state = read_json(cursor)
        if state is not None:
            done += int(state.get("samples_done", 0))
        elif shard.exists():
            try:
                with open_read(shard) as f:
                    done += int(f.attrs.get("n_samples", 0)) if bool(f.attrs.get("complete")) else 0
            except Exception:
                pass
        if total is None:
            req = _shard_request(shard if shard.exists() else Path(str(shard) + PARTIAL_SUFFIX))
            if req is not None and "n_samples" in req["request"]:
                total = int(req["request"]["n_samples"])
    return (f"store {path} is being written by a sharded run of {world} ranks ({done}/{total or '?'} samples "
            "written so far); wait for it to finish, or rerun the same command if it was stopped")


def renamed_hint(path: Path, rel: str) -> str | None:
    """Advice for an index whose recorded shard folder is gone while ``<its own name>.shards/``
    holds the shard (the pair was renamed together), or None."""
    recorded = Path(rel).parts[0] if len(Path(rel).parts) > 1 else None
    own = shard_dir(path.name).name
    if recorded is None or recorded == own or not (path.parent / own / Path(rel).name).exists():
        return None
    folder = path.parent
    return (f"store {path} was renamed together with its shard folder, but HDF5 reads its shards through the path "
            f"recorded in the file, {recorded}/; rename the folder back (mv {folder / own} {folder / recorded}; "
            f"{path.name} may keep its new name) and then, for one self-contained file under any name, "
            f"run `actkit consolidate {path} --out FILE.h5`")


def shard_list(f) -> list[str] | None:
    """The shard files (relative to the store's folder) of an open store (an h5py file or
    its metadata document), or None."""
    meta = f if isinstance(f, Mapping) else integrity.read_meta(f, f.filename)
    return meta.get(SHARDS)


def check_shards(path, meta: Mapping) -> None:
    """Refuse a sharded store (metadata ``meta``) whose shard files are missing, unfinished
    or replaced by another store (their fingerprints are recorded in the index)."""

    rel = shard_list(meta)
    if not rel:
        return
    base = Path(path).parent
    expected = meta.get("shard_fingerprints") or [None] * len(rel)
    for r, fp in zip(rel, expected):
        p = base / r
        if not p.exists():
            hint = renamed_hint(Path(path), r)
            if hint is not None:
                raise StoreError(hint)
            raise StoreError(f"store {path} is sharded and its shard {p} is missing; keep {path}.shards/ "
                             f"next to it, or share a copy made by `actkit consolidate`")
        try:
            with open_read(p) as s:
                ok = bool(s.attrs.get("complete"))
                got = s.attrs.get("fingerprint")
        except Exception:
            ok, got = False, None
        if not ok:
            raise StoreError(f"shard {p} of {path} is not a finished store; rerun the extraction")
        got = got.decode("ascii", "replace") if isinstance(got, bytes) else got
        if fp is not None and got != fp:
            raise StoreError(f"shard {p} of {path} is another store than the one this index was written over; "
                             "rerun the command that wrote it")
