"""Embedding files: a matrix someone already saved, read where a store layer is read.

``whiten``, ``ica``, ``dictionary`` and ``compare`` accept, in place of a store:

``.npy``
    a 2-D float array (float16/32/64), memory-mapped (``allow_pickle=False``: object arrays
    are refused, never unpickled);
``.safetensors``
    one named 2-D float tensor (``--key``; optional when the file holds one tensor),
    memory-mapped from the file (F16, F32, F64; BF16 is widened to float32 block by block);
``.parquet``
    a list / fixed-size-list column of floats (``--column``; optional when the file has one
    such column), read row group by row group.

Rows are read in blocks (never the whole matrix at once). Opening a file makes one streaming
pass that refuses NaN/Inf values (naming the first row) and computes the content sha256 that
serves as the source's fingerprint. The matrix behaves as a one-layer store
(:class:`MatrixStore`; layer name ``embeddings`` unless given) whose rows are samples (index
``[row, -1]``); it has no inputs fingerprint, so ``compare`` pairs it with any source of the
same number of rows. ``actkit import FILE --out store.h5`` writes it as an ordinary store.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

import actkit
from actkit._rows import block_rows as default_block_rows
from actkit.errors import InputError, LayerError
from actkit.matrix_files._readers import MatrixRows, open_reader
from actkit.store import LayerContainer, LayerSpec, Source, create_store, open_store

MATRIX_SUFFIXES = (".npy", ".safetensors", ".parquet")
DEFAULT_LAYER = "embeddings"


def is_matrix_file(path) -> bool:
    """True for a path whose suffix names an embedding file (``.npy``, ``.safetensors``, ``.parquet``)."""
    return Path(str(path)).suffix.lower() in MATRIX_SUFFIXES


# ----------------------------------------------------------------------------- the layer
class MatrixLayer:
    """Array-like, streaming view of an embedding file: ``(rows, features)``.

    The same reading interface as a store :class:`~actkit.store.Layer` (``shape``, ``dtype``,
    ``len``, slicing and sorted/unsorted integer-array row selection, ``np.asarray``,
    :meth:`iter_blocks`, ``index``, ``groups``), so every estimator and ``compare`` take it.
    """

    ndim = 2
    actkit_streaming = True  # read in blocks by actkit._data

    def __init__(self, store: "MatrixStore", name: str, reader):
        self.store, self.name, self._reader = store, name, reader
        self.attrs = {"source_file": str(store.path)}

    @property
    def shape(self):
        return self._reader.shape

    @property
    def dtype(self):
        return self._reader.dtype

    @property
    def size(self):
        return self.shape[0] * self.shape[1]

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"<actkit MatrixLayer {self.name!r} of {str(self.store.path)!r} shape={self.shape} dtype={self.dtype}>"

    @property
    def index(self) -> np.ndarray:
        """(rows, 2) int64 ``[row, -1]``: every row is one sample."""
        n = self.shape[0]
        return np.stack([np.arange(n, dtype=np.int64), np.full(n, -1, np.int64)], 1)

    @property
    def groups(self) -> np.ndarray:
        return np.arange(self.shape[0], dtype=np.int64)

    def __getitem__(self, key):
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = self.shape[0]
        if isinstance(rows, slice):
            start, stop, step = rows.indices(n)
            out = self._reader.read(start, stop) if stop > start else np.empty((0, self.shape[1]), self.dtype)
            out = out[::step] if step != 1 else out
        elif isinstance(rows, (int, np.integer)):
            r = int(rows) + (n if rows < 0 else 0)
            if not 0 <= r < n:
                raise IndexError(f"row {rows} out of range for {n} rows")
            out = self._reader.read(r, r + 1)[0]
        else:
            arr = np.asarray(rows)
            if arr.dtype == bool:
                arr = np.flatnonzero(arr)
            if arr.size and (arr.min() < 0 or arr.max() >= n):
                raise IndexError(f"row index out of range for {n} rows")
            uniq, inverse = np.unique(arr, return_inverse=True)
            out = self._reader.take(uniq)[inverse.reshape(-1)]
        return out[(slice(None), *rest)] if rest and np.ndim(out) == 2 else (out[rest] if rest else out)

    def __array__(self, dtype=None, copy=None):
        out = self._reader.read(0, self.shape[0])
        return np.asarray(out) if dtype is None else np.asarray(out).astype(dtype, copy=False)

    def to_numpy(self, dtype=None):
        return self.__array__(dtype)

    def to_dask(self, block_rows=None):
        """The rows as a ``dask.array.Array`` (one chunk per ``block_rows`` rows); every task
        opens the file by path (:class:`~actkit.matrix_files._readers.MatrixRows`), as for a store."""
        from actkit.runners import chunked_rows  # the hand-off to the room above (Dask)

        prov = self.store.provenance
        src = MatrixRows(prov["file"], prov["key"], prov["column"], self.shape, self.dtype)
        return chunked_rows(src, block_rows, token=(self.store.fingerprint, self.store.path.stat().st_mtime))

    def loader_source(self, verify: bool = True):
        """This embedding file's layer as the loader reads it (:class:`actkit.store._source.Source`)."""
        prov = self.store.provenance
        rows, feats = (int(x) for x in self.shape)
        return Source("matrix", str(self.store.path), self.name, rows, feats, str(self.dtype), key=prov.get("key"),
                      column=prov.get("column"), verify=verify, opener=reopen_layer)

    def to_torch(self, batch_size=None, **kwargs):
        """A shuffling torch dataset of the rows, as :meth:`actkit.store.Layer.to_torch`."""
        from actkit.loader import to_torch  # the hand-off to the room above (torch)

        return to_torch(self, batch_size, **kwargs)

    def iter_blocks(self, block_rows=None, *, start=0, stop=None, dtype=None):
        """Yield ``(first_row, block)`` pairs covering rows ``start:stop`` in order."""
        stop = self.shape[0] if stop is None else min(stop, self.shape[0])
        block_rows = block_rows or default_block_rows(self.shape[1], self.dtype.itemsize)
        for s in range(start, stop, block_rows):
            block = self._reader.read(s, min(stop, s + block_rows))
            yield s, (block if dtype is None else block.astype(dtype, copy=False))


