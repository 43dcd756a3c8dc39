"""The actkit store: one HDF5 file per extraction (or analysis) run.

This is the only module that knows the file layout (documented for plain h5py users in
``docs/store-format.md``)::

    /                       attrs: actkit_format, complete, n_samples, created_at,
                                   fingerprint, inputs_fingerprint, request (JSON),
                                   request_hash, provenance (JSON), layer_order (JSON)
    /provenance             attrs: one per provenance key (model id, revision, versions, ...)
    /layers/<name>/data     (rows, features) float32 | float16, row-major
    /layers/<name>/index    (rows, 2) int64: [sample, position]; position -1 = pooled row
    /params/<name>          fitted parameters and model matrices (mean, whitening_, unembedding)

Crash safety.  A store is written to ``<path>.partial`` with every dataset allocated at its
final size when the file is created; afterwards the writer only overwrites raw data in place,
so the file's metadata never changes while rows stream in and a ``kill -9`` can never leave an
unreadable file.  After each batch, :meth:`StoreWriter.checkpoint` flushes the data and then
atomically replaces ``<path>.progress.json`` (the resume cursor).  The identical request
resumes from the cursor; :meth:`StoreWriter.finalize` flips ``complete`` and renames the
partial file onto ``<path>`` (a completed store only ever appears whole).  Files are
bitwise reproducible: no HDF5 timestamps, and ``created_at`` honours ``SOURCE_DATE_EPOCH``.

Layout: ``_format`` (names, canonical JSON, attributes, safe opening), ``_create``
(:func:`create_store`), ``_writer`` (:class:`StoreWriter`), ``_layer`` (:class:`Layer`),
``_reader`` (:class:`Store`, :func:`open_store`).
"""

from actkit.store._create import LayerSpec, create_store
from actkit.store._format import (FORMAT, PARTIAL_SUFFIX, PROGRESS_SUFFIX, partial_path,
                                  progress_path, request_hash)
from actkit.store._layer import Layer
from actkit.store._reader import Store, common_layers, open_store
from actkit.store._writer import StoreWriter

__all__ = ["open_store", "common_layers", "create_store", "Store", "Layer", "LayerSpec", "StoreWriter", "FORMAT",
           "PARTIAL_SUFFIX", "PROGRESS_SUFFIX", "partial_path", "progress_path", "request_hash"]
