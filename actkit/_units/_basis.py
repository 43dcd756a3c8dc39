"""What a unit is: the bases a unit report reads, each resolved to the rows to stream, the unit
activations of a block of them, and each unit's direction in the layer's feature space.

* ``None`` -- the layer's own coordinates (neurons, channels): unit ``j`` is feature ``j``.
* a store written by ``actkit whiten`` / ``ica`` / ``dictionary`` from this store -- its rows
  are the unit activations (PCA components, ICA sources, dictionary codes); the directions are
  the de-whitening columns, the ICA mixing columns, the dictionary atoms.
* an SAE folder (:func:`actkit.load_sae`) or a loaded :class:`~actkit.sae.SparseAutoencoder`
  -- the codes are computed block by block; the directions are the decoder rows.
* an ``actkit-codes/1`` file of this store's layer (``transform_store`` of an SAE) -- its
  CSR rows, densified one block at a time; the directions are its stored ``W_dec``.
* a fitted transformer (``FastICA``, ``Whitener``, ``SparseDictionary``, scikit-learn's
  ``PCA``, the ICA sources of a comparison, ``CompareResult.ica_basis``, any estimator with
  ``transform``) -- its ``transform`` of every block (the basis
  GEMM, without writing a derived store).

A derived store or codes file records the fingerprint of the store it was computed from; one
from another store (or another layer) is refused before any row is read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from actkit.errors import InputError, LayerError

__all__ = ["Basis", "resolve_basis"]

#: derived-store command -> (kind of unit, parameter holding the directions, how to read it)
_DERIVED = {"ica": ("ica", "mixing", "columns"), "whiten": ("pca", "dewhitening", "columns"),
            "dictionary": ("dictionary", "dictionary", "rows")}
#: the default order of each kind of unit
DEFAULT_ORDER = {"neuron": "variance", "pca": "variance", "ica": "skewness", "dictionary": "frequency",
                 "sae": "frequency", "transform": "variance"}


class Basis:
    """One basis over one layer (picklable: it travels to Dask workers).

    Attributes
    ----------
    kind : {"neuron", "pca", "ica", "dictionary", "sae"}
    rows : row source
        What the pass streams: the layer itself, the derived store's layer, or the codes.
    n_units : int
    sparse : bool
        Codes that are mostly zero (SAE, dictionary): ordered by activation frequency, dead
        units listed apart.
    source : str
        Where the units come from (a path or ``"neurons"``), for the report.
    """

    def __init__(self, kind, rows, n_units, *, source, directions=None, sae=None, variance=None):
        self.kind, self.rows, self.n_units, self.source = kind, rows, int(n_units), str(source)
        self._directions, self.sae, self.transformer = directions, sae, None
        #: (n_units,) the variance each unit explains in the layer (PCA: before whitening), or None
        self.variance = None if variance is None else np.asarray(variance, np.float64)
        self.sparse = kind in ("dictionary", "sae")

    def activations(self, block, first_row=0):
        """Unit activations of a block of ``rows``: ndarray (n, n_units)."""
        if self.sae is not None:
            return self.sae._dense(self.sae.encode_block(np.asarray(block))).cpu().numpy()
        if self.transformer is not None:
            return np.asarray(self.transformer.transform(np.asarray(block)))
        return np.asarray(block)

    def entries(self, block, first_row=0):
        """The non-zero unit activations of a block of ``rows`` (for mostly-zero codes):
        ``(n, r, u, v)`` -- the block's row count, and (m,) block rows (increasing), units and
        float32 values; an SAE's top-k codes are taken as they are, never densified."""
        n = int(block.shape[0])
        if self.sae is not None:
            codes = self.sae.encode_block(np.asarray(block))
            if codes[0] == "topk":
                v = codes[1].cpu().numpy().astype(np.float32, copy=False).ravel()
                u = codes[2].cpu().numpy().astype(np.int64, copy=False).ravel()
                r = np.repeat(np.arange(n, dtype=np.int64), codes[1].shape[1])
                nz = v != 0
                return n, r[nz], u[nz], v[nz]
            A = codes[1].cpu().numpy()
        else:
            A = self.activations(block, first_row)
        A = np.asarray(A, dtype=np.float32)
        r, u = np.nonzero(A)
        return n, r.astype(np.int64), u.astype(np.int64), A[r, u]

    def directions(self):
        """(n_units, n_features) float64: each unit's direction in the layer's space, or None."""
        if self.kind == "neuron":
            return None
        return None if self._directions is None else np.asarray(self._directions, np.float64)

    def __getstate__(self):  # what travels to a worker: not the open row source (it reads its own chunk)
        return {**vars(self), "rows": None}


