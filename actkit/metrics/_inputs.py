"""Inputs of the metrics: 2-D numeric, finite matrices (torch tensors become numpy)."""

from __future__ import annotations

import numpy as np

from actkit.errors import ValidationError

__all__ = ["as_2d", "check_pair"]


def check_pair(X, Y, name_x="X", name_y="Y"):
    X = as_2d(X, name_x)
    Y = as_2d(Y, name_y)
    if X.shape[0] != Y.shape[0]:
        raise ValidationError(
            f"{name_x} and {name_y} must have the same number of rows (the same inputs), "
            f"got {X.shape[0]} and {Y.shape[0]}"
        )
    return X, Y


def as_2d(X, name):
    if hasattr(X, "detach"):  # torch tensor
        X = X.detach().cpu().numpy()
    X = np.asarray(X)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValidationError(f"{name} must be 2-D (n_samples, n_features), got shape {X.shape}")
    if X.dtype.kind not in "fiub":
        raise ValidationError(f"{name} must be numeric, got dtype {X.dtype}")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if not np.all(np.isfinite(X)):
        raise ValidationError(f"{name} contains NaN or infinite values")
    return X
