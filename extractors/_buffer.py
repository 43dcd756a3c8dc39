"""Rows on their way to the store: buffered per layer into large appends."""

from __future__ import annotations


import numpy as np



_APPEND_BYTES = 16 * 2**20  # buffer rows per layer up to this size before writing
_DIRECT_BYTES = 2**20  # blocks at least this big are written as they come


class RowBuffer:
    """Collects row blocks of one layer and writes them in large appends."""

    def __init__(self, writer, name):
        self.writer, self.name = writer, name
        self.blocks, self.nbytes = [], 0

    def add(self, rows: np.ndarray):
        if not self.blocks and rows.nbytes >= _DIRECT_BYTES:
            self.writer.append(self.name, rows)  # already a big block: no concatenation copy
            return
        self.blocks.append(rows)
        self.nbytes += rows.nbytes
        if self.nbytes >= _APPEND_BYTES:
            self.flush()

    def flush(self):
        if not self.blocks:
            return
        rows = self.blocks[0] if len(self.blocks) == 1 else np.concatenate(self.blocks)
        self.writer.append(self.name, rows)
        self.blocks, self.nbytes = [], 0
