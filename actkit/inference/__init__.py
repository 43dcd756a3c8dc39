"""Uncertainty of compare's measures, by input sample: permutation p-values and bootstrap
intervals (:func:`infer`), computed from per-sample moments gathered in one pass
(:class:`Samples`). docs/compare.md, "Uncertainty".
"""

from actkit.inference._resample import (INTERVALS, MeasureRecord, bootstrap_draws, bootstrap_interval,
                                        check_resampling, infer,
                                        p_value, percentile_interval, permutation_draws)
from actkit.inference._samples import MIN_SAMPLES, Moments, Samples, gather_pair

__all__ = ["INTERVALS", "MeasureRecord", "bootstrap_interval", "Moments", "Samples", "MIN_SAMPLES", "bootstrap_draws",
           "check_resampling", "gather_pair", "infer", "p_value", "percentile_interval",
           "permutation_draws"]
