"""Opening a store: :class:`Store` and :func:`open_store`."""

from __future__ import annotations

import contextlib
import contextvars
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from actkit.errors import ActkitError, LayerError, StoreError, StoreIncompleteError
from actkit.store import _inputs as recorded_inputs
from actkit.store import _integrity as integrity
from actkit.store._format import (PARTIAL_SUFFIX, READABLE_FORMATS, decode_attr, looks_like_hdf5, open_read,
                                  partial_path, progress_path, read_json, unknown_name)
from actkit.store._layer import Layer
from actkit.store._source import HINT
from actkit.store._shard_state import check_shards, sharded_progress


class LayerContainer:
    """What every store-like reader (:class:`Store`, ``actkit.matrix_files.MatrixStore``)
    does with its ``layers`` and ``close()``: ``name in store``, ``iter(store)``,
    ``len(store)`` and ``with store:`` (closed at the end)."""

    def __contains__(self, name) -> bool:
        return name in self.layers

    def __iter__(self):
        return iter(self.layers)

    def __len__(self):
        return len(self.layers)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Store(LayerContainer):
    """A store opened for reading (see :func:`open_store`).

    Attributes
    ----------
    path : Path
    layers : list of str
        Layer names, in the order they were written.
    complete : bool
    provenance : dict
    params : dict of str -> ndarray
        Fitted parameters and model matrices (loaded on first access).
    meta : dict
        The checksummed metadata document (``/meta``).
    """

    def __init__(self, path: Path, file, complete: bool, progress: dict | None, meta: dict,
                 verify_reads: bool = True):
        self.path = Path(path)
        self.file = file
        self.complete = complete
        self.progress = progress
        self.meta = meta
        self._params = None
        #: whether reads check the checksums of what they read (a finished store, unless
        #: opened with ``verify_reads=False``)
        self.checked_reads = bool(verify_reads and complete)
        self._sources: dict = {}
        self._index_checked: dict = {}
        self._inputs = None
        self._inputs_store = None  # a derived store's source, kept open for its recorded inputs
        order = list(meta.get("layer_order", []))
        with integrity.h5_errors(self.path):
            present = list(file["layers"]) if "layers" in file else []
        self.layers = [n for n in order if n in present and n in meta.get("layers", {})]

    # --- metadata
    @property
    def attrs(self) -> dict:
        keys = ("actkit_format", "n_samples", "created_at", "fingerprint", "inputs_fingerprint", "request_hash")
        return {**{k: self.meta.get(k) for k in keys}, "complete": self.complete}

    @property
    def provenance(self) -> dict:
        return dict(self.meta.get("provenance", {}))

    @property
    def request(self) -> dict:
        return dict(self.meta.get("request", {}))

    @property
    def fingerprint(self) -> str:
        return str(self.meta.get("fingerprint", ""))

    @property
    def inputs_fingerprint(self) -> str:
        return str(self.meta.get("inputs_fingerprint", ""))

    @property
    def n_samples(self) -> int:
        return int(self.meta.get("n_samples", 0))

    @property
    def params(self) -> dict[str, np.ndarray]:
        if self._params is None:
            with integrity.h5_errors(self.path):
                params = {k: v[()] for k, v in self.file["params"].items()} if "params" in self.file else {}
            if self.checked_reads:
                for key, digest in self.meta.get("params_sha256", {}).items():
                    if key in params and integrity.array_sha256(params[key]) != digest:

                        raise StoreError(f"{self.path}: parameter {key} does not match its checksum; {HINT}")
            self._params = params
        return self._params

    @property
    def inputs(self) -> "recorded_inputs.RecordedInputs | None":
        """What each input sample was (:class:`~actkit.store.RecordedInputs`): recorded in this
        store (``actkit-store/4``), reached through the source store of a derived store
        (``whiten``, ``ica``, ``dictionary``: its provenance names the source and its
        fingerprint), or attached with :meth:`attach_inputs`; None when none of these."""
        if self._inputs is None:
            self._inputs = recorded_inputs.read_recorded(self)
        if self._inputs is None and self._inputs_store is None:
            self._inputs_store = source_store(self.provenance, self.inputs_fingerprint, self.checked_reads)
            if self._inputs_store is not None:
                self._inputs = self._inputs_store.inputs
        return self._inputs

    def attach_inputs(self, inputs: "recorded_inputs.RecordedInputs") -> None:
        """Use ``inputs`` (from :func:`actkit.extractors.record_inputs`) as this store's
        inputs; one line unless their inputs fingerprint is the store's."""
        recorded_inputs.check_attachable(self, inputs)
        self._inputs = inputs

    def checked_source(self, name: str):
        """The checksum-verifying reader of layer ``name`` (:class:`~actkit.store._source.Source`,
        kept open until :meth:`close`), or None when this store's reads are not checked."""
        if not self.checked_reads:
            return None
        source = self._sources.get(name)
        if source is None:
            source = self._sources[name] = self[name].loader_source(verify=True)
        return source

    # --- layers
    def __getitem__(self, name: str) -> Layer:
        if name not in self.layers:
            name = self._alias(name)
        rows = None
        if self.progress is not None:
            rows = int(self.progress.get("rows_done", {}).get(name, 0))
        return Layer(self, name, rows)

    def _alias(self, name: str) -> str:
        """The layer that ``name`` names by another name: its module path or an alias the
        extraction recorded (``resid.3``, ``resid.-1``, ``model.layers.3``)."""
        layers = self.meta.get("layers", {})
        hits = [n for n in self.layers
                if name == layers[n].get("attrs", {}).get("module") or name in layers[n].get("attrs", {}).get("aliases", ())]
        if len({layers[n].get("attrs", {}).get("module") for n in hits}) != 1:  # none, or different modules
            raise LayerError(unknown_name(name, self.layers, f"store {self.path}"))
        return hits[0]

    @staticmethod
    def reopen(path) -> Store:
        """:func:`open_store` (what another process that reads this store's rows calls; it
        checks the rows itself, so the reopened store does not)."""
        return open_store(path, verify_reads=False)

    def open_shard(self, rel) -> Store:
        """The shard ``rel`` (relative to this sharded store's folder), opened for reading."""
        return open_store(self.path.parent / rel, verify_reads=self.checked_reads)

    def verify(self, on_progress=None) -> dict:
        """Check every written row block, row index and parameter against its checksum.

        Returns ``{"layers", "blocks", "bytes", "params"}`` (what was checked); raises
        :class:`~actkit.errors.StoreError` naming the first block that does not match.
        """
        return integrity.verify_store(self, on_progress=on_progress)

    def info(self) -> dict:
        """The JSON-ready description printed by ``actkit info --json``."""
        layers = {}
        for name in self.layers:
            layer = self[name]
            entry = {
                "dataset": layer.dataset_path,
                "index": f"/layers/{name}/index",
                "shape": list(layer.shape),
                "dtype": str(layer.dtype),
            }
            entry.update({k: v for k, v in layer.attrs.items() if k not in ("rows", "features")})
            layers[name] = entry
        with integrity.h5_errors(self.path):
            params = {k: {"dataset": f"/params/{k}", "shape": list(v.shape), "dtype": str(v.dtype)}
                      for k, v in (self.file["params"].items() if "params" in self.file else [])}
        out = {
            "path": str(self.path),
            "format": self.meta.get("actkit_format"),
            "complete": bool(self.complete),
            "n_samples": self.n_samples,
            "created_at": self.meta.get("created_at"),
            "fingerprint": self.fingerprint,
            "inputs_fingerprint": self.inputs_fingerprint,
            "layers": layers,
            "params": params,
            "provenance": self.provenance,
        }
        entry = self.meta.get(recorded_inputs.META_KEY)
        if entry:  # what each input sample was (actkit-store/4)
            out["inputs"] = {k: v for k, v in entry.items() if k != "sha256"}
        if self.progress is not None:
            out["progress"] = {
                "samples_done": int(self.progress.get("samples_done", 0)),
                "n_samples": int(self.progress.get("n_samples", 0)),
            }
        return out

    def close(self) -> None:
        if self._inputs_store is not None:
            self._inputs_store.close()
            self._inputs_store = None
        sources, self._sources = self._sources, {}
        for source in sources.values():
            source.close()
        try:
            self.file.close()
        except Exception:
            pass

    def __repr__(self):
        state = "complete" if self.complete else "INCOMPLETE"
        return f"<actkit Store {str(self.path)!r} {state}, layers={self.layers}>"


