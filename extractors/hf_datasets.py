"""Hugging Face ``datasets`` inputs: saved datasets, parquet/arrow files and hub datasets.

``--inputs`` forms handled here:

* a folder written by ``Dataset.save_to_disk`` (or ``DatasetDict.save_to_disk``: ``--split``
  picks the split), opened with ``datasets.load_from_disk`` (memory-mapped, nothing copied);
* a ``.arrow`` file (``Dataset.from_file``, memory-mapped) or a ``.parquet`` file, or a glob of
  either (``'shards/*.parquet'``, sorted); parquet is read with pyarrow, only the one column,
  lazily, one row group at a time (:class:`ParquetColumn`);
* ``hf:NAME`` (``--split``, default ``train``; ``--config``), loaded with
  ``datasets.load_dataset``, which serves a dataset from the local cache when offline. With
  ``--max-samples`` the dataset is streamed (``streaming=True``) and only the first rows are
  read; a streamed load that fails (offline) falls back to the cached copy.

``--column`` names the column: default ``text`` for text, else ``image`` or ``img``. A string
column is text; an image column (the ``datasets.Image`` feature, a struct with ``bytes``, raw
binary or decoded PIL images) is images. The rows keep the dataset's order. The digest covers
the content of the rows used (text digests equal those of a ``.txt`` with the same lines).
"""

from __future__ import annotations

import bisect
import functools
import glob as _glob
import hashlib
import io
import json
from pathlib import Path

from PIL import Image

from actkit.errors import InputError

from ._hub import _cache_only, _hub_offline_reason
from ._samples import Inputs, text_digest
from .windows import quiet_logs

DEFAULT_COLUMNS = ("text", "image", "img")
_DATASET_FILES = ("state.json", "dataset_info.json", "dataset_dict.json")


def _short(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def is_hf_inputs(spec) -> bool:
    """True when ``spec`` names a dataset this module reads."""
    s = str(spec)
    if s.startswith("hf:"):
        return True
    if any(c in s for c in "*?["):
        return True
    p = Path(s).expanduser()
    if p.suffix.lower() in (".parquet", ".arrow"):
        return True
    return p.is_dir() and any((p / name).is_file() for name in _DATASET_FILES)


class ArrowTexts:
    """A lazy, sliceable sequence of the strings of one arrow column (nothing copied up front).

    ``texts[i]`` and ``texts[a:b]`` (a list) read only those rows.
    """

    def __init__(self, column):
        self.column = column  # pyarrow.ChunkedArray of strings

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self.column))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            return self.column.slice(start, max(0, stop - start)).to_pylist()
        i = int(key)
        if i < 0:
            i += len(self.column)
        return self.column[i].as_py()

    def __iter__(self):
        for start in range(0, len(self), 4096):
            yield from self[start : start + 4096]

    def __eq__(self, other):
        return list(self) == list(other)


def read_hf(spec, *, column=None, split="train", config=None, max_samples=None):
    """Read a Hugging Face dataset's text or image column as :class:`~extractors.inputs.Inputs`.

    Raises
    ------
    InputError
        Missing files or column (the message lists the columns), a dataset that is neither
        cached nor reachable, a column that holds neither text nor images, null values.
    """
    s = str(spec)
    columns, pick = _columns(s, split or "train", config, max_samples)
    col = _choose_column(column, columns, s)
    values = pick(col)
    return _to_inputs(values, col, s)


def read_label_column(spec, column, *, split="train", config=None, max_samples=None) -> list:
    """One label per sample: ``column`` of the same dataset as :func:`read_hf` (a
    ``ClassLabel`` column gives its names). Kept next to the rows by ``extract --label-column``."""
    s = str(spec)
    split = split or "train"
    columns, pick = _columns(s, split, config, max_samples)
    if column not in columns:
        raise InputError(f"{s} has no label column {column!r}; its columns are: {', '.join(columns)}")
    values = pick(column)
    if hasattr(values, "to_pylist"):
        values = values.to_pylist()
    elif not isinstance(values, list):  # a ParquetColumn
        values = [values[i] for i in range(len(values))]
    nulls = [i for i, v in enumerate(values) if v is None]
    if nulls:
        raise InputError(f"label column {column!r} of {s} is empty in row {nulls[0]} ({len(nulls)} rows)")
    names = _classlabel_names(s, column, split)
    return [str(names[v] if names else v) for v in values]


