"""The actkit store: one HDF5 file per extraction (or analysis) run.

This is the only module that knows the file layout (documented for plain h5py users in
``docs/store-format.md``)::

    /                       attrs: actkit_format, complete, n_samples, created_at,
                                   fingerprint, inputs_fingerprint, request_hash
    /meta                   uint8: UTF-8 JSON of request, provenance, layer order, layer
                            attributes, checksums of indices and params; attr sha256
    /provenance             attrs: one per provenance key (model id, revision, versions, ...)
    /layers/<name>/data     (rows, features) float32 | float16, row-major
    /layers/<name>/index    (rows, 2) int64: [sample, position]; position -1 = pooled row
    /layers/<name>/checksums (blocks, 16) uint8: checksum of each block of ``block_rows`` rows
                            (meta["checksum"]: xxh3_128; sha256, 32 bytes, in actkit-store/2)
    /params/<name>          fitted parameters and model matrices (mean, whitening_, unembedding)
    /inputs                 what each input sample was (actkit-store/4, ``_inputs``): token ids
                            (ragged), each sample's text and its tokens' character spans
                            (actkit-store/5) and the tokenizer's decoded vocabulary, or image
                            sources

Every string attribute is fixed-length (nothing in HDF5's global heap, see ``_integrity``),
and every h5py/HDF5 error on reading becomes a one-line
:class:`~actkit.errors.StoreError` naming the file.

Crash safety.  A store is written to ``<path>.partial`` with every dataset allocated at its
final size when the file is created; afterwards the writer only overwrites raw data in place,
so the file's metadata never changes while rows stream in and a ``kill -9`` can never leave an
unreadable file.  After each batch, :meth:`StoreWriter.checkpoint` flushes the data and then
atomically replaces ``<path>.progress.json`` (the resume cursor).  The identical request
resumes from the cursor; :meth:`StoreWriter.finalize` flips ``complete`` (in place: the
attribute's bytes, never its header message) and renames the
partial file onto ``<path>`` (a completed store only ever appears whole).  Files are
bitwise reproducible: no HDF5 timestamps, and ``created_at`` honours ``SOURCE_DATE_EPOCH``.

Layout: ``_format`` (names, canonical JSON, attributes, safe opening), ``_create``
(:func:`create_store`), ``_writer`` (:class:`StoreWriter`), ``_layer`` (:class:`Layer`),
``_reader`` (:class:`Store`, :func:`open_store`), ``_integrity`` (the ``/meta`` document,
fixed-length attributes, block checksums and :func:`verify_store`, one-line errors),
``_shards`` (sharded stores: the virtual-dataset store over torchrun / Dask shards,
:func:`consolidate`).
"""

from actkit.store._codes import CodesWriter, codes_meta, is_codes_file, read_codes
from actkit.store._create import LayerSpec, create_store, unwritable_reason
from actkit.store._format import (
                                  FORMAT,
                                  PARTIAL_SUFFIX,
                                  PROGRESS_SUFFIX,
                                  is_actkit_store,
                                  partial_path,
                                  progress_path,
                                  request_hash,
)
from actkit.store._inputs import RecordedInputs, image_record, text_record
from actkit.store._integrity import format_bytes, verify_store
from actkit.store._layer import Layer, RowSelection
from actkit.store._outputs import check_writable_file
from actkit.store._lock import WriterLock
from actkit.store._reader import LayerContainer, RowsDropped, Store, common_layers, open_store, source_store, unverified_reads
from actkit.store._shard_state import check_shards, remove_stale, rerun_state, shard_files, shard_list
from actkit.store._shards import consolidate, finished_request_hash, shard_dir, write_sharded, write_virtual_store
from actkit.store._source import HINT, Segment, Source, SourceRows
from actkit.store._writer import StoreWriter

__all__ = ["read_codes", "codes_meta", "is_codes_file", "CodesWriter", "open_store", "common_layers", "create_store", "Store", "LayerContainer", "Layer", "LayerSpec", "StoreWriter", "verify_store",
           "FORMAT", "PARTIAL_SUFFIX", "PROGRESS_SUFFIX", "partial_path", "progress_path", "request_hash",
           "write_virtual_store", "consolidate", "check_shards", "shard_list", "finished_request_hash",
           # what the loader, a Dask worker and the derived stores read (a layer described by paths)
           "HINT", "Segment", "Source", "SourceRows",
           # what torchrun extraction and the Dask writer of derived stores use to write shards
           "WriterLock", "remove_stale", "rerun_state", "shard_dir", "shard_files", "write_sharded",
           "format_bytes", "unverified_reads", "is_actkit_store",
           # where any new output may be written (the CLI's checks before it runs)
           "unwritable_reason", "check_writable_file",
           # what each input sample was (/inputs, actkit-store/4 and /5): the reader and the writer's records
           "RecordedInputs", "text_record", "image_record", "source_store",
           # rows left out (special tokens, positions): a layer's row subset, a store's view
           "RowSelection", "RowsDropped"]