class RowsDropped(LayerContainer):
    """A store whose layers come without some rows (:meth:`Layer.drop_rows` of each): what
    ``actkit compare --drop-special-tokens / --drop-positions`` reads. Everything else is the
    store's own (``path``, ``inputs_fingerprint``, ...); closing it closes the store.

    Parameters
    ----------
    store : Store
    special_tokens : bool
        Drop the rows of the tokenizer's special tokens (the store's recorded inputs, or
        ``inputs``).
    positions : sequence of int, optional
        Drop the rows at these token positions of each sample (``-1``: its last token).
    """

    def __init__(self, store, *, special_tokens: bool = False, positions=None, inputs=None):
        self.store = store
        self.layers = list(store.layers)
        self._drop = {"special_tokens": bool(special_tokens), "positions": list(positions or []), "inputs": inputs}
        if not isinstance(store, Store):  # an embedding file: one row per sample, no positions
            raise ActkitError(f"{store.path} holds one row per sample (an embedding file): there are no token rows "
                              "to drop")

    def __getitem__(self, name):
        return self.store[name].drop_rows(**self._drop)

    def __getattr__(self, attr):
        return getattr(self.store, attr)

    def close(self) -> None:
        self.store.close()


def source_store(provenance: Mapping[str, Any], inputs_fingerprint: str = "", verify_reads: bool = True):
    """The source store a derived store (or codes file) was computed from, opened, by its
    provenance (``source_store``, ``source_fingerprint``); None when it names none. One line
    when it is gone or is another store now."""
    path, fingerprint = provenance.get("source_store"), provenance.get("source_fingerprint")
    if not path or not fingerprint:
        return None
    if not Path(path).exists():
        raise ActkitError(f"the inputs of this derived store are those of its source store {path}, which is "
                          "not there any more; put it back, or give the inputs with --inputs (inputs=)")
    source = open_store(path, verify_reads=verify_reads)
    if source.fingerprint != fingerprint or (inputs_fingerprint and source.inputs_fingerprint != inputs_fingerprint):
        source.close()
        raise ActkitError(f"the source store {path} of this derived store was replaced by another store; give "
                          "the inputs with --inputs (inputs=)")
    return source


