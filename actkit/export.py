"""A store layer written for other tools: parquet, or a Hugging Face ``datasets`` folder.

``actkit export STORE --format parquet|hf-datasets --out PATH`` (:func:`export_store`)
streams one layer in row blocks (never the whole matrix in memory) into a table with the
columns

* ``sample`` (int64) and ``position`` (int64; -1 for pooled rows): the store's row index;
* ``activation``: fixed-size list of the layer's floats (float32 / float16 as stored);
* ``label`` (optional): the label of the row's sample, from ``labels`` (one per sample);
* one column per label column the store recorded (``actkit extract --label-column COLUMN``),
  named ``COLUMN``, holding the label names of the row's sample.

``parquet`` writes one file (a row group per block); ``hf-datasets`` writes the folder that
``datasets.load_from_disk`` opens (an Arrow stream file with ``dataset_info.json`` and
``state.json``; ``activation`` is a ``Sequence(Value("float32"), length=features)``).
Both are written beside ``PATH`` (in a hidden ``.PATH.????????.partial`` folder of this run's
own, :class:`actkit._atomic.Temporary`, which a killed export leaves and the next one removes)
and renamed into place when complete. Each records what it holds (:func:`export_request`:
source fingerprint, layer, labels, blocks), so the same export run again finds its finished
output and has nothing to do; ``overwrite`` replaces only an earlier actkit export of the
same format (a parquet file whose schema metadata carries ``actkit_export``, a folder holding
``.actkit-export``), never anything else.

``saelens`` writes the cached-activations dataset SAELens's trainer reads
(``CacheActivationsRunner``'s output, read by ``ActivationsStore.load_cached_activation_dataset``):
a ``datasets.load_from_disk`` folder with one column named exactly ``hook_name`` (default: the
layer's name), typed ``Array2D((context_size, features))`` in the store's dtype; row ``i`` holds
the store rows ``i*C .. (i+1)*C - 1`` in order (``C = context_size``, default 128). The last
``n_rows % C`` rows (fewer than a context) are left out: SAELens needs every row of the column
to hold exactly ``C`` activations. No ``token_ids`` column is written (SAELens reads one only
where present).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from actkit._atomic import Temporary, move_into_place
from actkit._faults import fault
from actkit._rows import block_rows as default_rows
from actkit.errors import InputError, LayerError, ValidationError
from actkit.evaluation._labels import LABEL_PARAM
from actkit.loader import source_of
from actkit.matrix_files import open_source
from actkit.store import Layer, unwritable_reason

__all__ = ["export_store", "FORMATS"]

FORMATS = ("parquet", "hf-datasets", "saelens")


def _labels(labels, n_samples: int):
    if labels is None:
        return None
    if not isinstance(labels, (str, Path)):
        arr = np.asarray(labels)
    else:
        p = Path(labels)
        if not p.is_file():
            raise InputError(f"labels file not found: {p}")
        if p.suffix.lower() == ".npy":
            try:
                arr = np.load(p, allow_pickle=False)
            except ValueError as exc:
                raise InputError(f"{p}: cannot read labels ({exc})") from None
        else:
            arr = np.asarray(p.read_text(encoding="utf-8").splitlines())
    if arr.ndim != 1 or len(arr) != n_samples:
        raise InputError(f"the labels must be one per sample ({n_samples}), got shape {arr.shape}")
    return arr


_FIXED = ("sample", "position", "activation", "label")


def _recorded(src) -> dict:
    """The label columns the store recorded: ``{COLUMN: names per sample}`` (object arrays)."""
    params = getattr(src, "params", None) or {}
    names = (getattr(src, "provenance", None) or {}).get("label_names") or {}
    out = {}
    for key in sorted(params):
        col = key[len(LABEL_PARAM):]
        if key.startswith(LABEL_PARAM) and col in names:
            if col in _FIXED:
                raise InputError(f"the store's label column {col!r} has the name of a column export writes "
                                 f"({', '.join(_FIXED)}); re-extract with another --label-column name")
            out[col] = np.asarray(names[col], dtype=object)[np.asarray(params[key], dtype=np.int64)]
    return out


def _table(pa, index, block, labels, features, recorded=None):
    cols = {"sample": pa.array(index[:, 0]), "position": pa.array(index[:, 1])}
    flat = pa.array(np.ascontiguousarray(block).reshape(-1))
    cols["activation"] = pa.FixedSizeListArray.from_arrays(flat, features)
    if labels is not None:
        cols["label"] = pa.array(labels[index[:, 0]])
    for col, values in (recorded or {}).items():
        cols[col] = pa.array(values[index[:, 0]].tolist())
    return pa.table(cols)


def export_store(store, out, *, format: str = "parquet", layer: str | None = None, labels=None,
                 overwrite: bool = False, block_rows: int | None = None, progress: bool = True,
                 hook_name: str | None = None, context_size: int = 128) -> Path:
    """Write one layer of ``store`` (with its row index and optional labels) as parquet or as
    a Hugging Face dataset, in row blocks.

    Parameters
    ----------
    store : path or open store / embedding file (see :func:`actkit.matrix_files.open_source`)
    out : path
        A ``.parquet`` file (``format="parquet"``) or a folder (``"hf-datasets"``).
    format : {"parquet", "hf-datasets", "saelens"}
    layer : str, optional
        Needed when the store holds several layers.
    labels : path or array-like, optional
        One label per sample (a ``.npy`` 1-D array, or a text file with one label a line);
        added as the column ``label`` of every row of that sample. Label columns the store
        recorded (``actkit extract --label-column``) are written in any case, each as a
        column of its own name.
    overwrite : bool, default False
    block_rows : int, optional
        Rows per block (default: about 32 MiB).
    hook_name : str, optional
        ``saelens``: the column's name, SAELens's ``hook_name`` (default: the layer's name).
    context_size : int, default 128
        ``saelens``: store rows per dataset row (SAELens's ``context_size``); the last
        ``n_rows % context_size`` rows are left out.

    Returns
    -------
    pathlib.Path
    """
    import pyarrow as pa  # optional at import: pyarrow only when an export is written

    if format not in FORMATS:
        raise ValidationError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    if format == "saelens" and (isinstance(context_size, bool) or not isinstance(context_size, (int, np.integer))
                                or context_size < 1):
        raise ValidationError(f"--context-size must be a positive number of rows, got {context_size!r}")
    if format == "saelens" and labels is not None:
        raise ValidationError("--labels has no column in the saelens format (activations only)")
    out = Path(out)
    check_export_out(out, format, overwrite)
    src = open_source(store) if isinstance(store, (str, Path)) else store
    try:
        if layer is None:
            if len(src.layers) != 1:
                raise LayerError(f"{src.path} holds {len(src.layers)} layers ({', '.join(src.layers)}); choose one "
                                 "with --layer")
            layer = src.layers[0]
        lay = src[layer]
        rows, feats = lay.shape
        lab = _labels(labels, int(src.n_samples))
        recorded = _recorded(src)
        index = lay.index
        step = block_rows or default_rows(feats, lay.dtype.itemsize)
        if format == "saelens":
            step = context_size * max(1, step // context_size)  # blocks of whole contexts
        request = _request(src, layer, format, lab, step, hook_name, context_size)
        if out.exists() and not overwrite:  # a rerun of the same export has nothing to do
            if export_request(out, format) == request:
                return out
            raise _exists(out)
        # written beside OUT in a temporary folder of its own (never a name someone else may
        # hold), then renamed into place; any failure removes exactly what this call created,
        # and what a killed export left is removed first
        with Temporary(out) as tmp:
            target = tmp.file()
            if format == "saelens":
                if rows < context_size:
                    raise InputError(f"layer {layer} has {rows} rows, fewer than one context of --context-size "
                                     f"{context_size}")
                with tqdm(total=rows - rows % context_size, desc="export", unit="row",
                          disable=None if progress else True, leave=False) as bar:
                    _write_saelens(_verified_blocks(lay, step), target, bar, hook_name or layer, int(context_size),
                                   feats, lay.dtype, request)
            else:
                with tqdm(total=rows, desc="export", unit="row", disable=None if progress else True,
                          leave=False) as bar:
                    tables = (_table(pa, index[a:a + len(b)], b, lab, feats, recorded)
                              for a, b in _verified_blocks(lay, step))
                    if format == "parquet":
                        _write_parquet(tables, target, bar, request)
                    else:
                        _write_hf(tables, target, bar, lay, request)
            check_export_out(out, format, overwrite)  # what is there now (it may have appeared meanwhile)
            move_into_place(target, out)
        return out
    finally:
        if isinstance(store, (str, Path)):
            src.close()


def _verified_blocks(lay, step):
    """``(first_row, rows)`` blocks of ``lay``; a store's rows checked against its block
    checksums as they are read (a corrupt block is ``actkit verify``'s error, never exported:
    an export imported back would carry fresh checksums over it). Embedding files have none."""
    if not isinstance(lay, Layer):
        yield from lay.iter_blocks(step)
        return
    source = source_of(lay)
    try:
        for a in range(0, len(lay), step):
            fault("export-rows")
            yield a, source.read(a, min(len(lay), a + step))
    finally:
        source.close()


#: the file an hf-datasets export folder carries so that ``--overwrite`` knows it as actkit's
MARKER = ".actkit-export"
#: the key of a parquet export's schema metadata that marks it as actkit's
PARQUET_KEY = b"actkit_export"
_HF_FILES = {"state.json", "dataset_info.json", MARKER}


def is_actkit_export(path, format: str) -> bool:
    """Whether ``path`` is an export of ``format`` that actkit wrote (what ``--overwrite`` may
    replace): a parquet file whose schema metadata carries :data:`PARQUET_KEY`, or a folder
    holding :data:`MARKER` and nothing but the files an ``hf-datasets`` export writes."""
    path = Path(path)
    if format == "parquet":
        if not path.is_file() or path.is_symlink():
            return False
        try:
            import pyarrow.parquet as pq  # optional at import: pyarrow only for parquet files

            meta = pq.read_schema(path).metadata or {}
        except Exception:  # not parquet at all
            return False
        return PARQUET_KEY in meta
    if not path.is_dir() or path.is_symlink() or not (path / MARKER).is_file():
        return False
    if f"--format {format})" not in (path / MARKER).read_text(errors="replace"):   # the other folder format
        return False
    return all(p.is_file() and not p.is_symlink() and (p.name in _HF_FILES or p.name.startswith("data-")
                                                       and p.name.endswith(".arrow")) for p in path.iterdir())


def _exists(out) -> InputError:
    return InputError(f"{out} exists; pass --overwrite to replace it (an earlier actkit export only)")


def export_request(path, format: str) -> dict | None:
    """The request recorded in the actkit export of ``format`` at ``path`` (what it holds:
    source, layer, labels, blocks), or None."""
    try:
        if format == "parquet":
            import pyarrow.parquet as pq  # optional at import: pyarrow only for parquet files

            return json.loads((pq.read_schema(path).metadata or {})[PARQUET_KEY])
        lines = (Path(path) / MARKER).read_text(encoding="utf-8").splitlines()
        return json.loads(lines[1].partition("request: ")[2])
    except (OSError, KeyError, IndexError, ValueError):
        return None


def _request(src, layer, format, lab, step, hook_name, context_size) -> dict:
    """What an export of these arguments holds (recorded in it: a rerun finds its own export)."""
    request = {"format": format, "source_fingerprint": src.fingerprint, "layer": layer, "block_rows": int(step)}
    if lab is not None:
        request["labels_sha256"] = hashlib.sha256(str(lab.dtype).encode() + np.ascontiguousarray(lab).tobytes()
                                                  ).hexdigest()
    if format == "saelens":
        request.update(hook_name=hook_name or layer, context_size=int(context_size))
    return request


def check_export_out(out, format: str, overwrite: bool) -> None:
    """One-line :class:`InputError` unless ``out`` can be written: its folder exists and is
    writable, and ``out`` is absent or an earlier actkit export of the same format (which
    only ``overwrite`` replaces, unless it is the same export: :func:`export_store` decides).
    Nothing is written."""
    out = Path(out)
    why = unwritable_reason(out)
    if why:
        raise InputError(f"cannot write {out}: {why}")
    if not (out.exists() or out.is_symlink()):
        return
    if not overwrite and not is_actkit_export(out, format):  # the same export is the caller's to find
        raise _exists(out)
    if not is_actkit_export(out, format):
        what = "a folder" if out.is_dir() else "a file"
        raise InputError(f"{out} is {what} that is not an actkit {format} export; actkit replaces only its own "
                         "outputs (even with --overwrite): move it away or choose another --out")


def _write_parquet(tables, path, bar, request):
    import pyarrow.parquet as pq  # optional at import: pyarrow only for parquet files

    writer = None
    try:
        for t in tables:
            if writer is None:
                schema = t.schema.with_metadata({**(t.schema.metadata or {}),
                                                 PARQUET_KEY: json.dumps(request, sort_keys=True).encode()})
                writer = pq.ParquetWriter(path, schema)
            writer.write_table(t)
            bar.update(t.num_rows)
    finally:
        if writer is not None:
            writer.close()


def _mark(folder, format, request):
    """The marker that makes a folder an actkit export of ``format`` (what ``--overwrite`` may
    replace), with the request it holds (:func:`export_request`)."""
    (folder / MARKER).write_text(f"an actkit export (actkit export --format {format})\n"
                                 f"request: {json.dumps(request, sort_keys=True)}\n", encoding="utf-8")


def _write_saelens(blocks, folder, bar, hook, context, width, dtype, request):
    """SAELens's cached-activations folder: column ``hook`` of ``Array2D((context, features))``,
    one dataset row per ``context`` consecutive store rows (blocks are whole contexts, the
    tail of fewer than ``context`` rows is dropped)."""
    from datasets import Array2D, Features  # datasets: ~0.4 s at import (measured), only for the saelens format
    from datasets.arrow_writer import ArrowWriter  # datasets: ~0.4 s at import (measured), only for the saelens format

    features = Features({hook: Array2D(shape=(context, width), dtype=str(np.dtype(dtype)))})
    folder.mkdir(parents=True)
    _mark(folder, "saelens", request)
    name = "data-00000-of-00001.arrow"
    writer = ArrowWriter(features=features, path=str(folder / name))
    try:
        for _, block in blocks:
            n = len(block) - len(block) % context
            if n:
                writer.write_batch({hook: list(np.asarray(block[:n]).reshape(-1, context, width))})
                bar.update(n)
        writer.finalize()
    finally:
        writer.close()
    _finish_hf(folder, name, features)


def _finish_hf(folder, name, features):
    """``state.json`` and ``dataset_info.json`` beside an Arrow stream file, as
    ``Dataset.save_to_disk`` writes them."""
    from datasets import Dataset  # datasets: ~0.4 s at import (measured), only for its folder formats
    from datasets.info import DatasetInfo  # datasets: ~0.4 s at import (measured), only for its folder formats

    ds = Dataset.from_file(str(folder / name), info=DatasetInfo(features=features))
    state = {k: ds.__dict__[k] for k in ("_fingerprint", "_format_columns", "_format_kwargs", "_format_type",
                                          "_output_all_columns")}
    # datasets' fingerprint of a file hashes its path (here a temporary one): the content's
    # instead, so the same export is the same bytes
    with open(folder / name, "rb") as fh:
        state["_fingerprint"] = hashlib.file_digest(fh, "sha256").hexdigest()[:16]
    state["_split"] = None
    state["_data_files"] = [{"filename": name}]
    (folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    (folder / "dataset_info.json").write_text(json.dumps(asdict(ds._info), indent=2, sort_keys=True))


def _write_hf(tables, folder, bar, lay, request):
    """The folder ``datasets.Dataset.save_to_disk`` writes, streamed: one Arrow stream file,
    its features in the schema metadata, ``dataset_info.json`` and ``state.json``."""
    import pyarrow as pa  # optional at import: pyarrow only when an export is written
    from datasets import Features, Sequence, Value  # datasets: ~0.4 s at import (measured), only for the hf-datasets format

    folder.mkdir(parents=True)
    _mark(folder, "hf-datasets", request)
    name = "data-00000-of-00001.arrow"
    writer = None
    features = None
    try:
        for t in tables:
            if writer is None:
                spec = {"sample": Value("int64"), "position": Value("int64"),
                        "activation": Sequence(Value(str(lay.dtype)), length=int(lay.shape[1]))}
                for col in t.column_names[3:]:  # label, recorded label columns
                    spec[col] = Features.from_arrow_schema(t.select([col]).schema)[col]
                features = Features(spec)
                schema = t.schema.with_metadata(features.arrow_schema.metadata)
                writer = pa.ipc.new_stream(str(folder / name), schema)
            writer.write_table(t.replace_schema_metadata(schema.metadata))
            bar.update(t.num_rows)
    finally:
        if writer is not None:
            writer.close()
    _finish_hf(folder, name, features)
