"""Embedding files (``.npy``, ``.safetensors``, ``.parquet``) as a one-layer, read-only,
streamed store (``_files``: :func:`open_matrix`, :func:`open_source`, :func:`import_matrix`)
and the per-format readers (``_readers``)."""

from __future__ import annotations

from actkit.matrix_files._files import (DEFAULT_LAYER, MATRIX_SUFFIXES, MatrixLayer, MatrixStore, import_matrix,
                                        is_matrix_file, open_matrix, open_source, reopen_layer)
from actkit.matrix_files._readers import check_npy_header

__all__ = ["DEFAULT_LAYER", "check_npy_header", "MATRIX_SUFFIXES", "MatrixLayer", "MatrixStore", "import_matrix", "is_matrix_file",
           "open_matrix", "open_source", "reopen_layer"]