def unfinished_message(path: Path, progress: Mapping[str, Any] | None) -> str:
    """``store X is not finished (3/10 samples written); rerun ...``: what every command says
    about an unfinished store."""
    progress = progress or {}
    done, total = progress.get("samples_done", 0), progress.get("n_samples", "?")
    return (f"store {path} is not finished ({done}/{total} samples written); rerun the command that "
            "wrote it (the same command) to resume it")


_VERIFY_READS = contextvars.ContextVar("actkit_verify_reads", default=True)


@contextlib.contextmanager
def unverified_reads():
    """Inside the block, :func:`open_store` opens stores whose reads skip the checksum checks
    (what the commands' ``--no-verify`` does); stores opened before keep theirs."""
    token = _VERIFY_READS.set(False)
    try:
        yield
    finally:
        _VERIFY_READS.reset(token)


def open_store(path: str | os.PathLike, *, allow_incomplete: bool = False, verify: bool = False,
               verify_reads: bool | None = None) -> Store:
    """Open a store for reading.

    Parameters
    ----------
    path : str or Path
        The store (``.h5``) as given to ``extract``/``whiten``/``ica``/...; its unfinished
        ``.h5.partial`` file names the same store.
    allow_incomplete : bool, default False
        Open a store that is still being written (or whose writer was killed): its layers
        then show only the rows written so far.  Without it such a store is refused with
        :class:`~actkit.errors.StoreIncompleteError`.
    verify : bool, default False
        Check every row block against its checksum first (:meth:`Store.verify`).
    verify_reads : bool, optional
        Check every block a read touches (rows, row index, parameters) against its checksum,
        as it is read (default: True, except inside :func:`unverified_reads`). Costs a
        re-hash of what is read (measured in ``docs/performance.md``).

    Raises
    ------
    StoreError
        Missing, non-HDF5, truncated, corrupt or foreign files (one line naming the file,
        for every h5py/HDF5 error); stores in an older format.
    """
    path = Path(path)
    if path.name.endswith(PARTIAL_SUFFIX) and progress_path(str(path)[: -len(PARTIAL_SUFFIX)]).exists():
        path = Path(str(path)[: -len(PARTIAL_SUFFIX)])
    partial = partial_path(path)
    progress = None
    target = path
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a store file")
    if not path.exists():
        if partial.exists():
            progress = read_json(progress_path(path)) or {}
            if not allow_incomplete:
                raise StoreIncompleteError(unfinished_message(path, progress))
            target = partial
        else:
            running = sharded_progress(path)  # a torchrun extraction still writing its shards
            if running is not None:
                raise StoreIncompleteError(running)
            raise StoreError(f"store {path} does not exist")
    if not looks_like_hdf5(target):
        raise StoreError(f"{target} is not an HDF5 file")
    try:
        f = open_read(target)
    except Exception as exc:
        raise StoreError(f"cannot read {target}: not a readable HDF5 file (truncated or corrupt)"
                         f"{integrity._reason(exc)}") from None
    try:
        with integrity.h5_errors(target):
            if "actkit_format" not in f.attrs:
                raise StoreError(f"{target} is an HDF5 file but not an actkit store (it has no actkit_format)")
            if integrity.is_variable_length_string(f.attrs, "actkit_format"):
                raise StoreError(f"{target} was written by an older actkit (store format actkit-store/1); "
                                 "rerun the command that wrote it with --overwrite to rewrite it")
            fmt = decode_attr(f.attrs.get("actkit_format"))
            if fmt not in READABLE_FORMATS:
                raise StoreError(f"{target} is an HDF5 file but not an actkit store (format {fmt})")
            meta = integrity.read_meta(f, target)
            complete = bool(f.attrs.get("complete")) and target == path
            if not complete and not allow_incomplete:
                raise StoreIncompleteError(f"store {path} is not marked complete; rerun the command that "
                                           "wrote it")
            if meta.get("shards"):  # layers are virtual datasets over shard stores (see _shards)

                check_shards(path, meta)
            # sanity: every layer there, with the shape and dtype the checksummed metadata says
            for name, entry in meta.get("layers", {}).items():
                rows, feats = int(entry["rows"]), int(entry["features"])
                shapes = {"data": ((rows, feats), np.dtype(entry["dtype"])), "index": ((rows, 2), np.dtype(np.int64))}
                if entry.get("block_rows") is not None:  # a sharded store's checksums are its shards'
                    shapes["checksums"] = ((integrity.n_blocks(rows, entry["block_rows"]),
                                            integrity.checksum_bytes(integrity.checksum_algorithm(meta))),
                                           np.dtype(np.uint8))
                for key, (shape, dtype) in shapes.items():
                    ds = f[f"layers/{name}/{key}"]
                    if ds.shape != shape or ds.dtype != dtype:
                        raise StoreError(f"cannot read {target}: the file is corrupt (/layers/{name}/{key} has "
                                         f"shape {ds.shape} {ds.dtype}, its metadata says {shape} {dtype})")
        if verify_reads is None:
            verify_reads = _VERIFY_READS.get()
        store = Store(path, f, complete, progress, meta, verify_reads=verify_reads)
        if verify:
            store.verify()
    except StoreError:
        f.close()
        raise
    except Exception as exc:
        f.close()
        raise StoreError(f"cannot read {target}: not a readable actkit store (truncated or corrupt)"
                         f"{integrity._reason(exc)}") from None
    return store


def common_layers(store_a: Store, store_b: Store) -> list[tuple[str, str]]:
    """The layer pairs to compare between two stores: every layer in common (in ``store_a``'s
    order), or the two single layers when each store holds exactly one.

    Returns
    -------
    list of (layer of store_a, layer of store_b)

    Raises
    ------
    LayerError
        No layer in common (and not one layer each).
    """
    common = [x for x in store_a.layers if x in store_b.layers]
    if common:
        return [(x, x) for x in common]
    if len(store_a.layers) == 1 and len(store_b.layers) == 1:
        return [(store_a.layers[0], store_b.layers[0])]
    raise LayerError(f"the stores have no layer in common ({', '.join(store_a.layers)} vs "
                     f"{', '.join(store_b.layers)}); choose with --layer-a and --layer-b")