def _columns(s: str, split, config, max_samples):
    """(column names, pick(column) -> values) of the dataset ``s`` names."""
    if s.startswith("hf:"):
        if not s[3:]:
            raise InputError("hf: needs a dataset name, e.g. hf:wikitext")
        return _load_hub(s[3:], config, split, max_samples)
    files = _files(s)
    kind = files[0].suffix.lower() if files[0].is_file() else "dir"
    if kind == ".parquet":
        return _load_parquet(files, max_samples)
    if kind == ".arrow":
        return _load_arrow(files, max_samples)
    return _load_saved(files[0], split, max_samples)


def _classlabel_names(spec, column, split):
    """The names of a saved dataset's ``ClassLabel`` column, else None."""
    p = Path(str(spec))
    if not p.is_dir():
        return None
    import datasets  # datasets: ~0.7 s at import (measured), only for a datasets input (not .txt, folders, .npy)

    try:
        ds = datasets.load_from_disk(str(p))
    except Exception:
        return None
    if isinstance(ds, datasets.DatasetDict):
        ds = ds.get(split)
    feature = getattr(ds, "features", {}).get(column) if ds is not None else None
    return list(feature.names) if isinstance(feature, datasets.ClassLabel) else None


def _files(s: str) -> list[Path]:
    if any(c in s for c in "*?["):
        found = sorted(Path(p) for p in _glob.glob(str(Path(s).expanduser()), recursive=True))
        found = [p for p in found if p.suffix.lower() in (".parquet", ".arrow")]
        if not found:
            raise InputError(f"no .parquet or .arrow files match {s}")
        kinds = {p.suffix.lower() for p in found}
        if len(kinds) > 1:
            raise InputError(f"{s} matches both .parquet and .arrow files; use one kind")
        return found
    p = Path(s).expanduser()
    if not p.exists():
        raise InputError(f"inputs not found: {p}")
    return [p]


def _choose_column(column, columns, source) -> str:
    names = list(columns)
    if column is not None:
        if column not in names:
            raise InputError(f"dataset {source} has no column {column!r}; its columns are: {', '.join(names)}")
        return column
    for name in DEFAULT_COLUMNS:
        if name in names:
            return name
    raise InputError(f"dataset {source} has no column text, image or img; pick one with --column "
                     f"(its columns are: {', '.join(names)})")


# ----------------------------------------------------------------------------- loaders
# each returns (column names, pick) where pick(column) -> a pyarrow ChunkedArray or a list


def _load_parquet(files, max_samples):
    import pyarrow.parquet as pq  # pyarrow: ~0.1 s at import (measured), only for a datasets input

    try:
        handles = [pq.ParquetFile(f) for f in files]
    except Exception as exc:
        raise InputError(f"cannot read {files[0]} as parquet: {_short(exc)}") from None
    names = handles[0].schema_arrow.names

    def pick(col):
        for f, h in zip(files, handles):
            if col not in h.schema_arrow.names:
                raise InputError(f"{f} has no column {col!r}; its columns are: {', '.join(h.schema_arrow.names)}")
        types = [h.schema_arrow.field(col).type for h in handles]
        return ParquetColumn(files, handles, col, max_samples, type=_one_type(types, files, col))

    return names, pick


def _one_type(types, files, col):
    """The one arrow type of column ``col`` across ``files``: string and large_string (binary
    and large_binary) mixed are read as the large kind; any other mix is refused, naming files."""
    import pyarrow as pa  # pyarrow: ~0.1 s at import (measured), only for a datasets input

    kinds = set(types)
    if len(kinds) == 1:
        return types[0]
    for small, large in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())):
        if kinds <= {small, large}:
            return large
    first = types[0]
    other = next(i for i, t in enumerate(types) if t != first)
    raise InputError(f"column {col!r} holds {first} in {files[0]} but {types[other]} in {files[other]}; "
                     "the files of one dataset need one type per column")


