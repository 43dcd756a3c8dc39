"""Permutations and bootstrap of the row-based measures, on their row sample.

A row-based measure (``rsa``, ``mutual_knn``, ``dcor``, ...) is computed from a seeded
sample of whole input samples (:func:`actkit.measures.rows_of`); its inference uses the
same rows: a permutation re-pairs the sampled input samples of B with those of A (equal
lengths, as for the moments), a bootstrap resample takes the sampled input samples with
replacement and recomputes the measure from the resampled rows (a resampled sample's rows
appear as often as it was drawn: for the nearest-neighbour measures the copies are each
other's nearest neighbours, which biases their bootstrap upward; their p-value is not
affected). Each resample costs one evaluation of the measure, on its device.
"""

from __future__ import annotations

import numpy as np
from tqdm.auto import tqdm

from actkit.inference._resample import bootstrap_draws, measure_records, permutation_draws


def infer_rows(a, b, sample_ids, measures, *, permutations=0, bootstrap=0, confidence=0.95,
               random_state=0, interval="basic"):
    """Records of row-based measures on their row sample.

    Parameters
    ----------
    a, b : torch.Tensor of shape (n, p), (n, q)
        The sampled rows (float64, on the measures' device).
    sample_ids : ndarray of shape (n,)
        Input sample of each row.
    measures : dict of name -> (compute(a, b), kind)

    Returns
    -------
    dict of name -> MeasureRecord
    """
    import torch  # torch: ~1.2 s at import (measured); import actkit.alignment stays torch-free

    inv = np.unique(sample_ids, return_inverse=True)[1].ravel()
    order = np.argsort(inv, kind="stable")
    sid = inv[order]
    n_s = np.bincount(sid)
    offsets = np.concatenate([[0], np.cumsum(n_s)])
    position = np.arange(sid.size) - offsets[sid]
    dev = a.device
    idx = torch.as_tensor(order, device=dev)
    a, b = a[idx], b[idx]
    names = list(measures)
    observed = {k: float(measures[k][0](a, b)) for k in names}
    perms, _ = permutation_draws(n_s, permutations, random_state)
    null = np.full((permutations, len(names)), np.nan)
    # each resample is one evaluation of every measure on the whole row sample (seconds for
    # rsa or the k-NN measures at 10,000 rows): the bar says how far it is
    bar = tqdm(total=permutations + bootstrap, desc=f"compare: resampling {', '.join(names)}",
               unit="resample", leave=False, disable=None)
    for j, perm in enumerate(perms):
        r = torch.as_tensor(offsets[perm][sid] + position, device=dev)
        bp = b[r]
        null[j] = [measures[k][0](a, bp) for k in names]
        bar.update(1)
    W = bootstrap_draws(n_s.size, bootstrap, random_state) if bootstrap else np.zeros((0, n_s.size))
    boot = np.full((bootstrap, len(names)), np.nan)
    for j, w in enumerate(W):
        picks = np.repeat(np.arange(n_s.size), w.astype(int))
        rows = np.concatenate([np.arange(offsets[s], offsets[s + 1]) for s in picks])
        r = torch.as_tensor(rows, device=dev)
        boot[j] = [measures[k][0](a[r], b[r]) for k in names]
        bar.update(1)
    bar.close()
    return measure_records(names, measures, observed, null, boot, permutations, bootstrap, confidence, interval)
