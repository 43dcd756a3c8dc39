"""The sparse codes store (``actkit-codes/1``): an SAE's codes of every row of a store layer,
in compressed sparse row (CSR) form, readable with plain h5py (``docs/store-format.md``).

One HDF5 file:

* ``/`` attrs ``actkit_format`` (``b"actkit-codes/1"``), ``complete`` (True), ``rows``,
  ``latents``, ``layer``;
* ``/meta``: (bytes,) uint8, one UTF-8 JSON object: ``request``, ``provenance`` (source
  store path and fingerprint, the SAE folder, its spec), ``layer``, ``rows``, ``latents``,
  ``nnz``;
* ``/codes/<layer>/indptr`` (rows + 1,) int64, ``/codes/<layer>/indices`` (nnz,) int32,
  ``/codes/<layer>/values`` (nnz,) float32: row ``i``'s non-zero codes are
  ``values[indptr[i]:indptr[i+1]]`` at latents ``indices[indptr[i]:indptr[i+1]]``
  (``scipy.sparse.csr_matrix((values, indices, indptr), shape=(rows, latents))``);
* ``/codes/<layer>/index`` (rows, 2) int64: the source rows' ``[sample, position]``;
* ``/params/<name>``: the SAE's tensors (``W_enc``, ``W_dec``, ``b_enc``, ``b_dec``, ...).

It is written in a temporary folder of its own beside ``PATH`` (``.PATH.????????.partial``,
:class:`actkit._atomic.Temporary`) and renamed when complete, so a file at its final path is
always whole; a killed run's temporary is removed by the next.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from actkit._atomic import Temporary
from actkit.errors import StoreError
from actkit.store._format import h5py_module

__all__ = ["CODES_FORMAT", "CodesWriter", "codes_meta", "is_codes_file", "read_codes"]

CODES_FORMAT = "actkit-codes/1"


def is_codes_file(path) -> bool:
    """Whether ``path`` is a complete codes store (``actkit-codes/1``)."""
    h5py = h5py_module()
    try:
        with h5py.File(path, "r") as f:
            return bytes(f.attrs.get("actkit_format", b"")) == CODES_FORMAT.encode() and bool(f.attrs.get("complete"))
    except (OSError, ValueError, TypeError):
        return False


def codes_meta(path) -> dict:
    """The ``/meta`` document of a codes store."""
    h5py = h5py_module()
    with h5py.File(path, "r") as f:
        return json.loads(f["meta"][()].tobytes())


class CodesWriter:
    """Writes one layer's sparse codes block by block into a temporary folder beside ``PATH``;
    :meth:`finalize` renames it to ``PATH``, :meth:`abort` deletes it."""

    def __init__(self, path, layer: str, rows: int, latents: int, index, meta: dict, params: dict):
        h5py = h5py_module()
        self.path = Path(path)
        self.layer, self.rows, self.latents, self.meta = layer, int(rows), int(latents), dict(meta)
        self._tmp = Temporary(self.path).open()
        self.partial = self._tmp.file()
        try:
            self.f = h5py.File(self.partial, "w")
        except BaseException:
            self._tmp.close()
            raise
        g = self.f.create_group(f"codes/{layer}")
        chunk = 1 << 16
        self.indices = g.create_dataset("indices", (0,), dtype=np.int32, maxshape=(None,), chunks=(chunk,))
        self.values = g.create_dataset("values", (0,), dtype=np.float32, maxshape=(None,), chunks=(chunk,))
        self.indptr = g.create_dataset("indptr", (self.rows + 1,), dtype=np.int64)
        g.create_dataset("index", data=np.asarray(index, dtype=np.int64).reshape(self.rows, 2))
        for name, value in params.items():
            self.f.create_dataset(f"params/{name}", data=np.asarray(value))
        self.row, self.nnz = 0, 0
        self.indptr[0] = 0

    def append(self, indptr, indices, values) -> None:
        """Rows in CSR form: ``indptr`` (n + 1,) from 0, ``indices``, ``values`` (indptr[-1],)."""
        n, m = len(indptr) - 1, int(indptr[-1])
        if self.row + n > self.rows:
            raise StoreError(f"codes store {self.path}: more rows than the layer's {self.rows}")
        self.indices.resize((self.nnz + m,))
        self.values.resize((self.nnz + m,))
        self.indices[self.nnz:] = np.asarray(indices, dtype=np.int32)
        self.values[self.nnz:] = np.asarray(values, dtype=np.float32)
        self.indptr[self.row + 1 : self.row + n + 1] = self.nnz + np.asarray(indptr[1:], dtype=np.int64)
        self.row += n
        self.nnz += m

    def finalize(self) -> Path:
        if self.row != self.rows:
            raise StoreError(f"codes store {self.path}: {self.row} of {self.rows} rows written")
        meta = {**self.meta, "actkit_format": CODES_FORMAT, "layer": self.layer, "rows": self.rows,
                "latents": self.latents, "nnz": self.nnz}
        self.f.create_dataset("meta", data=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8))
        for key, value in (("actkit_format", np.bytes_(CODES_FORMAT)), ("rows", self.rows),
                           ("latents", self.latents), ("layer", np.bytes_(self.layer)), ("complete", True)):
            self.f.attrs[key] = value
        self.f.close()
        os.replace(self.partial, self.path)
        self._tmp.close()
        return self.path

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            self._tmp.close()


def read_codes(path, rows=slice(None)):
    """``(layer, csr_matrix)``: the codes of ``rows`` (a slice) of a codes store, as
    ``scipy.sparse.csr_matrix`` of shape (n_rows, latents)."""
    from scipy.sparse import csr_matrix  # scipy.sparse costs ~0.1 s at import; only readers of codes need it

    if not is_codes_file(path):
        raise StoreError(f"{path}: not a complete actkit codes store ({CODES_FORMAT})")
    h5py = h5py_module()
    with h5py.File(path, "r") as f:
        layer = bytes(f.attrs["layer"]).decode()
        g = f[f"codes/{layer}"]
        start, stop, _ = rows.indices(int(f.attrs["rows"]))
        ptr = g["indptr"][start : stop + 1]
        a, b = int(ptr[0]), int(ptr[-1])
        m = csr_matrix((g["values"][a:b], g["indices"][a:b], ptr - a), shape=(stop - start, int(f.attrs["latents"])))
    return layer, m