class MatrixStore(LayerContainer):
    """An embedding file opened as a one-layer, read-only store (see :func:`open_matrix`).

    Attributes
    ----------
    path : Path
    layers : list of str
        ``[layer]`` (default ``"embeddings"``).
    fingerprint : str
        sha256 of the matrix content (shape, dtype and values).
    inputs_fingerprint : str
        Empty: a bare matrix does not say which inputs its rows came from.
    provenance : dict
        ``file``, ``format``, ``key`` / ``column``, ``rows``, ``features``, ``dtype``, ``sha256``.
    """

    complete = True
    progress = None
    inputs_fingerprint = ""
    params: dict = {}
    request: dict = {}

    def __init__(self, path, reader, name, fmt, key=None, column=None, digest=""):
        self.path = Path(path)
        self.layers = [name]
        self._layer = MatrixLayer(self, name, reader)
        self.fingerprint = digest
        self.n_samples = int(reader.shape[0])
        self.provenance = {"source": "embedding file", "file": str(Path(path).resolve()), "format": fmt,
                           "key": key, "column": column, "rows": int(reader.shape[0]),
                           "features": int(reader.shape[1]), "dtype": str(reader.dtype), "sha256": digest}
        self.attrs = {"fingerprint": digest, "n_samples": self.n_samples}

    def __getitem__(self, name):
        if name not in self.layers:
            raise LayerError(f"unknown layer {name!r} in {self.path}: an embedding file has one layer, "
                             f"{self.layers[0]!r} (set its name with --layer)")
        return self._layer

    #: what each row's input was: None until attached (an embedding file records none)
    inputs = None

    def attach_inputs(self, inputs) -> None:
        """Use ``inputs`` (:func:`actkit.extractors.record_inputs`, one sample per row) as this
        file's inputs; one line unless they hold as many samples as the file has rows."""
        inputs.check_for(self)
        self.inputs = inputs

    def info(self) -> dict:
        layer = self._layer
        return {"path": str(self.path), "format": "embedding file", "complete": True, "n_samples": self.n_samples,
                "fingerprint": self.fingerprint, "inputs_fingerprint": "",
                "layers": {layer.name: {"shape": list(layer.shape), "dtype": str(layer.dtype)}},
                "params": {}, "provenance": self.provenance}

    def close(self):
        pass

    def __repr__(self):
        return f"<actkit MatrixStore {str(self.path)!r} layer={self.layers[0]!r} shape={self._layer.shape}>"


def open_matrix(path, *, key: str | None = None, column: str | None = None, layer: str | None = None,
                check: bool = True) -> MatrixStore:
    """Open an embedding file (``.npy``, ``.safetensors``, ``.parquet``) as a one-layer store.

    Parameters
    ----------
    path : str or Path
    key : str, optional
        Tensor name in a ``.safetensors`` file (needed when it holds several).
    column : str, optional
        Column of a ``.parquet`` file (needed when it has several list-of-float columns).
    layer : str, optional
        Name of the one layer (default ``"embeddings"``).
    check : bool, default True
        Make the streaming pass that refuses NaN/Inf and computes the content sha256.

    Raises
    ------
    InputError
        Missing file, unknown format, object / 1-D / non-float arrays, missing key or column,
        NaN or Inf values, fewer than one row.
    """
    p = Path(path).expanduser()
    suffix = p.suffix.lower()
    if suffix not in MATRIX_SUFFIXES:
        raise InputError(f"{p} is not an embedding file (.npy, .safetensors, .parquet)")
    if not p.is_file():
        raise InputError(f"embedding file not found: {p}")
    if key is not None and suffix != ".safetensors":
        raise InputError("--key names a tensor in a .safetensors file")
    if column is not None and suffix != ".parquet":
        raise InputError("--column names a column of a .parquet file")
    reader, fmt, key, column = open_reader(p, key, column)
    if reader.shape[0] < 1 or reader.shape[1] < 1:
        raise InputError(f"{p} holds an empty matrix of shape {reader.shape}")
    digest = _check_and_digest(reader, p) if check else ""
    return MatrixStore(p, reader, layer or DEFAULT_LAYER, fmt, key=key, column=column, digest=digest)


