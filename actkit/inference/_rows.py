"""Permutations and bootstrap of the row-based measures, on their row sample.

A row-based measure (``rsa``, ``mutual_knn``, ``dcor``, ...) is computed from a seeded
sample of input samples (:func:`actkit.measures.rows_of`); its inference uses the same rows:
a permutation re-pairs the sampled input samples of B with those of A (equal lengths, as for
the moments), a bootstrap resample takes the sampled input samples with replacement. Both
re-index the measure's pairwise structure, computed once (:mod:`actkit.measures._structures`:
RDMs, neighbour lists, distance and kernel matrices), rather than recomputing the measure
from the resampled rows; a measure without one, or whose structure would not fit
:data:`actkit.measures._structures.STRUCTURE_BYTES`, recomputes. Before the resamples, one timed evaluation of each gives an estimate of the time, printed on stderr
with the ``max_rows`` that would fit in about :data:`TARGET_SECONDS`.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from actkit._progress import heartbeat, progress_bar
from actkit._threads import current_threads, map_ordered, small_linalg
from actkit._groups import SampleGroups
from actkit.measures import get_measure, structure_for
from actkit.inference._resample import measure_records

#: the ``max_rows`` the estimate suggests would take about this long (seconds)
TARGET_SECONDS = 180.0

#: resamples per task (a constant, never the thread count: the same digits)
ROW_BATCH = 8


def row_measure(name, params=None):
    """``compute(a, b) -> float``: the registry's row-based measure ``name`` bound to ``params``,
    carrying ``.measure`` and ``.params`` so :func:`infer_rows` resamples it from its pairwise
    structure (an entry of ``infer_rows``'s ``measures``: ``{name: (row_measure(name), kind)}``)."""
    m = get_measure(name)
    params = dict(params or {})

    def compute(a, b):
        return float(m.compute(a, b, **params))
    compute.measure, compute.params = m.name, params     # its pairwise structure's key
    return compute


def infer_rows(a, b, sample_ids, measures, *, permutations=0, bootstrap=0, confidence=0.95,
               random_state=0, interval="basic", progress=None, structures=True):
    """Records of row-based measures on their row sample.

    Parameters
    ----------
    a, b : torch.Tensor of shape (n, p), (n, q)
        The sampled rows (float64, on the measures' device).
    sample_ids : ndarray of shape (n,)
        Input sample of each row.
    measures : dict of name -> (compute(a, b), kind)
        ``compute`` may carry ``.measure`` (the registry's name) and ``.params``: then its
        structure (:func:`~actkit.measures._structures.structure_for`) is used.
    progress : bool, optional
        None: the estimate and a bar on a terminal, else log lines; False: neither.
    structures : bool, default=True
        False: every resample recomputes the measure from the resampled rows (the reference
        the structures are tested against).

    Returns
    -------
    dict of name -> MeasureRecord
        Each with ``exchangeable``: the share of the sampled rows whose input sample the
        permutations can move (None without permutations).
    """
    import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

    before = torch.get_num_threads()
    torch.set_num_threads(1)     # a torch reduction's digits depend on its threads: one, and
    try:                         # the resamples on the budget's workers
        return _infer_rows(a, b, sample_ids, measures, permutations, bootstrap, confidence, random_state,
                           interval, progress, structures)
    finally:
        torch.set_num_threads(before)


def _infer_rows(a, b, sample_ids, measures, permutations, bootstrap, confidence, random_state, interval,
                progress, structures):
    import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

    layout = SampleGroups(sample_ids)          # the rows in sample order, as the structures take them
    idx = torch.as_tensor(layout.order, device=a.device)
    a, b = a[idx], b[idx]
    names = list(measures)
    observed = {k: float(measures[k][0](a, b)) for k in names}
    perms, _ = layout.permutation_draws(permutations, random_state)
    R = layout.row_order(perms) if permutations else np.zeros((0, layout.n), int)
    W = layout.bootstrap_draws(bootstrap, random_state) if bootstrap else np.zeros((0, layout.G))
    null = np.full((permutations, len(names)), np.nan)
    boot = np.full((bootstrap, len(names)), np.nan)
    evals = {}
    if permutations or bootstrap:
        for k in names:      # a log line a minute while a structure is built (on a terminal: none)
            with heartbeat(f"compare: {k}: pairwise structure of {layout.n:,} rows", progress):
                evals[k] = _evaluators(k, measures[k][0], a, b, layout, permutations, bootstrap, structures)
    _estimate(names, evals, R, W, layout.n, progress)
    bar = progress_bar(permutations + bootstrap, f"compare: resampling {', '.join(names)}", progress,
                       unit="resample")
    workers = current_threads()
    for out, draws, which in ((null, R, 0), (boot, W, 1)):
        spans = [(s, min(len(draws), s + ROW_BATCH)) for s in range(0, len(draws), ROW_BATCH)]

        def task(span, draws=draws, which=which):
            return [[evals[k][which](draws[j]) for k in names] for j in range(*span)]

        with small_linalg():      # one BLAS thread for every task (a dot's digits)
            for (s0, s1), vals in zip(spans, map_ordered(task, spans, workers)):
                out[s0:s1] = vals
                bar.update(s1 - s0)
    bar.close()
    records = measure_records(names, measures, observed, null, boot, permutations, bootstrap, confidence,
                              interval)
    for rec in records.values():
        rec.exchangeable = layout.movable_row_share() if permutations else None
    return records


def _evaluators(name, compute, a, b, layout, permutations, bootstrap, structures):
    """``(permuted(r), resampled(m))`` of one measure: by its structure, or recomputed."""
    import torch  # torch: ~1.2 s at import (measured); only with a row-based measure

    st = None
    if structures and hasattr(compute, "measure"):
        with small_linalg():
            st = structure_for(compute.measure, compute.params, a, b, layout,
                               permutations=permutations, bootstrap=bootstrap)
    dev = a.device

    def recompute_perm(r):
        return compute(a, b[torch.as_tensor(r, device=dev)])

    def recompute_boot(m):
        picks = np.repeat(np.arange(layout.G), np.asarray(m).astype(int))
        rows = np.concatenate([np.arange(layout.offsets[s], layout.offsets[s + 1]) for s in picks])
        r = torch.as_tensor(rows, device=dev)
        return compute(a[r], b[r])

    if st is None:
        return recompute_perm, recompute_boot
    boot = st.resampled if hasattr(st, "resampled") else recompute_boot
    return st.permuted, boot


def _estimate(names, evals, R, W, n, progress):
    """Time one permutation and one bootstrap resample of every measure; print the estimate
    of the whole and the ``max_rows`` that would take about :data:`TARGET_SECONDS`."""
    if progress is False or not (len(R) or len(W)):
        return None
    t = 0.0
    for draws, which in ((R, 0), (W, 1)):
        if len(draws):
            t0 = time.perf_counter()
            with small_linalg():
                for k in names:
                    evals[k][which](draws[0])
            t += (time.perf_counter() - t0) * len(draws)
    t /= max(1, current_threads())
    line = (f"actkit: compare: resampling {', '.join(names)} on {n:,} rows ({len(R)} permutations + "
            f"{len(W)} bootstrap resamples): about {_clock(t)}")
    if t > TARGET_SECONDS:      # the cost grows with the square of the rows
        fit = max(100, int(n * np.sqrt(TARGET_SECONDS / t)) // 100 * 100)
        line += f"; --max-rows {fit:,} would take about {_clock(t * (fit / n) ** 2)}"
    print(line, file=sys.stderr, flush=True)
    return t


def _clock(seconds):
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
