"""Readers of embedding files (:mod:`actkit.matrix_files`): a 2-D float matrix in a ``.npy``,
``.safetensors`` or ``.parquet`` file, read by row ranges or row indices, never whole.

Every reader has ``shape`` (rows, features), ``dtype``, ``read(start, stop)`` and
``take(sorted unique rows)``. :class:`MatrixRows` is the picklable form a Dask task gets:
the path and how to read it, opened again in the process that reads.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from actkit._h5 import where
from actkit.errors import InputError, StoreError

_SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": np.uint16}
_NPY_MAGIC = b"\x93NUMPY"


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


# ----------------------------------------------------------------------------- readers
class _ArrayReader:
    """A numpy (memory-mapped) 2-D array; ``bf16`` marks uint16 storage of bfloat16."""

    def __init__(self, arr, bf16=False):
        self.arr, self.bf16 = arr, bf16
        self.shape = tuple(int(s) for s in arr.shape)
        self.dtype = np.dtype(np.float32) if bf16 else arr.dtype

    def _convert(self, block):
        if self.bf16:
            return (np.asarray(block).astype(np.uint32) << 16).view(np.float32)
        return np.asarray(block)

    def read(self, start, stop):
        return self._convert(self.arr[start:stop])

    def take(self, idx):
        return self._convert(self.arr[idx])


class _ParquetReader:
    """A list-of-floats column of a parquet file, read one row group at a time."""

    def __init__(self, path, column):
        import pyarrow as pa  # optional at import: pyarrow only for parquet files
        import pyarrow.parquet as pq  # optional at import: pyarrow only for parquet files

        try:
            self.file = pq.ParquetFile(path)
        except Exception as exc:
            raise InputError(f"cannot read {path} as parquet: {_short(exc)}") from None
        schema = self.file.schema_arrow
        lists = [f.name for f in schema if _is_float_list(f.type)]
        if column is None:
            if len(lists) != 1:
                raise InputError(f"{path}: pick the embedding column with --column (list-of-float columns: "
                                 f"{', '.join(lists) or 'none'}; all columns: {', '.join(schema.names)})")
            column = lists[0]
        if column not in schema.names:
            raise InputError(f"{path} has no column {column!r}; its columns are: {', '.join(schema.names)}")
        if column not in lists:
            raise InputError(f"column {column!r} of {path} holds {schema.field(column).type}, not a list or "
                             "array of floats per row")
        self.column, self.path = column, path
        meta = self.file.metadata
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        value_type = schema.field(column).type.value_type
        self.dtype = np.dtype(value_type.to_pandas_dtype()) if value_type != pa.float16() else np.dtype(np.float16)
        self.shape, self._cache = None, (None, None)
        first = self._group(0) if sizes and sizes[0] else np.empty((0, 0), self.dtype)
        self.shape = (int(self.starts[-1]), int(first.shape[1]))

    def _group(self, g):
        import pyarrow as pa  # optional at import: pyarrow only for parquet files

        if self._cache[0] == g:
            return self._cache[1]
        col = self.file.read_row_group(g, columns=[self.column]).column(0).combine_chunks()
        if col.null_count:
            raise InputError(f"{self.path}: column {self.column!r} has empty (null) rows")
        if pa.types.is_fixed_size_list(col.type):
            width = col.type.list_size
        else:
            lengths = np.diff(np.asarray(col.offsets))
            if lengths.size and (lengths != lengths[0]).any():
                bad = int(np.flatnonzero(lengths != lengths[0])[0])
                raise InputError(f"{self.path}: rows of column {self.column!r} have different lengths "
                                 f"({lengths[0]} and {lengths[bad]} at row {int(self.starts[g]) + bad})")
            width = int(lengths[0]) if lengths.size else 0
        values = col.flatten().to_numpy(zero_copy_only=False)
        block = values.reshape(len(col), width)
        if self.shape is not None and width != self.shape[1]:
            raise InputError(f"{self.path}: rows of column {self.column!r} have different lengths "
                             f"({self.shape[1]} and {width})")
        self._cache = (g, block)
        return block

    def read(self, start, stop):
        out = []
        g = int(np.searchsorted(self.starts, start, side="right") - 1)
        while start < stop and g < len(self.starts) - 1:
            block = self._group(g)
            lo, hi = start - self.starts[g], min(stop, self.starts[g + 1]) - self.starts[g]
            out.append(block[lo:hi])
            start = int(self.starts[g] + hi)
            g += 1
        return np.concatenate(out) if len(out) != 1 else out[0]

    def take(self, idx):
        idx = np.asarray(idx, dtype=np.int64)
        if idx.size == 0:
            return np.empty((0, self.shape[1]), self.dtype)
        groups = np.searchsorted(self.starts, idx, side="right") - 1
        out = np.empty((idx.size, self.shape[1]), self.dtype)
        for g in np.unique(groups):
            sel = groups == g
            out[sel] = self._group(int(g))[idx[sel] - self.starts[g]]
        return out


def _is_float_list(t) -> bool:
    import pyarrow as pa  # optional at import: pyarrow only for parquet files

    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return False
    return pa.types.is_floating(t.value_type)


def check_npy_header(path, what="the array") -> None:
    """One-line :class:`InputError` unless ``path`` starts with the NumPy header (numpy
    reads any other file as a pickle, and would call a text file "pickled data")."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(_NPY_MAGIC))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {_short(exc)}") from None
    if magic != _NPY_MAGIC:
        raise InputError(f"{path} is not a .npy file (it does not start with the NumPy header); "
                         f"save {what} with numpy.save")


