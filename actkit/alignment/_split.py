"""The fit/eval split: whole input samples (groups) go to the held-out rows; the groups of
two store layers."""

from __future__ import annotations

import numpy as np

from actkit._groups import SampleGroups, heldout_samples
from actkit.errors import ValidationError


def split(n, groups, eval_fraction, random_state):
    """Boolean eval mask: whole groups (input samples) go to eval, about ``eval_fraction``."""
    if not 0 < eval_fraction < 1:
        raise ValidationError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
    samples = SampleGroups(groups, n)
    g = samples.G
    n_eval = int(round(eval_fraction * g))
    if g < 2 or n_eval < 1 or n_eval > g - 1:
        raise ValidationError(
            f"too few input samples ({g}) for a {1 - eval_fraction:.0%}/{eval_fraction:.0%} "
            f"fit/eval split by sample; provide more inputs or change eval_fraction")
    return heldout_samples(g, eval_fraction, random_state)[samples.inverse], g



def groups_for(A, B, groups):
    """The input-sample id of each row: ``groups`` where given, else the store layers' own
    (``A``'s, then ``B``'s), else None (one row = one sample). Whether A and B hold the same
    rows is :func:`actkit._groups.check_same_rows`' question, asked before."""
    if groups is None:
        g = getattr(A, "groups", None)
        if g is None:
            g = getattr(B, "groups", None)
        if isinstance(g, np.ndarray):
            return g
    return groups
