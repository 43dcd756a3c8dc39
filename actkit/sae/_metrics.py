"""``sae_metrics``: the standard SAE metrics over every row of a store, in one streaming pass.

With ``x`` a row, ``x_hat`` its reconstruction, ``n`` rows and ``x_bar`` the mean row:

* ``l0``: mean number of non-zero codes per row;
* ``fvu``: ``sum |x - x_hat|^2 / sum |x - x_bar|^2`` (fraction of variance unexplained);
* ``mse``: ``sum |x - x_hat|^2 / n`` (SAELens's training MSE: summed over features,
  averaged over rows);
* ``mean_cosine``: the mean over rows of ``cos(x, x_hat)`` (torch's ``cosine_similarity``,
  eps 1e-8);
* ``dead_latents``: latents never non-zero on any row; ``dense_latents``: non-zero on more
  than 10% of the rows.

The pass is one :class:`~actkit.runners.RowPass` (``add`` folds a block, ``merge`` adds two
partial sums), so it runs where the runners run it. Sums are float64; the variance is taken
about a fixed shift (the mean of the first rows) so it does not cancel.
"""

from __future__ import annotations

import numpy as np

from actkit._data import as_input
from actkit.errors import ValidationError
from actkit.runners import RowPass, runner_for
from actkit.sae._model import SparseAutoencoder, load_sae

__all__ = ["sae_metrics", "DENSE_FRACTION"]

DENSE_FRACTION = 0.1


def _new(sae, shift):
    return {"n": 0, "nnz": 0, "sq_err": 0.0, "sq_dev": 0.0, "cos": 0.0,
            "sum_dev": np.zeros(sae.n_features_in_), "active": np.zeros(sae.n_components_, dtype=np.int64)}


def _add(acc, block, start, sae, shift):
    import torch  # torch: ~1.2 s at import (measured); import actkit.sae stays torch-free

    codes, x_hat, x = sae.forward_block(np.asarray(block))
    with torch.no_grad():
        live = codes[1] != 0
        if codes[0] == "topk":
            acc["active"] += torch.bincount(codes[2][live], minlength=sae.n_components_).cpu().numpy()
            acc["nnz"] += int(live.sum())
        else:
            counts = live.sum(dim=0).cpu().numpy().astype(np.int64)
            acc["active"] += counts
            acc["nnz"] += int(counts.sum())
    # row sums in numpy (float32 per row, float64 across rows)
    err = x - x_hat
    acc["sq_err"] += float(np.einsum("ij,ij->i", err, err).sum(dtype=np.float64))
    dev = x.astype(np.float64) - shift
    acc["sq_dev"] += float(np.einsum("ij,ij->", dev, dev))
    acc["sum_dev"] += dev.sum(axis=0)
    dot = np.einsum("ij,ij->i", x, x_hat)
    # torch's cosine_similarity: x.y / max(|x| |y|, eps), eps = 1e-8
    norms = np.sqrt(np.einsum("ij,ij->i", x, x).astype(np.float64) * np.einsum("ij,ij->i", x_hat, x_hat))
    acc["cos"] += float((dot / np.maximum(norms, 1e-8)).sum(dtype=np.float64))
    acc["n"] += len(block)
    return acc


def _merge(a, b):
    return {k: a[k] + b[k] for k in a}


def sae_pass(sae, shift, rows) -> RowPass:
    """The metrics pass of ``sae`` over rows (``shift``: a fixed row the variance is taken about)."""
    return RowPass(_new, _add, _merge, (sae, np.asarray(shift, dtype=np.float64)), rows, threads=False,
                   name="sae-eval")


def finish(acc, n_components) -> dict:
    """The metrics from the pass's sums."""
    n = acc["n"]
    if n == 0:
        raise ValidationError("sae_metrics needs at least one row")
    mean_dev = acc["sum_dev"] / n
    total = acc["sq_dev"] - n * float(mean_dev @ mean_dev)
    active = acc["active"]
    return {"n_rows": int(n), "n_latents": int(n_components), "l0": acc["nnz"] / n,
            "fvu": acc["sq_err"] / total if total > 0 else float("nan"), "mse": acc["sq_err"] / n,
            "mean_cosine": acc["cos"] / n, "dead_latents": int((active == 0).sum()),
            "dense_latents": int((active > DENSE_FRACTION * n).sum())}


def sae_metrics(sae, layer, *, block_rows=None, progress=None) -> dict:
    """L0, FVU, MSE, mean cosine, dead and dense latents of an SAE over every row of a layer.

    Parameters
    ----------
    sae : SparseAutoencoder or path
        A loaded SAE (:func:`actkit.load_sae`) or its folder.
    layer : store layer, h5py dataset or array of shape (n_rows, d_in)
        Read in blocks, once.
    block_rows : int, optional
        Rows per block (default: about 64 MiB of codes).
    progress : bool, optional
        Progress bar (default: only on a terminal).

    Returns
    -------
    dict
        ``n_rows``, ``n_latents``, ``l0`` (mean active latents per row), ``fvu``
        (``sum |x - x_hat|^2 / sum |x - x_bar|^2``), ``mse`` (``sum |x - x_hat|^2 / n_rows``),
        ``mean_cosine``, ``dead_latents`` (never active), ``dense_latents`` (active on more
        than 10% of the rows).
    """
    if not isinstance(sae, SparseAutoencoder):
        sae = load_sae(sae)
    X = as_input(layer)
    if len(getattr(X, "shape", ())) != 2:
        raise ValidationError("sae_metrics needs rows of shape (n_rows, d_in)")
    n, d = int(X.shape[0]), int(X.shape[1])
    if d != sae.n_features_in_:
        raise ValidationError(f"the layer has {d} features, but the SAE reads {sae.n_features_in_}")
    if n == 0:
        raise ValidationError("sae_metrics needs at least one row")
    rows = int(block_rows or max(64, min(8192, (64 << 20) // (4 * max(sae.n_components_, d)))))
    shift = np.asarray(X[: min(n, 256)], dtype=np.float64).mean(axis=0)
    with runner_for(X, None, block_rows=rows) as (src, runner):
        acc = runner.run(src, sae_pass(sae, shift, rows), progress=progress, desc="sae-eval")
    return finish(acc, sae.n_components_)