def _open_npy(path):
    check_npy_header(path, "the matrix")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower() or "object" in str(exc).lower():
            raise InputError(f"{path} holds an object array (pickled Python objects); save a 2-D float "
                             "array instead") from None
        raise InputError(f"cannot read {path} as a .npy array: {_short(exc)}") from None
    except Exception as exc:
        raise InputError(f"cannot read {path} as a .npy array: {_short(exc)}") from None
    return arr


def _open_safetensors(path, key):
    try:
        with open(path, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            if size > 100 * 2**20:
                raise ValueError("header too large")
            header = json.loads(fh.read(size))
    except Exception as exc:
        raise InputError(f"cannot read {path} as a safetensors file: {_short(exc)}") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if key is None:
        if len(tensors) != 1:
            raise InputError(f"{path} holds {len(tensors)} tensors; pick one with --key "
                             f"({', '.join(sorted(tensors)[:12])})")
        key = next(iter(tensors))
    if key not in tensors:
        raise InputError(f"{path} has no tensor {key!r}; its tensors are: {', '.join(sorted(tensors)[:12])}")
    info = tensors[key]
    dt = info.get("dtype")
    if dt not in _SAFETENSORS_DTYPES:
        raise InputError(f"tensor {key!r} of {path} is {dt}; expected floats (F16, BF16, F32, F64)")
    shape = tuple(int(s) for s in info["shape"])
    begin, end = (int(x) for x in info["data_offsets"])
    dtype = np.dtype(_SAFETENSORS_DTYPES[dt])
    if len(shape) == 2 and (end - begin) != shape[0] * shape[1] * dtype.itemsize:
        raise InputError(f"tensor {key!r} of {path} is truncated or corrupt")
    if len(shape) != 2:
        return key, _Shape(shape, dt), dt == "BF16"
    arr = np.memmap(path, dtype=dtype, mode="r", offset=8 + size + begin, shape=shape)
    return key, arr, dt == "BF16"


class _Shape:
    """Stand-in for a tensor of the wrong rank (only its shape is reported)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = shape, dtype



def open_reader(p: Path, key=None, column=None):
    """The reader of embedding file ``p``: ``(reader, format, key, column)`` (the tensor or
    column picked when the file holds only one). One-line :class:`InputError` otherwise."""
    suffix = p.suffix.lower()
    bf16 = False
    if suffix == ".npy":
        arr, fmt = _open_npy(p), "npy"
    elif suffix == ".safetensors":
        key, arr, bf16 = _open_safetensors(p, key)
        fmt = "safetensors"
    else:
        reader = _ParquetReader(p, column)
        return reader, "parquet", key, reader.column
    shape = tuple(arr.shape)
    what = f"tensor {key!r} of {p}" if key else str(p)
    if len(shape) != 2:
        raise InputError(f"{what} has shape {shape} ({len(shape)}-D); expected a 2-D (rows, features) matrix")
    kind = np.dtype(arr.dtype).kind if not isinstance(arr, _Shape) else "f"
    if not bf16 and kind != "f":
        raise InputError(f"{what} holds {arr.dtype} values; expected floats (float16, float32, float64)")
    return _ArrayReader(arr, bf16=bf16), fmt, key, column


class MatrixRows:
    """Picklable rows of an embedding file for a Dask task: ``rows[a:b]`` opens the file (once
    per process that reads it) and reads only those rows.

    Parameters
    ----------
    path : str
        Absolute path of the file.
    key, column : str or None
        The ``.safetensors`` tensor / ``.parquet`` column (as resolved when the file was opened).
    shape : (int, int)
    dtype : numpy dtype
        As the reader gives them (bfloat16 read as float32).
    """

    ndim = 2

    def __init__(self, path, key, column, shape, dtype):
        self.path, self.key, self.column = str(path), key, column
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._reader = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_reader"} | {"_reader": None}

    def __getitem__(self, key):
        if self._reader is None:
            if not Path(self.path).is_file():
                raise StoreError(f"{where()} cannot open embedding file {self.path}: no such file")
            self._reader = open_reader(Path(self.path), self.key, self.column)[0]
            if tuple(self._reader.shape) != self.shape:
                raise StoreError(f"embedding file {self.path} changed while it was read "
                                 f"(shape {self._reader.shape}, was {self.shape})")
        rows, cols = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        start, stop, step = rows.indices(self.shape[0])
        out = self._reader.read(start, stop) if stop > start else np.empty((0, self.shape[1]), self.dtype)
        out = out[::step] if step != 1 else out
        return out[(slice(None), *cols)] if cols else out

    def __repr__(self):
        return f"MatrixRows({self.path!r}, shape={self.shape})"
