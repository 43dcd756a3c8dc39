"""What :mod:`actkit.loader` reads, and in which order (no torch here).

* :class:`Source` -- one layer as a picklable description (a store layer, with its shards and
  checksum blocks, or an embedding file). Each process opens the files itself on first read
  (a torch ``DataLoader`` worker never inherits an h5py handle) and reads rows ``[a, b)``
  checked against the store's block checksums.
* :func:`epoch_plan` -- the blocks of one rank for one epoch, cut into shuffle windows.
* :func:`round_robin` -- how many batches each of S streams has served after the first
  ``n`` batches of their round-robin interleaving (what a ``DataLoader`` with S workers
  yields, in order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actkit.errors import ValidationError
from actkit.store import HINT, Segment, Source, SourceRows  # noqa: F401  (the loader's sources)


def source_of(layer, verify: bool = True) -> Source:
    """The :class:`Source` of a store :class:`~actkit.store.Layer` or an embedding file's
    :class:`~actkit.matrix_files.MatrixLayer` (each describes itself: ``loader_source``)."""
    describe = getattr(layer, "loader_source", None)
    if describe is None:
        raise ValidationError(f"to_torch reads store layers and embedding files, not {type(layer).__name__}")
    return describe(verify)


def default_block_rows(sources) -> int:
    """Rows per loader block: the checksum block of the first store source (about 1 MiB of
    rows; reads then never cross a checksummed block), else about 1 MiB of rows."""
    for s in sources:
        for seg in s.segments:
            if seg.block_rows:
                return int(seg.block_rows)
    row_bytes = sum(s.features * np.dtype(s.dtype).itemsize for s in sources)
    return max(1, 2**20 // max(1, row_bytes))


# ---------------------------------------------------------------------------- the order
@dataclass
class Window:
    """Shuffle window ``index`` of a rank: ``pieces`` = ``[(first_row, stop_row), ...]`` of the
    layer, in read order; its rows are emitted in the order ``perm`` (seeded)."""

    index: int
    pieces: list
    rows: int


def rank_blocks(n_rows: int, block_rows: int, seed: int, epoch: int, shuffle: bool, rank: int,
                world: int) -> np.ndarray:
    """The blocks (ids; block i = rows ``[i*block_rows, (i+1)*block_rows)``) of ``rank``:
    every ``world``-th block of the epoch's seeded permutation (of ``range(blocks)`` when
    not shuffling), so the ranks' blocks partition the layer."""
    n_blocks = -(-n_rows // block_rows)
    order = np.random.default_rng([seed, epoch]).permutation(n_blocks) if shuffle else np.arange(n_blocks)
    return order[rank::world]


def windows(blocks: np.ndarray, n_rows: int, block_rows: int, window_rows: int) -> list[Window]:
    """Cut the rows of ``blocks`` (in order) into windows of ``window_rows`` rows (the last
    one shorter)."""
    out, pieces, filled = [], [], 0
    for b in blocks:
        a, z = int(b) * block_rows, min(n_rows, (int(b) + 1) * block_rows)
        while a < z:
            take = min(z - a, window_rows - filled)
            pieces.append((a, a + take))
            a += take
            filled += take
            if filled == window_rows:
                out.append(Window(len(out), pieces, filled))
                pieces, filled = [], 0
    if filled:
        out.append(Window(len(out), pieces, filled))
    return out


def window_perm(rows: int, seed: int, epoch: int, rank: int, index: int, shuffle: bool) -> np.ndarray:
    """The seeded order in which a window's rows are emitted."""
    if not shuffle:
        return np.arange(rows)
    return np.random.default_rng([seed, epoch, rank, index, 1]).permutation(rows)


def round_robin(counts, n: int) -> np.ndarray:
    """Batches taken from each of S streams after the first ``n`` batches of their
    round-robin interleaving (stream 0, 1, ..., S-1, 0, 1, ...; an exhausted stream is
    skipped), as a ``DataLoader`` with S workers yields them.

    Parameters
    ----------
    counts : sequence of int, length S
        Batches of each stream.
    n : int
        Batches yielded so far (0 <= n <= sum(counts)).

    Returns
    -------
    ndarray of int64, shape (S,)
    """
    c = np.asarray(counts, dtype=np.int64)
    lo, hi = 0, int(c.max(initial=0))
    while lo < hi:  # the last round t whose start f(t) = sum(min(c, t)) is <= n
        mid = (lo + hi + 1) // 2
        if int(np.minimum(c, mid).sum()) <= n:
            lo = mid
        else:
            hi = mid - 1
    done = np.minimum(c, lo)
    extra = n - int(done.sum())
    active = np.flatnonzero(c > lo)
    done[active[:extra]] += 1
    return done
