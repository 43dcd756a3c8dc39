"""Uncertainty of compare's measures, by input sample: permutation p-values and bootstrap
intervals (:func:`infer`), computed from the rows of a pair gathered once and grouped by input
sample (:class:`Samples`). docs/compare.md, "Uncertainty".
"""

from actkit._groups import SampleGroups, bootstrap_draws, permutation_draws
from actkit.inference._cca import bootstrap_mean_cca, mean_cca_resampled
from actkit.inference._cka import bootstrap_cka, bootstrap_cka_debiased, gram_fits
from actkit.inference._resample import (INTERVALS, MeasureRecord, bootstrap_floor_error, bootstrap_interval,
                                        check_resampling, infer, min_bootstrap, p_value, percentile_interval,
                                        resampling_notes)
from actkit.inference._rows import infer_rows, row_measure
from actkit.inference._samples import MIN_SAMPLES, Samples, gather_pair

__all__ = ["INTERVALS", "MIN_SAMPLES", "MeasureRecord", "SampleGroups", "Samples", "bootstrap_cka", "bootstrap_cka_debiased",
           "bootstrap_mean_cca", "mean_cca_resampled",
           "bootstrap_draws", "bootstrap_floor_error", "bootstrap_interval", "min_bootstrap",
           "resampling_notes", "check_resampling", "gather_pair", "gram_fits",
           "infer", "infer_rows", "p_value", "percentile_interval", "permutation_draws", "row_measure"]
