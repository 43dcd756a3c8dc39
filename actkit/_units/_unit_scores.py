"""The token scores of one unit report: :class:`Scoring` runs the units pass with the scores
folded in, then the held-out pass (:mod:`actkit._units._scores`), and adds to every shown unit
``token_purity``, ``token_r2``, ``context_r2`` and ``description`` (docs/definitions.md,
section 7), and to the report the split they were computed on (``scores``).

For :func:`actkit.compare_bases` it also keeps what the bootstrap by input sample needs, one
chunk of units at a time: the resampled held-out R^2 of every unit (``draws``: resampled
multiplicities of the input samples), the pass's result with each unit's ``top`` highest rows
(more than ``k``: the top-``k`` rows of a resample are among them) and, for k-sparse probing,
the candidate units of every label (:mod:`actkit._units._probe`).
"""

from __future__ import annotations

import numpy as np

from actkit._units._examples import Renderer
from actkit._units._pass import finish, oriented, setup, unit_pass
from actkit._units._purity import key_namer, unit_tokens
from actkit._units._score_plan import plan_scores
from actkit._units._scores import (Computed, fit_pass, fused_pass, heldout_pass, predictions, r2,
                                  unit_chunks)

__all__ = ["Scoring"]


class Scoring:
    """The scores of one report (see the module docstring).

    Parameters
    ----------
    plan : ScorePlan
    draws : ndarray of shape (B, n_sample_ids), optional
        Bootstrap multiplicities of every input sample id: the held-out R^2 resampled.
    probes : Probes, optional
        The k-sparse probing tasks (:class:`actkit._units._probe.Probes`).
    budget : int, optional
        Bytes of sums held at once (:data:`actkit._units._scores.SCORE_BYTES`).
    """

    def __init__(self, plan, *, draws=None, probes=None, budget=None):
        self.plan, self.draws, self.probes, self.budget = plan, draws, probes, budget
        self.token_r2 = self.context_r2 = self.token_purity = self.description = None
        self.boot_token_r2 = self.boot_context_r2 = None
        self.stats = None
        self.flipped, self.shown = [], ([], [])
        self.label_auroc = self.labels = None
        self.chunks = []

    @classmethod
    def for_inputs(cls, layer, inputs, *, eval_fraction=0.2, max_rows=None, random_state=0):
        """The :class:`Scoring` of a unit report of ``layer`` with recorded ``inputs`` (None
        without inputs)."""
        plan = plan_scores(layer, inputs, eval_fraction=eval_fraction, max_rows=max_rows, random_state=random_state)
        return None if plan is None else cls(plan)

    def run(self, basis, k, rows, codes, classes, random_state, threads, scheduler, progress):
        """The units pass of ``basis`` (as :func:`actkit._units._api._run_pass` runs it, its
        ``k`` highest rows per unit) with the per-key sums folded in, then the held-out pass,
        chunk by chunk; the pass's :class:`~actkit._units._pass.UnitStats`."""
        from actkit.runners import runner_for  # the runner decides where the passes run

        keys = self.plan.keys
        st = setup(basis, max(int(k), self.plan.top), labels=codes, classes=classes, random_state=random_state,
                   flippable=basis.kind == "ica")
        up = unit_pass(st._replace(basis=Computed(basis)), rows, threads=threads)  # fed the activations once
        n_units = basis.n_units
        self.token_r2 = np.full(n_units, np.nan)
        self.context_r2 = np.full(n_units, np.nan) if keys.has_context else None
        if self.draws is not None:
            self.boot_token_r2 = np.full((self.draws.shape[0], n_units), np.nan)
            self.boot_context_r2 = np.full_like(self.boot_token_r2, np.nan) if keys.has_context else None
        self.chunks = unit_chunks(n_units, keys, self.budget)
        with runner_for(basis.rows, scheduler, block_rows=rows) as (X, runner):
            for i, (lo, hi) in enumerate(self.chunks):
                if i == 0:
                    out = runner.run(X, fused_pass(up, basis, keys, lo, hi), desc="units", progress=progress)
                    stats, fit = finish(out["units"], st), out["fit"]
                else:
                    fit = runner.run(X, fit_pass(basis, keys, lo, hi, rows, threads), desc="scores", progress=progress)
                held = runner.run(X, heldout_pass(basis, keys, predictions(fit, keys), lo, hi, rows, threads),
                                  desc="held-out rows", progress=progress)
                self._chunk(lo, hi, held.reshape(keys.n_heldout, -1, hi - lo), fit)
        self.stats = stats
        return stats

    def _chunk(self, lo, hi, held, fit):
        """Units ``lo:hi``: their held-out R^2 (and resampled), and their probing candidates."""
        n = self.plan.eval_count[:, None]
        self.token_r2[lo:hi] = r2(held[:, 2].sum(0), held[:, 0].sum(0), held[:, 1].sum(0), n.sum())
        if self.context_r2 is not None:
            self.context_r2[lo:hi] = r2(held[:, 3].sum(0), held[:, 0].sum(0), held[:, 1].sum(0), n.sum())
        if self.draws is not None:
            W = self.draws[:, self.plan.heldout]
            d1, d2, wn = W @ held[:, 0], W @ held[:, 1], W @ n
            self.boot_token_r2[:, lo:hi] = r2(W @ held[:, 2], d1, d2, wn)
            if self.context_r2 is not None:
                self.boot_context_r2[:, lo:hi] = r2(W @ held[:, 3], d1, d2, wn)
        if self.probes is not None:
            self.probes.add_units(lo, fit["pool"])

    def oriented_top(self):
        """``(values, rows)``, each (K, units): every unit's top rows as the report orients it
        (a flipped ICA source's are its lowest, its values those of the negated source); row -1
        for an empty slot or a sparse unit's inactive row."""
        flip = np.zeros(self.stats.n_units, bool)
        flip[np.asarray(self.flipped, np.int64)] = True
        values, rows = oriented(self.stats, flip).top
        return values, (np.where(values > 0, rows, -1) if self.stats.bottom is None else rows)

    def best_and_worst(self, n):
        """``(best, worst)``: the ``n`` units of the highest ``token_r2`` (highest first) and the
        ``n`` others of the lowest (lowest first), among the units that have one (ties by
        unit): the units a comparison shows."""
        ok = np.flatnonzero(np.isfinite(self.token_r2))
        order = ok[np.lexsort((ok, -self.token_r2[ok]))].tolist()
        best = order[:n]
        return best, [j for j in order[::-1][:n] if j not in best]

    def attach(self, report, inputs):
        """``report`` with every shown unit's ``token_purity``, ``token_r2``, ``context_r2``
        and ``description`` (computed for every unit of the basis, from the top rows of the pass
        as the report orients them), and the split in ``report.to_dict()["scores"]``."""
        data = report._data
        plan, k = self.plan, int(data["k"])
        self.flipped = list(data.get("flipped") or [])
        values, rows = self.oriented_top()
        keys = np.where(rows >= 0, plan.token[np.maximum(rows, 0)], -2)
        name = key_namer(Renderer(inputs, 0, *plan.layout))
        self.token_purity, self.description = unit_tokens(keys, values, k, name)
        for u in data["units"]:
            j = int(u["unit"])
            u["token_purity"] = float(self.token_purity[j])
            u["token_r2"] = float(self.token_r2[j])
            u["context_r2"] = None if self.context_r2 is None else float(self.context_r2[j])
            u["description"] = self.description[j]
        data["scores"] = dict(plan.info(), k=k)
        return report
