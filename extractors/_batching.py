"""Length-sorted batching of text: the plan of windows and batches, and rows back in input order.

A padded batch costs its size times its longest member. Sorting samples by token count
before cutting batches (as sentence-transformers' ``encode`` does) puts texts of similar
length together, so almost no compute goes to padding. The store still holds its rows in
input order, and a killed run still resumes to the same bytes, because:

- the samples ``[first, last)`` of a run (a torchrun rank: its block) are cut into
  **windows** of consecutive samples, at most :data:`WINDOW_BATCHES` batches (and at most a
  quarter of the run, in whole batches, so a short run checkpoints along the way too) and
  about :data:`WINDOW_BYTES` of rows each; the boundaries depend only on the inputs and the
  options, never on where a run was stopped;
- inside a window the samples are sorted by token count (longest first, ties in input
  order) and cut into batches of at most ``batch_size`` samples and, with
  ``max_batch_tokens``, at most that many padded tokens (samples × longest);
- a window's rows are gathered back into input order and appended as one block; the resume
  cursor is written only at window ends, so a rerun starts at a window boundary and
  computes the very same batches.

Without sorting (``sort_by_length=False``, images, token windows of equal length,
``batch_size=1``) a window is one batch of consecutive samples: today's batches, cut by the token budget when one is
given.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actkit.errors import InputError

#: Most batches in one sorted window (the window holds at most this many × ``batch_size`` samples).
#: On 5,000 docstring texts (MiniLM's tokenizer, batch 16) 98 % of the padded tokens are real
#: at 64 batches, against 93 % at 16 and 99 % for one global sort; a killed run redoes at most
#: one window.
WINDOW_BATCHES = 64
#: About the most bytes of rows (all layers) a sorted window keeps in memory before writing.
WINDOW_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Window:
    """Samples ``start:stop`` (absolute ids) and the batches that compute them.

    Attributes
    ----------
    start, stop : int
    batches : tuple of ndarray of int64
        Sample ids of each batch, in the order they are run; together a permutation of
        ``start:stop``.
    in_order : bool
        The batches run ``start:stop`` in input order (rows go straight to the store).
    """

    start: int
    stop: int
    batches: tuple
    in_order: bool


def check_batching_options(max_batch_tokens, context_length=None) -> None:
    """``--max-batch-tokens``: a positive integer, at least one token window long."""
    if max_batch_tokens is None:
        return
    if isinstance(max_batch_tokens, bool) or not isinstance(max_batch_tokens, (int, np.integer)) \
            or max_batch_tokens < 1:
        raise InputError(f"--max-batch-tokens must be a positive integer, got {max_batch_tokens}")
    if context_length is not None and max_batch_tokens < context_length:
        raise InputError(f"--max-batch-tokens {max_batch_tokens} is below one token window of "
                         f"{context_length} tokens (--context-length); give at least {context_length}")


def check_token_budget(lengths, max_batch_tokens, texts=None, source="the inputs") -> None:
    """Every sample must fit a batch alone: one line naming the longest one otherwise.

    Parameters
    ----------
    lengths : array-like of int, shape (n_samples,)
        Tokens per sample, after the truncation ``--max-length`` (or the model's position
        table) asks for.
    max_batch_tokens : int or None
    texts : sequence of str, optional
        The samples, to quote the longest.
    """
    if max_batch_tokens is None or lengths is None or len(lengths) == 0:
        return
    lengths = np.asarray(lengths)
    longest = int(np.argmax(lengths))
    if lengths[longest] <= max_batch_tokens:
        return
    quote = "" if texts is None else f" ({str(texts[longest])[:40]!r})"
    raise InputError(
        f"sample {longest} of {source}{quote} is {int(lengths[longest])} tokens, more than --max-batch-tokens "
        f"{max_batch_tokens}; raise --max-batch-tokens to at least {int(lengths[longest])}, or truncate the "
        f"texts with --max-length {max_batch_tokens}")


def plan_windows(lengths, start, stop, *, first=None, batch_size, max_batch_tokens=None, sort_by_length=True,
                 row_bytes=None):
    """The windows and batches that compute samples ``start:stop``.

    Parameters
    ----------
    lengths : ndarray of int, shape (n_samples,), or None
        Tokens per sample (text); ``None`` for images (equal sizes: input order, no budget).
    start, stop : int
        Samples to compute now (``start`` is where a resumed run stands).
    first : int, optional
        Where the run's samples begin (a torchrun rank's block; default ``start``): window
        boundaries are counted from here, so a resumed run meets the same windows.
    batch_size : int
        Most samples per batch.
    max_batch_tokens : int, optional
        Most padded tokens per batch (samples × the longest one's tokens).
    sort_by_length : bool
        Sort each window by token count; ``False`` keeps batches in input order.
    row_bytes : ndarray of int, shape (n_samples,), optional
        Bytes of store rows each sample gives (all layers): bounds a window's memory.

    Yields
    ------
    Window
    """
    first = start if first is None else first
    if lengths is None:
        for lo in range(start, stop, batch_size):
            hi = min(lo + batch_size, stop)
            yield Window(lo, hi, (np.arange(lo, hi, dtype=np.int64),), True)
        return
    lengths = np.asarray(lengths, dtype=np.int64)
    # one sample per batch has no padding to save; equal lengths have no order to find
    varied = sort_by_length and batch_size > 1 and stop > first and np.ptp(lengths[first:stop]) > 0
    if not varied:
        yield from _in_order(lengths, first, start, stop, batch_size, max_batch_tokens)
        return
    for lo, hi in _window_bounds(first, stop, batch_size, row_bytes):
        if hi <= start:
            continue
        lo = max(lo, start)  # a cursor inside a window (never written by this plan): finish it
        order = lo + np.argsort(-lengths[lo:hi], kind="stable")
        batches = tuple(_cut(order, lengths, batch_size, max_batch_tokens))
        yield Window(lo, hi, batches, False)


def _in_order(lengths, first, start, stop, batch_size, max_batch_tokens):
    """One window per batch of consecutive samples, cut greedily from ``first``."""
    lo = first
    while lo < stop:
        hi, longest = lo, 0
        while hi < stop and hi - lo < batch_size:
            wide = max(longest, int(lengths[hi]))
            if max_batch_tokens is not None and hi > lo and wide * (hi - lo + 1) > max_batch_tokens:
                break
            longest, hi = wide, hi + 1
        if hi > start:
            lo = max(lo, start)
            yield Window(lo, hi, (np.arange(lo, hi, dtype=np.int64),), True)
        lo = hi


def _window_bounds(first, stop, batch_size, row_bytes):
    """Consecutive ``(lo, hi)`` from ``first``: at most ``WINDOW_BATCHES`` batches and at most
    a quarter of the run's samples (whole batches, at least one), so a short run checkpoints
    along the way too; and at most about ``WINDOW_BYTES`` of rows (never under one batch)."""
    quarter = -(-(stop - first) // (4 * batch_size))  # batches in a quarter of the run, rounded up
    cap = max(1, min(WINDOW_BATCHES, quarter)) * batch_size
    lo = first
    while lo < stop:
        hi = min(lo + cap, stop)
        if row_bytes is not None and hi - lo > batch_size:
            used = np.cumsum(row_bytes[lo:hi])
            fit = int(np.searchsorted(used, WINDOW_BYTES, side="right"))
            hi = lo + max(min(fit, hi - lo), min(batch_size, hi - lo))
        yield lo, hi
        lo = hi


def _cut(order, lengths, batch_size, max_batch_tokens):
    """Cut samples sorted longest first into batches: ``batch_size`` samples at most, and
    at most ``max_batch_tokens`` padded tokens (count × the first, longest, sample)."""
    i, n = 0, len(order)
    while i < n:
        size = batch_size
        if max_batch_tokens is not None:
            size = max(1, min(size, max_batch_tokens // int(lengths[order[i]])))
        yield order[i : i + size]
        i += size


class WindowRows:
    """Rows of one sorted window, per layer, gathered back into input order.

    Parameters
    ----------
    window : Window
    counts : dict of str -> ndarray of int, shape (n_samples,)
        Rows each sample gives in each layer (from the layer's row index).
    """

    def __init__(self, window: Window, counts: dict):
        self.window, self.counts = window, counts
        self.blocks = {name: [] for name in counts}
        self.order = np.concatenate(window.batches)  # sample ids in the order they were run

    def add(self, name: str, rows: np.ndarray) -> None:
        """The rows of the next batch for layer ``name`` (its samples in run order)."""
        self.blocks[name].append(rows)

    def in_input_order(self, name: str) -> np.ndarray:
        """All rows of the window for layer ``name``, samples in input order (one copy)."""
        blocks = self.blocks.pop(name)
        rows = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        per = self.counts[name][self.order]  # rows per sample, in run order
        if rows.shape[0] != int(per.sum()):
            raise RuntimeError(f"layer {name}: {rows.shape[0]} rows for samples that hold {int(per.sum())}")
        offset = np.cumsum(per) - per  # where each run-order sample's rows begin
        rank = np.argsort(self.order, kind="stable")  # run position of each sample, input order
        starts, sizes = offset[rank], per[rank]
        gather = np.repeat(starts - (np.cumsum(sizes) - sizes), sizes) + np.arange(int(sizes.sum()))
        return rows[gather]


@dataclass
class Batching:
    """How a run cuts its samples into batches (built once per run, before the store).

    Attributes
    ----------
    lengths : ndarray of int64, shape (n_samples,), or None
        Tokens per sample (text); ``None``: images, run in input order.
    sort_by_length, max_batch_tokens
        The user's options.
    counts : dict of str -> ndarray of int64, shape (n_samples,)
        Rows each sample gives in each layer (from the layers' row indices).
    row_bytes : ndarray of int64, shape (n_samples,), or None
        Bytes of rows each sample gives, all layers together.
    """

    lengths: np.ndarray | None
    sort_by_length: bool = True
    max_batch_tokens: int | None = None
    counts: dict | None = None
    row_bytes: np.ndarray | None = None

    @classmethod
    def for_layers(cls, lengths, specs, n, *, sort_by_length=True, max_batch_tokens=None):
        """From the layer specs (name, features, dtype, index) of the store to be written."""
        if lengths is None:
            return cls(None)
        counts = {s.name: np.bincount(np.asarray(s.index)[:, 0], minlength=n).astype(np.int64) for s in specs}
        row_bytes = sum(counts[s.name] * (s.features * np.dtype(s.dtype).itemsize) for s in specs)
        return cls(np.asarray(lengths, dtype=np.int64), bool(sort_by_length), max_batch_tokens, counts,
                   np.asarray(row_bytes, dtype=np.int64))

    def windows(self, start, stop, *, first, batch_size):
        """:func:`plan_windows` with these options."""
        return plan_windows(self.lengths, start, stop, first=first, batch_size=batch_size,
                            max_batch_tokens=self.max_batch_tokens, sort_by_length=self.sort_by_length,
                            row_bytes=self.row_bytes)

    def sink(self, window: Window):
        """A :class:`WindowRows` for a sorted window, ``None`` for one in input order."""
        return None if window.in_order else WindowRows(window, self.counts)


def take(adapter, inputs, ids):
    """The adapter's batch of samples ``ids`` (consecutive ids: its ``batch(start, stop)``)."""
    lo, hi = int(ids[0]), int(ids[-1]) + 1
    if hi - lo == len(ids) and np.all(np.diff(ids) == 1):
        return adapter.batch(inputs, lo, hi)
    return adapter.batch_of(inputs, ids)