def _check_and_digest(reader, path) -> str:
    """One pass over the rows: refuse NaN/Inf, return the content sha256 (hex)."""
    h = hashlib.sha256(b"actkit-matrix\0")
    h.update(np.asarray(reader.shape, np.int64).tobytes())
    h.update(str(reader.dtype).encode())
    step = default_block_rows(reader.shape[1], reader.dtype.itemsize)
    for s in range(0, reader.shape[0], step):
        block = np.ascontiguousarray(reader.read(s, min(reader.shape[0], s + step)))
        finite = np.isfinite(block)
        if not finite.all():
            row = s + int(np.flatnonzero(~finite.all(axis=1))[0])
            raise InputError(f"{path} has NaN or Inf values (first in row {row}); clean the matrix first")
        h.update(block.tobytes())
    return h.hexdigest()


def open_source(path, *, key=None, column=None, layer=None, strict=True, verify=False):
    """A store or an embedding file, opened for reading (the analysis commands' one door).

    With ``strict=False`` (``compare`` of several sources) ``key`` applies only to
    ``.safetensors`` files and ``column`` only to ``.parquet`` files among them; ``verify``
    checks a store against its checksums (embedding files carry none).
    """
    suffix = Path(str(path)).suffix.lower()
    if not strict:
        key = key if suffix == ".safetensors" else None
        column = column if suffix == ".parquet" else None
    if is_matrix_file(path):
        return open_matrix(path, key=key, column=column, layer=layer)
    if key is not None or column is not None:
        raise InputError("--key and --column apply to embedding files (.safetensors, .parquet), not stores")

    return open_store(path, verify=verify)  # missing / unfinished (``.partial``): its one-line errors


def import_matrix(path, out, *, layer: str | None = None, key: str | None = None, column: str | None = None,
                  overwrite: bool = False, progress: bool = True):
    """Write an embedding file as an ordinary one-layer store (``actkit import``).

    The layer (default ``embeddings``) keeps the file's float dtype (float16/32/64; bfloat16
    becomes float32); its index is ``[row, -1]``. The provenance records the file, its format,
    key/column and content sha256. Written crash-safely by :func:`actkit.store.create_store`;
    the identical call on a finished store returns at once.

    Returns
    -------
    pathlib.Path
    """
    from tqdm.auto import tqdm  # tqdm.auto: ~0.2 s at import (measured), only on a pass with a bar

    src = open_matrix(path, key=key, column=column, layer=layer)
    lay = src[src.layers[0]]
    out = Path(out)
    if out.resolve() == src.path.resolve():
        raise InputError("--out must differ from the embedding file")
    rows, feats = lay.shape
    dtype = str(lay.dtype) if str(lay.dtype) in ("float16", "float32", "float64") else "float32"
    request = {"command": "import", "source_sha256": src.fingerprint, "layer": lay.name, "key": src.provenance["key"],
               "column": src.provenance["column"], "dtype": dtype}
    provenance = {"command": "import", **src.provenance, "actkit_version": actkit.__version__}
    spec = LayerSpec(lay.name, rows, feats, dtype=dtype, attrs={"source_file": str(src.path)})
    kw = dict(n_samples=rows, request=request, provenance=provenance, overwrite=overwrite)
    writer = create_store(out, [spec], **kw)
    if writer.complete:
        return out
    if writer.samples_done:  # an interrupted import: copy again from the start
        writer.abort()
        writer = create_store(out, [spec], **kw)
    try:
        with tqdm(total=rows, desc="import", unit="row", disable=None if progress else True, leave=False) as bar:
            for _, block in lay.iter_blocks():
                writer.append(lay.name, block)
                bar.update(len(block))
        writer.checkpoint(rows, force=True)
        return writer.finalize()
    except BaseException:
        writer.abort()
        raise


def reopen_layer(path, key, column, name):
    """Layer ``name`` of the embedding file ``path`` opened again (in a loader worker)."""
    return open_matrix(path, key=key, column=column, layer=name, check=False)[name]
