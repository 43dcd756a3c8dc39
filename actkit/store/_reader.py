"""Opening a store: :class:`Store` and :func:`open_store`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from actkit.errors import LayerError, StoreError, StoreIncompleteError
from actkit.store._format import (FORMAT, decode_attr, h5py_module, looks_like_hdf5, partial_path,
                                  progress_path, read_json, unknown_name)
from actkit.store._layer import Layer


class Store:
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
    """

    def __init__(self, path: Path, file, complete: bool, progress: dict | None):
        self.path = Path(path)
        self.file = file
        self.complete = complete
        self.progress = progress
        self._params = None
        order = json.loads(decode_attr(file.attrs.get("layer_order", "[]")))
        present = list(file["layers"]) if "layers" in file else []
        self.layers = [n for n in order if n in present] + [n for n in present if n not in order]

    # --- metadata
    @property
    def attrs(self) -> dict:
        return {k: decode_attr(v) for k, v in self.file.attrs.items()}

    @property
    def provenance(self) -> dict:
        return json.loads(decode_attr(self.file.attrs.get("provenance", "{}")))

    @property
    def request(self) -> dict:
        return json.loads(decode_attr(self.file.attrs.get("request", "{}")))

    @property
    def fingerprint(self) -> str:
        return str(decode_attr(self.file.attrs.get("fingerprint", "")))

    @property
    def inputs_fingerprint(self) -> str:
        return str(decode_attr(self.file.attrs.get("inputs_fingerprint", "")))

    @property
    def n_samples(self) -> int:
        return int(self.file.attrs.get("n_samples", 0))

    @property
    def params(self) -> dict[str, np.ndarray]:
        if self._params is None:
            self._params = {k: v[()] for k, v in self.file["params"].items()} if "params" in self.file else {}
        return self._params

    # --- layers
    def __getitem__(self, name: str) -> Layer:
        if name not in self.layers:
            raise LayerError(unknown_name(name, self.layers, f"store {self.path}"))
        rows = None
        if self.progress is not None:
            rows = int(self.progress.get("rows_done", {}).get(name, 0))
        return Layer(self, name, rows)

    def __contains__(self, name) -> bool:
        return name in self.layers

    def __iter__(self):
        return iter(self.layers)

    def __len__(self):
        return len(self.layers)

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
        out = {
            "path": str(self.path),
            "format": decode_attr(self.file.attrs.get("actkit_format")),
            "complete": bool(self.complete),
            "n_samples": self.n_samples,
            "created_at": decode_attr(self.file.attrs.get("created_at")),
            "fingerprint": self.fingerprint,
            "inputs_fingerprint": self.inputs_fingerprint,
            "layers": layers,
            "params": {k: {"dataset": f"/params/{k}", "shape": list(v.shape), "dtype": str(v.dtype)}
                       for k, v in (self.file["params"].items() if "params" in self.file else [])},
            "provenance": self.provenance,
        }
        if self.progress is not None:
            out["progress"] = {
                "samples_done": int(self.progress.get("samples_done", 0)),
                "n_samples": int(self.progress.get("n_samples", 0)),
            }
        return out

    def close(self) -> None:
        try:
            self.file.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "complete" if self.complete else "INCOMPLETE"
        return f"<actkit Store {str(self.path)!r} {state}, layers={self.layers}>"




def open_store(path: str | os.PathLike, *, allow_incomplete: bool = False) -> Store:
    """Open a store for reading.

    Parameters
    ----------
    path : str or Path
        The store (``.h5``) as given to ``extract``/``whiten``/``ica``/...
    allow_incomplete : bool, default False
        Open a store that is still being written (or whose writer was killed): its layers
        then show only the rows written so far.  Without it such a store is refused with
        :class:`~actkit.errors.StoreIncompleteError`.

    Raises
    ------
    StoreError
        Missing, non-HDF5, truncated or foreign files.
    """
    path = Path(path)
    partial = partial_path(path)
    progress = None
    target = path
    if path.is_dir():
        raise StoreError(f"{path} is a directory, not a store file")
    if not path.exists():
        if partial.exists():
            progress = read_json(progress_path(path)) or {}
            if not allow_incomplete:
                done, total = progress.get("samples_done", 0), progress.get("n_samples", "?")
                raise StoreIncompleteError(
                    f"store {path} is not finished ({done}/{total} samples written); rerun the "
                    "same command to resume it"
                )
            target = partial
        else:
            raise StoreError(f"no such store: {path}")
    if not looks_like_hdf5(target):
        raise StoreError(f"{target} is not an HDF5 file")
    h5py = h5py_module()
    try:
        f = h5py.File(target, "r", locking=False)
    except OSError:
        raise StoreError(f"{target} is not a readable HDF5 file (truncated or corrupt)") from None
    try:
        fmt = decode_attr(f.attrs.get("actkit_format"))
        if fmt != FORMAT:
            raise StoreError(f"{target} is an HDF5 file but not an actkit store (format {fmt!r})")
        complete = bool(f.attrs.get("complete")) and target == path
        if not complete and not allow_incomplete:
            raise StoreIncompleteError(f"store {path} is not marked complete; rerun the command that wrote it")
        # sanity: every layer readable
        for name in f.get("layers", {}):
            f[f"layers/{name}/data"].shape  # noqa: B018
    except StoreError:
        f.close()
        raise
    except Exception:
        f.close()
        raise StoreError(f"{target} is not a readable actkit store (truncated or corrupt)") from None
    return Store(path, f, complete, progress)


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