class CodesRows:
    """The rows of an ``actkit-codes/1`` file as dense float32 blocks (a stream for the runners;
    picklable: it opens the file where it is read)."""

    actkit_streaming = True

    def __init__(self, path, rows, latents):
        self.path, self.shape, self.dtype = str(path), (int(rows), int(latents)), np.dtype(np.float32)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        from actkit.store import read_codes  # h5py: a codes file is read only here

        if not isinstance(key, slice):
            raise TypeError("CodesRows reads slices of rows")
        return read_codes(self.path, key)[1].toarray().astype(np.float32, copy=False)


def _fingerprint_check(what, path, recorded, store):
    if not recorded or recorded != store.fingerprint:
        raise InputError(f"basis {path}: {what} was computed from another store (fingerprint {recorded or 'none'}, "
                         f"this store's {store.fingerprint or 'none'}); pass a basis made from {store.path}")


def _derived(path, store, layer):
    from actkit.store import open_store  # the derived store is a store like any other

    d = open_store(path)
    prov = d.provenance
    command = prov.get("command")
    if command not in _DERIVED:
        raise InputError(f"basis {path}: a store, but not one written by actkit whiten / ica / dictionary "
                         f"(its command is {command!r})")
    _fingerprint_check(f"this {command} store", path, prov.get("source_fingerprint"), store)
    if prov.get("source_layer") != layer or layer not in d.layers:
        raise LayerError(f"basis {path}: its units are of layer {prov.get('source_layer')!r}, not {layer!r}; "
                         f"pass --layer {prov.get('source_layer')} or a basis fitted on {layer}")
    kind, param, how = _DERIVED[command]
    if command == "whiten" and (prov.get("settings") or {}).get("method") == "zca":
        kind = "zca"
    W = d.params.get(param)
    directions = None if W is None else (np.asarray(W).T if how == "columns" else np.asarray(W))
    rows = d[layer]
    ev = d.params.get("explained_variance") if command == "whiten" else None
    return Basis(kind if kind != "zca" else "pca", rows, rows.shape[1], source=path, directions=directions,
                 variance=ev if ev is not None and len(ev) == rows.shape[1] else None)


def _codes(path, store, layer):
    from actkit.store import codes_meta  # h5py: a codes file is read only here

    meta = codes_meta(path)
    prov = meta.get("provenance", {})
    _fingerprint_check("this codes file", path, prov.get("source_fingerprint"), store)
    if prov.get("source_layer") != layer:
        raise LayerError(f"basis {path}: codes of layer {prov.get('source_layer')!r}, not {layer!r}; "
                         f"pass --layer {prov.get('source_layer')} or the codes of {layer}")
    from actkit._h5 import open_read  # the SAE's decoder rows stored beside the codes

    with open_read(path) as f:
        rows, latents = int(f.attrs["rows"]), int(f.attrs["latents"])
        w_dec = np.asarray(f["params/W_dec"]) if "params/W_dec" in f else None
    if rows != int(store[layer].shape[0]):
        raise InputError(f"basis {path}: {rows} rows of codes, but layer {layer} has {store[layer].shape[0]}")
    return Basis("sae", CodesRows(path, rows, latents), latents, source=path, directions=w_dec)


