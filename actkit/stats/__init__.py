"""Streaming moments: mean and covariance in float64, resumable and mergeable.

Two accumulators, one rule (the model is baukit's ``runningstats``: ``add``, ``merge``,
``state_dict``):

* :class:`RunningMoments` -- one representation: count, mean, covariance. Out-of-core
  whitening, FastICA's whitening pass and ``compare``'s per-side cache are built on it.
* :class:`CrossMoments` -- two representations of the same rows: the cross scatter
  ``X'Y`` (and the row-norm terms of the debiased HSIC) beside each side's sums. Linear CKA,
  CCA, Procrustes, least squares and the correlation of every pair of columns
  (:meth:`CrossMoments.correlation`) are all functions of it.
* :class:`ColumnMoments` -- per column: count, mean and the central moment sums up to the
  fourth (variance, skewness, excess kurtosis), merged exactly (:func:`pebay_merge`); the unit
  reports' moments.

Numerics: every block is centred on a fixed shift (the mean of the first block, rounded to
the block's dtype, see :func:`first_block_shift`) before its cross-product is formed, so the
float64 accumulators never suffer the catastrophic cancellation of the textbook
``E[xx'] - E[x]E[x]'`` formula. The per-block product ``Xc.T @ Xc`` runs in the block's own
dtype (float32 blocks use BLAS ``ssyrk``, about twice as fast as float64) and is
accumulated in float64; pass ``precision="float64"`` to form the block products in float64.

:func:`iter_row_blocks` iterates the rows of any supported source (numpy, torch, h5py
dataset, store layer); on-disk sources are read one block ahead on a background thread.
"""

from actkit.stats._columns import ColumnMoments, pebay_merge
from actkit.stats._cross import CrossMoments
from actkit.stats._running import (
    RunningMoments,
    first_block_shift,
    iter_row_blocks,
    moments_pass,
)

__all__ = ["ColumnMoments", "CrossMoments", "RunningMoments", "first_block_shift", "iter_row_blocks", "moments_pass",
           "pebay_merge"]
