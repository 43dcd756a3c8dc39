"""One label per embedding row, from where users keep them.

``read_labels(spec, source=...)`` accepts:

* ``labels.npy`` (1-D, no pickled objects) or ``labels.txt`` (one label per line);
* ``FILE:COLUMN``: a column of a ``.parquet`` / ``.arrow`` file or of a ``datasets``
  ``save_to_disk`` folder;
* ``COLUMN``: a column of the embeddings' own ``.parquet`` file, or a label column that
  ``actkit extract --label-column COLUMN`` recorded in the store (one label per input
  sample, spread to the sample's rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from actkit.errors import InputError

__all__ = ["LABEL_PARAM", "read_labels"]

# a store's recorded label column COLUMN: params[LABEL_PARAM + COLUMN] = int64 code per input sample,
# provenance["label_names"][COLUMN] = the names of the codes
LABEL_PARAM = "label:"


def read_labels(spec, *, source=None, layer=None, what="--labels"):
    """The labels named by ``spec`` (see the module docstring), one per row of ``layer``.

    Parameters
    ----------
    spec : str or Path
    source : str or Path, optional
        The embeddings' path (for a bare column name).
    layer : store Layer, optional
        The embeddings' layer (a store's recorded labels are spread over its rows by sample).

    Returns
    -------
    ndarray of shape (n_labels,), object
    """
    spec = str(spec)
    p = Path(spec).expanduser()
    if p.suffix.lower() in (".npy", ".txt") and p.is_file():
        return _read_file(p, what)
    if ":" in spec:
        path, column = spec.rsplit(":", 1)
        if Path(path).expanduser().exists():
            return _read_column(Path(path).expanduser(), column, what)
    if p.suffix.lower() in (".npy", ".txt"):
        raise InputError(f"{what} file not found: {p}")
    src = Path(str(source)).expanduser() if source is not None else None
    if src is not None and src.suffix.lower() == ".parquet":
        return _read_column(src, spec, what)
    if layer is not None and hasattr(layer, "store") and hasattr(layer.store, "params"):
        codes = layer.store.params.get(LABEL_PARAM + spec)
        names = (layer.store.provenance.get("label_names") or {}).get(spec)
        if codes is not None and names is not None:
            return np.asarray(names, dtype=object)[np.asarray(codes)[np.asarray(layer.groups)]]
    raise InputError(f"{what} {spec!r}: not a .npy/.txt file, not FILE:COLUMN of a parquet or datasets input, "
                     f"and not a column or recorded label of {source}")


def _read_file(p: Path, what: str) -> np.ndarray:
    if p.suffix.lower() == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise InputError(f"cannot read {what} {p}: {str(exc).splitlines()[0]} (object arrays are refused: "
                             "save strings as a fixed-width array or a .txt)") from None
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1:
            raise InputError(f"{what} {p} has shape {arr.shape}; expected one label per row (1-D)")
        return arr.astype(object)
    lines = p.read_text(encoding="utf-8").splitlines()
    if lines and lines[-1] == "":
        lines = lines[:-1]
    return np.array([s.rstrip("\r") for s in lines], dtype=object)


def _read_column(path: Path, column: str, what: str) -> np.ndarray:
    if path.is_dir():
        try:
            import datasets  # datasets: ~2 s at import (measured), only for its folders

            ds = datasets.load_from_disk(str(path))
        except Exception as exc:
            raise InputError(f"cannot read {path} as a datasets folder: {str(exc).splitlines()[0]}") from None
        if isinstance(ds, datasets.DatasetDict):
            split = "train" if "train" in ds else (next(iter(ds)) if len(ds) == 1 else None)
            if split is None:
                raise InputError(f"{path} holds the splits {', '.join(ds)}; name one: {path}/SPLIT:{column}")
            ds = ds[split]
        if column not in ds.column_names:
            raise InputError(f"{path} has no column {column!r}; its columns are: {', '.join(ds.column_names)}")
        values = ds[column]
        names = getattr(ds.features[column], "names", None)  # a ClassLabel: its names, not its codes
        return np.array([names[v] if names else v for v in values], dtype=object)
    import pyarrow as pa  # optional at import: pyarrow only for parquet files

    try:
        if path.suffix.lower() == ".parquet":
            import pyarrow.parquet as pq  # optional at import: pyarrow only for parquet files

            names = pq.ParquetFile(path).schema_arrow.names
            if column not in names:
                raise InputError(f"{path} has no column {column!r}; its columns are: {', '.join(names)}")
            table = pq.read_table(path, columns=[column])
        else:
            with pa.memory_map(str(path)) as src:
                try:
                    table = pa.ipc.open_file(src).read_all()
                except pa.ArrowInvalid:
                    table = pa.ipc.open_stream(src).read_all()
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot read {what} from {path}: {str(exc).splitlines()[0]}") from None
    if column not in table.column_names:
        raise InputError(f"{path} has no column {column!r}; its columns are: {', '.join(table.column_names)}")
    return np.array(table.column(column).to_pylist(), dtype=object)