def _sae(sae, store, layer, source):
    width = int(store[layer].shape[1])
    if sae.n_features_in_ != width:
        raise InputError(f"basis {source}: the SAE reads {sae.n_features_in_} features, layer {layer} has {width}")
    return Basis("sae", store[layer], sae.n_components_, source=source, directions=sae.W_dec_, sae=sae)


#: a fitted estimator's kind of unit and where its directions are: (kind, attribute, rows or columns)
_ESTIMATORS = {"FastICA": ("ica", "mixing_", "columns"), "Whitener": ("pca", "dewhitening_", "columns"),
               "SparseDictionary": ("dictionary", "dictionary_", "rows"), "PCA": ("pca", "components_", "rows"),
                "ICASources": ("ica", "mixing_", "columns")}


def _transformer(est, store, layer):
    """A fitted transformer (actkit's FastICA / Whitener / SparseDictionary, scikit-learn's PCA
    or any estimator with ``transform`` and ``n_features_in_``): its ``transform`` of every block."""
    width = int(store[layer].shape[1])
    if getattr(est, "n_features_in_", None) != width:
        raise InputError(f"basis {type(est).__name__}: fitted on {getattr(est, 'n_features_in_', '?')} features, "
                         f"layer {layer} has {width} (fit it first, on this layer)")
    kind, attr, how = _ESTIMATORS.get(type(est).__name__, ("neuron", None, "rows"))
    W = getattr(est, attr, None) if attr else None
    directions = None if W is None else (np.asarray(W).T if how == "columns" else np.asarray(W))
    n_out = int(np.asarray(est.transform(np.asarray(store[layer][:1]))).shape[1])
    var = getattr(est, "explained_variance_", None) if kind == "pca" else None
    b = Basis(kind if directions is not None else "transform", store[layer], n_out, source=type(est).__name__,
              directions=directions, variance=var)
    b.transformer = est
    b.sparse = kind == "dictionary"
    return b


def resolve_basis(basis, store, layer, device="cpu", side="a") -> Basis:
    """The :class:`Basis` that ``basis`` names for ``store[layer]`` (see the module docstring);
    one-line errors for an unknown, foreign or mismatched basis (``side="b"``: the other store
    of a match, its messages naming ``basis_b`` / ``--basis-b`` and ``--layer-b``)."""
    if side == "a":
        return _resolve(basis, store, layer, device)
    try:
        return _resolve(basis, store, layer, device)
    except (InputError, LayerError) as exc:
        text = re.sub(r"\bbasis\b", "basis_b (--basis-b)", str(exc), count=1).replace("--layer ", "--layer-b ")
        raise type(exc)(text) from None


def _resolve(basis, store, layer, device):
    if basis is None:
        rows = store[layer]
        return Basis("neuron", rows, rows.shape[1], source="neurons")
    if hasattr(basis, "encode_block") and hasattr(basis, "W_dec_"):
        return _sae(basis, store, layer, "SparseAutoencoder")
    if hasattr(basis, "transform") and hasattr(basis, "fit"):
        return _transformer(basis, store, layer)
    if not isinstance(basis, (str, os.PathLike)):
        raise InputError(f"basis must be None, a path (derived store, SAE folder, codes file), a loaded SAE or a "
                         f"fitted transformer, got {type(basis).__name__}")
    p = Path(basis).expanduser()
    if p.is_dir():
        if not (p / "cfg.json").is_file():
            raise InputError(f"basis {p}: a folder without cfg.json is not an SAE (SAELens or sparsify)")
        from actkit.sae import load_sae  # the SAE's weights: only for an SAE basis

        return _sae(load_sae(p, device=device), store, layer, str(p))
    if not p.is_file():
        raise InputError(f"basis {p}: no such file or folder")
    from actkit.store import is_actkit_store, is_codes_file  # h5py: only a basis file needs it

    if is_codes_file(p):
        return _codes(p, store, layer)
    if is_actkit_store(p):
        return _derived(p, store, layer)
    raise InputError(f"basis {p}: not an actkit store (whiten / ica / dictionary), codes file or SAE folder")
