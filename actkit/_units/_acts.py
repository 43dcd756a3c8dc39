"""Every token of a text example's window with the unit's activation there (``"acts"``), as the
SAE dashboards shade a context: the rows of the shown windows only are read again from the
store (grouped by sample, in runs of nearby rows), their unit activations computed by the
report's basis and oriented as the report is. Never a second pass over the layer: the rows
read are at most the shown examples times ``2 * context + 1``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RowLookup", "add_window_acts", "unit_values"]

#: unit activations held at once while the window rows are read (values)
VALUES_AT_ONCE = 1 << 22


class RowLookup:
    """The row of each ``[sample, position]`` of a layer's row index (-1 where none: a pooled
    layer, a special token left out by ``--skip-special-tokens``)."""

    def __init__(self, index):
        index = np.asarray(index, np.int64)
        self._width = int(index[:, 1].max()) + 2 if index.size else 1
        keys = index[:, 0] * self._width + index[:, 1] + 1
        self._order = None if np.all(keys[1:] > keys[:-1]) else np.argsort(keys, kind="stable")
        self._keys = keys if self._order is None else keys[self._order]

    def rows(self, samples, positions) -> np.ndarray:
        """(m,) int64 rows of ``samples``, ``positions`` (each (m,)), -1 where none."""
        samples, positions = np.asarray(samples, np.int64), np.asarray(positions, np.int64)
        keys = samples * self._width + positions + 1
        at = np.minimum(np.searchsorted(self._keys, keys), max(self._keys.size - 1, 0))
        found = (self._keys.size > 0) & (positions < self._width - 1) & (positions >= 0)
        found &= self._keys[at] == keys if self._keys.size else False
        rows = at if self._order is None else self._order[at]
        return np.where(found, rows, -1)


def _read(source, idx):
    """Rows ``idx`` (increasing) of a row source: a store layer reads them in runs
    (:meth:`actkit.store.Layer.__getitem__`); a stream of slices (codes) run by run."""
    if not getattr(source, "actkit_streaming", False):
        return np.asarray(source[idx])
    cuts = np.flatnonzero(np.diff(idx) > 1) + 1
    return np.concatenate([np.asarray(source[int(r[0]):int(r[-1]) + 1]) for r in np.split(idx, cuts)])


def unit_values(basis, rows, units) -> np.ndarray:
    """(m,) float64: the activation of ``units[i]`` at ``rows[i]`` (each (m,) int64, rows >= 0),
    computed by ``basis`` from the rows as stored, a bounded chunk of rows at a time."""
    rows, units = np.asarray(rows, np.int64), np.asarray(units, np.int64)
    # distinct rows to read (row numbers, not input samples: those are actkit._groups')
    uniq, inverse = np.unique(rows, return_inverse=True)
    out = np.empty(rows.size, np.float64)
    step = max(1, VALUES_AT_ONCE // max(1, basis.n_units))
    for s in range(0, uniq.size, step):
        chunk = uniq[s:s + step]
        A = np.asarray(basis.activations(_read(basis.rows, chunk), int(chunk[0])))
        mine = (inverse >= s) & (inverse < s + chunk.size)
        out[mine] = A[inverse[mine] - s, units[mine]]
    return out


def _text_examples(unit_dicts):
    for u in unit_dicts:
        for ex in [*u["top"], *u["bottom"], *(e for b in u["bands"] for e in b["examples"])]:
            if ex.get("text") is not None and ex["position"] >= 0:
                yield u["unit"], ex


def add_window_acts(unit_dicts, basis, flip, lookup) -> int:
    """Give every text example of ``unit_dicts`` its ``text["acts"]``: the unit's activation at
    each token of its window (None where the token has no row), oriented as the report
    (``flip``: (n_units,) bool). Returns the number of distinct rows read."""
    found = list(_text_examples(unit_dicts))
    if not found:
        return 0
    lengths = np.array([len(ex["text"]["tokens"]) for _, ex in found], np.int64)
    starts = np.repeat(np.array([ex["text"]["start"] for _, ex in found], np.int64), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    samples = np.repeat(np.array([ex["sample"] for _, ex in found], np.int64), lengths)
    units = np.repeat(np.array([j for j, _ in found], np.int64), lengths)
    rows = lookup.rows(samples, starts + offsets)
    values = np.full(rows.size, np.nan)
    have = rows >= 0
    values[have] = unit_values(basis, rows[have], units[have])
    values = np.where(np.asarray(flip, bool)[units], -values, values)
    values = np.where(np.isfinite(values), values, np.nan).tolist()
    at = 0
    for (_, ex), n in zip(found, lengths.tolist()):
        ex["text"]["acts"] = [None if v != v else v for v in values[at:at + n]]  # NaN: no row
        at += n
    return int(np.unique(rows[have]).size)
