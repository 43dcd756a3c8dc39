"""Which rows the per-unit scores read, and what each row's token is: the :class:`ScorePlan`.

A unit's ``token_r2`` and ``context_r2`` are held-out R^2 of predicting its activation from the
row's token alone, or from the (previous token, token) pair (docs/definitions.md, section 7).
The plan fixes, before any activation is read:

* each row's **key**: its token id (text; the tokenizer's id at the row's position of its input
  sample) or its patch cell (images: the row's position), -1 for a pooled row; and the previous
  token of the same input sample (-1 at a sample's first token and for images);
* the **split** by whole input samples: of the samples with keyed rows (all, or a seeded choice
  of whole samples up to ``max_rows`` rows), a seeded ``eval_fraction`` is held out
  (:func:`actkit._groups.heldout_samples`, the split compare uses); the rest is the fit split;
* compact **slots**: only the tokens (pairs) seen in both splits get a slot, since a key seen
  only in the fit split predicts nothing held out and a held-out key unseen in the fit split
  backs off (pair -> token -> the fit split's mean). So the per-key sums are bounded by the
  held-out rows, whatever the vocabulary.

Everything here is a function of the store's row index and recorded inputs (no activation):
the same plan serves every basis of a layer (:func:`actkit.compare_bases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from actkit._groups import SampleGroups, heldout_samples
from actkit.errors import InputError

__all__ = ["RowKeys", "ScorePlan", "check_split", "plan_scores", "row_tokens"]

#: roles of a row in the scores: not scored (pooled, or outside ``max_rows``), fit, held out
NONE, FIT, EVAL = 0, 1, 2


def row_tokens(index, inputs):
    """``(token, prev, special)`` per row of a layer: the token id at each row's ``[sample,
    position]`` (images: the position, a patch cell), the previous token of that sample (-1 at
    position 0 and for images), whether the token is special ([CLS], a ViT's prefix token);
    -1 / False for pooled rows (position -1)."""
    index = np.asarray(index, np.int64)
    sample, pos = index[:, 0], index[:, 1]
    n = sample.size
    if inputs.kind == "image":
        token = np.where(pos >= 0, pos, -1)
        special = (pos >= 0) & (pos < int(getattr(inputs, "prefix_tokens", 0) or 0))
        return token, np.full(n, -1, np.int64), special
    if hasattr(inputs, "token_at"):                       # recorded inputs: one vectorised look-up
        token = inputs.token_at(sample, pos)
        prev = np.where(pos >= 1, inputs.token_at(sample, np.maximum(pos - 1, 0)), -1)
        return token, np.where(token >= 0, prev, -1), inputs.is_special(sample, pos) & (token >= 0)
    used = np.unique(sample[pos >= 0])
    none = np.full(n, -1, np.int64)
    if used.size == 0:
        return none, none.copy(), np.zeros(n, bool)
    ids = [np.asarray(inputs.token_ids(int(s)), np.int64) for s in used]
    lengths = np.array([t.size for t in ids], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    flat = np.concatenate(ids + [np.zeros(1, np.int64)])   # one spare entry: every index below is valid
    u = np.minimum(np.searchsorted(used, sample), used.size - 1)
    ok = (pos >= 0) & (used[u] == sample)
    ok &= pos < np.where(ok, lengths[u], 0)
    at = np.where(ok, starts[u] + pos, 0)
    token = np.where(ok, flat[at], -1)
    before = ok & (pos >= 1)
    prev = np.where(before, flat[np.where(before, at - 1, 0)], -1)
    table = getattr(inputs, "special", None)
    special = np.zeros(n, bool)
    if table is not None and len(table):
        table = np.asarray(table, bool)
        special[ok] = table[np.clip(token[ok], 0, table.size - 1)] & (token[ok] < table.size)
    return token, prev, special


class RowKeys(NamedTuple):
    """What the scores' passes read of a :class:`ScorePlan` (compact: it travels to Dask's
    workers with every task): per row its role (int8) and its token, pair, held-out sample and
    pooled-sample slots (int32, -1 none); the slot counts."""

    role: np.ndarray
    tslot: np.ndarray
    pslot: np.ndarray
    eslot: np.ndarray
    pool_slot: np.ndarray | None
    n_tok: int
    n_pair: int
    n_fit: int
    fit_count: np.ndarray
    n_heldout: int
    n_pooled: int
    has_context: bool


@dataclass(frozen=True)
class ScorePlan:
    """The rows, keys and split of the per-unit scores of one layer (see the module docstring).

    Attributes
    ----------
    kind : {"text", "image"}
    token, prev : ndarray of shape (n_rows,), int64
        Each row's key and previous token (-1: none).
    special : ndarray of shape (n_rows,), bool
        Special tokens (left out of the mean-pooled rows of k-sparse probing).
    sample : ndarray of shape (n_rows,), int64
        Each row's input sample.
    role : ndarray of shape (n_rows,), int8
        0 not scored, 1 fit split, 2 held out.
    heldout : ndarray, int64
        The held-out input samples, increasing (recorded in ``to_dict()``).
    scored : ndarray, int64
        The input samples the scores read (fit and held out), increasing.
    tslot, pslot : ndarray of shape (n_rows,), int64
        Compact slot of the row's token (pair) among those seen in both splits, -1 otherwise.
    n_tok, n_pair : int
        Slots of tokens and of pairs.
    fit_count : ndarray of shape (n_tok + n_pair,), float64
        Fit rows per slot; ``n_fit``: fit rows.
    eslot : ndarray of shape (n_rows,), int64
        Index of a held-out row's sample in ``heldout``, -1 otherwise.
    eval_count : ndarray of shape (len(heldout),), float64
        Held-out rows per held-out sample.
    top : int
        Top rows per unit the pass keeps (more than the report's ``k`` where the token purity is
        resampled).
    layout : tuple
        ``(positions, layer attributes)``: what a :class:`~actkit._units._examples.Renderer`
        needs to name a key (an image's patch grid).
    pool : bool
        Also the mean-pooled rows of every scored sample (k-sparse probing).
    """

    kind: str
    token: np.ndarray
    prev: np.ndarray
    special: np.ndarray
    sample: np.ndarray
    role: np.ndarray
    heldout: np.ndarray
    scored: np.ndarray
    tslot: np.ndarray
    pslot: np.ndarray
    n_tok: int
    n_pair: int
    fit_count: np.ndarray
    n_fit: int
    eslot: np.ndarray
    eval_count: np.ndarray
    eval_fraction: float
    max_rows: int | None
    random_state: int
    top: int = 0
    pool: bool = False
    pool_slot: np.ndarray = field(default=None, repr=False)
    layout: tuple = (0, None)

    @property
    def has_context(self) -> bool:
        """Whether rows have a previous token (text): ``context_r2`` is defined."""
        return self.kind == "text"

    @property
    def keys(self) -> RowKeys:
        """The compact :class:`RowKeys` the passes read."""
        small = (lambda a: None if a is None else a.astype(np.int32))
        return RowKeys(self.role, small(self.tslot), small(self.pslot), small(self.eslot), small(self.pool_slot),
                       self.n_tok, self.n_pair, self.n_fit, self.fit_count, int(self.heldout.size),
                       int(self.scored.size) if self.pool else 0, self.has_context)

    def info(self) -> dict:
        """What ``to_dict()`` records of the split: anyone can recompute a score from it."""
        n_eval = int(np.count_nonzero(self.role == EVAL))
        return {"eval_fraction": self.eval_fraction, "max_rows": self.max_rows, "random_state": self.random_state,
                "key": "token" if self.kind == "text" else "patch cell", "fit_rows": self.n_fit,
                "heldout_rows": n_eval, "scored_samples": int(self.scored.size),
                "heldout_samples": [int(s) for s in self.heldout]}


def check_split(eval_fraction, max_rows):
    """One-line :class:`~actkit.errors.InputError` unless ``eval_fraction`` is in (0, 1) and
    ``max_rows`` is None or a positive integer (before any work)."""
    if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float, np.floating)) \
            or not 0 < float(eval_fraction) < 1:
        raise InputError(f"eval_fraction must be in (0, 1), got {eval_fraction!r}")
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, (int, np.integer))
                                 or max_rows < 2):
        raise InputError(f"max_rows must be an integer >= 2, got {max_rows!r}")


def _scored_samples(sample, keyed, max_rows, random_state):
    """The input samples the scores read: every sample with a keyed row, or a seeded choice of
    whole samples (in a seeded order, while their rows fit ``max_rows``)."""
    samples, counts = np.unique(sample[keyed], return_counts=True)
    if max_rows is None or counts.sum() <= max_rows:
        return samples
    order = np.random.default_rng([int(random_state), 4]).permutation(samples.size)
    take = order[np.cumsum(counts[order]) <= max_rows]
    return np.sort(samples[take])


def _slots(keys, fit, ev):
    """Compact slot of each scored row's key among the keys seen in both splits (-1 otherwise)."""
    common = np.intersect1d(np.unique(keys[fit]), np.unique(keys[ev]))
    common = common[common >= 0]
    out = np.full(keys.size, -1, np.int64)
    if common.size:
        at = np.minimum(np.searchsorted(common, keys), common.size - 1)
        hit = (common[at] == keys) & (fit | ev)
        out[hit] = at[hit]
    return out, int(common.size)


def plan_scores(layer, inputs, *, eval_fraction=0.2, max_rows=None, random_state=0, top=0, pool=False):
    """The :class:`ScorePlan` of a store layer with recorded ``inputs``; None (no token scores)
    without inputs, where no row has a token (pooled rows) or where too few input samples have
    token rows to hold out ``eval_fraction`` of them and keep one to fit on."""
    if inputs is None or getattr(inputs, "kind", None) not in ("text", "image"):
        return None
    token, prev, special = row_tokens(layer.index, inputs)
    sample = np.asarray(layer.groups, np.int64)
    keyed = token >= 0
    scored = _scored_samples(sample, keyed, max_rows, random_state)
    in_scope = keyed & np.isin(sample, scored)
    n_eval = int(round(float(eval_fraction) * scored.size))
    if scored.size < 2 or not 1 <= n_eval <= scored.size - 1:   # pooled rows, or too few samples to split
        return None
    groups = SampleGroups(sample[in_scope], int(in_scope.sum()))
    is_eval = heldout_samples(groups.G, eval_fraction, int(random_state))[groups.inverse]
    role = np.zeros(token.size, np.int8)
    role[np.flatnonzero(in_scope)] = np.where(is_eval, EVAL, FIT)
    fit, ev = role == FIT, role == EVAL
    tslot, n_tok = _slots(token, fit, ev)
    width = int(token.max()) + 2 if token.size else 1
    pair = np.where(prev >= 0, prev * width + token, -1)
    pslot, n_pair = _slots(pair, fit, ev)
    slot = np.concatenate([tslot[fit & (tslot >= 0)], n_tok + pslot[fit & (pslot >= 0)]])
    heldout = np.unique(sample[ev])
    eslot = np.where(ev, np.searchsorted(heldout, sample), -1)
    pool_slot = np.where(in_scope & ~special, np.searchsorted(scored, sample), -1) if pool else None
    layout = (int(np.asarray(layer.index)[:, 1].max()) + 1, dict(getattr(layer, "attrs", {}) or {}))
    return ScorePlan(kind=str(inputs.kind), token=token, prev=prev, special=special, sample=sample, role=role,
                     heldout=heldout, scored=scored, tslot=tslot, pslot=pslot, n_tok=n_tok, n_pair=n_pair,
                     fit_count=np.bincount(slot, minlength=n_tok + n_pair).astype(np.float64),
                     n_fit=int(fit.sum()), eslot=eslot,
                     eval_count=np.bincount(eslot[ev], minlength=heldout.size).astype(np.float64),
                     eval_fraction=float(eval_fraction), max_rows=None if max_rows is None else int(max_rows),
                     random_state=int(random_state), top=int(top), pool=bool(pool), pool_slot=pool_slot, layout=layout)