class ParquetColumn:
    """One column of parquet files, read lazily one row group at a time.

    Offers what the readers need of a ``pyarrow.ChunkedArray``: ``len``, ``type``,
    ``null_count`` (from the files' statistics, without reading data), ``slice(start, length)``
    and ``[i]``. Only the row groups that hold the rows asked for are read (the last one is
    cached), so token-window packing with ``--max-tokens`` touches the start of the corpus only.
    """

    def __init__(self, files, handles, column, limit=None, type=None):
        self.files, self.handles, self.column = files, handles, column
        self.type = handles[0].schema_arrow.field(column).type if type is None else type
        groups, starts, total, nulls = [], [0], 0, 0
        for fi, h in enumerate(handles):
            meta = h.metadata
            ci = h.schema_arrow.get_field_index(column)
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                groups.append((fi, g))
                total += rg.num_rows
                starts.append(total)
                stats = rg.column(ci).statistics if ci < rg.num_columns else None
                if nulls is not None:
                    nulls = nulls + stats.null_count if stats is not None and stats.has_null_count else None
        self.groups, self.starts = groups, starts
        self._len = total if limit is None else min(total, int(limit))
        self._stats_nulls = nulls
        self._cache = (None, None)

    def __len__(self):
        return self._len

    @property
    def null_count(self) -> int:
        if self._stats_nulls is not None and self._len == self.starts[-1]:
            return self._stats_nulls
        n = 0
        for start in range(0, self._len, 65536):
            n += self.slice(start, 65536).null_count
        return n

    def _group(self, k):
        if self._cache[0] != k:
            fi, g = self.groups[k]
            part = self.handles[fi].read_row_group(g, columns=[self.column]).column(0)
            self._cache = (k, part if part.type == self.type else part.cast(self.type))
        return self._cache[1]

    def slice(self, start, length):
        import pyarrow as pa  # pyarrow: ~0.1 s at import (measured), only for a datasets input

        stop = min(self._len, start + max(0, length))
        chunks = []
        k = bisect.bisect_right(self.starts, start) - 1
        while start < stop and k < len(self.groups):
            part = self._group(k)
            lo, hi = start - self.starts[k], min(stop, self.starts[k + 1]) - self.starts[k]
            chunks.extend(part.slice(lo, hi - lo).chunks)
            start = self.starts[k] + hi
            k += 1
        return pa.chunked_array(chunks, type=self.type)

    def __getitem__(self, i):
        i = int(i)
        if not 0 <= i < self._len:
            raise IndexError(i)
        return self.slice(i, 1)[0]


def _dataset_pick(ds, max_samples):
    if getattr(ds, "_indices", None) is not None:
        ds = ds.flatten_indices()
    table = ds.data.table if hasattr(ds.data, "table") else ds.data

    def pick(col):
        arr = table.column(col)
        return arr if max_samples is None else arr.slice(0, max_samples)

    return list(ds.column_names), pick


def _load_arrow(files, max_samples):
    import datasets  # datasets: ~0.7 s at import (measured), only for a datasets input (not .txt, folders, .npy)

    try:
        parts = [datasets.Dataset.from_file(str(f)) for f in files]
    except Exception as exc:
        raise InputError(f"cannot read {files[0]} as an arrow dataset file: {_short(exc)}") from None
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return _dataset_pick(ds, max_samples)


