"""The fit/eval split: whole input samples (groups) go to the held-out rows; rows of two
store layers must correspond."""

from __future__ import annotations

import numpy as np

from actkit._groups import SampleGroups
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
    order = np.random.default_rng(random_state).permutation(g)
    is_eval = np.zeros(g, bool)
    is_eval[order[:n_eval]] = True
    return is_eval[samples.inverse], g



def groups_for(A, B, groups):
    """Default groups from store layers; refuse layers whose rows do not correspond."""
    ia, ib = getattr(A, "index", None), getattr(B, "index", None)
    sa, sb = getattr(A, "store", None), getattr(B, "store", None)
    if sa is not None and sb is not None:
        fa, fb = getattr(sa, "inputs_fingerprint", ""), getattr(sb, "inputs_fingerprint", "")
        if fa and fb and fa != fb:
            raise ValidationError(f"the stores were extracted from different inputs (inputs "
                             f"fingerprints {fa[:12]} and {fb[:12]} differ)")
    if isinstance(ia, np.ndarray) and isinstance(ib, np.ndarray):
        if ia.shape != ib.shape or not np.array_equal(ia, ib):
            raise ValidationError("the two layers have different row indexes ([sample, position] "
                             "per row): rows do not come from the same inputs and tokens")
    if groups is None:
        g = getattr(A, "groups", None)
        if g is None:
            g = getattr(B, "groups", None)
        if isinstance(g, np.ndarray):
            return g
    return groups