def _load_saved(path, split, max_samples):
    import datasets  # datasets: ~0.7 s at import (measured), only for a datasets input (not .txt, folders, .npy)

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        empty = _empty_saved(Path(path), split)
        if empty is not None:
            raise InputError(f"dataset {path} holds no samples (the save_to_disk folder {empty} has no data "
                             "files)") from None
        raise InputError(f"cannot open {path} as a saved Hugging Face dataset: {_short(exc)}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise InputError(f"dataset {path} has no split {split!r}; its splits are: {', '.join(ds)}")
        ds = ds[split]
    return _dataset_pick(ds, max_samples)


def _empty_saved(path: Path, split):
    """The folder of an empty ``save_to_disk`` dataset (its state lists no data files) at
    ``path`` (or its ``split``), or None."""
    folder = path / split if (path / "dataset_dict.json").is_file() else path
    try:
        files = json.loads((folder / "state.json").read_text()).get("_data_files")
    except (OSError, ValueError, AttributeError):
        return None
    return folder if files == [] else None


def _load_hub(name, config, split, max_samples):
    import datasets  # datasets: ~0.7 s at import (measured), only for a datasets input (not .txt, folders, .npy)

    local = Path(name).expanduser().is_dir()  # a dataset folder (files + script/README): no hub
    if not local:
        try:  # a cached dataset first: no request, so an offline machine never waits on retries
            with _cache_only(), quiet_logs("datasets"):
                return _dataset_pick(datasets.load_dataset(name, config, split=split), max_samples)
        except Exception:  # not (all) in the cache: the hub
            pass
    reason = None if local else _hub_offline_reason()
    if reason is not None:
        raise InputError(f"cannot load dataset {name!r} (config {config}, split {split}): it is not in the local "
                         f"Hugging Face cache and the hub cannot be reached ({reason}); pass a save_to_disk "
                         "folder or .parquet/.arrow files, or run once online to cache it")
    if max_samples is not None:
        try:
            stream = datasets.load_dataset(name, config, split=split, streaming=True)
            # column names without a download: from the features, else from the first row
            names = list(stream.column_names or next(iter(stream)).keys())
        except Exception:  # offline / not streamable: try the local cache below
            stream, names = None, []
        if stream is not None and names:
            def pick(col):
                feature = (stream.features or {}).get(col)
                s = stream
                if isinstance(feature, datasets.Image):
                    s = s.cast_column(col, datasets.Image(decode=False))
                try:
                    return [row[col] for row in s.select_columns([col]).take(max_samples)]
                except Exception as exc:
                    raise InputError(f"cannot stream dataset {name!r}: {_short(exc)}") from None

            return names, pick
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except ValueError as exc:
        if "split" in str(exc).lower():
            raise InputError(f"dataset {name!r} has no split {split!r}: {_short(exc)}") from None
        raise InputError(f"cannot load dataset {name!r}: {_short(exc)}") from None
    except Exception as exc:
        raise InputError(
            f"cannot load dataset {name!r} (config {config}, split {split}): it is not in the local "
            f"Hugging Face cache and the hub cannot be reached ({_short(exc)[:160]})"
        ) from None
    return _dataset_pick(ds, max_samples)


# ----------------------------------------------------------------------------- values
def _kind_of(values, col, source) -> str:
    import pyarrow as pa  # pyarrow: ~0.1 s at import (measured), only for a datasets input

    if isinstance(values, list):
        first = next((v for v in values if v is not None), None)
        if isinstance(first, str):
            return "text"
        if isinstance(first, (bytes, bytearray, dict)) or _is_pil(first):
            return "image"
        what = type(first).__name__
    else:
        t = values.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "text"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "image"
        if pa.types.is_struct(t) and t.get_field_index("bytes") >= 0:
            return "image"
        what = str(t)
    raise InputError(f"column {col!r} of {source} holds {what} values, not text or images; "
                     "pick a text or image column with --column")


def _is_pil(v) -> bool:
    return type(v).__module__.startswith("PIL.")


def _to_inputs(values, col, source):
    kind = _kind_of(values, col, source)
    n = len(values)
    nulls = [i for i, v in enumerate(values) if v is None] if isinstance(values, list) else (
        [] if values.null_count == 0 else [int(_first_null(values))])
    if nulls:
        raise InputError(f"row {nulls[0]} of column {col!r} in {source} is empty (null)")
    if kind == "text":
        texts = values if isinstance(values, list) else ArrowTexts(values)
        return Inputs(kind="text", source=source, texts=texts, digest_fn=lambda k=None: text_digest(texts, k),
                      column=col)
    images = values if isinstance(values, list) else _ArrowImages(values)
    h = hashlib.sha256(b"hf-images\0")
    for i in range(n):
        h.update(hashlib.sha256(_image_bytes(images[i], i, col, source)).digest())
    return Inputs(kind="image", source=source, image_values=images, digest=h.hexdigest(), column=col,
                  decode_fn=functools.partial(decode_image, col=col, source=source))


def _first_null(arr):
    import pyarrow.compute as pc  # pyarrow: ~0.1 s at import (measured), only for a datasets input

    for start in range(0, len(arr), 65536):
        part = arr.slice(start, 65536)
        if part.null_count:
            return start + pc.index(pc.is_null(part), True).as_py()
    return 0


class _ArrowImages:
    """Lazy access to an arrow image column (struct with bytes, or binary)."""

    def __init__(self, column):
        self.column = column

    def __len__(self):
        return len(self.column)

    def __getitem__(self, i):
        return self.column[int(i)].as_py()


def _image_bytes(value, i, col, source) -> bytes:
    if isinstance(value, dict):
        data = value.get("bytes")
        if data is None and value.get("path"):
            try:
                data = Path(value["path"]).read_bytes()
            except OSError as exc:
                raise InputError(f"row {i} of column {col!r} in {source}: cannot read {value['path']}: "
                                 f"{_short(exc)}") from None
        if data is None:
            raise InputError(f"row {i} of column {col!r} in {source} holds no image bytes")
        return bytes(data)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if _is_pil(value):  # a decoded image: its pixels, size and mode
        return f"{value.mode}{value.size}".encode() + value.tobytes()
    raise InputError(f"row {i} of column {col!r} in {source} is not an image")


def decode_image(value, i, col, source):
    """Row ``i`` of an image column as an RGB ``PIL.Image``."""
    if _is_pil(value):
        return value.convert("RGB")
    try:
        with Image.open(io.BytesIO(_image_bytes(value, i, col, source))) as img:
            return img.convert("RGB")
    except InputError:
        raise
    except Exception as exc:
        raise InputError(f"cannot decode the image in row {i} of column {col!r} in {source}: "
                         f"{_short(exc)}") from None
